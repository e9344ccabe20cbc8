#!/usr/bin/env bash
# Benchmark: `kpack split` of a large Windows PE32+ DLL against `cp` of the
# same file, measured in the same run (best of $REPS each), plus peak RSS.
# The DLL is built here (no Windows, no download): $BUNDLES offload bundles,
# each with a host entry and $TARGETS device entries of $ENTRY_KIB KiB
# (incompressible bytes), made by clang-offload-bundler, placed in
# `.hip_fatbin` with one HIPF wrapper each (DIR64 base relocations), and
# linked by lld (MinGW driver) into `.hip_fat`/`.hipFatB` as ROCm's Windows
# builds are. Each code object is an AMDGPU ELF header followed by random
# bytes. The split output is checked with `kpack verify` and reassembled
# (byte-identical) before anything is timed. Defaults: 64 bundles x 8 targets x 128 KiB = 64 MiB of code objects.
#
#   bench/split-pe.sh          # BUNDLES=.. TARGETS=.. ENTRY_KIB=.. REPS=.. KPACK=..
. "$(dirname "$0")/lib.sh"

BUNDLES="${BUNDLES:-64}"; TARGETS="${TARGETS:-8}"; ENTRY_KIB="${ENTRY_KIB:-128}"; REPS="${REPS:-3}"
LLVM=/usr/lib/llvm-19/bin
for t in "$LLVM/clang" "$LLVM/clang-offload-bundler" x86_64-w64-mingw32-gcc; do
    command -v "$t" >/dev/null || bdie "missing $t (clang-19 lld-19 clang-tools-19 gcc-mingw-w64-x86-64)"
done
KPACK="${KPACK:-$(kpack_release)}"
ARCHS=(gfx900 gfx906 gfx908 gfx90a gfx942 gfx1030 gfx1100 gfx1101 gfx1102 gfx1151 gfx1200 gfx1201)
W="$BENCH_CACHE/pe-$BUNDLES-$TARGETS-$ENTRY_KIB"
DLL="$W/fx_big.dll"
if [ ! -f "$DLL" ]; then
    blog "building $DLL"
    rm -rf "$W" && mkdir -p "$W/b"
    : >"$W/host"
    {
        echo '.section .hip_fatbin,"dr"'
        for i in $(seq 0 $((BUNDLES - 1))); do
            targets="host-x86_64-unknown-linux--"; inputs="-input=$W/host"
            for j in $(seq 0 $((TARGETS - 1))); do
                # an AMDGPU ELF header (so `kpack verify` accepts it), then incompressible bytes
                { printf '\177ELF\002\001\001\100\002\000\000\000\000\000\000\000\003\000\340\000'
                  head -c $((ENTRY_KIB * 1024 - 20)) /dev/urandom; } >"$W/b/$i.$j"
                targets="$targets,hipv4-amdgcn-amd-amdhsa--${ARCHS[$((j % ${#ARCHS[@]}))]}"
                inputs="$inputs -input=$W/b/$i.$j"
            done
            # shellcheck disable=SC2086
            "$LLVM/clang-offload-bundler" -type=o -bundle-align=4096 -targets="$targets" $inputs \
                -output="$W/b/$i.bundle" >&2 || bdie "clang-offload-bundler"
            rm -f "$W/b/$i".[0-9]*
            printf '.p2align 12\nfatbin_%d:\n.incbin "%s"\n' "$i" "$W/b/$i.bundle"
        done
        echo '.section .hipFatBinSegment,"dw"'
        echo '.p2align 3'
        for i in $(seq 0 $((BUNDLES - 1))); do
            printf '.long 0x48495046, 1\n.quad fatbin_%d\n.quad 0\n' "$i"
        done
    } >"$W/fat.s"
    printf '__declspec(dllexport) int fx_big(void) { return 1; }\n' >"$W/main.c"
    "$LLVM/clang" --target=x86_64-w64-windows-gnu -c "$W/fat.s" -o "$W/fat.obj" || bdie "assemble"
    "$LLVM/clang" --target=x86_64-w64-windows-gnu -fuse-ld=lld -shared -o "$DLL" "$W/main.c" "$W/fat.obj" \
        || bdie "link"
    rm -rf "$W/b"
fi
size=$(stat -c %s "$DLL")
mkdir -p "$W/art/big/bin"
ln -f "$DLL" "$W/art/big/bin/fx_big.dll" 2>/dev/null || cp "$DLL" "$W/art/big/bin/fx_big.dll"
echo bin >"$W/art/big/artifact_manifest.txt"

rm -rf "$W/out"
"$KPACK" split --compression none --artifact-dir "$W/art/big" --artifact-prefix big --output-dir "$W/out" >/dev/null 2>&1 \
    || bdie "kpack split"
"$KPACK" verify --artifacts-dir "$W/out" >"$W/verify.log" 2>&1 || { cat "$W/verify.log"; bdie "kpack verify"; }
"$KPACK" reassemble --host "$W/out/big_generic/bin/fx_big.dll" --kpack-dir "$W/out" -o "$W/re.dll" 2>/dev/null \
    || bdie "kpack reassemble"
cmp -s "$W/re.dll" "$DLL" || bdie "reassembled DLL differs from the input"
rm -f "$W/re.dll"
blog "split output verified ($(tail -1 "$W/verify.log" | cut -c1-90)...), reassembly byte-identical"

best() { # best REPORT-PREFIX CMD... -> "seconds peak_kib" of the fastest run
    local b="" r="" t m
    for _ in $(seq "$REPS"); do
        rm -rf "$W/out" "$W/cp.dll"
        /usr/bin/time -f '%e %M' -o "$W/time" "$@" >/dev/null 2>&1 || bdie "failed: $*"
        read -r t m <"$W/time"
        if [ -z "$b" ] || awk -v a="$t" -v c="$b" 'BEGIN{exit !(a<c)}'; then b=$t; r=$m; fi
    done
    echo "$b $r"
}
sync
read -r t_cp _ < <(best cp "$DLL" "$W/cp.dll")
read -r t_none rss_none < <(best "$KPACK" split --compression none --artifact-dir "$W/art/big" --artifact-prefix big --output-dir "$W/out")
read -r t_zstd rss_zstd < <(best "$KPACK" split --artifact-dir "$W/art/big" --artifact-prefix big --output-dir "$W/out")
host=$(stat -c %s "$W/out/big_generic/bin/fx_big.dll")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b <= 0) b = 0.01; printf "%.2f", a / b }'; }
printf '\nfile                          fx_big.dll (%d bytes, %d bundles x %d targets x %d KiB), host-only %d bytes\n' \
    "$size" "$BUNDLES" "$TARGETS" "$ENTRY_KIB" "$host"
printf 'cp                            %6.2f s\n' "$t_cp"
printf 'kpack split --compression none %5.2f s = %sx cp, peak RSS %d KiB\n' "$t_none" "$(ratio "$t_none" "$t_cp")" "$rss_none"
printf 'kpack split (zstd)            %6.2f s = %sx cp, peak RSS %d KiB\n' "$t_zstd" "$(ratio "$t_zstd" "$t_cp")" "$rss_zstd"
printf 'cores                         %s\n' "$(nproc)"
