"""abi_guard: the ABI-drift guard of prebuilt snapshots (docs/cli/snapctl.md).

`snapctl create --abi-input FILE…` records the digests of the files a prebuilt
archive was compiled against; this rule runs `snapctl abi-check` on the files
the build uses now and hands the archive on only when they are unchanged, so a
drifted dependency stops the build before anything links the archive."""

load(":tools.bzl", "ACTION_ENV", "tool_attrs")

def _abi_guard_impl(ctx):
    stamp = ctx.actions.declare_file(ctx.label.name + ".abi-ok")
    args = ctx.actions.args()
    args.add("abi-check")
    for path in sorted(ctx.attr.expect.keys()):
        args.add("--expect", "%s=%s" % (path, ctx.attr.expect[path]))
    for f in ctx.files.inputs:
        # Workspace-relative, as `snapctl create --abi-input` run from the workspace root records it.
        args.add("--input", "%s=%s" % (f.short_path, f.path))
    args.add("--library=" + ctx.attr.library)
    args.add("--channel=" + ctx.attr.channel)
    args.add("--version=" + ctx.attr.version)
    args.add("--recut=" + " ".join([ctx.attr.recut] + ["--abi-input " + f.short_path for f in ctx.files.inputs]))
    args.add("--dev=" + ctx.attr.dev)
    args.add("--stamp", stamp)
    ctx.actions.run(
        executable = ctx.executable._snapctl,
        arguments = [args],
        inputs = ctx.files.inputs,
        outputs = [stamp],
        mnemonic = "SnapshotAbiCheck",
        progress_message = "checking the ABI inputs of %s" % ctx.label,
        env = ACTION_ENV,
    )
    out = ctx.actions.declare_file(ctx.label.name + "/" + ctx.file.archive.basename)
    ctx.actions.run_shell(
        inputs = [ctx.file.archive, stamp],
        outputs = [out],
        command = 'cp "$1" "$2"',
        arguments = [ctx.file.archive.path, out.path],
        mnemonic = "SnapshotAbiGuarded",
        env = ACTION_ENV,
    )
    return [DefaultInfo(files = depset([out]))]

abi_guard = rule(
    implementation = _abi_guard_impl,
    doc = "Passes a prebuilt archive on only when the dependency files it was compiled against are unchanged.",
    attrs = dict({
        "archive": attr.label(allow_single_file = True, mandatory = True, doc = "The verified prebuilt archive."),
        "inputs": attr.label_list(allow_files = True, doc = "The dependency's headers and libraries as the build uses them now."),
        "expect": attr.string_dict(doc = "Recorded digests: workspace-relative path -> sha256 (the checksums file's abi_inputs)."),
        "library": attr.string(doc = "Library name (message)."),
        "channel": attr.string(doc = "Channel (message)."),
        "version": attr.string(doc = "ROCm version (message)."),
        "recut": attr.string(doc = "Command that re-cuts the snapshot, without its --abi-input arguments (message)."),
        "dev": attr.string(doc = "How to build from source instead (message)."),
    }, **tool_attrs(snapctl = True)),
)
