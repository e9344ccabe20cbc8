#!/usr/bin/env bash
# Benchmark (not a test): `kpack split` on Debian's 1.3 GB librocsparse.so.0.1
# (111 bundles, 777 code objects, 7 GPU targets), against `cp` of the same
# file measured in the same run.
#
# Targets (issue 7): `--compression none` wall time <= 2x cp; peak RSS <= 256 MiB.
# The default (zstd) is reported too.
#
# Usage: bench/split.sh        (needs apt-get download access on first run;
#                               ROCPACK_BENCH_CACHE=/tmp/rocpack-bench by default)
. "$(dirname "$0")/lib.sh"

KPACK="${KPACK:-$(kpack_release)}"   # KPACK=path/to/kpack skips the build
LIB="$(rocsparse)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rocpack-bench-split.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# A one-prefix artifact directory holding the library (hard link: no copy).
ART="$WORK/art/sparse_lib_gfxall"
mkdir -p "$ART/lib"
ln "$LIB" "$ART/lib/librocsparse.so.0.1" 2>/dev/null || cp "$LIB" "$ART/lib/librocsparse.so.0.1"
printf 'lib\n' > "$ART/artifact_manifest.txt"
SIZE=$(stat -c %s "$LIB")

blog "warming the page cache ($SIZE bytes)"
cat "$LIB" > /dev/null

blog "cp"
timed "$WORK/cp.time" cp "$LIB" "$WORK/cp.out"
rm -f "$WORK/cp.out"

blog "kpack split --compression none"
timed "$WORK/none.time" "$KPACK" split --artifact-dir "$ART" --artifact-prefix sparse_lib \
    --output-dir "$WORK/out-none" --compression none
blog "kpack split (zstd, default)"
timed "$WORK/zstd.time" "$KPACK" split --artifact-dir "$ART" --artifact-prefix sparse_lib \
    --output-dir "$WORK/out-zstd"

cp_s=$(wall_s "$WORK/cp.time")
none_s=$(wall_s "$WORK/none.time")
zstd_s=$(wall_s "$WORK/zstd.time")
none_rss=$(rss_mib "$WORK/none.time")
zstd_rss=$(rss_mib "$WORK/zstd.time")
host=$(stat -c %s "$WORK/out-none/sparse_lib_generic/lib/librocsparse.so.0.1")
kp_none=$(find "$WORK/out-none" -name '*.kpack' -printf '%s\n' | awk '{s+=$1} END {print s+0}')
kp_zstd=$(find "$WORK/out-zstd" -name '*.kpack' -printf '%s\n' | awk '{s+=$1} END {print s+0}')
archs=$(ls "$WORK/out-none" | grep -vc '_generic$' || true)

cat <<REPORT
split benchmark: librocsparse.so.0.1 ($SIZE bytes), $(nproc) CPUs
  cp                          ${cp_s} s
  kpack split --compression none  ${none_s} s   ratio to cp: $(ratio "$none_s" "$cp_s")x (target <= 2x)   peak RSS ${none_rss} MiB (target <= 256)
  kpack split (zstd)          ${zstd_s} s   ratio to cp: $(ratio "$zstd_s" "$cp_s")x   peak RSS ${zstd_rss} MiB
  host-only binary            ${host} bytes; ${archs} arch artifacts
  .kpack total                none: ${kp_none} bytes, zstd: ${kp_zstd} bytes
REPORT

awk -v r="$(ratio "$none_s" "$cp_s")" -v m="$none_rss" -v z="$zstd_rss" 'BEGIN {
    bad = 0
    if (r > 2.0) { print "MISSED: none/cp ratio " r " > 2" > "/dev/stderr"; bad = 1 }
    if (m > 256 || z > 256) { print "MISSED: peak RSS above 256 MiB" > "/dev/stderr"; bad = 1 }
    exit bad }'
