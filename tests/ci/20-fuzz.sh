#!/usr/bin/env bash
# Fuzz targets: build every target of tools/fuzz (all parsers, every owner's)
# with cargo-fuzz's flags (tools/fuzz/build.sh: SanitizerCoverage + ASan,
# release, the build `cargo fuzz build -O` makes; cargo-fuzz itself is not
# needed), then run every target for a bounded time (ROCPACK_FUZZ_SECONDS,
# default 20 s each), seeded with real bundles, ELFs and archives from the
# fixtures. Targets run ROCPACK_FUZZ_JOBS at a time (default: one per CPU,
# at most 2), each a single-threaded libFuzzer on its own core, so each
# still gets its full seconds.
#
# A target that fails (crash, panic, OOM, leak, timeout) does not stop the stage at
# once: its input is printed (sha256, base64 of the gzipped bytes, the input as
# the target's Debug formatting, what `cargo fuzz fmt` prints) so the log alone
# reproduces it, the other targets still run, and the stage fails at the end
# naming every failed target.
#
# Knobs for long local runs: ROCPACK_FUZZ_TARGETS="elf kpack" runs only those;
# ROCPACK_FUZZ_CORPUS=DIR keeps the corpora (seeds plus what libFuzzer finds) in
# DIR/<target> across runs instead of a temporary directory.
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

FUZZ_DIR="$ROOT/tools/fuzz"
prefetch_wait crates
log "tools/fuzz/build.sh (all targets: cargo build --release, cargo fuzz build -O's flags)"
BIN_DIR="$(bash "$FUZZ_DIR/build.sh")"
# What `cargo fuzz run` adds to the target's environment.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_odr_violation=0"

RUNS="${ROCPACK_FUZZ_RUNS:-50000}"
SECS="${ROCPACK_FUZZ_SECONDS:-20}"
# One input slower than this is a failure (libFuzzer's default, 20 min, would
# hang the stage instead).
TIMEOUT="${ROCPACK_FUZZ_TIMEOUT:-30}"
# The most base64 characters printed for a failing input (max_len 128 KiB
# gzips to less than that, so in practice the whole input is printed).
SHOW="${ROCPACK_FUZZ_SHOW_CHARS:-262144}"
if [ -n "${ROCPACK_FUZZ_CORPUS:-}" ]; then
    seeds="$ROCPACK_FUZZ_CORPUS"
    tmp="$(mktemp -d)"
else
    seeds="$(mktemp -d)"
    tmp="$seeds/.tmp"
    mkdir -p "$tmp"
fi
trap 'rm -rf "$tmp"; [ -n "${ROCPACK_FUZZ_CORPUS:-}" ] || rm -rf "$seeds"' EXIT
all=(bundle ccob target_id kpack marker elf pe packaging_config metadata runtime wheel)
read -r -a targets <<<"${ROCPACK_FUZZ_TARGETS:-${all[*]}}"
for t in "${all[@]}"; do mkdir -p "$seeds/$t"; done
fx="$ROCPACK_SHARED/fixtures"
if [ -d "$fx/fatbins" ]; then
    # raw bundles cut out of fat binaries: uncompressed (small) and CCOB v2
    dd if="$fx/fatbins/libfx_multi_compressed.so" of="$seeds/bundle/ccob_v2" \
        iflag=skip_bytes,count_bytes skip=12288 count=3871 status=none
    tail -c +5 "$seeds/bundle/ccob_v2" >"$seeds/ccob/ccob_v2_body"
    dd if="$fx/fatbins/fx_app" of="$seeds/bundle/uncompressed" \
        iflag=skip_bytes,count_bytes skip=12288 count=8192 status=none
    cp "$fx/fatbins/libfx_relr.so" "$seeds/elf/relr.so"
    cp "$fx/fatbins/fx_app_nopie" "$seeds/elf/nopie"
    # an `ar` archive of fat objects and a CCOB-compressed library
    cp "$fx/fatbins/libfx_static.a" "$seeds/elf/static.a"
    cp "$fx/fatbins/libfx_multi_compressed.so" "$seeds/elf/ccob.so"
    cp "$fx/kpack-golden/test_zstd.kpack" "$seeds/kpack/zstd.kpack"
    cp "$fx/kpack-golden/test_noop.kpack" "$seeds/kpack/noop.kpack"
    cp "$fx/kpack-golden/test_zstd.kpack" "$fx/kpack-golden/test_noop.kpack" "$seeds/runtime/"
    cp "$fx/artifacts/packaging-config.json" "$seeds/packaging_config/config.json"
fi
wfx="$ROCPACK_WIN_FIXTURES/fatbins-win"
if [ -d "$wfx" ]; then
    cp "$wfx/fx_win_lld.dll" "$wfx/fx_win_ccob.dll" "$wfx/fx_win_msvc.dll" "$wfx/fx_win_kern.obj" "$seeds/pe/"
fi
python3 - "$seeds/wheel" <<'PY'  # small wheels, stored and deflated
import base64, hashlib, sys, zipfile
f = {"fx/__init__.py": b"x = 1\n", "fx-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: fx\nVersion: 1.0\n"}
h = lambda b: base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
f["fx-1.0.dist-info/RECORD"] = "".join(f"{n},sha256={h(b)},{len(b)}\n" for n, b in f.items()).encode() + b"fx-1.0.dist-info/RECORD,,\n"
for c in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(f"{sys.argv[1]}/fx{c}.whl", "w", c) as z:
        [z.writestr(n, b) for n, b in f.items()]
PY
printf 'hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+\ngfx90a:xnack+' >"$seeds/target_id/a"
printf 'hipv4-amdgcn-amd-amdhsa--gfx11-generic\ngfx1151' >"$seeds/target_id/b"
printf 'host-x86_64-unknown-linux--' >"$seeds/target_id/c"
printf 'gfx942:sramecc+:xnack-\namdgcn-amd-amdhsa--gfx942:sramecc+:xnack-' >"$seeds/target_id/d"

# show_input TARGET STAMP: prints the input libFuzzer saved for TARGET since
# STAMP was touched (crash-, oom-, leak-, timeout-, slow-unit-…), so the CI log
# alone reproduces the failure.
show_input() {
    local t="$1" stamp="$2" art size b64
    art="$(find "$FUZZ_DIR/artifacts/$t" -type f -newer "$stamp" -printf '%T@ %p\n' 2>/dev/null \
        | sort -n | tail -1 | cut -d' ' -f2-)"
    if [ -z "$art" ]; then
        printf 'fuzz %s failed and saved no input (see its output above)\n' "$t" >&2
        return 0
    fi
    size="$(stat -c %s "$art")"
    {
        printf '\n===== fuzz %s failed: input %s, %s bytes, sha256 %s\n' \
            "$t" "${art#"$ROOT"/}" "$size" "$(sha256sum "$art" | cut -d' ' -f1)"
        printf '===== to reproduce: base64 -d <<'"'"'B64'"'"' | gunzip >input; then\n'
        printf '=====   tools/fuzz/build.sh --bin %s && ASAN_OPTIONS=detect_odr_violation=0 \\\n' "$t"
        printf '=====     tools/fuzz/target/*/release/%s input   (or: RUSTC_BOOTSTRAP=1 cargo fuzz run -O --fuzz-dir tools/fuzz %s input)\n' "$t" "$t"
        gzip -9 -n -c "$art" | base64 -w 76 >"$tmp/b64"
        b64="$(stat -c %s "$tmp/b64")"
        if [ "$b64" -le "$SHOW" ]; then
            cat "$tmp/b64"
            printf 'B64\n'
        else
            head -c "$SHOW" "$tmp/b64"
            printf '\nB64\n===== (cut at %s of %s base64 characters: ROCPACK_FUZZ_SHOW_CHARS)\n' \
                "$SHOW" "$b64"
        fi
        # What `cargo fuzz fmt` prints: libfuzzer-sys writes the input's
        # Debug formatting to RUST_LIBFUZZER_DEBUG_PATH instead of running it.
        printf '===== the input as the target sees it (cargo fuzz fmt; first 8 KiB):\n'
        RUST_LIBFUZZER_DEBUG_PATH="$tmp/$t.fmt" "$BIN_DIR/$t" "$art" >/dev/null 2>&1 </dev/null || true
        head -c 8192 "$tmp/$t.fmt" 2>/dev/null || true
        printf '\n===== end of fuzz %s input\n' "$t"
    } >&2
}

# run_target T: one libFuzzer run of T (what `cargo fuzz run -O` runs), its
# output into $tmp/T.log; on failure the input is appended there too.
run_target() {
    local t="$1" rc=0
    mkdir -p "$tmp/$t.tmpdir" "$FUZZ_DIR/artifacts/$t"
    touch "$tmp/$t.stamp"
    # rss_limit guards "no huge allocations"; max_len keeps inputs bundle-sized
    # TMPDIR: what a target leaves in the temporary directory goes with $tmp
    {
        printf '\n==> fuzz %s (%s runs, at most %s s)\n' "$t" "$RUNS" "$SECS"
        TMPDIR="$tmp/$t.tmpdir" "$BIN_DIR/$t" -artifact_prefix="$FUZZ_DIR/artifacts/$t/" \
            -runs="$RUNS" -max_len=131072 -rss_limit_mb=1024 -malloc_limit_mb=512 \
            -max_total_time="$SECS" -timeout="$TIMEOUT" -print_final_stats=1 "$seeds/$t" </dev/null || rc=$?
        [ "$rc" -eq 0 ] || show_input "$t" "$tmp/$t.stamp"
        printf '==> fuzz %s: %s\n' "$t" "$([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)")"
    } >"$tmp/$t.log" 2>&1
    return "$rc"
}

JOBS="${ROCPACK_FUZZ_JOBS:-$(nproc)}"
[ "$JOBS" -ge 1 ] 2>/dev/null || JOBS=1
[ -n "${ROCPACK_FUZZ_JOBS:-}" ] || [ "$JOBS" -le 2 ] || JOBS=2
log "fuzz ${#targets[@]} targets, $JOBS at a time, $RUNS runs or $SECS s each"
declare -A pid_of=()
failed=()
# Waits for the oldest running target, prints its log (in the targets'
# order, so the log reads as if they had run one after another).
reap() {
    local t="$1"
    wait "${pid_of[$t]}" || failed+=("$t")
    cat "$tmp/$t.log" >&2
}
running=()
for t in "${targets[@]}"; do
    if [ ${#running[@]} -ge "$JOBS" ]; then
        reap "${running[0]}"
        running=("${running[@]:1}")
    fi
    run_target "$t" &
    pid_of[$t]=$!
    running+=("$t")
done
for t in "${running[@]}"; do reap "$t"; done
[ ${#failed[@]} -eq 0 ] || die "fuzz targets failed: ${failed[*]} (inputs printed above)"
log "fuzz ok: ${#targets[@]} targets"
