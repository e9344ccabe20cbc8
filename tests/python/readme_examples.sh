#!/usr/bin/env bash
# README's `kpack` and `snapctl` examples, run with the executables on PATH
# (stage 47 runs it from a venv the rocpack wheel was installed into, no
# cargo on PATH). Each README command runs as written, on the fixtures in
# place of the README's placeholder files.
#
#   tests/python/readme_examples.sh WORK_DIR
#
# Needs ROCPACK_SHARED (fatbin fixtures) and ROCPACK_WIN_FIXTURES; python on
# PATH is the venv's. Exit 0 ok, 1 a command failed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
W="$1"; mkdir -p "$W"; cd "$W"
F="$ROCPACK_SHARED/fixtures/fatbins"
WF="$ROCPACK_WIN_FIXTURES/fatbins-win"
SHARDS="$ROOT/examples/kpack/shards"
CFG="$ROOT/examples/kpack/packaging-config.json"
n=0
ex() { n=$((n + 1)); "$@" >"$W/ex.log" 2>&1 || { cat "$W/ex.log" >&2; echo "FAILED: README example: $*" >&2; exit 1; }; }

cp "$F/libfx_multi.so" libfoo.so
cp "$F/libfx_multi_compressed.so" big.o
ex kpack inspect libfoo.so --json
ex kpack inspect big.o --json --check-hash
ex kpack unbundle libfoo.so --output-dir objs/

cp -r "$SHARDS/gfx110X-build" shard
ex kpack split --artifact-dir shard/blas_lib_gfx110X-dgpu --artifact-prefix blas_lib \
    --output-dir out/ --split-databases rocblas hipblaslt aotriton
ex kpack split --input-dir shard/blas_lib_gfx110X-dgpu --component-name blas_lib --output-dir out-rocm/

mkdir shards
for s in "$SHARDS"/*/; do
    ex kpack split --batch-artifact-parent-dir "$s" --output-dir "shards/$(basename "$s")" --split-databases rocblas
done
cp "$CFG" packaging-config.json
ex kpack recombine --input-shards-dir shards/ --config packaging-config.json --output-dir pkgs/
ex kpack verify --artifacts-dir pkgs/
ex kpack select-family --arch gfx1101 --config packaging-config.json
grep -q gfx110X "$W/ex.log" || { cat "$W/ex.log"; echo "FAILED: select-family" >&2; exit 1; }

ex kpack split --artifact-dir shard/blas_lib_gfx110X-dgpu --artifact-prefix blas_lib --output-dir out2/ --gpu-targets gfx90a gfx1100
ex kpack verify --artifacts-dir out2/ --install-model both

# A fat wheel (examples/wheel/fxpkg, built by pip), split, installed, verified.
ex python -m pip wheel --disable-pip-version-check -q --no-deps --no-index --no-build-isolation -w . "$ROOT/examples/wheel/fxpkg"
ex kpack split-wheel fxpkg-1.0-py3-none-linux_x86_64.whl --output-dir wheels/
ex python -m venv venv
ex venv/bin/python -m pip install --disable-pip-version-check -q --no-index --find-links wheels/ 'fxpkg[device-gfx1100]'
site="$(venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
ex kpack verify --installed-tree "$site" --gpu-target gfx1100

ex kpack reassemble --host out/blas_lib_generic/math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5.2 \
    --kpack-dir out/ -o librocblas.fat.so

# Windows: a DLL, an artifact with bin/*.dll, a win_amd64 wheel.
mkdir -p bin blas_lib_win/stage/bin
cp "$WF/fx_win_full.dll" bin/rocblas.dll
cp "$WF/fx_win_full.dll" blas_lib_win/stage/bin/rocblas.dll
echo stage >blas_lib_win/artifact_manifest.txt
ex kpack inspect bin/rocblas.dll --json
grep -q '"kind": *"pe"' "$W/ex.log" || { echo "FAILED: not a PE report" >&2; exit 1; }
ex kpack split --artifact-dir blas_lib_win --artifact-prefix blas_lib --output-dir outwin/
python - "$WF/fx_win_full.dll" <<'PY'
import base64, hashlib, sys, zipfile
files = {"fxwin/fx.dll": open(sys.argv[1], "rb").read(),
         "fxwin/__init__.py": b"",
         "fxwin-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: fxwin\nVersion: 0.1\n",
         "fxwin-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp311-cp311-win_amd64\n"}
rec = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
              for n, d in files.items()) + "fxwin-0.1.dist-info/RECORD,,\n"
with zipfile.ZipFile("fxwin-0.1-cp311-cp311-win_amd64.whl", "w", zipfile.ZIP_DEFLATED) as z:
    for n, d in files.items():
        z.writestr(n, d)
    z.writestr("fxwin-0.1.dist-info/RECORD", rec)
PY
ex kpack split-wheel fxwin-0.1-cp311-cp311-win_amd64.whl --output-dir wheels-win/

co="$(ls objs/ | grep gfx1100 | head -1)"
cp "objs/$co" a.hsaco
ex kpack pack --code-object gfx1100=a.hsaco --kernel-name librocblas.so -o x.kpack
ex kpack unpack x.kpack --output-dir x/
ex kpack pack --compression zstd --no-zstd-checksum --input-dir x/ -o same-as-rocm.kpack

# snapctl: README's commands, in order, on a directory store.
printf 'not really an archive\n' >librcclx-dev.a
printf '#pragma once\n' >rccl.h
hash=0807924a0807924a0807924a0807924a0807924a
ex snapctl create --snapshots-root snapshots --store store --version 6.4 \
    --artifact librcclx-dev.a --header rccl.h --commit rcclx=$hash
printf 'a newer archive\n' >librcclx-dev.a
ex snapctl create --snapshots-root snapshots --store store --version 6.4 \
    --artifact librcclx-dev.a --header rccl.h --commit rcclx=$hash
ex snapctl status --snapshots-root snapshots
ex snapctl rollback --snapshots-root snapshots --version 6.4
ex snapctl gen-checksums --snapshots-root snapshots --output stable_checksums.bzl
ex snapctl check --snapshots-root snapshots --checksums stable_checksums.bzl
ex snapctl verify --snapshots-root snapshots --store store
ex snapctl fetch --snapshots-root snapshots --channel stable --version 6.4 -o fetched.a
ex snapctl gc --snapshots-root snapshots --dry-run
echo "README examples: $n commands ran" >&2
