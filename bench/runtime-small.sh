#!/usr/bin/env bash
# Benchmark (not a test): steady-state cost per kpack_load_code_object on
# small zstd kernels (issue 20, item 9): 5,000 code objects of ~7.6 KB in one
# zstd-per-kernel archive, one cache, every co_index resolved once (first
# pass: open + locate every frame), then 20 more passes timed (ns per load,
# best of 5). Same run: the archive without content checksums (their cost),
# a `zstd -d` of the same frames' worth of data is not comparable per call,
# so the baselines are the library itself at another commit:
#   BASELINE_LIB=/path/to/librocm_kpack.a bench/runtime-small.sh
# (e.g. built from main) prints the same lines for it. Wall-clock times
# depend on what else runs; the marginal system calls (strace -c) and user
# instructions (valgrind --tool=callgrind) per load, when those tools are
# installed, do not.
# ROCm's C++ library cannot be fetched here (no source download), so the
# side-by-side run against it the issue asks for is left to a machine that
# has it: ROCM_LIB=/opt/rocm/lib/librocm_kpack.so runs it the same way.
. "$(dirname "$0")/lib.sh"

N="${N:-5000}" SIZE="${SIZE:-7600}" ROUNDS="${ROUNDS:-20}"
(cd "$BENCH_ROOT" && cargo build --release -q -p rocpack-runtime --lib --example small_kernels) >&2 \
    || bdie "cargo build -p rocpack-runtime"
TDIR="$(cd "$BENCH_ROOT" && cargo metadata --format-version 1 --no-deps 2>/dev/null \
    | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
TDIR="${TDIR:-$BENCH_ROOT/target}/release"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rocpack-bench-small.XXXXXX")"
[ -n "${KEEP_WORK:-}" ] || trap 'rm -rf "$WORK"' EXIT

"$TDIR/examples/small_kernels" "$WORK/ck" "$N" "$SIZE" || bdie "small_kernels"
"$TDIR/examples/small_kernels" "$WORK/nock" "$N" "$SIZE" --no-checksum || bdie "small_kernels"
A="$WORK/ck/lib/.kpack/small_gfx1100.kpack"
blog "archive: $N kernels x $SIZE bytes, $(stat -c %s "$A") bytes zstd (with checksums)"

build() {  # build NAME LIB...
    local name="$1"; shift
    cc -O2 -I "$BENCH_ROOT/tools/rocpack-runtime/include" "$BENCH_ROOT/bench/runtime_bench.c" \
        -o "$WORK/$name" "$@" -lpthread -ldl -lm -lrt -lutil -lgcc_s || bdie "cc $name"
}
build bench_this "$TDIR/librocm_kpack.a"
[ -z "${BASELINE_LIB:-}" ] || build bench_base "$BASELINE_LIB"
[ -z "${ROCM_LIB:-}" ] || build bench_rocm "$ROCM_LIB" -Wl,-rpath,"$(dirname "$ROCM_LIB")"

# per_load_delta TOOL EXE TREE: (TOOL's count with 2 steady rounds - with 1)
# over the 5 x 200 loads in between, on the first 200 kernels: what one more
# load costs, independent of startup and of other load on the machine.
per_load_delta() {
    local tool="$1" exe="$2" tree="$3" r c1 c2
    for r in 1 2; do
        case "$tool" in
        strace) strace -f -c -o "$WORK/sc$r" "$exe" steady "$tree/marker.bin" "$tree/lib/libsmall.so" 200 "$r" > /dev/null \
                    || bdie "strace"
                awk '$NF=="total" {print $4}' "$WORK/sc$r" > "$WORK/n$r" ;;
        callgrind) valgrind --tool=callgrind --callgrind-out-file="$WORK/cg$r" "$exe" steady "$tree/marker.bin" \
                    "$tree/lib/libsmall.so" 200 "$r" > /dev/null 2> "$WORK/cgerr$r" || bdie "valgrind"
                sed -n 's/^summary: *//p' "$WORK/cg$r" > "$WORK/n$r" ;;
        esac
    done
    c1="$(cat "$WORK/n1")" c2="$(cat "$WORK/n2")"
    awk -v a="$c1" -v b="$c2" 'BEGIN { printf "%.1f", (b - a) / 1000 }'
}

run() {  # run LABEL EXE TREE
    local label="$1" exe="$2" tree="$3"
    cat "$tree/lib/.kpack/small_gfx1100.kpack" > /dev/null
    /usr/bin/time -v -o "$WORK/t" "$exe" steady "$tree/marker.bin" "$tree/lib/libsmall.so" "$N" "$ROUNDS" > "$WORK/out" \
        || bdie "$label"
    . "$WORK/out"
    local extra=""
    command -v strace >/dev/null && extra="$extra, $(per_load_delta strace "$exe" "$tree") syscalls/load"
    command -v valgrind >/dev/null && extra="$extra, $(per_load_delta callgrind "$exe" "$tree") instructions/load (user)"
    printf '  %-24s first pass %7s ms, steady %6s ns/load%s, peak RSS %s MiB\n' \
        "$label" "$first_pass_ms" "$steady_ns" "$extra" "$(rss_mib "$WORK/t")"
}
printf 'runtime (small zstd kernels): %s x %s B, %s steady passes\n' "$N" "$SIZE" "$ROUNDS"
run "this, checksums" "$WORK/bench_this" "$WORK/ck"
run "this, no checksums" "$WORK/bench_this" "$WORK/nock"
[ -z "${BASELINE_LIB:-}" ] || run "baseline, checksums" "$WORK/bench_base" "$WORK/ck"
[ -z "${BASELINE_LIB:-}" ] || run "baseline, no checksums" "$WORK/bench_base" "$WORK/nock"
[ -z "${ROCM_LIB:-}" ] || run "ROCm, checksums" "$WORK/bench_rocm" "$WORK/ck"
[ -z "${ROCM_LIB:-}" ] || run "ROCm, no checksums" "$WORK/bench_rocm" "$WORK/nock"
