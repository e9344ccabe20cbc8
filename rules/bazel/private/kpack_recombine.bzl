"""kpack_recombine: split shards + packaging config -> one group's package."""

load("//rules/common:kpack.bzl", "KPACK_GENERIC_GROUP", "KPACK_RECOMBINE_MNEMONIC", "kpack_package_dir_name")
load(":providers.bzl", "KpackPackageInfo", "KpackSplitInfo")
load(":tools.bzl", "ACTION_ENV", "stage_list", "tool_attrs")

def kpack_recombine_action(ctx, kpack, stage, shards, config, component, group, out_dir, more = []):
    """Registers one `kpack recombine` action keeping one or more packages (reusable).

    Args:
      ctx: rule context.
      kpack: kpack executable File.
      stage: stage.sh executable File.
      shards: list of (shard name, split tree File) pairs.
      config: packaging-config JSON File.
      component: component name.
      group: architecture group or "generic".
      out_dir: declared tree artifact receiving <component>_<group>/'s contents.
      more: further (group, declared tree artifact) pairs the same run fills.
    """
    pairs = [("shards/" + name, tree) for name, tree in shards]
    lst = stage_list(ctx, "stage.txt", pairs)
    args = ctx.actions.args()
    args.add("--stage", lst)
    args.add("--link-inputs")
    for g, d in [(group, out_dir)] + more:
        args.add("--collect", kpack_package_dir_name(component, g))
        args.add(d.path)
    args.add("--")
    args.add(kpack)
    args.add("recombine")
    args.add("--input-shards-dir", "@STAGE@/shards")
    args.add("--config", config)
    args.add("--output-dir", "@OUT@")
    args.add("@STAGING_ROOTS@")
    ctx.actions.run(
        executable = stage,
        arguments = [args],
        inputs = [lst, config] + [t for _, t in shards],
        tools = [kpack],
        outputs = [out_dir] + [d for _, d in more],
        mnemonic = KPACK_RECOMBINE_MNEMONIC,
        progress_message = "kpack recombine %s (%s)" % (" ".join([kpack_package_dir_name(component, g) for g, _ in [(group, out_dir)] + more]), ctx.label),
        env = ACTION_ENV,
    )

def kpack_recombine_shards(ctx):
    """The (shard name, split tree) pairs of `ctx.attr.shards`, checked.

    Args:
      ctx: context of a rule with `shards` and `component` attributes.

    Returns:
      A list of (shard name, tree artifact) pairs.
    """
    shards = []
    seen = {}
    for s in ctx.attr.shards:
        info = s[KpackSplitInfo]
        if info.shard in seen:
            fail("kpack_recombine: two shards are named '%s' (%s and %s); set `shard` on kpack_split" % (info.shard, seen[info.shard], s.label))
        seen[info.shard] = s.label
        if info.artifact_prefix != ctx.attr.component:
            fail("kpack_recombine: shard %s splits component '%s', not '%s'" % (s.label, info.artifact_prefix, ctx.attr.component))
        shards.append((info.shard, info.dir))
    return shards

def _kpack_recombine_impl(ctx):
    shards = kpack_recombine_shards(ctx)
    out_dir = ctx.actions.declare_directory(ctx.label.name)
    kpack_recombine_action(
        ctx,
        kpack = ctx.executable._kpack,
        stage = ctx.executable._stage,
        shards = shards,
        config = ctx.file.config,
        component = ctx.attr.component,
        group = ctx.attr.group,
        out_dir = out_dir,
    )
    return [
        DefaultInfo(files = depset([out_dir]), runfiles = ctx.runfiles(files = [out_dir])),
        KpackPackageInfo(dir = out_dir, component = ctx.attr.component, group = ctx.attr.group),
    ]

kpack_recombine = rule(
    implementation = _kpack_recombine_impl,
    doc = """Recombines split shards into one package with `kpack recombine`.

Output: a directory named after the target holding what `kpack recombine`
writes to `<component>_<group>/` (for group "generic": the host code). The
action fails when the shards give that group no content.
""",
    attrs = dict({
        "shards": attr.label_list(
            providers = [KpackSplitInfo],
            mandatory = True,
            doc = "kpack_split targets, one per CI shard, all of the same component. Each is staged as <input-shards-dir>/<shard>/.",
        ),
        "config": attr.label(allow_single_file = [".json"], mandatory = True, doc = "The packaging config JSON (rocm-kpack format: primary_shard, architecture_groups, validation)."),
        "component": attr.string(mandatory = True, doc = "Component name (the artifact prefix of the shards), e.g. \"blas_lib\"."),
        "group": attr.string(mandatory = True, doc = "Architecture group of the config to keep, or \"%s\" for the host-code package." % KPACK_GENERIC_GROUP),
    }, **tool_attrs(kpack = True)),
)
