"""abi_guard: the ABI-drift guard of prebuilt snapshots (docs/cli/snapctl.md).

`snapctl create --abi-input FILE…` records the digests of the files a prebuilt
archive was compiled against; `abi_guard` runs `snapctl abi-check` on the
files the build uses now and hands the archive on only when they are
unchanged, so a drifted dependency stops the build before anything links the
archive. `abi_guard_test` runs the same check for `bazel test`: a channel the
configuration does not select never fails `bazel build //...`, but its drift
shows up as a failing test naming the channel, the changed file and the fix."""

load("//rules/common:snapshot.bzl", "abi_check_expect_args", "abi_check_message_args", "abi_recut_input")
load(":tools.bzl", "ACTION_ENV", "tool_attrs")

def _abi_check(ctx, verdict, out, mnemonic):
    # One `snapctl abi-check` of the inputs; `verdict` (--stamp or --report)
    # says where its verdict goes: `out`.
    args = ctx.actions.args()
    args.add("abi-check")
    args.add_all(abi_check_expect_args(ctx.attr.expect))
    recut = []
    for f in ctx.files.inputs:
        # Workspace-relative, as `snapctl create --abi-input` run from the workspace root records it.
        args.add("--input", "%s=%s" % (f.short_path, f.path))
        recut.append(abi_recut_input(f.short_path, '"$(bazel info workspace)"' if f.is_source else '"$(bazel info bazel-bin)"'))
    args.add_all(abi_check_message_args(ctx.attr, recut))
    inputs = list(ctx.files.inputs)
    if ctx.file.snapshot_metadata:
        args.add("--metadata", ctx.file.snapshot_metadata)
        inputs.append(ctx.file.snapshot_metadata)
    args.add(verdict, out)
    ctx.actions.run(
        executable = ctx.executable._snapctl,
        arguments = [args],
        inputs = inputs,
        outputs = [out],
        mnemonic = mnemonic,
        progress_message = "checking the ABI inputs of %s" % ctx.label,
        env = ACTION_ENV,
    )

def _abi_guard_impl(ctx):
    stamp = ctx.actions.declare_file(ctx.label.name + ".abi-ok")
    _abi_check(ctx, "--stamp", stamp, "SnapshotAbiCheck")
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

_ATTRS = {
    "inputs": attr.label_list(allow_files = True, doc = "The dependency's headers and libraries as the build uses them now."),
    "expect": attr.string_dict(doc = "Recorded digests: workspace-relative path -> sha256 (the checksums file's abi_inputs)."),
    "snapshot_metadata": attr.label(allow_single_file = True, doc = "The snapshot's metadata.txt (the message names its commits)."),
    "library": attr.string(doc = "Library name (message)."),
    "channel": attr.string(doc = "Channel (message)."),
    "version": attr.string(doc = "ROCm version (message)."),
    "recut": attr.string(doc = "Command that re-cuts the snapshot, without its --abi-input arguments (message)."),
    "rebuild": attr.string(doc = "What to rebuild before the re-cut (message)."),
    "rollback": attr.string(doc = "Command going back to the last-stable snapshot, or empty (message)."),
    "dev": attr.string(doc = "How to build from source instead (message)."),
    "docs": attr.string(doc = "Where the recovery is documented (message)."),
}

abi_guard = rule(
    implementation = _abi_guard_impl,
    doc = "Passes a prebuilt archive on only when the dependency files it was compiled against are unchanged.",
    attrs = dict(dict(_ATTRS, archive = attr.label(allow_single_file = True, mandatory = True, doc = "The verified prebuilt archive.")), **tool_attrs(snapctl = True)),
)

def _abi_guard_test_impl(ctx):
    report = ctx.actions.declare_file(ctx.label.name + ".abi-report")
    _abi_check(ctx, "--report", report, "SnapshotAbiReport")
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.write(script, """#!/bin/sh
r="%s"
if [ "$(head -c 3 "$r")" = "OK " ]; then
    cat "$r"
    exit 0
fi
echo "%s: " >&2
cat "$r" >&2
exit 1
""" % (report.short_path, ctx.label), is_executable = True)
    return [DefaultInfo(executable = script, runfiles = ctx.runfiles(files = [report]))]

abi_guard_test = rule(
    implementation = _abi_guard_test_impl,
    test = True,
    doc = "Fails (at test time, never at build time) when the dependency files a prebuilt archive was compiled against changed.",
    attrs = dict(dict(_ATTRS), **tool_attrs(snapctl = True)),
)
