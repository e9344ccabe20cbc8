#!/usr/bin/env bash
# Bazel: real builds and tests of the rules and both examples with Debian's
# bazel-bootstrap (4.2.3), plus e2e checks of outputs, caching (no-op rebuild,
# --disk_cache, HTTP remote cache on nginx), hermeticity and the release-binary
# download path. See tests/bazel/e2e.sh.
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
need_pkgs bazel-bootstrap nginx gcc libc6-dev binutils python3 curl

# Debug-profile helpers: stage 10 (cargo test) already built most of them, and
# the examples are tiny; a release build would add minutes on 2 cores.
log "cargo build -p kpack -p snapctl (helpers for --config=prebuilt)"
cargo fetch --locked
# One package per cargo run: the same feature sets as the cargo_binary actions.
cargo build --locked -p kpack
cargo build --locked -p snapctl

# Without debug info: Bazel hashes, copies and archives them several times.
# (e2e.sh installs them into rules/bazel/prebuilt, gitignored.)
helpers="$(mktemp -d /tmp/rocpack-helpers.XXXXXX)"
trap 'rm -rf "$helpers"' EXIT
strip --strip-debug -o "$helpers/kpack" target/debug/kpack
strip --strip-debug -o "$helpers/snapctl" target/debug/snapctl

log "bazel e2e"
KPACK_BIN="$helpers/kpack" SNAPCTL_BIN="$helpers/snapctl" CARGO_PROFILE=dev bash tests/bazel/e2e.sh
