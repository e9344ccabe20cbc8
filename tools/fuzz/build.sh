#!/usr/bin/env bash
# Builds every fuzz target of tools/fuzz exactly as `cargo fuzz build -O`
# (cargo-fuzz 0.13, default AddressSanitizer) does, without cargo-fuzz
# itself: the same cargo command, RUSTFLAGS and target directory, so a
# `cargo fuzz run -O --fuzz-dir tools/fuzz` afterwards reuses this build
# (and the other way round). CI calls it instead of installing cargo-fuzz,
# which compiled a tool of ~150 crates from source on every fresh machine.
#
#   tools/fuzz/build.sh [cargo build args, e.g. --bin elf]
#
# Prints the directory holding the target binaries on stdout. Run one with
#   ASAN_OPTIONS=detect_odr_violation=0 <dir>/<target> -artifact_prefix=tools/fuzz/artifacts/<target>/ CORPUS...
# (what `cargo fuzz run` runs). Needs nightly features: RUSTC_BOOTSTRAP=1
# enables them on stable for this build only.
set -euo pipefail
FUZZ_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
# cargo-fuzz's flags for `build -O` on Linux (src/project.rs, Project::cargo):
# SanitizerCoverage (8-bit counters, PC table, comparison tracing, stack
# depth), --cfg fuzzing, no branch folding, ASan, one codegen unit.
RUSTFLAGS=" -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
RUSTFLAGS+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
RUSTFLAGS+=" -Cllvm-args=-sanitizer-coverage-pc-table"
RUSTFLAGS+=" -Cllvm-args=-sanitizer-coverage-trace-compares"
RUSTFLAGS+=" --cfg fuzzing -Cllvm-args=-simplifycfg-branch-fold-threshold=0"
RUSTFLAGS+=" -Zsanitizer=address -Cllvm-args=-sanitizer-coverage-stack-depth -Ccodegen-units=1"
RUSTFLAGS+="${RUSTFLAGS_EXTRA:+ $RUSTFLAGS_EXTRA}"
export RUSTFLAGS RUSTC_BOOTSTRAP=1
[ $# -gt 0 ] || set -- --bins
# --target: RUSTFLAGS then reach the targets, not build scripts.
cargo build --manifest-path "$FUZZ_DIR/Cargo.toml" --target "$TRIPLE" --release \
    --config 'profile.release.debug="line-tables-only"' "$@" >&2
echo "$FUZZ_DIR/target/$TRIPLE/release"
