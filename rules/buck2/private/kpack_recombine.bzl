"""kpack_recombine: split shards + packaging config -> one group's package (Buck2)."""

load("//rules/common:env.bzl", "HELPER_ENV")
load("//rules/common:kpack.bzl", "KPACK_GENERIC_GROUP", "kpack_check_shards", "kpack_missing_package_format", "kpack_package_dir_name")
load(":providers.bzl", "KpackPackageInfo", "KpackSplitInfo", "RocpackToolchainInfo")
load(":toolchain.bzl", "toolchain_attr")

# Runs `kpack recombine` ("$@" after the --), then fails with rules/common's
# message (a printf format, $1) unless every wanted package directory ($3 ...
# before the --) is in the output directory ($2). POSIX sh builtins only.
_RECOMBINE_SH = """fmt=$1; out=$2; shift 2
want=""
while [ "$1" != -- ]; do want="$want $1"; shift; done
shift
"$@" || exit $?
missing=""
for w in $want; do [ -d "$out/$w" ] || missing="$missing $w"; done
[ -z "$missing" ] && exit 0
wrote=""
for d in "$out"/*/; do [ -d "$d" ] && { d=${d%/}; wrote="$wrote ${d##*/}"; }; done
printf "$fmt" "${missing# }" "${wrote# }" >&2
exit 1
"""

def kpack_recombine_run(actions: AnalysisActions, kpack: RunInfo, shards: dict[str, Artifact], config: Artifact, component: str, groups: list[str], owner: str, attr: str, out_name: str, checks: list[Artifact] = []) -> Artifact:
    """Registers one `kpack recombine`; returns its whole output directory.

    The action fails with rules/common's message (the group, the config
    file, what the helper wrote, the fix) when a wanted group gives no
    package: a name that is not an architecture group of the config, or a
    group no shard has code for.

    Args:
      actions: the rule's AnalysisActions.
      kpack: RunInfo of the kpack helper.
      shards: shard name -> split output directory.
      config: the packaging-config JSON.
      component: component name.
      groups: the groups whose packages must be written ("generic" included).
      owner: the target, for the message.
      attr: the attribute that named the groups ("group" or "groups").
      out_name: name of the declared output directory.
      checks: outputs that must be built first (the splits' arch checks).

    Returns:
      The directory `kpack recombine` wrote (one `<component>_<group>/` per package).
    """
    # Symlinks, not copies: <shard> -> that split's output directory, each
    # named with --staging-root so recombine accepts the link (Buck2's
    # copied_dir would also rewrite the splits' own relative symlinks into
    # links back to the split outputs).
    shards_dir = actions.symlinked_dir(out_name + ".shards", shards)
    out_dir = actions.declare_output(out_name, dir = True)
    names = [kpack_package_dir_name(component, g) for g in groups]
    actions.run(
        cmd_args(
            "/bin/sh",
            "-c",
            _RECOMBINE_SH,
            "kpack_recombine",
            # The config's path as the action sees it (from the project root).
            cmd_args(config, format = kpack_missing_package_format(owner, "{}", attr)),
            out_dir.as_output(),
            names,
            "--",
            kpack,
            "recombine",
            "--input-shards-dir",
            shards_dir,
            "--config",
            config,
            "--output-dir",
            out_dir.as_output(),
            [cmd_args("--staging-root", shards[s]) for s in sorted(shards)],
            hidden = checks,
        ),
        category = "kpack_recombine",
        identifier = names[0] if len(names) == 1 else component,
        env = HELPER_ENV,
    )
    return out_dir

def kpack_recombine_owner(ctx: AnalysisContext) -> str:
    """The target of a recombine rule as the user writes it (for messages), without configuration."""
    return "%s//%s:%s" % (ctx.label.cell, ctx.label.package, ctx.label.name)

def kpack_recombine_checks(ctx: AnalysisContext) -> list[Artifact]:
    """The arch listings of the `shards` splits: a split whose `archs` do not match fails the recombine too."""
    return [dep[KpackSplitInfo].archs_file for dep in ctx.attrs.shards]

def kpack_recombine_shards(ctx: AnalysisContext) -> dict[str, Artifact]:
    """Shard name -> split output directory of the `shards` attribute, checked (rules/common's kpack_check_shards)."""
    infos = [dep[KpackSplitInfo] for dep in ctx.attrs.shards]
    kpack_check_shards(ctx.attrs.component, [(info.shard, info.artifact_prefix, None) for info in infos])
    return {info.shard: info.dir for info in infos}

def _kpack_recombine_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._rocpack_toolchain[RocpackToolchainInfo]
    shards = kpack_recombine_shards(ctx)
    out = kpack_recombine_run(
        ctx.actions,
        kpack = toolchain.kpack,
        shards = shards,
        config = ctx.attrs.config,
        component = ctx.attrs.component,
        groups = [ctx.attrs.group],
        owner = kpack_recombine_owner(ctx),
        attr = "group",
        out_name = ctx.label.name + ".recombine",
        checks = kpack_recombine_checks(ctx),
    )
    package = out.project(kpack_package_dir_name(ctx.attrs.component, ctx.attrs.group))
    return [
        DefaultInfo(default_output = package),
        KpackPackageInfo(dir = package, component = ctx.attrs.component, group = ctx.attrs.group),
    ]

kpack_recombine = rule(
    impl = _kpack_recombine_impl,
    doc = """Recombines split shards into one package with `kpack recombine`.

Output: the directory `<component>_<group>/` that `kpack recombine` writes
(for group "generic": the host code). The build fails, naming the group,
the config and the fix, when the group is not in the config or the shards
give it no content.
""",
    attrs = dict({
        "component": attrs.string(doc = "Component name (the artifact prefix of the shards), e.g. \"blas_lib\"."),
        "config": attrs.source(doc = "The packaging config JSON (rocm-kpack format: primary_shard, architecture_groups, validation)."),
        "group": attrs.string(doc = "Architecture group of the config to keep, or \"%s\" for the host-code package." % KPACK_GENERIC_GROUP),
        "shards": attrs.list(attrs.dep(providers = [KpackSplitInfo]), doc = "kpack_split targets, one per CI shard, all of the same component. Each is staged as <input-shards-dir>/<shard>/."),
    }, **toolchain_attr()),
)
