#!/usr/bin/env bash
# Rust: format, lints, every unit/integration/golden test of the workspace.
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
need_pkgs clang-tools-19 llvm-19 lld-19 elfutils binutils zstd openssl gcc libc6-dev debhelper debugedit patchelf mold cmake pkgconf git unzip
# Windows (PE/COFF): mingw-w64 builds the Wine test harness, Wine loads the
# split DLLs (tools/kpack/tests/windows_pe.rs, about 35 s with a fresh prefix;
# installing wine64 took 42 s here), pefile checks split images
# (tools/rocpack-image/tests/pe_fixtures.rs, about 6 s).
need_pkgs gcc-mingw-w64-x86-64 wine64
# Python modules for the python3 that runs the tests (pyenv's on CI machines,
# not Debian's): zstandard (rocpack-kpack's writer test: Python's reader) and
# pefile (the independent PE reader).
python3 -c 'import zstandard' 2>/dev/null || python3 -m pip install -q 'zstandard==0.23.0'
python3 -c 'import pefile' 2>/dev/null || python3 -m pip install -q 'pefile==2024.8.26'
python3 -m pip --version >/dev/null 2>&1 || need_pkgs python3-pip  # split-wheel win_amd64 install test
export PATH="/usr/lib/llvm-19/bin:$PATH"
prefetch_wait crates
timed "cargo fetch" cargo fetch --locked
timed "cargo fmt --check" cargo fmt --all --check
timed "cargo build (helpers used by the Buck2 harness and every later stage)" cargo build --workspace --locked
timed "cargo test --no-run (the test binaries)" cargo test --workspace --locked --no-run
export ROCPACK_KPACK="$ROOT/target/debug/kpack" ROCPACK_SNAPCTL="$ROOT/target/debug/snapctl"
# Clippy runs beside the tests: running them keeps about one core busy (a
# quiet cold run: 273 s of tests for 303 s of CPU), and cargo holds the
# target directory's lock only while it builds, so clippy starts once the
# first test binary runs (same target directory: build scripts and
# proc-macros are shared) and its output is printed after the tests'.
log "cargo test, with cargo clippy --workspace --all-targets beside it"
t=$SECONDS
started="$(mktemp -u)" clippy_out="$(mktemp)" clippy_rc="$(mktemp)"
(
    while [ ! -e "$started" ]; do sleep 1; done
    c=$SECONDS rc=0
    cargo clippy --workspace --all-targets --locked -- -D warnings >"$clippy_out" 2>&1 || rc=$?
    echo "$rc $((SECONDS - c))" >"$clippy_rc"
) &
clippy_pid=$!
test_rc=0
cargo test --workspace --locked 2>&1 | tee /tmp/rocpack-cargo-test.log \
    | awk -v m="$started" '{ print; fflush() } !d && /^ *Running / { system("touch " m); d = 1 }' \
    || test_rc=$?
touch "$started"  # the tests ended before one ran: clippy still runs
wait "$clippy_pid" || true
read -r rc secs <"$clippy_rc" || { rc=1 secs="?"; }
log "cargo clippy (beside the tests; $secs s)"
cat "$clippy_out" >&2
rm -f "$started" "$clippy_out" "$clippy_rc"
[ "$test_rc" -eq 0 ] || die "cargo test failed (exit $test_rc)"
[ "$rc" -eq 0 ] || die "cargo clippy failed (exit $rc): its warnings are above"
# Tests run, per result line of the harness (unit, integration, doc tests).
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "    cargo test: %d passed, %d failed, %d ignored\n", p, f, i }' \
    /tmp/rocpack-cargo-test.log >&2
printf '    (cargo test: %d s; the slowest test binaries:)\n' $((SECONDS - t)) >&2
awk '/^ *(Running|Doc-tests) / { what = $0; sub(/^ *(Running|Doc-tests) /, "", what); sub(/\(target\/debug\/deps\//, "(", what) }
     /^test result:/ { sub(/s$/, "", $NF); printf "%8.1f s  %s\n", $NF, what }' \
    /tmp/rocpack-cargo-test.log | sort -rn | head -8 >&2
