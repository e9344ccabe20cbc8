"""abi_guard (Buck2): the ABI-drift guard of prebuilt snapshots, as in rules/bazel.

`snapctl create --abi-input FILE…` records the digests of the files a prebuilt
archive was compiled against; `abi_guard` runs `snapctl abi-check` on the
files the build uses now and hands the archive on only when they are
unchanged, so a drifted dependency stops the build before anything links the
archive (the link's only way to the archive is this rule's output, which
needs the check's stamp). `abi_guard_test` runs the same check for `buck2
test`: a channel the configuration does not select never fails `buck2 build
//...`, but its drift shows up as a failing test naming the channel, the
changed file and the fix."""

load("//rules/common:env.bzl", "HELPER_ENV")
load("//rules/common:snapshot.bzl", "abi_check_expect_args", "abi_check_message_args", "abi_recut_input")
load(":project_test.bzl", "project_root_test_providers")
load(":providers.bzl", "RocpackToolchainInfo")
load(":toolchain.bzl", "toolchain_attr")

def _recorded_path(ctx: AnalysisContext, f: Artifact) -> str:
    # `snapctl create --abi-input` run from the project root records
    # project-relative paths; Buck2's short_path is relative to the package
    # of the artifact's owner (a source file: this target's package).
    pkg = ctx.label.package
    if f.owner and hasattr(f.owner, "package"):
        pkg = f.owner.package
    return (pkg + "/" + f.short_path) if pkg else f.short_path

def _abi_check(ctx: AnalysisContext, verdict: str, out: Artifact, category: str):
    # One `snapctl abi-check` of the inputs; `verdict` (--stamp or --report)
    # says where its verdict goes: `out`.
    toolchain = ctx.attrs._rocpack_toolchain[RocpackToolchainInfo]
    args = ["abi-check"] + abi_check_expect_args(ctx.attrs.expect)
    recut = []
    for f in ctx.attrs.inputs:
        path = _recorded_path(ctx, f)
        args += ["--input-pair", path, f]
        if f.is_source:
            recut.append(abi_recut_input(path, '"$(buck2 root --kind project)"'))
        else:
            recut.append("--abi-input %s=\"$(buck2 build --show-full-simple-output %s)\"" % (path, f.owner.raw_target() if f.owner else "<its target>"))
    args += abi_check_message_args(ctx.attrs, recut)
    if ctx.attrs.snapshot_metadata:
        args += ["--metadata", ctx.attrs.snapshot_metadata]
    ctx.actions.run(cmd_args(toolchain.snapctl, args, verdict, out.as_output()), category = category, env = HELPER_ENV)

def _abi_guard_impl(ctx: AnalysisContext) -> list[Provider]:
    stamp = ctx.actions.declare_output(ctx.label.name + ".abi-ok")
    _abi_check(ctx, "--stamp", stamp, "snapshot_abi_check")
    out = ctx.actions.declare_output(ctx.label.name + "/" + ctx.attrs.archive.basename)
    ctx.actions.run(
        cmd_args("cp", ctx.attrs.archive, out.as_output(), hidden = [stamp]),
        category = "snapshot_abi_guarded",
        env = HELPER_ENV,
    )
    return [DefaultInfo(default_output = out)]

_ATTRS = {
    "channel": attrs.string(default = "", doc = "Channel (message)."),
    "dev": attrs.string(default = "", doc = "How to build from source instead (message)."),
    "docs": attrs.string(default = "", doc = "Where the recovery is documented (message)."),
    "expect": attrs.dict(attrs.string(), attrs.string(), default = {}, doc = "Recorded digests: project-relative path -> sha256 (the checksums file's abi_inputs)."),
    "inputs": attrs.list(attrs.source(), default = [], doc = "The dependency's headers and libraries as the build uses them now."),
    "library": attrs.string(default = "", doc = "Library name (message)."),
    "snapshot_metadata": attrs.option(attrs.source(), default = None, doc = "The snapshot's metadata.txt (the message names its commits)."),
    "rebuild": attrs.string(default = "", doc = "What to rebuild before the re-cut (message)."),
    "recut": attrs.string(default = "", doc = "Command that re-cuts the snapshot, without its --abi-input arguments (message)."),
    "rollback": attrs.string(default = "", doc = "Command going back to the last-stable snapshot, or empty (message)."),
    "version": attrs.string(default = "", doc = "ROCm version (message)."),
}

abi_guard = rule(
    impl = _abi_guard_impl,
    doc = "Passes a prebuilt archive on only when the dependency files it was compiled against are unchanged.",
    attrs = dict(dict(_ATTRS, archive = attrs.source(doc = "The verified prebuilt archive.")), **toolchain_attr()),
)

_TEST = """r=$1
if [ "$(head -c 3 "$r")" = "OK " ]; then
    cat "$r"
    exit 0
fi
cat "$r" >&2
exit 1
"""

def _abi_guard_test_impl(ctx: AnalysisContext) -> list[Provider]:
    report = ctx.actions.declare_output(ctx.label.name + ".abi-report")
    _abi_check(ctx, "--report", report, "snapshot_abi_report")
    return project_root_test_providers(cmd_args("/bin/sh", "-c", _TEST, "abi_guard_test", report), ctx.attrs.labels)

abi_guard_test = rule(
    impl = _abi_guard_test_impl,
    doc = "Fails (at test time, never at build time) when the dependency files a prebuilt archive was compiled against changed.",
    attrs = dict(dict(_ATTRS, labels = attrs.list(attrs.string(), default = [], doc = "Test labels.")), **toolchain_attr()),
)
