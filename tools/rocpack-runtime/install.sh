#!/usr/bin/env bash
# Install librocm_kpack as ROCm's own install lays it out:
#   PREFIX/lib/librocm_kpack.so.0.MINOR.PATCH   (the library, SONAME librocm_kpack.so.0)
#   PREFIX/lib/librocm_kpack.so.0 -> .so.0.MINOR.PATCH, librocm_kpack.so -> .so.0
#   PREFIX/lib/librocm_kpack.a
#   PREFIX/include/rocm_kpack/{kpack.h,kpack_types.h,kpack_export.h}
#   PREFIX/lib/pkgconfig/rocm_kpack.pc (+ rocm_kpack-shared.pc, which it requires)
#   PREFIX/lib/cmake/rocm_kpack/rocm_kpack-config{,-version}.cmake  (find_package(rocm_kpack))
#   PREFIX/lib/cmake/rocm-kpack/rocm-kpack-config{,-version}.cmake  (ROCm's package name)
# Imported targets: rocm::rocm_kpack (shared, ROCm's name) and
# rocm::rocm_kpack_static. The CMake and pkg-config files are relocatable
# (paths relative to where they are installed).
#
# usage: install.sh --prefix DIR [--build-dir DIR] [--no-build]
#   --build-dir  where the built libraries are (default: TARGET/release,
#                built with `cargo build --release -p rocpack-runtime` first
#                unless --no-build)
# DESTDIR is honoured as in make install. Exit 0 ok, 2 usage error.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
prefix="" build_dir="" build=1
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || usage; prefix="$2"; shift 2 ;;
        --prefix=*) prefix="${1#*=}"; shift ;;
        --build-dir) [ $# -ge 2 ] || usage; build_dir="$2"; shift 2 ;;
        --build-dir=*) build_dir="${1#*=}"; shift ;;
        --no-build) build=0; shift ;;
        -h|--help) usage ;;
        *) echo "install.sh: unknown argument $1" >&2; usage ;;
    esac
done
[ -n "$prefix" ] || usage
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
if [ -z "$build_dir" ]; then
    build_dir="${CARGO_TARGET_DIR:-$root/target}/release"
    if [ "$build" = 1 ]; then
        (cd "$root" && cargo build --release -p rocpack-runtime) >&2
    fi
fi
for f in librocm_kpack.so librocm_kpack.a; do
    [ -f "$build_dir/$f" ] || { echo "install.sh: $build_dir/$f is missing (build first)" >&2; exit 2; }
done
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' "$root/Cargo.toml" | head -n1)"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || { echo "install.sh: no version in Cargo.toml" >&2; exit 2; }
minor_patch="${version#*.}"; minor_patch="${minor_patch%%[-+]*}"
real="librocm_kpack.so.0.$minor_patch"

dest="${DESTDIR:-}$prefix"
lib="$dest/lib" inc="$dest/include/rocm_kpack"
mkdir -p "$lib/pkgconfig" "$lib/cmake/rocm_kpack" "$lib/cmake/rocm-kpack" "$inc"
install -m 0755 "$build_dir/librocm_kpack.so" "$lib/$real"
ln -sfn "$real" "$lib/librocm_kpack.so.0"
ln -sfn librocm_kpack.so.0 "$lib/librocm_kpack.so"
install -m 0644 "$build_dir/librocm_kpack.a" "$lib/librocm_kpack.a"
install -m 0644 "$here"/include/rocm_kpack/*.h "$inc/"

subst() { sed -e "s|@VERSION@|$version|g" -e "s|@REAL@|$real|g" "$1" > "$2"; }
subst "$here/cmake/rocm_kpack.pc.in" "$lib/pkgconfig/rocm_kpack.pc"
subst "$here/cmake/rocm_kpack-shared.pc.in" "$lib/pkgconfig/rocm_kpack-shared.pc"
subst "$here/cmake/rocm_kpack-config.cmake.in" "$lib/cmake/rocm_kpack/rocm_kpack-config.cmake"
subst "$here/cmake/rocm_kpack-config-version.cmake.in" "$lib/cmake/rocm_kpack/rocm_kpack-config-version.cmake"
# ROCm's package name (find_package(rocm-kpack)): the same targets.
printf 'include("${CMAKE_CURRENT_LIST_DIR}/../rocm_kpack/rocm_kpack-config.cmake")\n' \
    > "$lib/cmake/rocm-kpack/rocm-kpack-config.cmake"
printf 'include("${CMAKE_CURRENT_LIST_DIR}/../rocm_kpack/rocm_kpack-config-version.cmake")\n' \
    > "$lib/cmake/rocm-kpack/rocm-kpack-config-version.cmake"
echo "$dest"
