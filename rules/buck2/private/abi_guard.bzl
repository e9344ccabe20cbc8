"""abi_guard (Buck2): the ABI-drift guard of prebuilt snapshots, as in rules/bazel.

`snapctl create --abi-input FILE…` records the digests of the files a prebuilt
archive was compiled against; this rule runs `snapctl abi-check` on the files
the build uses now and hands the archive on only when they are unchanged, so a
drifted dependency stops the build before anything links the archive (the
link's only way to the archive is this rule's output, which needs the check's
stamp)."""

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

def _abi_guard_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._rocpack_toolchain[RocpackToolchainInfo]
    stamp = ctx.actions.declare_output(ctx.label.name + ".abi-ok")
    args = ["abi-check"]
    for path in sorted(ctx.attrs.expect.keys()):
        args += ["--expect", "%s=%s" % (path, ctx.attrs.expect[path])]
    recorded = []
    for f in ctx.attrs.inputs:
        path = _recorded_path(ctx, f)
        recorded.append(path)
        args += ["--input-pair", path, f]
    args += [
        "--library=" + ctx.attrs.library,
        "--channel=" + ctx.attrs.channel,
        "--version=" + ctx.attrs.version,
        "--recut=" + " ".join([ctx.attrs.recut] + ["--abi-input " + p for p in recorded]),
        "--dev=" + ctx.attrs.dev,
        "--stamp",
        stamp.as_output(),
    ]
    cmd = cmd_args(toolchain.snapctl, args)
    ctx.actions.run(cmd, category = "snapshot_abi_check", env = {"LC_ALL": "C", "TZ": "UTC"})
    out = ctx.actions.declare_output(ctx.label.name + "/" + ctx.attrs.archive.basename)
    ctx.actions.run(
        cmd_args("cp", ctx.attrs.archive, out.as_output(), hidden = [stamp]),
        category = "snapshot_abi_guarded",
        env = {"LC_ALL": "C"},
    )
    return [DefaultInfo(default_output = out)]

abi_guard = rule(
    impl = _abi_guard_impl,
    doc = "Passes a prebuilt archive on only when the dependency files it was compiled against are unchanged.",
    attrs = dict({
        "archive": attrs.source(doc = "The verified prebuilt archive."),
        "channel": attrs.string(default = "", doc = "Channel (message)."),
        "dev": attrs.string(default = "", doc = "How to build from source instead (message)."),
        "expect": attrs.dict(attrs.string(), attrs.string(), default = {}, doc = "Recorded digests: project-relative path -> sha256 (the checksums file's abi_inputs)."),
        "inputs": attrs.list(attrs.source(), default = [], doc = "The dependency's headers and libraries as the build uses them now."),
        "library": attrs.string(default = "", doc = "Library name (message)."),
        "recut": attrs.string(default = "", doc = "Command that re-cuts the snapshot, without its --abi-input arguments (message)."),
        "version": attrs.string(default = "", doc = "ROCm version (message)."),
    }, **toolchain_attr()),
)
