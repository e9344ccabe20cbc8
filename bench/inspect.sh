#!/usr/bin/env bash
# Benchmark: `kpack inspect --json` over Debian's librocsparse.so.0.1
# (1.3 GB, 111 bundles, 777 code objects) against `openssl dgst -sha256` of
# the same file, measured in the same run (every code object is hashed, so
# SHA-256 throughput is the practical floor). Prints the ratio and peak RSS.
# Targets: ratio <= 1.5, peak RSS <= 128 MiB.
#
#   bench/inspect.sh            # downloads librocsparse0 into $CACHE once
#   CACHE=/some/dir bench/inspect.sh
set -euo pipefail
. "$(dirname "$0")/../tests/ci/lib.sh"
cd "$ROOT"

CACHE="${CACHE:-/tmp/debcorpus}"
REPS="${REPS:-3}"
need_pkgs time openssl

LIB="$(find "$CACHE/x/librocsparse0" -name 'librocsparse.so.0.*' -type f 2>/dev/null | head -n1 || true)"
if [ -z "$LIB" ]; then
    log "fetching librocsparse0 into $CACHE"
    mkdir -p "$CACHE"
    (
        cd "$CACHE"
        chown _apt . 2>/dev/null || true
        apt-get download librocsparse0 || { apt-get update -q && apt-get download librocsparse0; }
        deb="$(ls librocsparse0_*.deb | head -n1)"
        rm -rf x/librocsparse0 && mkdir -p x && dpkg-deb -x "$deb" x/librocsparse0
    )
    LIB="$(find "$CACHE/x/librocsparse0" -name 'librocsparse.so.0.*' -type f | head -n1)"
fi
[ -n "$LIB" ] || die "librocsparse.so.0.* not found under $CACHE"

log "cargo build --release -p kpack"
cargo build --release -p kpack
KPACK="$ROOT/target/release/kpack"

size=$(stat -c %s "$LIB")
log "input: $LIB ($size bytes); warming the page cache"
cat "$LIB" >/dev/null

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
