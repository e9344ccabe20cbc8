#!/usr/bin/env bash
# rocpack as a Python package (docs/python.md):
#  1. `pip wheel .` at the repository root (in-tree PEP 517 backend, which
#     runs cargo into target/). CI builds each profile once: here the backend
#     packs stage 10's helpers (ci_helpers, via ROCPACK_PREBUILT_DIR) instead
#     of a release build of its own (several minutes on 2 cores);
#     ROCPACK_CI_WHEEL_PROFILE=release (or dev) runs the backend's own cargo
#     build as users get it:
#     twice, byte-identical, and from its sdist the same; `auditwheel show` agrees with the wheel's tag
#     (manylinux_2_N computed from the binaries' glibc symbol versions);
#  2. `pip install` into a fresh venv with no cargo/rustc on PATH; from it:
#     `kpack --version`, `snapctl --version`, a split + verify of the example
#     shards; a C consumer of librocm_kpack (examples/runtime/kpack_consumer.c,
#     which checks every code object against the fat binary) built with the
#     installed headers and library through pkg-config and through CMake
#     (rocm_kpack_DIR from `python -m rocpack --cmakedir`, and
#     CMAKE_PREFIX_PATH + find_package(rocm-kpack)), run; the pkg-config file
#     still right after the package directory is moved; README's kpack and
#     snapctl examples (tests/python/readme_examples.sh);
#  3. rocm-kpack's command lines through `python -m rocpack.tools.*` on the
#     example shards: same files, same bytes as `kpack split`/`recombine`,
#     `kpack verify` OK, unknown flags refused naming them
#     (tests/python/compat_check.py);
#  4. the device selector (`kpack split-wheel --selector`): pip installs the
#     device wheels of a fake sysfs's GPUs (gfx1100; gfx942 + gfx1100), of
#     ROCPACK_GPU_TARGETS, an explicit extra on a GPU-less machine, and fails
#     naming the targets that exist; kpack and the selector's backend agree
#     (tests/python/selector_install.sh).
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
need_pkgs cmake pkg-config

PY=python3
if ! $PY -m venv --help >/dev/null 2>&1 || ! $PY -m pip --version >/dev/null 2>&1; then
    need_pkgs python3-venv python3-pip
    PY=/usr/bin/python3
fi
t0=$(date +%s)
stage() { log "$* ($(( $(date +%s) - t0 )) s so far)"; }
W="$(mktemp -d /tmp/rocpack-python.XXXXXX)"
trap '[ -n "${ROCPACK_KEEP_TMP:-}" ] || rm -rf "$W"' EXIT
pipq() { "$1/bin/python" -m pip --disable-pip-version-check -q "${@:2}"; }

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
if [ -n "${ROCPACK_CI_WHEEL_PROFILE:-}" ]; then
    export ROCPACK_WHEEL_CARGO_PROFILE="$ROCPACK_CI_WHEEL_PROFILE"
    unset ROCPACK_PREBUILT_DIR   # the backend runs cargo
    prebuilt="$CARGO_TARGET_DIR/release"; [ "$ROCPACK_WHEEL_CARGO_PROFILE" = dev ] && prebuilt="$CARGO_TARGET_DIR/debug"
    stage "pip wheel . (cargo build --profile $ROCPACK_WHEEL_CARGO_PROFILE into target/)"
else
    ci_helpers
    export ROCPACK_PREBUILT_DIR="$CI_HELPERS_DIR"
    prebuilt="$CI_HELPERS_DIR"
    stage "pip wheel . (stage 10's helpers: ROCPACK_PREBUILT_DIR=$CI_HELPERS_DIR)"
fi
$PY -m pip wheel --disable-pip-version-check -q --no-deps --no-index --no-cache-dir -w "$W/w1" .
$PY -m pip wheel --disable-pip-version-check -q --no-deps --no-index --no-cache-dir -w "$W/w2" .
WHL="$(ls "$W"/w1/rocpack-*.whl)"
[ "$(ls "$W/w1" | wc -l)" = 1 ] || die "expected one wheel, got $(ls "$W/w1")"
cmp "$WHL" "$W/w2/$(basename "$WHL")" || die "two builds of the wheel differ"
tag="$(basename "$WHL" .whl)"; tag="${tag##*-}"
echo "wheel: $(basename "$WHL"), $(du -k "$WHL" | cut -f1) KiB" >&2
$PY "$ROOT/tests/wheel/record_check.py" "$WHL" >/dev/null || die "the wheel fails the RECORD check"

stage "sdist (git ls-files): its wheel is the same wheel"
mkdir -p "$W/sd"
$PY -c 'import sys; sys.path.insert(0, "python/build_backend"); import rocpack_backend as b; print(b.build_sdist(sys.argv[1]))' "$W/sd" >/dev/null
tar -xzf "$W"/sd/rocpack-*.tar.gz -C "$W/sd"
[ -f "$W/sd/rocpack-$(basename "$WHL" | cut -d- -f2)/PKG-INFO" ] || die "sdist without PKG-INFO"
ROCPACK_PREBUILT_DIR="$prebuilt" $PY -m pip wheel --disable-pip-version-check -q --no-deps \
    --no-index --no-cache-dir -w "$W/sd/w" "$W"/sd/rocpack-*/
cmp "$WHL" "$W/sd/w/$(basename "$WHL")" || die "the wheel built from the sdist differs"

stage "auditwheel show"
$PY -m venv "$W/tools"
pipq "$W/tools" install auditwheel
"$W/tools/bin/auditwheel" show "$WHL" >"$W/audit.txt" 2>&1 || { cat "$W/audit.txt"; die "auditwheel show"; }
# Not looser than the binaries allow, and not stricter than they need.
tr -s '\n ' '  ' <"$W/audit.txt" >"$W/audit1.txt"
grep -q "consistent with the following platform tag: \"$tag\"" "$W/audit1.txt" \
    && grep -q "constrains the platform tag to \"$tag\"" "$W/audit1.txt" \
    || { cat "$W/audit.txt"; die "auditwheel does not agree with the wheel's tag $tag"; }
echo "auditwheel: consistent with $tag" >&2

stage "pip install into a fresh venv, no cargo on PATH"
# PATH without any directory holding cargo or rustc.
CLEAN_PATH=""
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    [ -x "$d/cargo" ] || [ -x "$d/rustc" ] || CLEAN_PATH="${CLEAN_PATH:+$CLEAN_PATH:}$d"
done
V="$W/venv"
PATH="$CLEAN_PATH" $PY -m venv "$V"
PATH="$CLEAN_PATH" pipq "$V" install --no-index --no-cache-dir "$WHL"
export PATH="$V/bin:$CLEAN_PATH"
unset CARGO_TARGET_DIR
! command -v cargo >/dev/null || die "cargo is still on PATH"
[ "$(command -v kpack)" = "$V/bin/kpack" ] || die "kpack on PATH is $(command -v kpack), not the venv's"
kpack --version
snapctl --version
[ "$(python -m rocpack --version)" = "$(kpack --version | awk '{print $2}')" ] || die "versions differ"
"$V/bin/python" -m pip check

stage "split + verify with the installed kpack"
SHARD=examples/kpack/shards/gfx110X-build/blas_lib_gfx110X-dgpu
kpack split --artifact-dir "$SHARD" --artifact-prefix blas_lib --output-dir "$W/split" --split-databases rocblas
kpack verify --artifacts-dir "$W/split"
KP="$W/split/blas_lib_gfx1100/math-libs/BLAS/rocBLAS/stage/.kpack/blas_lib_gfx1100.kpack"
HOST="$W/split/blas_lib_generic/math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5.2"
FAT="$SHARD/math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5.2"
[ -f "$KP" ] && [ -f "$HOST" ] || die "split outputs missing"

LIBDIR="$(python -m rocpack --libdir)"
case "$LIBDIR" in "$V"/*) ;; *) die "--libdir $LIBDIR is not inside the venv" ;; esac
# (grep -q on a pipe would end it early: SIGPIPE, a failure under pipefail.)
needs() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

stage "C consumer through pkg-config"
export PKG_CONFIG_PATH; PKG_CONFIG_PATH="$(python -m rocpack --pkgconfigdir)"
pkg-config --exists rocm_kpack || die "pkg-config does not find rocm_kpack"
[ "$(pkg-config --modversion rocm_kpack)" = "$(python -m rocpack --version)" ] || die "pkg-config version"
# shellcheck disable=SC2046
cc -O1 -o "$W/consumer_pc" examples/runtime/kpack_consumer.c $(pkg-config --cflags --libs rocm_kpack) \
    -Wl,-rpath,"$LIBDIR"
grep -qx librocm_kpack.so.0 <<<"$(needs "$W/consumer_pc")" || die "the pkg-config consumer does not need librocm_kpack.so.0"
grep -q "librocm_kpack.so.0 => $LIBDIR/librocm_kpack.so.0" <<<"$(ldd "$W/consumer_pc")" \
    || { ldd "$W/consumer_pc"; die "the consumer does not load the venv's librocm_kpack"; }
"$W/consumer_pc" "$KP" "$HOST" "$FAT" gfx1100

stage "C consumer through CMake"
mkdir -p "$W/cm"
cat >"$W/cm/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.16)
project(kpack_consumer C)
find_package(rocm_kpack 0.1 REQUIRED)
find_package(rocm-kpack REQUIRED)
if(TARGET rocm::rocm_kpack_static)
  message(FATAL_ERROR "the wheel has no librocm_kpack.a, yet rocm::rocm_kpack_static is defined")
endif()
add_executable(consumer "$ROOT/examples/runtime/kpack_consumer.c")
target_link_libraries(consumer PRIVATE rocm::rocm_kpack)
EOF
cmake -S "$W/cm" -B "$W/cm/b1" -Drocm_kpack_DIR="$(python -m rocpack --cmakedir)" \
    -Drocm-kpack_DIR="$LIBDIR/cmake/rocm-kpack" >"$W/cmake1.log" 2>&1 || { cat "$W/cmake1.log"; die "cmake (rocm_kpack_DIR)"; }
cmake --build "$W/cm/b1" >>"$W/cmake1.log" 2>&1 || { cat "$W/cmake1.log"; die "cmake --build"; }
"$W/cm/b1/consumer" "$KP" "$HOST" "$FAT" gfx1100
cmake -S "$W/cm" -B "$W/cm/b2" -DCMAKE_PREFIX_PATH="$(python -m rocpack --prefix)" \
    >"$W/cmake2.log" 2>&1 || { cat "$W/cmake2.log"; die "cmake (CMAKE_PREFIX_PATH)"; }
cmake --build "$W/cm/b2" >>"$W/cmake2.log" 2>&1 || { cat "$W/cmake2.log"; die "cmake --build"; }
"$W/cm/b2/consumer" "$KP" "$HOST" "$FAT" gfx1100 >/dev/null
grep -q "=> $LIBDIR/librocm_kpack.so.0" <<<"$(ldd "$W/cm/b2/consumer")" || die "CMake consumer loads another library"

stage "relocatable: the package directory moved"
mkdir -p "$W/moved"
cp -r "$(python -m rocpack --prefix)" "$W/moved/rocpack"
[ "$(PKG_CONFIG_PATH="$W/moved/rocpack/lib/pkgconfig" pkg-config --variable=includedir rocm_kpack)" \
    = "$W/moved/rocpack/lib/pkgconfig/../../include" ] || die "pkg-config file is not relative to itself"
cc -o "$W/consumer_moved" examples/runtime/kpack_consumer.c \
    $(PKG_CONFIG_PATH="$W/moved/rocpack/lib/pkgconfig" pkg-config --cflags --libs rocm_kpack) \
    -Wl,-rpath,"$W/moved/rocpack/lib"
"$W/consumer_moved" "$KP" "$HOST" "$FAT" gfx1100 >/dev/null

stage "README's kpack and snapctl examples from the venv"
bash "$ROOT/tests/python/readme_examples.sh" "$W/readme"

stage "rocm-kpack command lines: python -m rocpack.tools.*"
(cd "$W" && "$V/bin/python" "$ROOT/tests/python/compat_check.py" "$V/bin/kpack" \
    "$ROOT/examples/kpack/shards" "$ROOT/examples/kpack/packaging-config.json" "$W/compat")

stage "device selector: pip install through it from a local index (tests/python/selector_install.sh)"
PY="$PY" bash "$ROOT/tests/python/selector_install.sh" "$V/bin/kpack" "$W/selector"

stage "done"
