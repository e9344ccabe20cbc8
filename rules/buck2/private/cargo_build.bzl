"""rocpack_cargo_build: the helper binaries built by cargo from this repository."""

def rocpack_cargo_build_action(actions: AnalysisActions, manifest: Artifact, srcs: list[Artifact], packages: list[str], profile: str) -> Artifact:
    """Registers one local-only `cargo build` of `packages`; returns the target dir.

    Args:
      actions: the rule's AnalysisActions.
      manifest: the workspace Cargo.toml.
      srcs: every file cargo reads (manifests, Cargo.lock, sources).
      packages: cargo packages (-p) to build.
      profile: cargo profile ("release" or "dev").

    Returns:
      The declared cargo target directory.
    """
    target_dir = actions.declare_output("cargo-target", dir = True)
    args = [
        "cargo",
        "build",
        "--locked",
        "--offline",
        "--profile",
        profile,
        "--manifest-path",
        manifest,
        "--target-dir",
        target_dir.as_output(),
    ]
    for p in packages:
        args += ["-p", p]
    actions.run(
        cmd_args(args, hidden = srcs),
        category = "cargo_build",
        # cargo needs the user's registry cache (run `cargo fetch --locked` once).
        local_only = True,
        env = {"CARGO_TERM_COLOR": "never"},
    )
    return target_dir

def _rocpack_cargo_build_impl(ctx: AnalysisContext) -> list[Provider]:
    target_dir = rocpack_cargo_build_action(ctx.actions, ctx.attrs.manifest, ctx.attrs.srcs, ctx.attrs.packages, ctx.attrs.profile)
    out_dir = "release" if ctx.attrs.profile == "release" else "debug" if ctx.attrs.profile == "dev" else ctx.attrs.profile
    sub_targets = {}
    bins = []
    for p in ctx.attrs.packages:
        exe = target_dir.project(out_dir + "/" + p)
        bins.append(exe)
        sub_targets[p] = [DefaultInfo(default_output = exe), RunInfo(args = cmd_args(exe))]
    return [DefaultInfo(default_outputs = bins, sub_targets = sub_targets)]

rocpack_cargo_build = rule(
    impl = _rocpack_cargo_build_impl,
    doc = "Builds the helper binaries with cargo (local-only action); sub-target [<package>] runs one.",
    attrs = {
        "manifest": attrs.source(doc = "The workspace Cargo.toml."),
        "packages": attrs.list(attrs.string(), default = ["kpack", "snapctl"], doc = "Cargo packages to build; each must have a binary of the same name."),
        "profile": attrs.string(default = "release", doc = "Cargo profile."),
        "srcs": attrs.list(attrs.source(), doc = "Every file cargo reads: manifests, Cargo.lock and the crates' sources."),
    },
)
