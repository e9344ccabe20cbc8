"""kpack_recombine: split shards + packaging config -> one group's package (Buck2)."""

load("//rules/common:kpack.bzl", "KPACK_GENERIC_GROUP", "kpack_package_dir_name", "kpack_package_target_names")
load(":providers.bzl", "KpackPackageInfo", "KpackSplitInfo", "RocpackToolchainInfo")
load(":toolchain.bzl", "toolchain_attr")

def kpack_recombine_action(actions: AnalysisActions, kpack: RunInfo, shards: dict[str, Artifact], config: Artifact, component: str, group: str, out_name: str) -> Artifact:
    """Registers one `kpack recombine`; returns the kept package directory.

    Args:
      actions: the rule's AnalysisActions.
      kpack: RunInfo of the kpack helper.
      shards: shard name -> split output directory.
      config: the packaging-config JSON.
      component: component name.
      group: architecture group, or "generic".
      out_name: name of the declared output directory.

    Returns:
      The `<component>_<group>/` directory inside the recombine output.
    """
    # Symlinks, not copies: <shard> -> that split's output directory, each
    # named with --staging-root so recombine accepts the link (Buck2's
    # copied_dir would also rewrite the splits' own relative symlinks into
    # links back to the split outputs).
    shards_dir = actions.symlinked_dir(out_name + ".shards", shards)
    out_dir = actions.declare_output(out_name, dir = True)
    actions.run(
        cmd_args(
            kpack,
            "recombine",
            "--input-shards-dir",
            shards_dir,
            "--config",
            config,
            "--output-dir",
            out_dir.as_output(),
            [cmd_args("--staging-root", shards[s]) for s in sorted(shards)],
        ),
        category = "kpack_recombine",
        identifier = kpack_package_dir_name(component, group),
        env = {"LC_ALL": "C", "TZ": "UTC"},
    )
    return out_dir.project(kpack_package_dir_name(component, group))

def _kpack_recombine_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._rocpack_toolchain[RocpackToolchainInfo]
    shards = {}
    for dep in ctx.attrs.shards:
        info = dep[KpackSplitInfo]
        if info.shard in shards:
            fail("kpack_recombine: two shards are named '%s'; set `shard` on kpack_split" % info.shard)
        if info.artifact_prefix != ctx.attrs.component:
            fail("kpack_recombine: shard '%s' splits component '%s', not '%s'" % (info.shard, info.artifact_prefix, ctx.attrs.component))
        shards[info.shard] = info.dir
    package = kpack_recombine_action(
        ctx.actions,
        kpack = toolchain.kpack,
        shards = shards,
        config = ctx.attrs.config,
        component = ctx.attrs.component,
        group = ctx.attrs.group,
        out_name = ctx.label.name + ".recombine",
    )
    return [
        DefaultInfo(default_output = package),
        KpackPackageInfo(dir = package, component = ctx.attrs.component, group = ctx.attrs.group),
    ]

kpack_recombine = rule(
    impl = _kpack_recombine_impl,
    doc = """Recombines split shards into one package with `kpack recombine`.

Output: the directory `<component>_<group>/` that `kpack recombine` writes
(for group "generic": the host code). The build fails when the shards give
that group no content.
""",
    attrs = dict({
        "component": attrs.string(doc = "Component name (the artifact prefix of the shards), e.g. \"blas_lib\"."),
        "config": attrs.source(doc = "The packaging config JSON (rocm-kpack format: primary_shard, architecture_groups, validation)."),
        "group": attrs.string(doc = "Architecture group of the config to keep, or \"%s\" for the host-code package." % KPACK_GENERIC_GROUP),
        "shards": attrs.list(attrs.dep(providers = [KpackSplitInfo]), doc = "kpack_split targets, one per CI shard, all of the same component. Each is staged as <input-shards-dir>/<shard>/."),
    }, **toolchain_attr()),
)

def kpack_packages(component: str, shards: list[str], config: str, groups: list[str], **kwargs) -> list[str]:
    """One kpack_recombine target per package: `<component>_generic`, then `<component>_<group>`.

    The group names come in `groups` (in the order of the config) because a
    BUCK file cannot read JSON; a name missing from the config fails that
    package's action, which lists the config's groups.

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
    for target, group in targets:
        kpack_recombine(name = target, component = component, group = group, config = config, shards = shards, **kwargs)
    return [target for target, _ in targets]
