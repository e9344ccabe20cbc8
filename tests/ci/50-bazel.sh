#!/usr/bin/env bash
# Bazel: real builds and tests of the rules and the examples with Debian's
# bazel-bootstrap (4.2.3), plus e2e checks of outputs, caching (no-op rebuild,
# --disk_cache, HTTP remote cache on nginx), hermeticity, the from-source
# toolchain (one cargo invocation, cargo target dir reaching the exec
# configuration) and the prebuilt toolchain (tests/bazel/e2e.sh); then the
# WORKSPACE-mode consumer workspace e2e/bazel-workspace (tests/bazel/consumer.sh);
# then a consumer assembled from docs/rules/consumers.md with rocpack vendored
# at third_party/rocpack and helpers from tools/release/make-prebuilt.sh
# (tests/bazel/vendored.sh), which then builds the helpers from source in the
# default cargo target dir (~/.cache/rocpack/cargo-target/<hash>), kills cargo
# mid-build and checks the rebuild keeps what was finished
# (e2e/interrupted-build.sh).
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
need_pkgs bazel-bootstrap nginx gcc libc6-dev binutils python3 curl

# Debug-profile helpers: stage 10's build (ci_helpers in lib.sh), without
# debug info (Bazel hashes, copies and archives them several times), and
# librocm_kpack for examples/runtime (install.sh takes it from beside
# kpack). e2e.sh installs them into rules/bazel/prebuilt (gitignored).
cargo fetch --locked
ci_helpers
helpers="$CI_HELPERS_DIR"

T=$SECONDS
log "bazel e2e"
KPACK_BIN="$helpers/kpack" SNAPCTL_BIN="$helpers/snapctl" CARGO_PROFILE=dev bash tests/bazel/e2e.sh
echo "    (bazel e2e: $((SECONDS - T))s)" >&2

T=$SECONDS
log "ABI-drift guard with a real break: examples/abi_guard (prebuilt_snapshot abi_inputs)"
rules/bazel/prebuilt/install.sh "$helpers/kpack" "$helpers/snapctl"
bash examples/abi_guard/check.sh --config=prebuilt
echo "    (abi_guard: $((SECONDS - T))s)" >&2

T=$SECONDS
log "C consumer of librocm_kpack: examples/runtime on //:rocm_kpack{,_static} (prebuilt libraries); a consumer workspace on @rocpack//:rocm_kpack{,_static} (built from source)"
bash tests/ci/runtime-consumer.sh bazel --config=prebuilt
bash tests/ci/runtime-consumer.sh readme  # README's runtime recipe as written (debug build above)
bash tests/ci/runtime-consumer.sh bazel-workspace \
    --@rocpack//rules/bazel:cargo_target_dir="$ROOT/target" --@rocpack//rules/bazel:cargo_profile=dev
echo "    (runtime consumer: $((SECONDS - T))s)" >&2

T=$SECONDS
log "source snapshots: examples/rcclx_source (source_snapshot, package paths mapped, freshness test)"
bash examples/rcclx_source/check.sh --config=prebuilt
echo "    (rcclx_source: $((SECONDS - T))s)" >&2

T=$SECONDS
log "consumer workspace e2e/bazel-workspace (local_repository ../..), toolchain from source with CI's warm target dir"
SNAPCTL_BIN="$helpers/snapctl" bash tests/bazel/consumer.sh e2e/bazel-workspace \
    --@rocpack//rules/bazel:cargo_target_dir="$ROOT/target" --@rocpack//rules/bazel:cargo_profile=dev
echo "    (consumer: $((SECONDS - T))s)" >&2

T=$SECONDS
log "vendored consumer (WORKSPACE): third_party/rocpack, docs/rules/consumers.md's files, release-script helpers; then the helpers from source in the default target dir, cargo killed mid-build"
# FROM_SOURCE_SEED: the crates.io crates of the dev build above seed the
# default cargo target dir, so the from-source step compiles the rocpack
# crates only.
FROM_SOURCE_SEED="$ROOT/target" bash tests/bazel/vendored.sh workspace "$helpers/kpack" "$helpers/snapctl"
echo "    (vendored consumer: $((SECONDS - T))s)" >&2
