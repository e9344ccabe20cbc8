#!/usr/bin/env bash
# Benchmark: `kpack inspect --json` over Debian's librocsparse.so.0.1
# (1.3 GB, 111 bundles, 777 code objects) against `openssl dgst -sha256` of
# the same file, measured in the same run (every code object is hashed, so
# SHA-256 throughput is the practical floor). Prints the ratio and peak RSS.
# Targets: ratio <= 1.5, peak RSS <= 128 MiB.
#
#   bench/inspect.sh     # downloads librocsparse0 into $ROCPACK_BENCH_CACHE once
. "$(dirname "$0")/lib.sh"

REPS="${REPS:-3}"
command -v openssl >/dev/null || bdie "openssl not installed"
[ -x /usr/bin/time ] || bdie "/usr/bin/time not installed (Debian package time)"
KPACK="${KPACK:-$(kpack_release)}"   # KPACK=path/to/kpack skips the build
LIB="$(rocsparse)"

size=$(stat -c %s "$LIB")
blog "input: $LIB ($size bytes)"
warm_large_folios "$LIB"

# best-of-$REPS wall time (s) and the peak RSS (KiB) of that run
measure() {
    local best="" rss="" t m
    for _ in $(seq "$REPS"); do
        /usr/bin/time -f '%e %M' -o /tmp/rocpack-bench-time "$@" >/tmp/rocpack-bench-out
        read -r t m </tmp/rocpack-bench-time
        if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN{exit !(a<b)}'; then
            best=$t; rss=$m
        fi
    done
    echo "$best $rss"
}

read -r t_ssl rss_ssl < <(measure openssl dgst -sha256 "$LIB")
read -r t_kp rss_kp < <(measure "$KPACK" inspect --json "$LIB")
bundles=$(grep -c '"source": ".hip_fatbin"' /tmp/rocpack-bench-out || true)
cos=$(grep -c '"sha256"' /tmp/rocpack-bench-out || true)
# one more run under `time -v` for the record
/usr/bin/time -v "$KPACK" inspect --json "$LIB" 2>/tmp/rocpack-bench-timev >/dev/null
peak_kib=$(awk -F': ' '/Maximum resident set size/{print $2}' /tmp/rocpack-bench-timev)

ratio=$(awk -v a="$t_kp" -v b="$t_ssl" 'BEGIN{ if (b <= 0) b = 0.01; printf "%.2f", a / b }')
printf '\n'
printf 'file                       %s (%d bytes, %s bundles, %s code objects incl. host entries)\n' "$(basename "$LIB")" "$size" "$bundles" "$cos"
printf 'openssl dgst -sha256       %6.2f s   peak RSS %6d KiB\n' "$t_ssl" "$rss_ssl"
printf 'kpack inspect --json       %6.2f s   peak RSS %6d KiB (time -v: %s KiB)\n' "$t_kp" "$rss_kp" "$peak_kib"
printf 'ratio kpack / openssl      %s   (target <= 1.5)\n' "$ratio"
printf 'cores                      %s\n' "$(nproc)"
ok=1
awk -v r="$ratio" 'BEGIN{exit !(r <= 1.5)}' || { echo "ratio above target"; ok=0; }
[ "$peak_kib" -le $((128 * 1024)) ] || { echo "peak RSS above 128 MiB"; ok=0; }
[ "$ok" = 1 ] && echo "within targets"
