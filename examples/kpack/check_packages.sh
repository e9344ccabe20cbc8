#!/bin/bash
# check_packages.sh GENERIC_DIR GFX110X_DIR: the recombined packages hold
# exactly what they should.
set -euo pipefail
generic="$1" group="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
lib=math-libs/BLAS/rocBLAS/stage/lib

# Group package: .kpack files and arch database files of gfx1100/1101/1102 only.
[ -f "$group/artifact_manifest.txt" ] || fail "$group has no artifact_manifest.txt"
kpacks="$(cd "$group" && find -L . -type f -name '*.kpack' | sed 's|.*/||' | sort | tr '\n' ' ')"
[ "$kpacks" = "blas_lib_gfx1100.kpack blas_lib_gfx1101.kpack blas_lib_gfx1102.kpack " ] \
    || fail "gfx110X .kpack files: [$kpacks]"
others="$(cd "$group" && find -L . -type f ! -name '*.kpack' ! -name artifact_manifest.txt | sort)"
for f in $others; do
    case "$f" in
        *gfx1100*|*gfx1101*|*gfx1102*) ;;
        *) fail "unexpected file in gfx110X package: $f" ;;
    esac
    case "$f" in */rocblas/library/*) ;; *) fail "not a database file: $f" ;; esac
done
[ -n "$others" ] || fail "gfx110X package has no arch database files"
for a in gfx1100 gfx1101 gfx1102; do
    grep -q "TensileLibrary_lazy_$a.dat" <<< "$others" || fail "missing TensileLibrary_lazy_$a.dat"
done
if (cd "$group" && find -L . -type f | grep -E 'gfx906|gfx1151|gfx120'); then
    fail "gfx110X package holds other archs"
fi

# Generic package: host code, generic database files, no device packs.
[ -f "$generic/artifact_manifest.txt" ] || fail "$generic has no artifact_manifest.txt"
[ -f "$generic/$lib/librocblas.so.5.2" ] || fail "generic package has no librocblas.so.5.2"
[ -e "$generic/$lib/librocblas.so.5" ] || fail "generic package has no librocblas.so.5"
[ -f "$generic/$lib/rocblas/library/TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat" ] \
    || fail "generic package lost the generic database file"
if (cd "$generic" && find -L . -type f -name '*.kpack' | grep .); then fail "generic package holds .kpack files"; fi
if (cd "$generic" && find -L . -type f | grep -E 'gfx110[012]\.(co|dat|hsaco)$'); then
    fail "generic package holds arch database files"
fi
if grep -q -- '__CLANG_OFFLOAD_BUNDLE__' "$generic/$lib/librocblas.so.5.2"; then
    fail "librocblas.so.5.2 in the generic package still contains device code"
fi
echo "packages OK: $(echo $kpacks)"
