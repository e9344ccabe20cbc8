"""kpack_packages (Buck2): every package of a packaging config from ONE `kpack recombine`."""

load("//rules/common:kpack.bzl", "KPACK_GENERIC_GROUP", "kpack_package_dir_name", "kpack_package_target_names")
load(":kpack_recombine.bzl", "kpack_recombine_checks", "kpack_recombine_owner", "kpack_recombine_run", "kpack_recombine_shards")
load(":providers.bzl", "KpackPackageInfo", "KpackSplitInfo", "RocpackToolchainInfo")
load(":toolchain.bzl", "toolchain_attr")

_KpackPackagesInfo = provider(
    doc = "Every package of one kpack_recombine_all: group -> KpackPackageInfo.",
    fields = {
        "packages": provider_field(dict[str, typing.Any]),
    },
)

def _kpack_recombine_all_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._rocpack_toolchain[RocpackToolchainInfo]
    out = kpack_recombine_run(
        ctx.actions,
        kpack = toolchain.kpack,
        shards = kpack_recombine_shards(ctx),
        config = ctx.attrs.config,
        component = ctx.attrs.component,
        groups = ctx.attrs.groups,
        owner = kpack_recombine_owner(ctx),
        attr = "groups",
        out_name = ctx.label.name + ".recombine",
        checks = kpack_recombine_checks(ctx),
    )
    packages = {}
    sub_targets = {}
    for g in ctx.attrs.groups:
        d = out.project(kpack_package_dir_name(ctx.attrs.component, g))
        packages[g] = KpackPackageInfo(dir = d, component = ctx.attrs.component, group = g)
        sub_targets[g] = [DefaultInfo(default_output = d)]
    return [
        DefaultInfo(default_output = out, sub_targets = sub_targets),
        _KpackPackagesInfo(packages = packages),
    ]

_kpack_recombine_all = rule(
    impl = _kpack_recombine_all_impl,
    doc = "One `kpack recombine` for every package of a component (kpack_packages); sub-target [<group>] is one package.",
    attrs = dict({
        "component": attrs.string(doc = "Component name (the artifact prefix of the shards)."),
        "config": attrs.source(doc = "The packaging config JSON."),
        "groups": attrs.list(attrs.string(), doc = "Packages to keep: \"%s\" and the config's architecture groups." % KPACK_GENERIC_GROUP),
        "shards": attrs.list(attrs.dep(providers = [KpackSplitInfo]), doc = "kpack_split targets, one per CI shard, all of the same component."),
    }, **toolchain_attr()),
)

def _kpack_package_impl(ctx: AnalysisContext) -> list[Provider]:
    info = ctx.attrs.packages[_KpackPackagesInfo].packages.get(ctx.attrs.group)
    if info == None:
        fail("%s makes no package of group '%s'" % (ctx.attrs.packages.label, ctx.attrs.group))
    return [DefaultInfo(default_output = info.dir), info]

_kpack_package = rule(
    impl = _kpack_package_impl,
    doc = "One package of a kpack_packages recombine (no action of its own).",
    attrs = {
        "group": attrs.string(doc = "Architecture group, or \"%s\"." % KPACK_GENERIC_GROUP),
        "packages": attrs.dep(providers = [_KpackPackagesInfo], doc = "The recombine of every package."),
    },
)

def kpack_packages(component: str, shards: list[str], config: str, groups: list[str], **kwargs) -> list[str]:
    """One package target per package (`<component>_generic`, then `<component>_<group>`), all from ONE recombine.

    `<component>_all_packages` runs `kpack recombine` once; each package
    target hands out its directory. The group names come in `groups` (in the
    order of the config) because a BUCK file cannot read JSON; a name missing
    from the config (or a group no shard has code for) fails the recombine
    with rocpack's message naming the group, the config file and the fix.

    Args:
      component: the shards' artifact prefix, e.g. "blas_lib".
      shards: the kpack_split targets (one per CI shard).
      config: packaging-config JSON file.
      groups: the config's architecture groups, e.g. ["gfx110X", "gfx115X"].
      **kwargs: attributes given to every created target (visibility, ...).

    Returns:
      Names of the created targets.
    """
    targets = kpack_package_target_names(component, groups)
    all_name = component + "_all_packages"
    _kpack_recombine_all(name = all_name, component = component, groups = [g for _, g in targets], config = config, shards = shards, **kwargs)
    for target, group in targets:
        _kpack_package(name = target, packages = ":" + all_name, group = group, **kwargs)
    return [target for target, _ in targets]
