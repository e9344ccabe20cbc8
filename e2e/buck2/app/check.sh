#!/bin/bash
# check.sh GENERIC GFX115X APU: the consumer's packages hold what they
# should; the kpack_recombine target equals kpack_packages' group package.
set -euo pipefail
generic="$1" group="$2" apu="$3"
lib=math-libs/BLAS/rocBLAS/stage/lib
[ -f "$group/math-libs/BLAS/rocBLAS/stage/.kpack/mathlib_gfx1151.kpack" ] || { echo "FAIL: no gfx1151 .kpack in $group" >&2; exit 1; }
[ "$(readlink "$generic/$lib/librocblas.so.5")" = librocblas.so.5.2 ] \
    || { echo "FAIL: librocblas.so.5 is not the artifact's symlink" >&2; exit 1; }
[ -f "$generic/$lib/librocblas.so.5.2" ] || { echo "FAIL: no host library" >&2; exit 1; }
diff -r --no-dereference "$group" "$apu" >&2 || { echo "FAIL: kpack_recombine differs from kpack_packages" >&2; exit 1; }
echo "consumer packages ok"
