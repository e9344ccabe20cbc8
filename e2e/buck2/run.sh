#!/usr/bin/env bash
# run.sh BUCK2 DIR ISOLATION [buck2 -c flags...]
#
# Assembles a consumer project in DIR (which must not exist): this
# directory's files, a copy of the rocpack checkout (tracked and untracked,
# non-ignored files, as a fresh clone has them) at third-party/rocpack, and a
# copy of one example shard as the consumer's own artifact. Then, with the
# real BUCK2: build and test everything, run the consumer's program in two
# channels, and check a missing snapshot fails with rocpack's message.
set -euo pipefail
BUCK2="$1" DIR="$2" ISO="$3"; shift 3
CFG=("$@")
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
fail() { echo "e2e/buck2 FAILED: $*" >&2; exit 1; }

[ ! -e "$DIR" ] || fail "$DIR exists"
mkdir -p "$DIR/third-party/rocpack"
(cd "$here" && tar -cf - --exclude=run.sh .) | (cd "$DIR" && tar -xf -)
(cd "$repo" && git ls-files -co --exclude-standard -z | tar -cf - --null -T -) \
    | (cd "$DIR/third-party/rocpack" && tar -xf -)
cp -a "$repo/examples/kpack/shards/gfx1151-build/blas_lib_gfx1151" "$DIR/app/art"

cd "$DIR"
b2() { local sub="$1"; shift; "$BUCK2" --isolation-dir "$ISO" "$sub" "${CFG[@]}" "$@"; }
# The daemon of this project ends with the run.
trap '"$BUCK2" --isolation-dir "$ISO" kill >/dev/null 2>&1 || true' EXIT

b2 build //... || fail "buck2 build //..."
b2 test //... || fail "buck2 test //..."
# rocpack's own targets, reached through the cell.
b2 build rocpack//examples/kpack:blas_lib_gfx110X || fail "buck2 build rocpack//examples/kpack:blas_lib_gfx110X"

out="$(b2 run -m rcclx_stable -m rocm64 //app:hello 2>/dev/null)" || fail "buck2 run -m rcclx_stable -m rocm64 //app:hello"
want="consumer: rcclx channel=stable rocm=6.4 commit=0807924a0e8d91869474d24caa35c96b3db86955 sum=6"
[ "$out" = "$want" ] || fail "stable/6.4: got [$out], expected [$want]"
out="$(b2 run //app:hello 2>/dev/null)" || fail "buck2 run //app:hello"
want="consumer: rcclx channel=dev rocm=6.4 commit=source sum=6"
[ "$out" = "$want" ] || fail "dev: got [$out], expected [$want]"

if b2 build -m rcclx_last_stable -m rocm71 //app:hello >/dev/null 2>"$DIR/missing.err"; then
    fail "a missing snapshot built"
fi
grep -qF "no last-stable snapshot of rcclx for ROCm 7.1" "$DIR/missing.err" \
    || { cat "$DIR/missing.err" >&2; fail "missing-snapshot message"; }
echo "e2e/buck2: consumer project ok" >&2
