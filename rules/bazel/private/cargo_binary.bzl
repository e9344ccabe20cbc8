"""cargo_binaries / cargo_binary: build Rust binaries of this repository's cargo workspace.

The default of the //rules/bazel:kpack and :snapctl label_flags is ONE
`cargo_binaries` action building both helpers (`cargo build -p kpack -p
snapctl`), so a cold first build compiles the shared crates once. It runs the
host's `cargo build --offline --locked` outside the sandbox (cargo needs a
writable ~/.cargo; bazel-offline.md section 2.2) and copies the binaries out.
Crate sources must already be in ~/.cargo/registry (`cargo fetch`).

The action's environment is pinned (CARGO_ENV, plus ROCPACK_CARGO_TARGET_DIR
when --host_action_env passes it): a changed PATH in the user's shell does not
change the action's key, so it does not rerun a 20-minute cold build. cargo
is found on that PATH or in ~/.cargo/bin (~: the home directory of the user
running Bazel, from its passwd entry; HOME and XDG_CACHE_HOME of the shell
do not reach the action). Without a target dir, cargo builds in a
per-checkout cache dir, `~/.cache/rocpack/cargo-target/<first 16 hex digits
of the sha256 of the Cargo.toml path>`, kept between runs: an interrupted
build keeps what cargo finished, and the next build continues from there
(tests/bazel/vendored.sh kills cargo mid-build and checks it).

A warm target dir (e.g. CI's own `cargo build`) is reused with

    --@rocpack//rules/bazel:cargo_target_dir=/abs/path/to/target

which works on every Bazel version: Starlark flags reach the exec
configuration the helpers are built in. The environment variable
ROCPACK_CARGO_TARGET_DIR works too, but must reach the exec configuration:
`--action_env` alone does not on Bazel 4.2; pass `--host_action_env` as well.
"""

load(":providers.bzl", "FlagValueInfo")

# The whole environment of the cargo action; nothing else of the client's
# reaches it (use_default_shell_env would add its PATH to the action key).
CARGO_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C", "CARGO_TERM_COLOR": "never"}

_CMD = """set -euo pipefail
manifest="$1"; profile="$2"; tdir="${3:-${ROCPACK_CARGO_TARGET_DIR:-}}"; shift 3
# The real checkout path (the execroot links to it): cargo then keys its
# fingerprints like the user's own builds, so a shared target dir stays warm.
manifest="$(readlink -f "$manifest")"
# "$@": cargo arguments (-p PACKAGE ...) -- OUT_DIR BINARY ...
pkgs=()
while [ "$1" != -- ]; do pkgs+=("$1"); shift; done
shift
outdir="$1"; shift
[ -n "${HOME:-}" ] || HOME="$(getent passwd "$(id -u)" | cut -d: -f6)"
[ -n "$HOME" ] || HOME="${TMPDIR:-/tmp}"
export HOME
if [ -z "$tdir" ]; then
    # Kept between runs (not a temporary dir removed on exit): an
    # interrupted cold build loses nothing cargo finished.
    key="$(printf '%s' "$manifest" | sha256sum | cut -c1-16)"
    tdir="$HOME/.cache/rocpack/cargo-target/$key"
    mkdir -p "$tdir"
fi
export PATH="$PATH:$HOME/.cargo/bin"
cargo build --offline --locked --quiet --profile "$profile" --manifest-path "$manifest" "${pkgs[@]}" --target-dir "$tdir"
dir="$profile"; [ "$profile" = dev ] && dir=debug
for b in "$@"; do cp "$tdir/$dir/$b" "$outdir/$b"; done
"""

def _profile(ctx):
    profile = ctx.attr.profile or ctx.attr._profile_flag[FlagValueInfo].value
    if profile not in ("release", "dev"):
        fail("%s: profile must be release or dev, got '%s'" % (ctx.label, profile))
    return profile

def cargo_build_action(ctx, manifest, srcs, packages, binaries, profile, outs, target_dir = "", extra_args = []):
    """Registers one cargo build action for several packages and binaries.

    Args:
      ctx: rule context.
      manifest: File, the workspace Cargo.toml.
      srcs: list of Files cargo reads (sources, manifests, Cargo.lock).
      packages: cargo package names (-p each).
      binaries: binary names, in the order of `outs`.
      profile: cargo profile ("release" or "dev").
      outs: declared output Files, one per binary, all in one directory.
      target_dir: cargo target dir to reuse; empty: $ROCPACK_CARGO_TARGET_DIR
        when --host_action_env passes it, else a per-checkout cache dir.
      extra_args: more `cargo build` arguments (e.g. ["--bin", "kpack"]).
    """
    args = [manifest.path, profile, target_dir]
    for p in packages:
        args += ["-p", p]
    args += extra_args + ["--", outs[0].dirname] + binaries
    env = dict(CARGO_ENV)
    passed = ctx.configuration.default_shell_env.get("ROCPACK_CARGO_TARGET_DIR")
    if passed:
        env["ROCPACK_CARGO_TARGET_DIR"] = passed
    ctx.actions.run_shell(
        command = _CMD,
        arguments = args,
        inputs = srcs + [manifest],
        outputs = outs,
        mnemonic = "CargoBuild",
        progress_message = "cargo build %s (%s)" % (" ".join(["-p " + p for p in packages]), profile),
        env = env,
        execution_requirements = {"no-sandbox": "1", "no-remote": "1"},
    )

def cargo_binary_action(ctx, manifest, srcs, package, binary, profile, out):
    """Registers the cargo build action of one binary (kept for existing callers).

    Args:
      ctx: rule context.
      manifest: File, the workspace Cargo.toml.
      srcs: list of Files cargo reads (sources, manifests, Cargo.lock).
      package: cargo package name.
      binary: binary name.
      profile: cargo profile ("release" or "dev").
      out: declared output File (named like the binary).
    """
    cargo_build_action(ctx, manifest, srcs, [package], [binary], profile, [out], extra_args = ["--bin", binary])

def _cargo_binaries_impl(ctx):
    outs = [ctx.actions.declare_file(ctx.label.name + "/" + b) for b in ctx.attr.binaries]
    cargo_build_action(
        ctx,
        ctx.file.manifest,
        ctx.files.srcs,
        ctx.attr.packages,
        ctx.attr.binaries,
        _profile(ctx),
        outs,
        ctx.attr._target_dir_flag[FlagValueInfo].value,
    )
    return [DefaultInfo(files = depset(outs))]

_COMMON_ATTRS = {
    "manifest": attr.label(allow_single_file = ["Cargo.toml"], mandatory = True, doc = "The workspace Cargo.toml."),
    "srcs": attr.label_list(allow_files = True, doc = "Every file cargo reads: sources and Cargo.toml of each crate the binaries depend on, and Cargo.lock. A change re-runs cargo."),
    "profile": attr.string(default = "", values = ["", "release", "dev"], doc = "Cargo profile; empty takes --@rocpack//rules/bazel:cargo_profile (default release)."),
    "_profile_flag": attr.label(default = Label("//rules/bazel:cargo_profile"), doc = "The cargo_profile flag."),
    "_target_dir_flag": attr.label(default = Label("//rules/bazel:cargo_target_dir"), doc = "The cargo_target_dir flag."),
}

cargo_binaries = rule(
    implementation = _cargo_binaries_impl,
    doc = "Builds several binaries of the cargo workspace in one cargo invocation (offline, locked). Outputs <name>/<binary>; pick one with `cargo_output`.",
    attrs = dict({
        "packages": attr.string_list(mandatory = True, doc = "Cargo packages (-p each)."),
        "binaries": attr.string_list(mandatory = True, doc = "Binary names the packages produce; also the output file names."),
    }, **_COMMON_ATTRS),
)

def _cargo_output_impl(ctx):
    want = ctx.attr.binary
    for f in ctx.files.binaries:
        if f.basename == want:
            out = ctx.actions.declare_file(ctx.label.name + "/" + want)
            ctx.actions.symlink(output = out, target_file = f, is_executable = True)
            return [DefaultInfo(files = depset([out]), executable = out)]
    fail("%s: %s has no binary named %s" % (ctx.label, ctx.attr.binaries.label, want))

cargo_output = rule(
    implementation = _cargo_output_impl,
    executable = True,
    doc = "One binary of a `cargo_binaries` target, as an executable target.",
    attrs = {
        "binaries": attr.label(mandatory = True, doc = "The cargo_binaries target."),
        "binary": attr.string(mandatory = True, doc = "The binary's name."),
    },
)

def _cargo_binary_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + "/" + ctx.attr.binary)
    cargo_build_action(
        ctx,
        ctx.file.manifest,
        ctx.files.srcs,
        [ctx.attr.package],
        [ctx.attr.binary],
        _profile(ctx),
        [out],
        ctx.attr._target_dir_flag[FlagValueInfo].value,
        extra_args = ["--bin", ctx.attr.binary],
    )
    return [DefaultInfo(files = depset([out]), executable = out)]

cargo_binary = rule(
    implementation = _cargo_binary_impl,
    executable = True,
    doc = "Builds one binary of the cargo workspace with the host's cargo (offline, locked).",
    attrs = dict({
        "package": attr.string(mandatory = True, doc = "Cargo package (-p)."),
        "binary": attr.string(mandatory = True, doc = "Binary name (--bin); also the output file name."),
    }, **_COMMON_ATTRS),
)
