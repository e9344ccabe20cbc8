"""cargo_binary: builds a Rust binary of this repository's cargo workspace.

The default of the //rules/bazel:kpack and :snapctl label_flags. It runs the
host's `cargo build --release --offline --locked` as one Bazel action outside
the sandbox (cargo needs a writable ~/.cargo; bazel-offline.md section 2.2),
into a private temporary target dir (or $ROCPACK_CARGO_TARGET_DIR, passed with
--action_env), and copies the binary out. Crate sources
must already be in ~/.cargo/registry (`cargo fetch`).
"""

load(":providers.bzl", "FlagValueInfo")

_CMD = """set -euo pipefail
manifest="$1"; package="$2"; binary="$3"; out="$4"; profile="$5"
# ROCPACK_CARGO_TARGET_DIR (--action_env) reuses a warm target dir, e.g. CI's
# own `cargo build --release`; by default every build starts clean.
if [ -n "${ROCPACK_CARGO_TARGET_DIR:-}" ]; then
    tdir="$ROCPACK_CARGO_TARGET_DIR"
else
    tdir="$(mktemp -d "${TMPDIR:-/tmp}/rocpack-cargo.XXXXXXXX")"
    trap 'rm -rf "$tdir"' EXIT
fi
export PATH="$PATH:${HOME:-/root}/.cargo/bin"
cargo build --offline --locked --quiet --profile "$profile" --manifest-path "$manifest" -p "$package" --bin "$binary" --target-dir "$tdir"
dir="$profile"; [ "$profile" = dev ] && dir=debug
cp "$tdir/$dir/$binary" "$out"
"""

def cargo_binary_action(ctx, manifest, srcs, package, binary, profile, out):
    """Registers the cargo build action (reusable by other rules).

    Args:
      ctx: rule context.
      manifest: File, the workspace Cargo.toml.
      srcs: list of Files cargo reads (sources, manifests, Cargo.lock).
      package: cargo package name.
      binary: binary name.
      profile: cargo profile ("release" or "dev").
      out: declared output File.
    """
    ctx.actions.run_shell(
        command = _CMD,
        arguments = [manifest.path, package, binary, out.path, profile],
        inputs = srcs + [manifest],
        outputs = [out],
        mnemonic = "CargoBuild",
        progress_message = "cargo build -p %s (%s)" % (package, profile),
        use_default_shell_env = True,
        execution_requirements = {"no-sandbox": "1", "no-remote": "1"},
    )

def _cargo_binary_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + "/" + ctx.attr.binary)
    profile = ctx.attr.profile or ctx.attr._profile_flag[FlagValueInfo].value
    if profile not in ("release", "dev"):
        fail("cargo_binary: profile must be release or dev, got '%s'" % profile)
    cargo_binary_action(ctx, ctx.file.manifest, ctx.files.srcs, ctx.attr.package, ctx.attr.binary, profile, out)
    return [DefaultInfo(files = depset([out]), executable = out)]

cargo_binary = rule(
    implementation = _cargo_binary_impl,
    executable = True,
    doc = "Builds one binary of the cargo workspace with the host's cargo (offline, locked).",
    attrs = {
        "manifest": attr.label(allow_single_file = ["Cargo.toml"], mandatory = True, doc = "The workspace Cargo.toml."),
        "srcs": attr.label_list(allow_files = True, doc = "Every file cargo reads: sources and Cargo.toml of each crate the binary depends on, and Cargo.lock. A change re-runs cargo."),
        "package": attr.string(mandatory = True, doc = "Cargo package (-p)."),
        "binary": attr.string(mandatory = True, doc = "Binary name (--bin); also the output file name."),
        "profile": attr.string(default = "", values = ["", "release", "dev"], doc = "Cargo profile; empty takes --//rules/bazel:cargo_profile (default release)."),
        "_profile_flag": attr.label(default = Label("//rules/bazel:cargo_profile"), doc = "The cargo_profile flag."),
    },
)
