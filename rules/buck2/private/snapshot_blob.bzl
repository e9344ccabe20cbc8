"""snapshot_blob (Buck2): one prebuilt snapshot artifact, verified by `snapctl fetch`
against its pinned sha256 and its metadata.txt."""

load("//rules/common:env.bzl", "HELPER_ENV")
load("//rules/common:snapshot.bzl", "PREBUILT_CHANNELS", "channel_dir", "checksum_sha256", "store_blob_path", "under_snapshots_root")
load(":providers.bzl", "RocpackToolchainInfo", "SnapshotBlobInfo")
load(":toolchain.bzl", "toolchain_attr")

def snapshot_blob_action(actions: AnalysisActions, snapctl: RunInfo, blob: Artifact, sha256: str, metadata: dict[str, Artifact], channel: str, version: str, out: str) -> Artifact:
    """Registers `snapctl fetch`, which verifies `blob` and writes it as `out`.

    The blob is staged as a one-blob store (`cas/sha256/<hex>`) next to the
    snapshot's own metadata, so snapctl checks sha256 and size against
    metadata.txt before writing the output.

    Args:
      actions: the rule's AnalysisActions.
      snapctl: RunInfo of the snapctl helper.
      blob: the downloaded or checked-in blob.
      sha256: pinned sha256 (from stable_checksums.bzl).
      metadata: path under the snapshots root -> file (that snapshot's metadata.txt, headers).
      channel: "stable" or "last_stable".
      version: ROCm version.
      out: file name of the verified artifact.

    Returns:
      The verified artifact.
    """
    store = actions.copied_dir("store", {store_blob_path(sha256): blob})
    root = actions.copied_dir("snapshots_root", metadata)
    verified = actions.declare_output(out)
    actions.run(
        cmd_args(
            snapctl,
            "fetch",
            "--snapshots-root",
            root,
            "--store",
            store,
            "--channel",
            channel_dir(channel),
            "--version",
            version,
            "-o",
            verified.as_output(),
        ),
        category = "snapshot_verify",
        env = HELPER_ENV,
    )
    return verified

def _blob_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._rocpack_toolchain[RocpackToolchainInfo]
    sha = checksum_sha256(ctx.attrs.sha256)
    metadata = under_snapshots_root([(f.short_path, f) for f in ctx.attrs.metadata_files], ctx.attrs.snapshots_root_path)
    verified = snapshot_blob_action(ctx.actions, toolchain.snapctl, ctx.attrs.blob, sha, metadata, ctx.attrs.channel, ctx.attrs.version, ctx.attrs.out)
    return [
        DefaultInfo(default_output = verified),
        SnapshotBlobInfo(file = verified, sha256 = sha, channel = ctx.attrs.channel, version = ctx.attrs.version),
    ]

snapshot_blob = rule(
    impl = _blob_impl,
    doc = "Verifies one prebuilt snapshot artifact against its pinned sha256 and its metadata.txt (`snapctl fetch`) and exposes it under its real file name.",
    attrs = dict({
        "blob": attrs.source(doc = "The blob: a file of the local store (<store>/cas/sha256/<hex>) or an http_file target."),
        "channel": attrs.enum(PREBUILT_CHANNELS, doc = "Channel the snapshot belongs to."),
        # Bazel calls this `metadata`, a name Buck2 reserves for every target.
        "metadata_files": attrs.list(attrs.source(), doc = "The snapshot's files under the snapshots root (metadata.txt, headers)."),
        "out": attrs.string(doc = "File name of the verified artifact, e.g. \"librcclx-dev.a\"."),
        "sha256": attrs.string(doc = "Pinned sha256 (from stable_checksums.bzl)."),
        "snapshots_root_path": attrs.string(doc = "The snapshots root, relative to the package."),
        "version": attrs.string(doc = "ROCm version of the snapshot."),
    }, **toolchain_attr()),
)
