"""kpack_packages: one kpack_recombine target per group of a packaging config."""

load("//rules/common:kpack.bzl", "kpack_package_target_names")
load(":kpack_recombine.bzl", "kpack_package", "kpack_recombine_all")

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
