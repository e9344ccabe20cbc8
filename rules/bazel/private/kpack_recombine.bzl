"""kpack_recombine: split shards + packaging config -> one group's package.

kpack_packages uses the same action once for every group (`kpack_recombine_all`)."""

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

def _shards(ctx):
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
    shards = _shards(ctx)
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

_KpackPackagesInfo = provider(
    doc = "Every package of one kpack_recombine_all: group -> KpackPackageInfo.",
    fields = {"packages": "dict group -> KpackPackageInfo."},
)

def _kpack_recombine_all_impl(ctx):
    shards = _shards(ctx)
    groups = ctx.attr.groups
    dirs = [ctx.actions.declare_directory(kpack_package_dir_name(ctx.attr.component, g)) for g in groups]
    kpack_recombine_action(
        ctx,
        kpack = ctx.executable._kpack,
        stage = ctx.executable._stage,
        shards = shards,
        config = ctx.file.config,
        component = ctx.attr.component,
        group = groups[0],
        out_dir = dirs[0],
        more = [(g, d) for g, d in zip(groups[1:], dirs[1:])],
    )
    return [
        DefaultInfo(files = depset(dirs)),
        _KpackPackagesInfo(packages = {
            g: KpackPackageInfo(dir = d, component = ctx.attr.component, group = g)
            for g, d in zip(groups, dirs)
        }),
    ]

kpack_recombine_all = rule(
    implementation = _kpack_recombine_all_impl,
    doc = """One `kpack recombine` for every package of a component (used by kpack_packages).

Outputs: the directories `<component>_<group>` of the package (not under the
target's name), one per entry of `groups`; `kpack_package` targets of those
names hand each out. The action fails, naming what it did write, when a group
gives no package.
""",
    attrs = dict({
        "shards": attr.label_list(providers = [KpackSplitInfo], mandatory = True, doc = "kpack_split targets, one per CI shard, all of the same component."),
        "config": attr.label(allow_single_file = [".json"], mandatory = True, doc = "The packaging config JSON."),
        "component": attr.string(mandatory = True, doc = "Component name (the artifact prefix of the shards)."),
        "groups": attr.string_list(mandatory = True, doc = "Packages to keep: \"%s\" and the config's architecture groups." % KPACK_GENERIC_GROUP),
    }, **tool_attrs(kpack = True)),
)

def _kpack_package_impl(ctx):
    info = ctx.attr.packages[_KpackPackagesInfo].packages.get(ctx.attr.group)
    if info == None:
        fail("%s: %s makes no package of group '%s'" % (ctx.label, ctx.attr.packages.label, ctx.attr.group))
    return [
        DefaultInfo(files = depset([info.dir]), runfiles = ctx.runfiles(files = [info.dir])),
        info,
    ]

kpack_package = rule(
    implementation = _kpack_package_impl,
    doc = "One package of a kpack_recombine_all target (no action of its own).",
    attrs = {
        "packages": attr.label(providers = [_KpackPackagesInfo], mandatory = True, doc = "The kpack_recombine_all target."),
        "group": attr.string(mandatory = True, doc = "Architecture group, or \"%s\"." % KPACK_GENERIC_GROUP),
    },
)
