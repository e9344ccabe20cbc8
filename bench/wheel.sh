#!/usr/bin/env bash
# Benchmark (not a test): `kpack split-wheel` on a real ROCm wheel from PyPI
# (jax-rocm7-plugin 0.10.0, pinned sha256), against `unzip -q` + `zip -q -r -1`
# of the same wheel measured in the same run.
#
# Targets (issue 14): `--compression none` wall time <= 1.5x unzip+zip;
# peak RSS <= 256 MiB.
#
# Usage: bench/wheel.sh   (downloads the wheel once into $ROCPACK_BENCH_CACHE)
. "$(dirname "$0")/lib.sh"

KPACK="${KPACK:-$(kpack_release)}"
WHL=jax_rocm7_plugin-0.10.0-cp312-cp312-manylinux_2_28_x86_64.whl
SHA=f00e5664a380bef3657b412e4ea3895a5a29656155074e2667e68194eabb5329
mkdir -p "$BENCH_CACHE/pypi"
if [ ! -f "$BENCH_CACHE/pypi/$WHL" ]; then
    python3 -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
        --python-version 3.12 --platform manylinux_2_28_x86_64 -d "$BENCH_CACHE/pypi" \
        jax-rocm7-plugin==0.10.0 || bdie "pip download jax-rocm7-plugin==0.10.0"
fi
echo "$SHA  $BENCH_CACHE/pypi/$WHL" | sha256sum -c --quiet - || bdie "sha256 of $WHL"
for t in unzip zip; do command -v $t >/dev/null || bdie "$t is needed"; done
IN="$BENCH_CACHE/pypi/$WHL"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rocpack-bench-wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cat "$IN" >/dev/null
export IN KPACK

REPS="${REPS:-5}"
best() {
    local name="$1"; shift
    local pre="$WORK/$name" best_s="" i w
    for i in $(seq "$REPS"); do
        rm -rf "$pre.out"; mkdir -p "$pre.out"; sync
        OUT="$pre.out" timed "$pre.$i" "$@"
        w=$(wall_s "$pre.$i")
        if [ -z "$best_s" ] || awk -v a="$w" -v b="$best_s" 'BEGIN { exit !(a < b) }'; then
            best_s=$w; cp "$pre.$i" "$pre.time"
        fi
        awk -F': ' '/Maximum resident set size/ {print $2}' "$pre.$i" >> "$pre.rss"
    done
}
max_rss_mib() { sort -n "$WORK/$1.rss" | tail -n1 | awk '{ printf "%.1f\n", $1 / 1024 }'; }

blog "unzip -q + zip -q -r -1 (x$REPS)"
best zip sh -c 'cd "$OUT" && unzip -q "$IN" -d x && cd x && exec zip -q -r -1 ../out.whl .'
blog "kpack split-wheel --compression none (x$REPS)"
best none sh -c 'rmdir "$OUT"; exec "$KPACK" split-wheel "$IN" --overlay-root jax_rocm7_plugin --compression none -o "$OUT"'
blog "kpack split-wheel (zstd, default) (x$REPS)"
best zstd sh -c 'rmdir "$OUT"; exec "$KPACK" split-wheel "$IN" --overlay-root jax_rocm7_plugin -o "$OUT"'

zip_s=$(wall_s "$WORK/zip.time"); none_s=$(wall_s "$WORK/none.time"); zstd_s=$(wall_s "$WORK/zstd.time")
none_rss=$(max_rss_mib none); zstd_rss=$(max_rss_mib zstd)
host=$(stat -c %s "$WORK/none.out/$WHL")
dev=$(ls "$WORK/none.out" | grep -c '_device_' || true)
devsz=$(find "$WORK/none.out" -name '*_device_*.whl' -printf '%s\n' | awk '{s+=$1} END {print s+0}')
cat <<REPORT
split-wheel benchmark: $WHL ($(stat -c %s "$IN") bytes), $(nproc) CPUs, best of $REPS
  unzip -q + zip -q -r -1           ${zip_s} s
  kpack split-wheel --compression none  ${none_s} s   ratio: $(ratio "$none_s" "$zip_s")x (target <= 1.5x)   peak RSS ${none_rss} MiB (target <= 256)
  kpack split-wheel (zstd)          ${zstd_s} s   ratio: $(ratio "$zstd_s" "$zip_s")x   peak RSS ${zstd_rss} MiB
  host wheel ${host} bytes (input $(stat -c %s "$IN")); ${dev} device wheels, ${devsz} bytes
REPORT
awk -v r="$(ratio "$none_s" "$zip_s")" -v m="$none_rss" 'BEGIN {
    bad = 0
    if (r > 1.5) { print "MISSED: ratio " r " > 1.5" > "/dev/stderr"; bad = 1 }
    if (m > 256) { print "MISSED: peak RSS above 256 MiB" > "/dev/stderr"; bad = 1 }
    exit bad }'
