"""kpack_packages: every package of a packaging config from ONE `kpack recombine`."""

load("//rules/common:kpack.bzl", "KPACK_GENERIC_GROUP", "kpack_package_dir_name", "kpack_package_target_names")
load(":kpack_recombine.bzl", "kpack_recombine_action", "kpack_recombine_shards")
load(":providers.bzl", "KpackPackageInfo", "KpackSplitInfo")
load(":tools.bzl", "tool_attrs")

_KpackPackagesInfo = provider(
    doc = "Every package of one kpack_recombine_all: group -> KpackPackageInfo.",
    fields = {"packages": "dict group -> KpackPackageInfo."},
)

def _kpack_recombine_all_impl(ctx):
    shards = kpack_recombine_shards(ctx)
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


def kpack_packages(component, shards, config, groups, **kwargs):
    """Creates `<component>_generic` and `<component>_<group>` for every group.

    Starlark cannot read the JSON config while loading BUILD files, so the
    group names are passed in `groups` (in config order); a group that is not
    in the config (or has no content in the shards) makes the action fail,
    naming the group and the packages `kpack recombine` did write.

    ONE `kpack recombine` action (target `<component>_all_packages`) makes
    every package; each `<component>_<group>` target hands out its own
    directory, at the same path as a `kpack_recombine` of that name.

    Args:
      component: component (artifact prefix) name, e.g. "blas_lib".
      shards: kpack_split targets, one per CI shard.
      config: label of the packaging-config JSON.
      groups: architecture group names of the config, e.g. ["gfx110X", "gfx115X", "gfx120X"].
      **kwargs: common attributes (visibility, tags, ...) for every target.

    Returns:
      The list of created target names.
    """
    targets = kpack_package_target_names(component, groups)
    all_name = component + "_all_packages"
    kpack_recombine_all(
        name = all_name,
        shards = shards,
        config = config,
        component = component,
        groups = [g for _, g in targets],
        **kwargs
    )
    names = []
    for target, group in targets:
        kpack_package(name = target, packages = ":" + all_name, group = group, **kwargs)
        names.append(target)
    return names
