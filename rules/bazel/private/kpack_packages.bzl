"""kpack_packages: one kpack_recombine target per group of a packaging config."""

load("//rules/common:kpack.bzl", "kpack_package_target_names")
load(":kpack_recombine.bzl", "kpack_recombine")

def kpack_packages(component, shards, config, groups, **kwargs):
    """Creates `<component>_generic` and `<component>_<group>` for every group.

    Starlark cannot read the JSON config while loading BUILD files, so the
    group names are passed in `groups` (in config order); a group that is not
    in the config (or has no content in the shards) makes its package action
    fail, naming the packages `kpack recombine` did write.

    Args:
      component: component (artifact prefix) name, e.g. "blas_lib".
      shards: kpack_split targets, one per CI shard.
      config: label of the packaging-config JSON.
      groups: architecture group names of the config, e.g. ["gfx110X", "gfx115X", "gfx120X"].
      **kwargs: common attributes (visibility, tags, ...) for every target.

    Returns:
      The list of created target names.
    """
    names = []
    for target, group in kpack_package_target_names(component, groups):
        kpack_recombine(
            name = target,
            shards = shards,
            config = config,
            component = component,
            group = group,
            **kwargs
        )
        names.append(target)
    return names
