#!/usr/bin/env bash
# run.sh BUCK2 DIR ISOLATION [buck2 -c flags...]
#
# Assembles a consumer project in DIR (which must not exist): this
# directory's files, a copy of the rocpack checkout (tracked and untracked,
# non-ignored files, as a fresh clone has them) at third-party/rocpack, and a
# copy of one example shard as the consumer's own artifact. Then, with the
# real BUCK2: build and test everything (every rocpack rule under the
# consumer's names), run the consumer's program with its two snapshot
# libraries in separately chosen channels, and check a missing snapshot of
# either fails with that library's own message and fix.
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

# The commit of a snapshot, from its metadata.txt (what snapctl recorded).
commit_of() { # METADATA LIBRARY
    sed -n "s/^  $2: \([0-9a-f]\{40\}\)\$/\1/p" "$1"
}
fooccl_stable_64="$(commit_of fooccl/snapshots/stable/6.4/metadata.txt fooccl)"
rcclx_last_64="$(commit_of third-party/rocpack/examples/rcclx/snapshots/last-stable/6.4/metadata.txt rcclx)"
[ -n "$fooccl_stable_64" ] && [ -n "$rcclx_last_64" ] || fail "no commit in the snapshots' metadata.txt"

# expect_hello NAME WANT -m ...: one `buck2 run` of //app:hello (both libraries
# in one build, one configuration) prints exactly WANT.
expect_hello() {
    local name="$1" want="$2"; shift 2
    local got
    got="$(b2 run "$@" //app:hello 2>"$DIR/$name.err")" || { tail -30 "$DIR/$name.err" >&2; fail "buck2 run $* //app:hello"; }
    [ "$got" = "$want" ] || fail "$name ($*): got
$got
expected
$want"
    echo "e2e/buck2: ok: buck2 run $* //app:hello" >&2
}
# Defaults: both from dev (the global channel), ROCm 6.4.
expect_hello default "consumer: fooccl channel=dev rocm=6.4 commit=source prod=24
consumer: rcclx channel=dev rocm=6.4 commit=source sum=6"
# fooccl's own channel stable, rcclx on the global default (dev).
expect_hello a_stable_b_dev "consumer: fooccl channel=stable rocm=6.4 commit=$fooccl_stable_64 prod=24
consumer: rcclx channel=dev rocm=6.4 commit=source sum=6" -m fooccl_stable -m rocm64
# Global channel last-stable for every library, fooccl's own back to dev.
expect_hello global_last_stable_a_dev "consumer: fooccl channel=dev rocm=6.4 commit=source prod=24
consumer: rcclx channel=last_stable rocm=6.4 commit=$rcclx_last_64 sum=6" -m snapshot_last_stable -m fooccl_dev
# Dev for a version without any snapshot.
expect_hello dev_71 "consumer: fooccl channel=dev rocm=7.1 commit=source prod=24
consumer: rcclx channel=dev rocm=7.1 commit=source sum=6" -m rocm71

# A missing snapshot of the consumer's own library: its names, not rcclx's.
if b2 build -m fooccl_last_stable -m rocm70 //app:hello >/dev/null 2>"$DIR/missing.err"; then
    fail "a missing fooccl snapshot built"
fi
for want in "no last-stable snapshot of fooccl for ROCm 7.0" "(-m fooccl_last_stable)" \
    "snapctl create --snapshots-root fooccl/snapshots --store fooccl/store --version 7.0 --artifact <path to libfooccl.a> --prefix FOOCCL" \
    "buck2 run //fooccl:stable_checksums.update"; do
    grep -qF -- "$want" "$DIR/missing.err" || { cat "$DIR/missing.err" >&2; fail "fooccl missing-snapshot message lacks: $want"; }
done
# rcclx's, while fooccl (dev) is fine.
if b2 build -m rcclx_last_stable -m rocm71 //app:hello >/dev/null 2>"$DIR/missing2.err"; then
    fail "a missing rcclx snapshot built"
fi
grep -qF "no last-stable snapshot of rcclx for ROCm 7.1" "$DIR/missing2.err" \
    || { cat "$DIR/missing2.err" >&2; fail "rcclx missing-snapshot message"; }

# The consumer's checksums file: .update keeps an up-to-date file as it is.
cp fooccl/stable_checksums.bzl "$DIR/fooccl-checksums.orig"
b2 run //fooccl:stable_checksums.update >/dev/null 2>&1 || fail "buck2 run //fooccl:stable_checksums.update"
cmp "$DIR/fooccl-checksums.orig" fooccl/stable_checksums.bzl || fail ".update changed fooccl's up-to-date checksums file"
grep -q "^FOOCCL_STABLE_CHECKSUMS = " fooccl/stable_checksums.bzl || fail "fooccl's checksums file lost its FOOCCL_ names"
echo "e2e/buck2: consumer project ok" >&2
