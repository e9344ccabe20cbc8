#!/usr/bin/env bash
# Recovering from ABI drift in a Buck2 consumer project, as the guard's
# message and docs/buck2.md ("When the ABI guard fires") tell users:
#   * libs/mylib, a guarded prebuilt_snapshot (abi_inputs = the exported
#     header of libs/dep), cut twice with `buck2 run
#     toolchains//:rocpack_snapctl -- create` as docs/buck2.md shows it (plus
#     --abi-input): stable r2 and last-stable r1 of ROCm 6.4, each recording
#     its header and commit; every channel builds and runs;
#   * libs/dep/dep.h changes: `buck2 build //...` still works (dev
#     selected), `buck2 test //...` fails on exactly the two `_abi_test`s,
#     each naming its channel, the changed file and its fix; a build
#     selecting stable stops before linking with the same message;
#   * each channel's printed fix ("first rebuild …" and "then: …") is run
#     exactly, with bash, from libs/ (the message says: any directory of the
#     project), with the sources of the commit it names;
#   * every channel builds and runs again, `buck2 test //...` is green, each
#     snapshot still holds its headers and commits, and the checksums file
#     is the one `.update` makes;
#   * the printed `snapctl rollback` (stable's way out 3) run exactly from
#     libs/: stable is then the old last-stable (r1) and links.
#
#   tests/buck2/abi-recovery.sh BUCK2 PROJECT_DIR ISOLATION [buck2 -c flags...]
# PROJECT_DIR: the consumer project e2e/buck2/run.sh assembled (rocpack at
# third_party/rocpack; its daemon is reused). The printed commands say
# `buck2`: they run with a `buck2` on PATH that is BUCK2 with ISOLATION and
# the -c flags (build/run/test), so they share the caller's daemon.
set -euo pipefail
BUCK2="$1" C="$(cd "$2" && pwd)" ISO="$3"; shift 3
CFG=("$@")
export LC_ALL=C
T="$(mktemp -d /tmp/rocpack-b2abi.XXXXXX)"
trap 'rm -rf "$T"' EXIT
die() { printf 'FAILED: [buck2 abi-recovery] %s\n' "$*" >&2; exit 1; }
TS=$SECONDS
step() { printf '    (%ds)\n==> [buck2 abi-recovery] %s\n' $((SECONDS - TS)) "$*" >&2; TS=$SECONDS; }

# `buck2` as the printed commands call it.
mkdir "$T/bin"
{
    printf '#!/usr/bin/env bash\n'
    printf 'sub="$1"; shift\n'
    printf 'case "$sub" in build|run|test) exec %q --isolation-dir %q "$sub"' "$BUCK2" "$ISO"
    [ ${#CFG[@]} -eq 0 ] || printf ' %q' "${CFG[@]}"
    printf ' "$@" ;; *) exec %q --isolation-dir %q "$sub" "$@" ;; esac\n' "$BUCK2" "$ISO"
} > "$T/bin/buck2"
chmod +x "$T/bin/buck2"
export PATH="$T/bin:$PATH"
plain() { sed -E -e 's/\x1b\[[0-9;]*m//g' -e 's/^\[[0-9T:.+-]+\] //' "$1"; }   # no colours, no time stamps
cd "$C"

step "libs/dep and libs/mylib (two releases r1, r2); the first two snapshots, cut as docs/buck2.md shows"
mkdir -p libs/dep libs/mylib/src libs/mylib/include
cat > libs/dep/dep.h <<'H'
struct dep_point { int x; int y; };
H
cat > libs/dep/BUCK <<'B'
# The dependency's header, as its own target (the path the snapshot records: libs/dep/dep.h).
export_file(name = "dep.h", src = "dep.h", visibility = ["PUBLIC"])

cxx_library(
    name = "dep",
    exported_headers = {"libs/dep/dep.h": ":dep.h"},
    header_namespace = "",
    visibility = ["PUBLIC"],
)
B
cat > libs/mylib/include/mylib.h <<'H'
struct dep_point;
int mylib_sum(const struct dep_point *p);
const char *mylib_release(void);
H
cat > libs/mylib/demo.c <<'H'
#include <stdio.h>
#include "libs/dep/dep.h"
#include "mylib.h"
int main(void) {
    struct dep_point p = {.x = 2, .y = 3};
    printf("%s %s sum=%d\n", MYLIB_SNAPSHOT_CHANNEL, mylib_release(), mylib_sum(&p));
    return 0;
}
H
release() { cat > "$T/$1.c" <<H
#include "libs/dep/dep.h"
#include "mylib.h"
int mylib_sum(const struct dep_point *p) { return p->x + p->y; }
const char *mylib_release(void) { return "$1"; }
H
}
release r1; release r2
checkout() { cp "$T/$1.c" libs/mylib/src/mylib.c; }
SOURCE_BUCK='cxx_library(
    name = "mylib_source",
    srcs = ["src/mylib.c"],
    exported_headers = {"mylib.h": "include/mylib.h"},
    header_namespace = "",
    deps = ["//libs/dep:dep"],
)
'
printf '%s' "$SOURCE_BUCK" > libs/mylib/BUCK
cut_release() { # COMMIT: snapctl create of mylib at COMMIT (the archive named like `artifact`)
    checkout "$1"
    local a
    a="$(buck2 build --show-full-simple-output '//libs/mylib:mylib_source[static]' 2>"$T/cut.err")" \
        || { tail -20 "$T/cut.err" >&2; die "buck2 build of mylib_source[static] ($1)"; }
    cp "$a" "$T/libmylib.a"
    buck2 run toolchains//:rocpack_snapctl -- create --snapshots-root "$PWD/libs/mylib/snapshots" \
        --store "$PWD/libs/mylib/store" --version 6.4 --artifact "$T/libmylib.a" --prefix MYLIB \
        --checksums "$PWD/libs/mylib/stable_checksums.bzl" --header "$PWD/libs/mylib/include/mylib.h" --commit "mylib=$1" \
        --abi-base "$PWD" --abi-input "$PWD/libs/dep/dep.h" >"$T/create.out" 2>&1 \
        || { tail -20 "$T/create.out" >&2; die "snapctl create ($1)"; }
}
cut_release r1
cut_release r2
checkout r2
grep -q "mylib: r1" libs/mylib/snapshots/last-stable/6.4/metadata.txt || die "last-stable does not record r1"
grep -q "mylib: r2" libs/mylib/snapshots/stable/6.4/metadata.txt || die "stable does not record r2"
grep -q '"libs/dep/dep.h"' libs/mylib/stable_checksums.bzl || die "the checksums file records no ABI input libs/dep/dep.h"
{
    printf '%s\n' 'load("@rocpack//rules/buck2:defs.bzl", "prebuilt_snapshot", "stable_checksums")'
    printf '%s\n' 'load(":stable_checksums.bzl", "MYLIB_LAST_STABLE_CHECKSUMS", "MYLIB_SNAPSHOT_ARTIFACTS", "MYLIB_STABLE_CHECKSUMS")'
    printf '\n%s\n' "$SOURCE_BUCK"
    cat <<'B'
prebuilt_snapshot(
    name = "mylib",
    abi_inputs = ["//libs/dep:dep.h"],
    checksums_prefix = "MYLIB",
    checksums_target = ":stable_checksums",
    channel_define = "MYLIB_SNAPSHOT_CHANNEL",
    dev = ":mylib_source",
    last_stable_checksums = MYLIB_LAST_STABLE_CHECKSUMS,
    local_store = "store",
    snapshot_artifacts = MYLIB_SNAPSHOT_ARTIFACTS,
    stable_checksums = MYLIB_STABLE_CHECKSUMS,
)

stable_checksums(
    name = "stable_checksums",
    srcs = glob(["snapshots/**/metadata.txt"]),
    prefix = "MYLIB",
)

cxx_binary(
    name = "mylib_demo",
    srcs = ["demo.c"],
    deps = [
        ":mylib",
        "//libs/dep:dep",
    ],
)
B
} > libs/mylib/BUCK
. "$(dirname "${BASH_SOURCE[0]}")/../snapshot/abi-recovery-checks.sh"   # kept, recut_kept
kept stable > "$T/stable.kept"; kept last-stable > "$T/last.kept"
grep -q "mylib.h" "$T/stable.kept" || die "create recorded no header"

demo() { # CHANNEL: what //libs/mylib:mylib_demo prints with that channel of mylib
    buck2 run -m "//libs/mylib:mylib_channel_$1" -m rocm64 //libs/mylib:mylib_demo 2>"$T/demo.err" \
        || { tail -30 "$T/demo.err" >&2; return 1; }
}
every_channel() { # WHEN
    local ch want
    for ch in dev stable last_stable; do
        case "$ch" in dev|stable) want="$ch r2 sum=5" ;; last_stable) want="$ch r1 sum=5" ;; esac
        [ "$(demo "$ch")" = "$want" ] || die "$1: $ch prints '$(demo "$ch" || true)', expected '$want'"
    done
}
step "before the change: //... builds, //libs/... tests green, every channel runs"
buck2 build //... >"$T/b0.out" 2>&1 || { tail -30 "$T/b0.out" >&2; die "buck2 build //..."; }
buck2 test //libs/... >"$T/t0.out" 2>&1 || { tail -40 "$T/t0.out" >&2; die "buck2 test //libs/..."; }
every_channel "before"

step "libs/dep/dep.h changes its layout: //... builds, buck2 test names both drifted channels"
cat > libs/dep/dep.h <<'H'
struct dep_point { long id; int x; int y; };
H
buck2 build //... >"$T/b1.out" 2>&1 || { tail -30 "$T/b1.out" >&2; die "buck2 build //... failed on a channel nobody selects"; }
if buck2 test //... >"$T/t1.raw" 2>&1; then die "buck2 test //... passed with two drifted snapshots"; fi
plain "$T/t1.raw" > "$T/t1.out"
failed="$({ grep -oE '✗ Fail: [^ ]+' "$T/t1.out" || true; } | awk '{print $3}' | sort -u | tr '\n' ' ')"
[ "$failed" = "root//libs/mylib:mylib_last_stable_rocm64_abi_test root//libs/mylib:mylib_stable_rocm64_abi_test " ] \
    || { tail -40 "$T/t1.out" >&2; die "failing tests: '$failed'"; }
grep -q 'Fail 2\.' "$T/t1.out" || { tail -5 "$T/t1.out" >&2; die "not exactly two failing tests"; }
for ch in stable last_stable; do
    grep -qF "ABI drift: the mylib $ch snapshot of ROCm 6.4" "$T/t1.out" || die "no $ch drift message in buck2 test's output"
done
grep -qF "changed: libs/dep/dep.h" "$T/t1.out" || die "the test output does not name libs/dep/dep.h"
echo "    failing: $failed" >&2

step "a build selecting stable stops before linking"
if buck2 build -m //libs/mylib:mylib_channel_stable -m rocm64 //libs/mylib:mylib_demo >"$T/b2.raw" 2>&1; then
    die "the demo linked the drifted stable snapshot"
fi
plain "$T/b2.raw" > "$T/b2.out"
grep -qF "changed: libs/dep/dep.h" "$T/b2.out" || { tail -30 "$T/b2.out" >&2; die "the guard's message does not name libs/dep/dep.h"; }

msg() { # OUTPUT_FILE CHANNEL: the drift message of CHANNEL, once
    awk -v h="ABI drift: the mylib $2 snapshot" 'on && !/^(  |Ways out)/ { exit } index($0, h) { on = 1 } on' "$1"
}
fix() { # OUTPUT_FILE CHANNEL COMMIT: run the fix printed for CHANNEL, exactly, from libs/
    local rebuild recut
    msg "$1" "$2" > "$T/msg.$2"
    rebuild="$(grep -m1 'first rebuild' "$T/msg.$2" | sed 's/^.*against the current dependencies: //')"
    recut="$(grep -m1 '^ *then: ' "$T/msg.$2" | sed 's/^ *then: //')"
    [ -n "$rebuild" ] && [ -n "$recut" ] || { cat "$T/msg.$2" >&2; die "no printed fix for $2"; }
    grep -qF "mylib=$3" "$T/msg.$2" || die "the $2 message does not name its commit $3"
    echo "    $2: $rebuild" >&2; echo "    $2: $recut" >&2
    checkout "$3"   # the recorded commit's sources
    (cd "$C/libs" && bash -c "$rebuild" && bash -c "$recut") >"$T/fix.$2.out" 2>&1 \
        || { tail -30 "$T/fix.$2.out" >&2; die "the printed fix for $2 failed"; }
    checkout r2     # back to the branch
}
step "the printed fixes, exactly, from libs/: stable (from the build) and last-stable (from its test)"
fix "$T/b2.out" stable r2
fix "$T/t1.out" last_stable r1

step "after: every channel builds and runs, buck2 test //... is green, headers and commits kept"
buck2 build //... >"$T/b3.out" 2>&1 || { tail -30 "$T/b3.out" >&2; die "buck2 build //... after the re-cuts"; }
buck2 test //... >"$T/t3.out" 2>&1 || { tail -40 "$T/t3.out" >&2; die "buck2 test //... after the re-cuts"; }
every_channel "after"
recut_kept "$T/stable.kept" "$T/last.kept"

step "way out 3 of stable's message, exactly, from libs/: snapctl rollback"
rollback="$(msg "$T/b2.out" stable | grep -m1 'go back to the last-stable snapshot: ' | sed 's/^.*last-stable snapshot: //')"
[ -n "$rollback" ] || die "stable's message prints no rollback"
echo "    $rollback" >&2
(cd "$C/libs" && bash -c "$rollback") >"$T/rollback.out" 2>&1 || { tail -20 "$T/rollback.out" >&2; die "the printed rollback failed"; }
grep -q "mylib: r1" libs/mylib/snapshots/stable/6.4/metadata.txt || die "after rollback stable does not record r1"
[ "$(demo stable)" = "stable r1 sum=5" ] || die "after rollback stable prints '$(demo stable || true)'"
buck2 test //libs/mylib:stable_checksums_test >"$T/t4.out" 2>&1 || { tail -20 "$T/t4.out" >&2; die "the checksums file is stale after rollback"; }
step "ABI drift recovered as printed (buck2)"
