#!/usr/bin/env bash
# Benchmark (not a test): librocm_kpack (tools/rocpack-runtime) on one arch's
# .kpack split from Debian's librocsparse.so.0.1 (--compression none, or
# $COMPRESSION), against
# `cat ARCHIVE > /dev/null` and a plain pread of just those kernels' bytes,
# measured in the same run on a warm page cache.
#
# Targets (issue 15): open + first lookup <= 2 ms; all lookups <= 1.2x the
# bytes-read baseline. Peak RSS of the measuring process is reported.
. "$(dirname "$0")/lib.sh"

KPACK="${KPACK:-$(kpack_release)}"
(cd "$BENCH_ROOT" && cargo build --release -q -p rocpack-runtime) >&2 || bdie "cargo build -p rocpack-runtime"
LIBDIR="$(dirname "$KPACK")"
LIB="$(rocsparse)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rocpack-bench-runtime.XXXXXX")"
[ -n "${KEEP_WORK:-}" ] || trap 'rm -rf "$WORK"' EXIT

ART="$WORK/art/sparse_lib_gfxall"
mkdir -p "$ART/lib"
ln "$LIB" "$ART/lib/librocsparse.so.0.1" 2>/dev/null || cp "$LIB" "$ART/lib/librocsparse.so.0.1"
printf 'lib\n' > "$ART/artifact_manifest.txt"
# COMPRESSION=zstd measures the zstd-per-kernel scheme instead (the baseline
# stays a pread of the decoded size, i.e. what the caller receives).
COMPRESSION="${COMPRESSION:-none}"
blog "kpack split --compression $COMPRESSION"
"$KPACK" split --artifact-dir "$ART" --artifact-prefix sparse_lib --output-dir "$WORK/out" --compression "$COMPRESSION" >/dev/null
ARCHIVE="$(find "$WORK/out" -name '*.kpack' -printf '%s %p\n' | sort -n | tail -n1 | cut -d' ' -f2-)"
ARCH="$(basename "$ARCHIVE" .kpack)"; ARCH="${ARCH##*_}"
blog "archive $ARCHIVE ($(stat -c %s "$ARCHIVE") bytes), arch $ARCH"

# The HIP runtime's path: the split binary's marker, the archive installed
# where it points (overlay of the generic and the arch artifact).
HOST="$WORK/out/sparse_lib_generic/lib/librocsparse.so.0.1"
REL="${ARCHIVE#"$WORK"/out/sparse_lib_"$ARCH"/}"
mkdir -p "$(dirname "$WORK/out/sparse_lib_generic/$REL")"
ln -s "$ARCHIVE" "$WORK/out/sparse_lib_generic/$REL" || bdie "install $REL"
objcopy -O binary --only-section=.rocm_kpack_ref "$HOST" "$WORK/marker.bin" || bdie "objcopy .rocm_kpack_ref"

cc -O2 -I "$BENCH_ROOT/tools/rocpack-runtime/include" "$BENCH_ROOT/bench/runtime_bench.c" \
    -o "$WORK/runtime_bench" "$LIBDIR/librocm_kpack.a" -lpthread -ldl -lm -lrt -lutil -lgcc_s
cat "$ARCHIVE" > /dev/null
t0=$(date +%s.%N); cat "$ARCHIVE" > /dev/null; t1=$(date +%s.%N)
cat_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
/usr/bin/time -v -o "$WORK/rt.time" "$WORK/runtime_bench" "$ARCHIVE" "$ARCH" "$WORK/marker.bin" "$HOST" > "$WORK/rt.out"
. "$WORK/rt.out" 2>/dev/null || eval "$(cat "$WORK/rt.out")"
printf 'runtime: %s kernels, %s bytes of %s\n' "$kernels" "$bytes" "$ARCH"
printf '  open + first lookup: %s us (target <= 2000)\n' "$open_first_us"
printf '  all lookups: %s s = %sx pread of the same bytes (%s s), %sx cat of the archive (%s s); target <= 1.2x pread\n' \
    "$all_s" "$(ratio "$all_s" "$read_s")" "$read_s" "$(ratio "$all_s" "$cat_s")" "$cat_s"
printf '  kpack_load_code_object (cache, as a HIP runtime): create + first lookup %s us; all %s code objects %s s = %sx pread\n' \
    "$cache_first_us" "$cache_cos" "$cache_all_s" "$(ratio "$cache_all_s" "$read_s")"
printf '  peak RSS %s MiB\n' "$(rss_mib "$WORK/rt.time")"
