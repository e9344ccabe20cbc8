#!/usr/bin/env bash
# Rust: format, lints, every unit/integration/golden test of the workspace.
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
need_pkgs clang-tools-19 llvm-19 lld-19 elfutils binutils zstd openssl gcc libc6-dev debhelper debugedit patchelf mold cmake pkgconf python3-zstandard
export PATH="/usr/lib/llvm-19/bin:$PATH"
log "cargo fetch"
cargo fetch --locked
log "cargo fmt --check"
cargo fmt --all --check
log "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
log "cargo build (helpers used by the Buck2 harness)"
cargo build --workspace --locked
export ROCPACK_KPACK="$ROOT/target/debug/kpack" ROCPACK_SNAPCTL="$ROOT/target/debug/snapctl"
log "cargo test"
cargo test --workspace --locked 2>&1 | tee /tmp/rocpack-cargo-test.log
