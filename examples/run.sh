#!/usr/bin/env bash
# README's first command: set up, build both examples with Bazel, show what
# `hello` prints for each rcclx channel.
#
#   ./examples/run.sh
#
# Installs Debian's Bazel (bazel-bootstrap) when it is missing and we are root,
# builds the helpers with cargo (copied to rules/bazel/prebuilt for
# --config=prebuilt), then runs the examples.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\n==> %s\n' "$*" >&2; }

if ! command -v bazel >/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bazel is not installed; as root run: apt-get install bazel-bootstrap" >&2
        exit 1
    fi
    log "installing Debian's bazel-bootstrap"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=600 bazel-bootstrap gcc libc6-dev binutils
fi

log "building the helpers: cargo build -p kpack -p snapctl"
cargo build --locked -p kpack -p snapctl
rules/bazel/prebuilt/install.sh target/debug/kpack target/debug/snapctl

log "kpack: split three CI shards and recombine them per GPU family"
bazel build --config=prebuilt //examples/kpack:all
bin="$(bazel info --config=prebuilt bazel-bin 2>/dev/null)"
for p in blas_lib_generic blas_lib_gfx110X blas_lib_gfx115X blas_lib_gfx120X; do
    printf '  %-18s %s\n' "$p" "$(cd "$bin/examples/kpack/$p" && find -L . -type f | sed 's|.*/||' | grep -E '\.kpack$|\.so' | sort | tr '\n' ' ')"
done

log "rcclx: one library, three channels"
for cfg in "" "--config=rcclx_stable --config=rocm64" "--config=rcclx_last_stable --config=rocm64" \
    "--config=rcclx_stable --config=rocm70"; do
    # shellcheck disable=SC2086
    printf '  %-56s ' "bazel run ${cfg:-(default: dev)}"
    bazel run --config=prebuilt $cfg //examples/rcclx:hello 2>/dev/null
done

log "a ROCm version without a snapshot fails with a message that says what to do"
bazel build --config=prebuilt --config=rcclx_stable --config=rocm71 //examples/rcclx:hello 2>&1 \
    | sed -n '/Error in fail/,/update/p' || true
echo
echo "More: docs/rules/README.md. All tests: ./tests/run-all.sh"
