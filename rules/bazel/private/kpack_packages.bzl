"""kpack_packages: every package of a packaging config from ONE `kpack recombine`."""

load("//rules/common:kpack.bzl", "KPACK_GENERIC_GROUP", "kpack_package_dir_name", "kpack_package_target_names")
load(":kpack_recombine.bzl", "KPACK_RECOMBINE_ATTRS", "kpack_recombine_action")
load(":providers.bzl", "KpackPackageInfo")

_KpackPackagesInfo = provider(
    doc = "Every package of one kpack_recombine_all: group -> KpackPackageInfo.",
    fields = {"packages": "dict group -> KpackPackageInfo."},
)

def _kpack_recombine_all_impl(ctx):
    groups = ctx.attr.groups
    dirs = [ctx.actions.declare_directory(kpack_package_dir_name(ctx.attr.component, g)) for g in groups]
    kpack_recombine_action(ctx, list(zip(groups, dirs)), "groups")
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
names hand each out. The action fails, naming the missing groups, the config
and what it did write, when a group gives no package.
""",
    attrs = dict({
        "groups": attr.string_list(mandatory = True, doc = "Packages to keep: \"%s\" and the config's architecture groups." % KPACK_GENERIC_GROUP),
    }, **KPACK_RECOMBINE_ATTRS),
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
    naming the group, the config file, the packages `kpack recombine` did
    write and the fix.

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
