#!/usr/bin/env bash
# Generate a large split-shard tree for bench/recombine.sh: the three
# fixture shards (gfx110X-build, gfx1151-build, gfx120X-build), split with
# `kpack split`, replicated as components `<component>-rNNN` until the tree
# reaches TARGET_MIB. Every replica's blas_lib arch artifacts also get one
# BIG_MIB-sized arch database file (`TensileLibrary_..._bench_<arch>.co`), as
# real rocBLAS/hipBLASLt libraries carry multi-MB code-object files; the
# gfx906 payload is identical in every shard (the TheRock fallback), so
# recombine's duplicate-device-code check compares real bytes.
#
# Usage: bench/gen-shards.sh OUT_DIR [TARGET_MIB=1100]
#   env: KPACK=path/to/kpack (default: release build), BIG_MIB=4,
#        ROCPACK_SHARED (fixtures; falls back to examples/kpack/shards).
. "$(dirname "$0")/lib.sh"

OUT="${1:?usage: gen-shards.sh OUT_DIR [TARGET_MIB]}"
TARGET_MIB="${2:-1100}"
BIG_MIB="${BIG_MIB:-4}"
KPACK="${KPACK:-$(kpack_release)}"
SHARED="${ROCPACK_SHARED:-$BENCH_ROOT/../shared}"
SRC="$SHARED/fixtures/artifacts"
[ -d "$SRC/gfx110X-build" ] || SRC="$BENCH_ROOT/examples/kpack/shards"
[ -d "$SRC/gfx110X-build" ] || bdie "no fixture shards found (set ROCPACK_SHARED)"
[ ! -e "$OUT" ] || bdie "$OUT exists"
SHARDS=(gfx110X-build gfx1151-build gfx120X-build)

BASE="$OUT.base"
rm -rf "$BASE"
mkdir -p "$BASE/payload"
trap 'rm -rf "$BASE"' EXIT
for s in "${SHARDS[@]}"; do
    "$KPACK" split --batch-artifact-parent-dir "$SRC/$s" --output-dir "$BASE/$s" \
        --split-databases rocblas hipblaslt aotriton >/dev/null 2>&1 || bdie "kpack split $s"
done

# One random payload per arch (same bytes for an arch in every shard).
for d in "$BASE"/*/blas_lib_gfx*; do
    a="${d##*_}"
    case "$a" in *:*) continue ;; esac
    [ -f "$BASE/payload/$a" ] || head -c "$((BIG_MIB * 1024 * 1024))" /dev/urandom > "$BASE/payload/$a"
done

base_kib=$(du -sk --apparent-size "${SHARDS[@]/#/$BASE/}" | awk '{s+=$1} END {print s}')
n_big=$(ls -d "$BASE"/*/blas_lib_gfx* | grep -vc ':' || true)
per_kib=$((base_kib + n_big * BIG_MIB * 1024))
reps=$(( (TARGET_MIB * 1024 + per_kib - 1) / per_kib ))
blog "replicating ${reps}x (~$((per_kib / 1024)) MiB each) into $OUT"

for s in "${SHARDS[@]}"; do mkdir -p "$OUT/$s"; done
for r in $(seq -f '%03g' 1 "$reps"); do
    for s in "${SHARDS[@]}"; do
        for d in "$BASE/$s"/*; do
            name="${d##*/}"
            comp="${name%_*}"
            suffix="${name##*_}"
            dst="$OUT/$s/${comp}-r${r}_${suffix}"
            cp -r "$d" "$dst"
            if [ "$comp" = blas_lib ] && [ -f "$BASE/payload/$suffix" ]; then
                cp "$BASE/payload/$suffix" \
                    "$dst/math-libs/BLAS/rocBLAS/stage/lib/rocblas/library/TensileLibrary_Type_ZZ_Contraction_bench_${suffix}.co"
            fi
        done
    done
done
blog "generated $(du -sh --apparent-size "$OUT" | cut -f1) in $(find "$OUT" -type f | wc -l) files"
