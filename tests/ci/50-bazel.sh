#!/usr/bin/env bash
# Bazel: real builds and tests of the rules and both examples with Debian's
# bazel-bootstrap (4.2.3), plus e2e checks of outputs, caching (no-op rebuild,
# --disk_cache, HTTP remote cache on nginx), hermeticity and the release-binary
# download path. See tests/bazel/e2e.sh.
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
need_pkgs bazel-bootstrap nginx gcc libc6-dev python3 curl

log "cargo build --release -p kpack -p snapctl (helpers for --config=prebuilt)"
cargo fetch --locked
cargo build --release --locked -p kpack -p snapctl

log "bazel e2e"
bash tests/bazel/e2e.sh
