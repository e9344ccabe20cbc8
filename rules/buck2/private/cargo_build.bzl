"""rocpack_cargo_build: the helper binaries built by cargo from this repository."""

# $1 target dir ("" = a per-checkout dir under ~/.cache/rocpack, kept between
# builds and outside every project tree), $2 output dir, $3 cargo profile,
# $4 profile's directory name, $5 manifest, $6 space-separated files to copy
# out (binaries or libraries); then the cargo -p flags. Only those files land
# in the output (Buck2 hashes every output byte: a whole cargo target dir is
# gigabytes), without debug info.
_CARGO_BUILD = """set -eu
td=$1; out=$2; profile=$3; pdir=$4; manifest=$5; bins=$6; shift 6
if [ -z "$td" ]; then
    [ -n "${HOME:-}" ] || HOME="$(getent passwd "$(id -u)" | cut -d: -f6)"
    key="$(readlink -f "$manifest" | tr -d '\n' | sha256sum | cut -c1-16)"
    td="${XDG_CACHE_HOME:-${HOME:-${TMPDIR:-/tmp}}/.cache}/rocpack/cargo-target/$key"
    mkdir -p "$td"
fi
cargo build --locked --offline --quiet --profile "$profile" --manifest-path "$manifest" --target-dir "$td" "$@"
mkdir -p "$out"
for b in $bins; do
    strip --strip-debug -o "$out/$b" "$td/$pdir/$b" 2>/dev/null || cp "$td/$pdir/$b" "$out/$b"
    chmod 0755 "$out/$b"
done
"""

def rocpack_cargo_build_action(actions: AnalysisActions, manifest: Artifact, srcs: list[Artifact], packages: list[str], profile: str, target_dir: str = "", files: list[str] | None = None) -> Artifact:
    """Registers one local-only `cargo build` of `packages`; returns the binaries' directory.

    Args:
      actions: the rule's AnalysisActions.
      manifest: the workspace Cargo.toml.
      srcs: every file cargo reads (manifests, Cargo.lock, sources).
      packages: cargo packages (-p) to build; each has a binary of its name.
      profile: cargo profile ("release" or "dev").
      target_dir: cargo's --target-dir, shared with other cargo runs
        (relative paths are from the project root); "": a per-checkout
        directory under ~/.cache/rocpack/cargo-target, outside the project.

    Returns:
      The declared directory holding one binary per package.
    """
    out = actions.declare_output("bin", dir = True)
    pdir = "debug" if profile == "dev" else profile
    args = ["/bin/sh", "-c", _CARGO_BUILD, "cargo_build", target_dir, out.as_output(), profile, pdir, manifest, " ".join(packages if files == None else files)]
    for p in packages:
        args += ["-p", p]
    actions.run(
        cmd_args(args, hidden = srcs),
        category = "cargo_build",
        # cargo needs the user's registry cache (run `cargo fetch --locked` once)
        # and, with a shared target dir, a path outside buck-out.
        local_only = True,
        env = {"CARGO_TERM_COLOR": "never"},
    )
    return out

def _rocpack_cargo_build_impl(ctx: AnalysisContext) -> list[Provider]:
    out = rocpack_cargo_build_action(ctx.actions, ctx.attrs.manifest, ctx.attrs.srcs, ctx.attrs.packages, ctx.attrs.profile, ctx.attrs.target_dir)
    sub_targets = {}
    bins = []
    for p in ctx.attrs.packages:
        exe = out.project(p)
        bins.append(exe)
        sub_targets[p] = [DefaultInfo(default_output = exe), RunInfo(args = cmd_args(exe))]
    return [DefaultInfo(default_outputs = bins, sub_targets = sub_targets)]

rocpack_cargo_build = rule(
    impl = _rocpack_cargo_build_impl,
    doc = "Builds the helper binaries with cargo (local-only action); sub-target [<package>] runs one.",
    attrs = {
        "manifest": attrs.source(doc = "The workspace Cargo.toml."),
        "packages": attrs.list(attrs.string(), default = ["kpack", "snapctl"], doc = "Cargo packages to build, in one cargo run; each must have a binary of the same name."),
        "profile": attrs.string(default = "release", doc = "Cargo profile (`[rocpack] cargo_profile`)."),
        "srcs": attrs.list(attrs.source(), doc = "Every file cargo reads: manifests, Cargo.lock and the crates' sources."),
        "target_dir": attrs.string(default = "", doc = "cargo --target-dir shared with other cargo runs (`[rocpack] cargo_target_dir`; relative to the project root); empty: a per-checkout directory under ~/.cache/rocpack/cargo-target, kept between builds and outside the project."),
    },
)
