"""kpack_recombine: split shards + packaging config -> one group's package."""

load("//rules/common:kpack.bzl", "KPACK_GENERIC_GROUP", "KPACK_RECOMBINE_MNEMONIC", "kpack_check_shards", "kpack_missing_package_format", "kpack_package_dir_name")
load(":providers.bzl", "KpackPackageInfo", "KpackSplitInfo")
load(":tools.bzl", "ACTION_ENV", "stage_list", "tool_attrs")

def kpack_recombine_action(ctx, packages, attr):
    """Registers ONE `kpack recombine` of `ctx.attr.shards` keeping one or more packages.

    Used by kpack_recombine (one package) and kpack_packages (every package
    of the component from the same run). When the helper writes no
    `<component>_<group>` for a wanted group, the action fails with
    rules/common's message naming the group, the config and the fix.

    Args:
      ctx: context of a rule with `shards`, `config`, `component` and the
        kpack tool attributes.
      packages: (group, declared tree artifact) pairs: each artifact receives
        the contents of `<component>_<group>/`.
      attr: the attribute that named the group(s), for the message
        ("group" or "groups").
    """
    component = ctx.attr.component
    shards = _shards(ctx)
    pairs = [("shards/" + name, tree) for name, tree in shards]
    lst = stage_list(ctx, "stage.txt", pairs)
    names = [kpack_package_dir_name(component, g) for g, _ in packages]
    args = ctx.actions.args()
    args.add("--stage", lst)
    args.add("--link-inputs")
    for name, (_, d) in zip(names, packages):
        args.add("--collect", name)
        args.add(d.path)
    # The label as the user writes it (Bazel 7 prints the main repository's as @@//...).
    owner = str(ctx.label) if ctx.label.workspace_name else "//%s:%s" % (ctx.label.package, ctx.label.name)
    args.add("--collect-message", kpack_missing_package_format(owner, ctx.file.config.short_path, attr))
    args.add("--")
    args.add(ctx.executable._kpack)
    args.add("recombine")
    args.add("--input-shards-dir", "@STAGE@/shards")
    args.add("--config", ctx.file.config)
    args.add("--output-dir", "@OUT@")
    args.add("@STAGING_ROOTS@")
    ctx.actions.run(
        executable = ctx.executable._stage,
        arguments = [args],
        inputs = [lst, ctx.file.config] + [t for _, t in shards],
        tools = [ctx.executable._kpack],
        outputs = [d for _, d in packages],
        mnemonic = KPACK_RECOMBINE_MNEMONIC,
        progress_message = "kpack recombine %s (%s)" % (" ".join(names), ctx.label),
        env = ACTION_ENV,
    )

def _shards(ctx):
    # The (shard name, split tree) pairs of ctx.attr.shards, checked.
    infos = [(s[KpackSplitInfo], s.label) for s in ctx.attr.shards]
    kpack_check_shards(ctx.attr.component, [(info.shard, info.artifact_prefix, str(label)) for info, label in infos])
    return [(info.shard, info.dir) for info, _ in infos]

def _kpack_recombine_impl(ctx):
    out_dir = ctx.actions.declare_directory(ctx.label.name)
    kpack_recombine_action(ctx, [(ctx.attr.group, out_dir)], "group")
    return [
        DefaultInfo(files = depset([out_dir]), runfiles = ctx.runfiles(files = [out_dir])),
        KpackPackageInfo(dir = out_dir, component = ctx.attr.component, group = ctx.attr.group),
    ]

# Attributes of kpack_recombine and kpack_packages' recombine.
KPACK_RECOMBINE_ATTRS = dict({
    "shards": attr.label_list(
        providers = [KpackSplitInfo],
        mandatory = True,
        doc = "kpack_split targets, one per CI shard, all of the same component. Each is staged as <input-shards-dir>/<shard>/.",
    ),
    "config": attr.label(allow_single_file = [".json"], mandatory = True, doc = "The packaging config JSON (rocm-kpack format: primary_shard, architecture_groups, validation)."),
    "component": attr.string(mandatory = True, doc = "Component name (the artifact prefix of the shards), e.g. \"blas_lib\"."),
}, **tool_attrs(kpack = True))

kpack_recombine = rule(
    implementation = _kpack_recombine_impl,
    doc = """Recombines split shards into one package with `kpack recombine`.

Output: a directory named after the target holding what `kpack recombine`
writes to `<component>_<group>/` (for group "generic": the host code). The
action fails, naming the group, the config and the fix, when the group is
not in the config or the shards give it no content.
""",
    attrs = dict({
        "group": attr.string(mandatory = True, doc = "Architecture group of the config to keep, or \"%s\" for the host-code package." % KPACK_GENERIC_GROUP),
    }, **KPACK_RECOMBINE_ATTRS),
)
