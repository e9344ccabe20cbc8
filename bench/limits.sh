#!/usr/bin/env bash
# Benchmark (not a test): `kpack split` / `reassemble` on big real inputs
# against the physical limits measured in the same run, side by side, at two
# load levels (LOADS, default "quiet loaded": loaded = one busy-looping
# process per CPU, started and stopped by this script).
#
#   split (zstd, default)      vs  zstd -3 -T0 of the same file   target <= 1.0x
#                              (CCOB inputs, also: vs zstd -d of the payloads + zstd -3 -T0
#                              of what they hold, the work such a split cannot avoid)
#   split --compression none   vs  cp of the same file            target <= 1.2x
#                              (CCOB inputs: vs zstd -d of the CCOB payloads + cp)
#   reassemble (from zstd)     vs  the split above                target <= 1.0x
#   peak RSS of every run, of a split at every --compression level
#   (none, zstd:1 3 9 19 22), and at --jobs JOBS_LIST (default 1 2 4 8) for
#   each of JOBS_COMPRESSION (default zstd, zstd:9, none)
#                                                                 target <= 256 MiB
#   .kpack bytes per arch at each level vs the per-frame floor: every code
#   object compressed alone by `zstd --ultra -22 --long=27`     zstd:19 <= 1.05x
#   byte-identical code objects within an arch and across arches (what
#   sharing one frame between them would save)
#
# Every ratio is reported twice, wall clock and CPU (user + system), each the
# median of ROUNDS (default 5) paired rounds: one round runs every tool once,
# alternating, and the ratio is taken within the round (both sides of a ratio
# saw the same load). Dirty pages are flushed before each timed run.
#
# Inputs (downloaded once into $ROCPACK_BENCH_CACHE, pinned by sha256):
#   rocblas    Debian unstable librocblas4 6.4.4-4 (librocblas.so.4.4, 1.05 GB,
#              plain bundles), `apt-get download` with a private sources list
#              (bench/lib.sh debian_sid_lib)
#   onnx       PyPI onnxruntime-rocm 1.22.2.post3 (cp311 manylinux_2_34,
#              libonnxruntime_providers_rocm.so, 513 MB, plain bundles)
#   jaxpjrt    PyPI jax-rocm7-pjrt 0.10.0 (xla_rocm_plugin.so, 520 MB, 41 CCOB
#              v3 holding 1.2 GB of code objects, 6 targets)
#   jaxwide    PyPI jax-rocm7-pjrt 0.12.0 (manylinux_2_27 wheel, 133 MB;
#              xla_rocm_plugin.so, 459 MB, 45 CCOB v3 of 27 targets each
#              holding 2.44 GB of code objects, largest payload 114 MB)
#   rocsparse  Debian bookworm librocsparse0 5.3.0+dfsg-2 (librocsparse.so.0.1,
#              1.31 GB, plain bundles), `apt-get download`
#
# Knobs: ROUNDS, LOADS, SIZES=0 (skip the archive rows), JOBS_COMPRESSION,
# LEVELS (default "1 3 9 19 22"), FLOOR=0 (skip the per-frame floor, the slow part: about a
# minute of CPU per 100 MB of code objects; cached per input under
# $ROCPACK_BENCH_CACHE/floors), JOBS_LIST, QUICK=1 (smoke test: ROUNDS=1,
# LOADS=quiet, LEVELS=3, JOBS_LIST="1 2", FLOOR=0).
# Usage: bench/limits.sh [INPUT...]   (default: every input)
. "$(dirname "$0")/lib.sh"

if [ "${QUICK:-0}" = 1 ]; then
    : "${ROUNDS:=1}" "${LOADS:=quiet}" "${LEVELS:=3}" "${JOBS_LIST:=1 2}" "${FLOOR:=0}"
fi
KPACK="${KPACK:-$(kpack_release)}"
ROUNDS="${ROUNDS:-5}"
LOADS="${LOADS:-quiet loaded}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rocpack-bench-limits.XXXXXX")"
LOAD_PIDS=()
trap 'stop_load; rm -rf "$WORK"' EXIT
export KPACK
command -v zstd >/dev/null || bdie "zstd not installed"
[ -x /usr/bin/time ] || bdie "/usr/bin/time not installed (Debian package time)"

pinned() { # FILE SHA256
    echo "$2  $1" | sha256sum -c --quiet - || bdie "sha256 of $1 (pinned $2)"
}

# start_load / stop_load: the fixed synthetic load of the `loaded` level,
# one busy loop per CPU (same priority as the runs it competes with).
start_load() {
    local i
    for i in $(seq "$(nproc)"); do
        sh -c 'while :; do :; done' &
        LOAD_PIDS+=("$!")
    done
    sleep 1
}
stop_load() {
    local p
    for p in "${LOAD_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${LOAD_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    LOAD_PIDS=()
}

input_rocblas() { rocblas; }

input_rocsparse() {
    local deb_sha=688878bb8cb9ec7970e7b632828d91336a6819860fb0c306372eb6a7199b3b8e
    local lib; lib="$(rocsparse)"
    pinned "$(ls "$BENCH_CACHE"/deb/librocsparse0_5.3.0+dfsg-2_amd64.deb)" "$deb_sha"
    printf '%s\n' "$lib"
}

# pypi_lib PROJECT VERSION WHEEL SHA256 PYVER PLATFORM NAME: the largest
# file called NAME in a pinned wheel (downloaded once, unpacked once).
pypi_lib() {
    local project="$1" version="$2" whl="$3" sha="$4" py="$5" plat="$6" name="$7"
    local dir="$BENCH_CACHE/pypi"
    mkdir -p "$dir"
    if [ ! -f "$dir/$whl" ]; then
        python3 -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
            --python-version "$py" --platform "$plat" -d "$dir" \
            "$project==$version" >&2 || bdie "pip download $project==$version"
    fi
    pinned "$dir/$whl" "$sha"
    local x="$dir/x/${whl%.whl}"
    if [ ! -d "$x" ]; then
        mkdir -p "$x.tmp" && (cd "$x.tmp" && unzip -q "$dir/$whl") && mv "$x.tmp" "$x" \
            || bdie "unzip $whl"
    fi
    find "$x" -name "$name" -type f -printf '%s %p\n' | sort -n | tail -n1 | cut -d' ' -f2-
}

input_jaxpjrt() {
    pypi_lib jax-rocm7-pjrt 0.10.0 jax_rocm7_pjrt-0.10.0-py3-none-manylinux_2_28_x86_64.whl \
        fe0a40550c60e1b9f82eebfa6243ed6a7e3de7a07369142232bf8e331de03181 \
        3.12 manylinux_2_28_x86_64 xla_rocm_plugin.so
}

WIDE_VERSION=0.12.0
input_jaxwide() {
    pypi_lib jax-rocm7-pjrt "$WIDE_VERSION" \
        "jax_rocm7_pjrt-$WIDE_VERSION-py3-none-manylinux_2_27_x86_64.whl" \
        4551d0714523355f2946ca1958c3f584e95661e467a641d36b726f718a1c7934 \
        3.12 manylinux_2_27_x86_64 xla_rocm_plugin.so
}

input_onnx() {
    pypi_lib onnxruntime-rocm 1.22.2.post3 \
        onnxruntime_rocm-1.22.2.post3-cp311-cp311-manylinux_2_34_x86_64.whl \
        705596b48933446ae6766921c5c8a46ef42f0c735bf158b6eb44a60bf7f95230 \
        3.11 manylinux_2_34_x86_64 libonnxruntime_providers_rocm.so
}

# median: the median of the numbers on stdin.
median() { sort -n | awk '{a[NR]=$1} END { if (NR) print a[int((NR+1)/2)]; else print 0 }'; }
max_rss() { for f in "$@"; do rss_mib "$f"; done | sort -n | tail -n1; }
# sum_s KIND REPORT...: wall or CPU seconds of several reports added up.
sum_s() {
    local kind="$1" f t=0; shift
    for f in "$@"; do t=$(awk -v a="$t" -v b="$("${kind}_s" "$f")" 'BEGIN { printf "%.3f", a + b }'); done
    echo "$t"
}
# paired KIND A B [C]: the median over rounds i of A.i / (B.i + C.i)
# (KIND wall or cpu; C optional).
paired() {
    local kind="$1" a="$2" b="$3" c="${4:-}" i
    for i in $(seq "$ROUNDS"); do
        local den=("$b.$i")
        [ -n "$c" ] && den+=("$c.$i")
        ratio "$(sum_s "$kind" "$a.$i")" "$(sum_s "$kind" "${den[@]}")"
    done | median
}
# med KIND PREFIX: median seconds of PREFIX.1..ROUNDS.
med() {
    local kind="$1" pre="$2" i
    for i in $(seq "$ROUNDS"); do "${kind}_s" "$pre.$i"; done | median
}

# ccob_payloads LIB OUT: the zstd payloads of LIB's compressed bundles
# (CCOB v1-v3, method zstd), concatenated into OUT (one stream of frames,
# what `zstd -d` decodes in one go); prints their count and, on stderr, the
# targets per bundle. Offsets come from `kpack inspect --json`, header
# sizes from docs/formats/offload-bundle.md.
ccob_payloads() {
    "$KPACK" inspect --json "$1" | python3 -c '
import json, sys
lib, out = sys.argv[1], sys.argv[2]
d = json.load(sys.stdin)
n, widths, biggest = 0, set(), 0
with open(lib, "rb") as f, open(out, "wb") as o:
    for b in d.get("bundles", []):
        if b.get("format") != "ccob" or b.get("compression") != "zstd":
            continue
        hdr = {1: 20, 2: 24, 3: 32}[b["version"]]
        f.seek(b["file_offset"])
        o.write(f.read(b["size"])[hdr:])
        n += 1
        widths.add(sum(1 for e in b.get("code_objects", []) if not e.get("is_host")))
        biggest = max(biggest, b.get("uncompressed_size") or 0)
if n:
    print(f"  {n} CCOBs, targets per bundle {sorted(widths)}, largest payload {biggest} bytes", file=sys.stderr)
print(n)' "$1" "$2"
}

# round NAME W LIB BASE CCOBS I: one paired round of every tool, alternating.
round() {
    local name="$1" w="$2" lib="$3" base="$4" ccobs="$5" i="$6"
    sync; timed "$w/cp.$i" cp "$lib" "$w/cp.out"; rm -f "$w/cp.out"
    sync; timed "$w/zstd.$i" zstd -q -3 -T0 -f "$lib" -o "$w/zstd.out"; rm -f "$w/zstd.out"
    if [ "$ccobs" -gt 0 ]; then
        sync; timed "$w/zd.$i" zstd -q -d -f "$w/payloads.zst" -o "$w/zd.out"
        # What a split of CCOB bundles cannot avoid: decoding them (above)
        # and compressing what they hold again (one frame per code object).
        sync; timed "$w/zc.$i" zstd -q -3 -T0 -f "$w/zd.out" -o "$w/zc.out"; rm -f "$w/zd.out" "$w/zc.out"
    fi
    rm -rf "$w/none"; sync
    timed "$w/none.$i" "$KPACK" split --artifact-dir "$w/art/$name" --artifact-prefix "$name" \
        --output-dir "$w/none" --compression none
    rm -rf "$w/split"; sync
    timed "$w/split.$i" "$KPACK" split --artifact-dir "$w/art/$name" --artifact-prefix "$name" \
        --output-dir "$w/split"
    rm -f "$w/back"; sync
    timed "$w/reas.$i" "$KPACK" reassemble --host "$w/split/${name}_generic/lib/$base" \
        --kpack-dir "$w/split" --output "$w/back"
}

# rounds_at LOAD NAME W LIB BASE CCOBS: ROUNDS paired rounds at LOAD, then
# their rows.
rounds_at() {
    local load="$1" name="$2" w="$3" lib="$4" base="$5" ccobs="$6" i
    [ "$load" = loaded ] && start_load
    for i in $(seq "$ROUNDS"); do
        blog "$name $load round $i/$ROUNDS"
        round "$name" "$w" "$lib" "$base" "$ccobs" "$i"
    done
    local la; la=$(cut -d' ' -f1-3 /proc/loadavg)
    [ "$load" = loaded ] && stop_load
    local same=no floor_name=cp
    cmp -s "$w/back" "$lib" && same=yes
    [ "$ccobs" -gt 0 ] && floor_name="zstd -d of the $ccobs CCOB payloads + cp"
    printf '  %s (load average at the end %s), median of %s paired rounds: wall s / CPU s, ratio wall / CPU\n' \
        "$load" "$la" "$ROUNDS"
    printf '    %-28s %7s / %7s\n' cp "$(med wall "$w/cp")" "$(med cpu "$w/cp")"
    printf '    %-28s %7s / %7s\n' "zstd -3 -T0" "$(med wall "$w/zstd")" "$(med cpu "$w/zstd")"
    [ "$ccobs" -gt 0 ] && printf '    %-28s %7s / %7s\n' "zstd -d payloads" "$(med wall "$w/zd")" "$(med cpu "$w/zd")"
    [ "$ccobs" -gt 0 ] && printf '    %-28s %7s / %7s\n' "zstd -3 -T0 of their content" "$(med wall "$w/zc")" "$(med cpu "$w/zc")"
    printf '    %-28s %7s / %7s  %5sx / %5sx zstd -3 -T0 (target <= 1.0)  peak RSS %s MiB\n' \
        "split (zstd)" "$(med wall "$w/split")" "$(med cpu "$w/split")" \
        "$(paired wall "$w/split" "$w/zstd")" "$(paired cpu "$w/split" "$w/zstd")" "$(max_rss "$w"/split.*)"
    # CCOB inputs: against what the split cannot avoid (decode the bundles,
    # compress their code objects again), measured the same way.
    [ "$ccobs" -gt 0 ] && printf '    %-28s %7s   %7s  %5sx / %5sx zstd -d payloads + zstd -3 -T0 of their content\n' \
        "  split (zstd), CCOB floor" "" "" "$(paired wall "$w/split" "$w/zd" "$w/zc")" "$(paired cpu "$w/split" "$w/zd" "$w/zc")"
    local fl=("$w/cp")
    [ "$ccobs" -gt 0 ] && fl=("$w/zd" "$w/cp")
    printf '    %-28s %7s / %7s  %5sx / %5sx %s (target <= 1.2)  peak RSS %s MiB\n' \
        "split --compression none" "$(med wall "$w/none")" "$(med cpu "$w/none")" \
        "$(paired wall "$w/none" "${fl[@]}")" "$(paired cpu "$w/none" "${fl[@]}")" "$floor_name" "$(max_rss "$w"/none.*)"
    printf '    %-28s %7s / %7s  %5sx / %5sx split (target <= 1.0)  peak RSS %s MiB  identical: %s\n' \
        "reassemble (zstd)" "$(med wall "$w/reas")" "$(med cpu "$w/reas")" \
        "$(paired wall "$w/reas" "$w/split")" "$(paired cpu "$w/reas" "$w/split")" "$(max_rss "$w"/reas.*)" "$same"
    rm -f "$w"/*.[0-9]*
}

run_input() {
    local name="$1" lib="$2"
    local w="$WORK/$name"
    mkdir -p "$w/art/$name/lib"
    ln -f "$lib" "$w/art/$name/lib/" 2>/dev/null || cp "$lib" "$w/art/$name/lib/"
    echo lib > "$w/art/$name/artifact_manifest.txt"
    local base; base="$(basename "$lib")"
    local size; size=$(stat -c %s "$lib")
    echo "$name: $base, $size bytes, sha256 $(sha256sum "$lib" | cut -c1-16)…, $(nproc) CPUs"
    # CCOB inputs: the `none` split's floor is decompressing the payloads
    # and copying the host (the whole file here: at most a few % more).
    local ccobs; ccobs=$(ccob_payloads "$lib" "$w/payloads.zst" 2>"$w/widths")
    cat "$w/widths"
    warm_large_folios "$lib" "$w/payloads.zst"
    local load
    for load in $LOADS; do
        rounds_at "$load" "$name" "$w" "$lib" "$base" "$ccobs"
    done
    # One `none` split for the archive rows and the identical-code-object count.
    rm -rf "$w/none"
    "$KPACK" split --artifact-dir "$w/art/$name" --artifact-prefix "$name" \
        --output-dir "$w/none" --compression none >/dev/null || bdie "split none"
    unpack_all "$name" "$w"
    identical "$w"
    [ "${SIZES:-1}" = 1 ] && archive_sizes "$name" "$w" "$lib"
    jobs_rss "$name" "$w"
    rm -rf "$w"
}

# unpack_all NAME W: every arch's code objects of the `none` split, one file
# each, under W/u/<arch>/.
unpack_all() {
    local name="$1" w="$2" a arch
    rm -rf "$w/u"
    for a in $(find "$w/none" -type f -name '*.kpack' | sort); do
        arch="$(basename "$a" .kpack)"; arch="${arch#"${name}"_}"
        "$KPACK" unpack "$a" -o "$w/u/$arch" >/dev/null 2>"$w/unpack.log" \
            || { cat "$w/unpack.log" >&2; bdie "unpack $a"; }
        find "$w/u/$arch" -type f -name '*.json' -delete
    done
}

# identical W: byte-identical code objects (SHA-256) within an arch and
# across arches, and the bytes one shared frame per content would save
# (uncompressed; the frames are smaller in proportion).
identical() {
    local w="$1"
    (cd "$w/u" && find . -type f -print0 | xargs -0 -r -P "$(nproc)" -n 64 sha256sum) | python3 -c '
import collections, os, sys
root = sys.argv[1]
within = collections.Counter(); across = collections.defaultdict(set); size = {}
n = 0
for line in sys.stdin:
    h, p = line.rstrip("\n").split("  ", 1)
    arch = p.split("/")[1]
    n += 1
    within[(arch, h)] += 1
    across[h].add(arch)
    size[h] = os.path.getsize(os.path.join(root, p))
dup_in = sum(c - 1 for c in within.values() if c > 1)
saved_in = sum((c - 1) * size[h] for (a, h), c in within.items() if c > 1)
dup_x = sum(1 for h, s in across.items() if len(s) > 1)
print(f"  identical code objects: {n} in all; {dup_in} repeat one of their arch ({saved_in} bytes a shared frame would save); {dup_x} contents appear in more than one arch (one archive per arch: no saving)")
' "$w/u"
}

# floor_of W ARCH: bytes of ARCH's code objects each compressed alone by
# `zstd --ultra -22 --long=27` (the most a one-frame-per-code-object
# archive can get), cached by content in $BENCH_CACHE/floors.
floor_of() {
    local w="$1" arch="$2" key
    key=$(cd "$w/u/$arch" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-32)
    local cache="$BENCH_CACHE/floors/$key"
    if [ ! -s "$cache" ]; then
        mkdir -p "$BENCH_CACHE/floors"
        blog "per-frame floor of $arch (zstd --ultra -22 --long=27 per code object)"
        find "$w/u/$arch" -type f -print0 \
            | xargs -0 -r -P "$(nproc)" -I{} sh -c 'zstd -q --ultra -22 --long=27 -c "$1" | wc -c' _ {} \
            | awk '{ s += $1 } END { print s + 0 }' > "$cache.tmp" && mv "$cache.tmp" "$cache"
    fi
    cat "$cache"
}

# archive_sizes NAME W LIB: for each level of LEVELS, the split's wall and
# CPU time, peak RSS and .kpack bytes, against the per-frame floor per arch
# (FLOOR=1, the default) and in all.
archive_sizes() {
    local name="$1" w="$2" lib="$3" a arch
    declare -A floor=()
    local total_floor=0
    if [ "${FLOOR:-1}" = 1 ]; then
        for arch in $(ls "$w/u"); do
            floor[$arch]=$(floor_of "$w" "$arch")
            total_floor=$(( total_floor + floor[$arch] ))
        done
        echo "  per-frame floor (each code object alone, zstd --ultra -22 --long=27), all arches: ${total_floor} bytes"
    fi
    local level
    for level in ${LEVELS:-1 3 9 19 22}; do
        rm -rf "$w/lv"; sync
        timed "$w/lv.t" "$KPACK" split --artifact-dir "$w/art/$name" --artifact-prefix "$name" \
            --output-dir "$w/lv" --compression "zstd:$level"
        local total=0 worst=0 worst_arch="-" r sz
        for a in $(find "$w/lv" -type f -name '*.kpack'); do
            arch="$(basename "$a" .kpack)"; arch="${arch#"${name}"_}"
            sz=$(stat -c %s "$a")
            total=$(( total + sz ))
            [ -n "${floor[$arch]:-}" ] || continue
            r=$(ratio "$sz" "${floor[$arch]}")
            if awk -v a="$r" -v b="$worst" 'BEGIN { exit !(a > b) }'; then worst="$r"; worst_arch="$arch"; fi
        done
        local vs="" check=""
        if [ "$total_floor" -gt 0 ]; then
            vs=" = $(ratio "$total" "$total_floor")x the floor; worst arch $worst_arch ${worst}x"
            [ "$level" = 19 ] && check=" (target <= 1.05: $(awk -v a="$worst" 'BEGIN { print (a <= 1.05) ? "met" : "NOT met" }'))"
        fi
        printf '  zstd:%-2s  split %8.2f s wall %8.2f s CPU  peak RSS %6s MiB  %12d bytes%s%s\n' \
            "$level" "$(wall_s "$w/lv.t")" "$(cpu_s "$w/lv.t")" "$(rss_mib "$w/lv.t")" "$total" "$vs" "$check"
    done
    rm -rf "$w/lv"
}

# jobs_rss NAME W: peak RSS of the split at each --compression of
# JOBS_COMPRESSION (default: the default level, level 9, `none`) and each
# --jobs of JOBS_LIST, and what each worker beyond the first adds.
jobs_rss() {
    local name="$1" w="$2" c j
    for c in ${JOBS_COMPRESSION:-zstd zstd:9 none}; do
        local line="" first="" last="" jl=""
        for j in ${JOBS_LIST:-1 2 4 8}; do
            rm -rf "$w/jb"; sync
            timed "$w/jb.t" "$KPACK" split --artifact-dir "$w/art/$name" --artifact-prefix "$name" \
                --output-dir "$w/jb" --compression "$c" --jobs "$j"
            local r; r=$(rss_mib "$w/jb.t")
            line="$line  --jobs $j: $r MiB ($(cpu_s "$w/jb.t") s CPU)"
            [ -n "$first" ] || first="$r:$j"
            last="$r:$j"
        done
        local per
        per=$(awk -v a="$first" -v b="$last" 'BEGIN { split(a, x, ":"); split(b, y, ":");
            if (y[2] > x[2]) printf "%.1f", (y[1] - x[1]) / (y[2] - x[2]); else print "-" }')
        printf '  peak RSS, split %-6s%s; per extra worker %s MiB (target: <= 256 MiB at any --jobs)\n' "$c" "$line" "$per"
    done
    rm -rf "$w/jb"
}

[ $# -gt 0 ] || set -- rocblas onnx jaxpjrt jaxwide rocsparse
echo "bench/limits.sh: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), loads: $LOADS"
for inp in "$@"; do
    lib="$(input_"$inp")" || bdie "input $inp"
    run_input "$inp" "$lib"
done
