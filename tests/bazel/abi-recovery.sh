#!/usr/bin/env bash
# Recovering from ABI drift in a consumer workspace, as docs/rules/consumers.md
# tells users: the page's `abi-step` blocks are run as written (files appended
# or put on top, shell blocks run from the workspace root), then:
#   * two releases of libs/mylib cut with the page's `snapctl create`
#     (stable and last-stable of ROCm 6.4, each recording its header, commit
#     and the ABI input libs/dep/dep.h); every channel builds and runs;
#   * libs/dep/dep.h changes: `bazel build //...` still works (dev selected),
#     `bazel test //...` fails on exactly the two `_abi_test`s, each naming
#     its channel, the changed file and its fix; a build selecting stable
#     stops before linking with the same message, whose commands are those
#     the page shows;
#   * each channel's printed fix is run exactly, from a subdirectory, with
#     the sources of the commit it names (stable r2, last-stable r1);
#   * every channel builds and runs again, `bazel test //...` is green, and
#     each snapshot still holds its headers and commits;
#   * stable's printed way out 3 (`snapctl rollback`) run exactly from libs/:
#     stable is then r1, links, and the checksums test is green.
#
#   tests/bazel/abi-recovery.sh CONSUMER_DIR
# CONSUMER_DIR: a workspace assembled by tests/bazel/vendored.sh (its Bazel
# server is reused). The page's commands take no extra flags; with Bazel 7
# offline the caller turns the page's `common:debian7` lines into `common`
# lines first (the page allows both).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
C="$(cd "$1" && pwd)"
DOC="$ROOT/docs/rules/consumers.md"
export LC_ALL=C
T="$(mktemp -d /tmp/rocpack-abi.XXXXXX)"
export TMPDIR="$T"
trap 'rm -rf "$T"' EXIT
die() { printf 'FAILED: [abi-recovery] %s\n' "$*" >&2; exit 1; }
TS=$SECONDS
step() { printf '    (%ds)\n==> [abi-recovery] %s\n' $((SECONDS - TS)) "$*" >&2; TS=$SECONDS; }

# The page's abi-step blocks, in order (tests/snapshot/doc-blocks.sh cuts
# the page): N.kind (file, file-top, run, printed), N.path, N.body.
mkdir "$T/steps"
"$ROOT/tests/snapshot/doc-blocks.sh" "$T/blocks" "$DOC"
k=0
for i in $("$ROOT/tests/snapshot/doc-select.sh" "$T/blocks" abi-step); do
    k=$((k + 1))
    read -r kind path _ < "$T/blocks/$i.args" || true
    echo "$kind" > "$T/steps/$k.kind"; echo "${path:-}" > "$T/steps/$k.path"; cp "$T/blocks/$i.body" "$T/steps/$k.body"
done
nsteps="$(ls "$T/steps" | grep -c '\.kind$' || true)"
[ "$nsteps" -ge 5 ] || die "docs/rules/consumers.md has $nsteps abi-step blocks"
kind() { cat "$T/steps/$1.kind"; }
run_step() { # N: what the page says to do with block N
    local k p
    k="$(kind "$1")"; p="$(cat "$T/steps/$1.path")"
    case "$k" in
        file) mkdir -p "$(dirname "$C/$p")"; cat "$T/steps/$1.body" >> "$C/$p" ;;
        file-top) cat "$T/steps/$1.body" "$C/$p" > "$T/top" && mv "$T/top" "$C/$p" ;;
        run) (cd "$C" && bash -euo pipefail "$T/steps/$1.body") >"$T/run.$1.out" 2>&1 \
                || { tail -30 "$T/run.$1.out" >&2; die "the page's block $1 failed"; } ;;
        printed) ;;
        *) die "unknown abi-step kind $k" ;;
    esac
}
first_of() { local i; for i in $(seq 1 "$nsteps"); do [ "$(kind "$i")" = "$1" ] && { echo "$i"; return; }; done; die "no $1 block"; }
RUN="$(first_of run)"

step "sources of libs/dep and libs/mylib (two releases), then the page's steps 1 to 3"
mkdir -p "$C/libs/dep" "$C/libs/mylib/src" "$C/libs/mylib/include"
cat > "$C/libs/dep/dep.h" <<'H'
struct dep_point { int x; int y; };
H
cat > "$C/libs/mylib/include/mylib.h" <<'H'
struct dep_point;
int mylib_sum(const struct dep_point *p);
const char *mylib_release(void);
H
cat > "$C/libs/mylib/demo.c" <<'H'
#include <stdio.h>
#include "libs/dep/dep.h"
#include "mylib.h"
int main(void) {
    struct dep_point p = {.x = 2, .y = 3};
    printf("%s %s sum=%d\n", MYLIB_SNAPSHOT_CHANNEL, mylib_release(), mylib_sum(&p));
    return 0;
}
H
# Two releases of mylib, "commits" r1 and r2 (the page's MYLIB_COMMIT; no
# git needed: the Bazel 7 chroot has none). checkout REL puts its sources back.
release() { cat > "$T/$1.c" <<H
#include "libs/dep/dep.h"
#include "mylib.h"
int mylib_sum(const struct dep_point *p) { return p->x + p->y; }
const char *mylib_release(void) { return "$1"; }
H
}
release r1; release r2
checkout() { cp "$T/$1.c" "$C/libs/mylib/src/mylib.c"; }
cd "$C"
R1=r1 R2=r2
checkout r1
for i in $(seq 1 $((RUN - 1))); do run_step "$i"; done
MYLIB_COMMIT=$R1 run_step "$RUN"
checkout r2
MYLIB_COMMIT=$R2 run_step "$RUN"
for i in $(seq $((RUN + 1)) "$nsteps"); do run_step "$i"; done
grep -q "mylib: $R1" libs/mylib/snapshots/last-stable/6.4/metadata.txt || die "last-stable does not record r1"
grep -q "mylib: $R2" libs/mylib/snapshots/stable/6.4/metadata.txt || die "stable does not record r2"
. "$ROOT/tests/snapshot/abi-recovery-checks.sh"   # kept, recut_kept
kept stable > "$T/stable.kept"; kept last-stable > "$T/last.kept"
grep -q "mylib.h" "$T/stable.kept" || die "the page's create recorded no header"

demo() { # CHANNEL: what //libs/mylib:mylib_demo prints with that channel
    bazel run --//libs/mylib:mylib_channel="$1" --@rocpack//rules/bazel:rocm_version=6.4 //libs/mylib:mylib_demo 2>"$T/demo.err" \
        || { tail -30 "$T/demo.err" >&2; return 1; }
}
every_channel() { # WHEN
    [ "$(demo dev)" = "dev r2 sum=5" ] || die "$1: dev prints '$(demo dev)'"
    [ "$(demo stable)" = "stable r2 sum=5" ] || die "$1: stable prints '$(demo stable)'"
    [ "$(demo last_stable)" = "last_stable r1 sum=5" ] || die "$1: last_stable prints '$(demo last_stable)'"
}
step "before the change: //... builds and tests green, every channel runs"
bazel build //... >"$T/b0.out" 2>&1 || { tail -30 "$T/b0.out" >&2; die "bazel build //..."; }
bazel test //libs/... >"$T/t0.out" 2>&1 || { tail -40 "$T/t0.out" >&2; die "bazel test //libs/..."; }
every_channel "before"

step "libs/dep/dep.h changes its layout: //... builds, bazel test names both drifted channels"
cat > "$C/libs/dep/dep.h" <<'H'
struct dep_point { long id; int x; int y; };
H
bazel build //... >"$T/b1.out" 2>&1 || { tail -30 "$T/b1.out" >&2; die "bazel build //... failed on a channel nobody selects"; }
if bazel test //... >"$T/t1.out" 2>&1; then die "bazel test //... passed with two drifted snapshots"; fi
failed="$(grep -E '^//[^ ]+ +(FAILED|NO STATUS|FAILED TO BUILD)' "$T/t1.out" | awk '{print $1}' | sort | tr '\n' ' ')"
[ "$failed" = "//libs/mylib:mylib_last_stable_rocm64_abi_test //libs/mylib:mylib_stable_rocm64_abi_test " ] \
    || { tail -40 "$T/t1.out" >&2; die "failing tests: '$failed'"; }
for ch in stable last_stable; do
    grep -qF "ABI drift: the mylib $ch snapshot of ROCm 6.4" "$T/t1.out" || die "no $ch drift message in bazel test's output"
done
grep -qF "changed: libs/dep/dep.h" "$T/t1.out" || die "the test output does not name libs/dep/dep.h"
echo "    failing: $failed" >&2

step "a build selecting stable stops before linking, printing the commands the page shows"
if bazel build --//libs/mylib:mylib_channel=stable --@rocpack//rules/bazel:rocm_version=6.4 //libs/mylib:mylib_demo >"$T/b2.out" 2>&1; then
    die "the demo linked the drifted stable snapshot"
fi
grep -qF "changed: libs/dep/dep.h" "$T/b2.out" || { tail -30 "$T/b2.out" >&2; die "the guard's message does not name libs/dep/dep.h"; }
P="$(first_of printed)"
grep -E '^ +(then|first rebuild|3\. go back)' "$T/steps/$P.body" | sed 's/^ *//; s/^.*dependencies: //' > "$T/doc.cmds"
[ "$(wc -l < "$T/doc.cmds")" = 3 ] || die "the page's printed message has no rebuild/then/rollback lines"
while IFS= read -r l; do
    grep -qF -- "$l" "$T/b2.out" || { sed -n '/ABI drift/,/go back/p' "$T/b2.out" >&2; die "the guard does not print the page's: $l"; }
done < "$T/doc.cmds"

fix() { # OUTPUT_FILE CHANNEL COMMIT: run the fix printed for CHANNEL, exactly, from libs/
    local rebuild recut
    rebuild="$(sed -n "/ABI drift: the mylib $2 snapshot/,/go back\|from source/p" "$1" | grep -m1 'first rebuild' | sed 's/^.*against the current dependencies: //')"
    recut="$(sed -n "/ABI drift: the mylib $2 snapshot/,/from source/p" "$1" | grep -m1 '^ *then: ' | sed 's/^ *then: //')"
    [ -n "$rebuild" ] && [ -n "$recut" ] || die "no printed fix for $2"
    grep -qF "mylib=$3" "$1" || die "the $2 message does not name its commit $3"
    echo "    $2: $rebuild" >&2; echo "    $2: $recut" >&2
    checkout "$3"   # the recorded commit's sources
    (cd "$C/libs" && bash -c "$rebuild" && bash -c "$recut") >"$T/fix.$2.out" 2>&1 \
        || { tail -30 "$T/fix.$2.out" >&2; die "the printed fix for $2 failed"; }
    checkout r2     # back to the branch
}
step "the printed fixes, exactly, from libs/: stable (from the build) and last-stable (from its test)"
fix "$T/b2.out" stable "$R2"
fix "$T/t1.out" last_stable "$R1"

step "after: every channel builds and runs, bazel test //... is green, headers and commits kept"
bazel build //... >"$T/b3.out" 2>&1 || { tail -30 "$T/b3.out" >&2; die "bazel build //... after the re-cuts"; }
bazel test //... >"$T/t3.out" 2>&1 || { tail -40 "$T/t3.out" >&2; die "bazel test //... after the re-cuts"; }
every_channel "after"
recut_kept "$T/stable.kept" "$T/last.kept"

step "way out 3 of stable's message, exactly, from libs/: snapctl rollback"
rollback="$(sed -n '/ABI drift: the mylib stable snapshot/,/go back/p' "$T/b2.out" | sed -n 's/^.*go back to the last-stable snapshot: //p' | head -1)"
[ -n "$rollback" ] || die "stable's message prints no rollback"
echo "    $rollback" >&2
(cd "$C/libs" && bash -c "$rollback") >"$T/rollback.out" 2>&1 || { tail -20 "$T/rollback.out" >&2; die "the printed rollback failed"; }
grep -q "mylib: $R1" libs/mylib/snapshots/stable/6.4/metadata.txt || die "after rollback stable does not record $R1"
[ "$(demo stable)" = "stable r1 sum=5" ] || die "after rollback stable prints '$(demo stable || true)'"
bazel test //libs/mylib:stable_checksums_test >"$T/t4.out" 2>&1 || { tail -20 "$T/t4.out" >&2; die "the checksums file is stale after rollback"; }
step "ABI drift recovered as documented"
