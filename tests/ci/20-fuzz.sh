#!/usr/bin/env bash
# Fuzz targets: build every target of tools/fuzz (all parsers, every owner's),
# then run every target for a bounded time (ROCPACK_FUZZ_SECONDS, default 20 s each),
# seeded with real bundles, ELFs and archives from the fixtures. cargo-fuzz needs nightly
# features; RUSTC_BOOTSTRAP=1 enables them on stable for this build only.
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
seeds="$(mktemp -d)"
trap 'rm -rf "$seeds"' EXIT
targets=(bundle ccob target_id kpack marker elf pe packaging_config metadata runtime wheel)
for t in "${targets[@]}"; do mkdir -p "$seeds/$t"; done
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
    cp "$fx/kpack-golden/test_zstd.kpack" "$seeds/kpack/zstd.kpack"
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

for t in "${targets[@]}"; do
    log "fuzz $t ($RUNS runs)"
    # rss_limit guards "no huge allocations"; max_len keeps inputs bundle-sized
    cargo fuzz run -O --fuzz-dir "$FUZZ_DIR" "$t" "$seeds/$t" -- -runs="$RUNS" -max_len=131072 \
        -rss_limit_mb=1024 -malloc_limit_mb=512 -max_total_time="$SECS" -print_final_stats=1
done
log "fuzz ok"
