"""source_snapshot (Buck2): a library built from HEAD (dev) or from a source
snapshot, selected by the same per-library (`-m <library>_stable`) and global
(`-m snapshot_stable`) channel modifiers as prebuilt_snapshot. Each snapshot
channel directory is a cell of its own (`[cells] rcl_snapshot_stable =
<root>/stable` in .buckconfig; the snapshots root in `[project] ignore`), so
`//<subtree>/...` labels and `load()`s inside the snapshot resolve to the
snapshot itself: its BUCK files are never rewritten (reference §5.5)."""

load("//rules/common:snapshot.bzl", "SNAPSHOT_CHANNELS", "package_path")
load(":config.bzl", "channel_constraint", "library_channel_constraints", "library_channel_value")
load(":project_test.bzl", "project_root_test_providers")
load(":providers.bzl", "RocpackToolchainInfo")
load(":toolchain.bzl", "toolchain_attr")

def _check_test_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._rocpack_toolchain[RocpackToolchainInfo]

    # Run from the project root on the real trees. They are not build inputs
    # (the snapshots root is in `[project] ignore`, each channel is a cell of
    # its own), so the test is local only, as Bazel's is tagged `local`: on a
    # remote worker the trees do not exist (docs/remote-execution.md).
    cmd = cmd_args(toolchain.snapctl, "check", "--snapshots-root", ctx.attrs.snapshots_root_path)
    return project_root_test_providers(cmd, ctx.attrs.labels, local_only = True)

source_snapshot_check_test = rule(
    impl = _check_test_impl,
    doc = "`snapctl check` of a source-snapshot root: red when a tree differs from its recorded digest.",
    attrs = dict({
        "snapshots_root_path": attrs.string(doc = "The snapshots root relative to the project root."),
        "labels": attrs.list(attrs.string(), default = [], doc = "Test labels."),
    }, **toolchain_attr()),
)

def source_snapshot(name: str, dev: str, target: str, repositories: dict[str, str], snapshots_root: str = "snapshots", visibility: list[str] = ["PUBLIC"], **kwargs):
    """A library built from HEAD or from a source snapshot of it.

    Args:
      name: target name; also the prefix of its `-m <name>_<channel>` aliases.
      dev: the library at HEAD, e.g. "//examples/rcclx_source/rcl:rcl".
      target: the library's label inside a snapshot without cell (usually `dev`).
      repositories: channel -> the cell of that channel's directory, e.g.
        {"stable": "rcl_snapshot_stable", "last_stable": "rcl_snapshot_last_stable"}.
      snapshots_root: the source-snapshot root relative to the package.
      visibility: of <name> and its channel constraints.
      **kwargs: common attributes.
    """
    library_channel_constraints(name, visibility)

    def _own(channel):
        return ":" + library_channel_value(name, channel)

    def _flavours(key):
        out = {}
        for channel in SNAPSHOT_CHANNELS:
            if channel == "dev":
                out[key(channel)] = dev
            elif channel in repositories:
                out[key(channel)] = repositories[channel] + target
        return out

    branches = _flavours(_own)
    branches["DEFAULT"] = select(_flavours(channel_constraint))
    native.alias(name = name, actual = select(branches), visibility = visibility, **kwargs)
    source_snapshot_check_test(
        name = name + "_check_test",
        snapshots_root_path = package_path(native.package_name(), snapshots_root),
    )
