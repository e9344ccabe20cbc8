#!/usr/bin/env bash
# Fuzz targets: build every target of tools/fuzz (all parsers, every owner's),
# then run every target for a bounded time (ROCPACK_FUZZ_SECONDS, default 20 s each),
# seeded with real bundles, ELFs and archives from the fixtures. cargo-fuzz needs nightly
# features; RUSTC_BOOTSTRAP=1 enables them on stable for this build only.
#
# A target that fails (crash, panic, OOM, leak, timeout) does not stop the stage at
# once: its input is printed (sha256, base64 of the gzipped bytes, `cargo fuzz fmt`)
# so the log alone reproduces it, the other targets still run, and the stage fails
# at the end naming every failed target.
#
# Knobs for long local runs: ROCPACK_FUZZ_TARGETS="elf kpack" runs only those;
# ROCPACK_FUZZ_CORPUS=DIR keeps the corpora (seeds plus what libFuzzer finds) in
# DIR/<target> across runs instead of a temporary directory.
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    log "cargo install cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

export RUSTC_BOOTSTRAP=1
FUZZ_DIR="$ROOT/tools/fuzz"
log "cargo fuzz build -O (all targets)"
cargo fuzz build -O --fuzz-dir "$FUZZ_DIR"

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
        printf '=====   RUSTC_BOOTSTRAP=1 cargo fuzz run -O --fuzz-dir tools/fuzz %s input\n' "$t"
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
        printf '===== cargo fuzz fmt (first 8 KiB):\n'
        cargo fuzz fmt -O --fuzz-dir "$FUZZ_DIR" "$t" "$art" 2>&1 | head -c 8192 || true
        printf '\n===== end of fuzz %s input\n' "$t"
    } >&2
}

failed=()
for t in "${targets[@]}"; do
    log "fuzz $t ($RUNS runs, at most $SECS s)"
    touch "$tmp/stamp"
    # rss_limit guards "no huge allocations"; max_len keeps inputs bundle-sized
    # TMPDIR: what a target leaves in the temporary directory goes with $tmp
    if ! TMPDIR="$tmp" cargo fuzz run -O --fuzz-dir "$FUZZ_DIR" "$t" "$seeds/$t" -- -runs="$RUNS" -max_len=131072 \
        -rss_limit_mb=1024 -malloc_limit_mb=512 -max_total_time="$SECS" -timeout="$TIMEOUT" \
        -print_final_stats=1; then
        show_input "$t" "$tmp/stamp"
        failed+=("$t")
    fi
done
[ ${#failed[@]} -eq 0 ] || die "fuzz targets failed: ${failed[*]} (inputs printed above)"
log "fuzz ok"
