"""snapshot_blob: one prebuilt snapshot artifact, verified against its pinned sha256."""

load("//rules/common:snapshot.bzl", "PREBUILT_CHANNELS", "checksum_sha256", "store_blob_path", "under_snapshots_root")
load(":providers.bzl", "SnapshotBlobInfo")
load(":tools.bzl", "ACTION_ENV", "stage_list", "tool_attrs")

def snapshot_blob_action(ctx, stage, snapctl, blob, sha256, out, fetch = None):
    """Registers the action that verifies a prebuilt blob and copies it to `out`.

    Without `fetch` the wrapper checks the sha256 itself. With `fetch` =
    struct(root_files = [(rel, File)], channel, version), `snapctl fetch` reads
    the snapshot's metadata, looks the blob up in a staged store and verifies
    sha256 (and size) before writing `out`.

    Args:
      ctx: rule context.
      stage: stage.sh executable File.
      snapctl: snapctl executable File.
      blob: the blob File (content-addressed by sha256).
      sha256: expected sha256 (from stable_checksums.bzl).
      out: declared output File.
      fetch: optional struct for the snapctl route.
    """
    args = ctx.actions.args()
    inputs = [blob]
    tools = []
    if fetch == None:
        args.add("--sha256", sha256)
        args.add(blob)
        args.add("--")
        args.add("/bin/cp")
        args.add(blob)
        args.add(out)
    else:
        pairs = [("root/" + rel, f) for rel, f in fetch.root_files]
        pairs.append(("store/" + store_blob_path(sha256), blob))
        lst = stage_list(ctx, "stage.txt", pairs)
        inputs = inputs + [lst] + [f for _, f in fetch.root_files]
        tools = [snapctl]
        args.add("--sha256", sha256)
        args.add(blob)
        args.add("--stage", lst)
        args.add("--")
        args.add(snapctl)
        args.add("fetch")
        args.add("--snapshots-root", "@STAGE@/root")
        args.add("--store", "@STAGE@/store")
        args.add("--channel", fetch.channel.replace("_", "-"))
        args.add("--version", fetch.version)
        args.add("-o", out)
    ctx.actions.run(
        executable = stage,
        arguments = [args],
        inputs = inputs,
        tools = tools,
        outputs = [out],
        mnemonic = "SnapshotVerify",
        progress_message = "verifying snapshot %s" % ctx.label,
        env = ACTION_ENV,
    )

def _blob_impl(ctx):
    sha = checksum_sha256(ctx.attr.sha256)
    out = ctx.actions.declare_file(ctx.label.name + "/" + ctx.attr.out)
    fetch = None
    if ctx.attr.metadata:
        files = under_snapshots_root([(f.path, f) for f in ctx.files.metadata], ctx.attr.snapshots_root_path)
        fetch = struct(root_files = files.items(), channel = ctx.attr.channel, version = ctx.attr.version)
        if not ctx.attr.snapctl:
            fail("snapshot_blob: `metadata` needs `snapctl`")
    snapshot_blob_action(ctx, ctx.executable._stage, ctx.executable.snapctl if ctx.attr.snapctl else None, ctx.file.blob, sha, out, fetch)
    return [
        DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out])),
        SnapshotBlobInfo(file = out, sha256 = sha, channel = ctx.attr.channel, version = ctx.attr.version),
    ]

snapshot_blob = rule(
    implementation = _blob_impl,
    doc = "Verifies one prebuilt snapshot artifact against its pinned sha256 and exposes it under its real file name.",
    attrs = dict({
        "blob": attr.label(allow_single_file = True, mandatory = True, doc = "The blob: a file of the local store (<store>/cas/sha256/<hex>) or an http_file repository's file."),
        "sha256": attr.string(mandatory = True, doc = "Pinned sha256 (from stable_checksums.bzl)."),
        "out": attr.string(mandatory = True, doc = "File name of the verified artifact, e.g. \"librcclx-dev.a\"."),
        "channel": attr.string(mandatory = True, values = PREBUILT_CHANNELS, doc = "Channel the snapshot belongs to."),
        "version": attr.string(mandatory = True, doc = "ROCm version of the snapshot."),
        "metadata": attr.label_list(allow_files = True, doc = "Optional: the snapshot's metadata.txt (and headers). When set, `snapctl fetch` verifies the blob against the metadata too."),
        "snapshots_root_path": attr.string(doc = "Execroot-relative snapshots root, needed with `metadata`."),
        "snapctl": attr.label(executable = True, allow_files = True, cfg = "exec", doc = "The snapctl helper, needed with `metadata` (rcclx_snapshot passes the //rules/bazel:snapctl label_flag)."),
    }, **tool_attrs()),
)
