#!/usr/bin/env bash
# Recovering from ABI drift in a Buck2 consumer project, as docs/buck2.md
# ("Using rocpack from another project", "When the ABI guard fires") and the
# guard's message tell users:
#   * the page's `buck2-step` blocks run as written (files appended or put on
#     top, the shell block run from the project root): libs/dep, and
#     libs/mylib, a guarded prebuilt_snapshot cut twice (commits r1, r2:
#     stable r2 and last-stable r1 of ROCm 6.4, each recording its header,
#     commit and the ABI input libs/dep/dep.h); every channel builds and runs;
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
# third_party/rocpack; its daemon is reused). The page's and the printed
# commands say `buck2`: they run with a `buck2` on PATH that is BUCK2 with
# ISOLATION and the -c flags (tests/buck2/buck2-on-path.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUCK2="$1" C="$(cd "$2" && pwd)" ISO="$3"; shift 3
export LC_ALL=C
T="$(mktemp -d /tmp/rocpack-b2abi.XXXXXX)"
export TMPDIR="$T"
trap 'rm -rf "$T"' EXIT
die() { printf 'FAILED: [buck2 abi-recovery] %s\n' "$*" >&2; exit 1; }
TS=$SECONDS
step() { printf '    (%ds)\n==> [buck2 abi-recovery] %s\n' $((SECONDS - TS)) "$*" >&2; TS=$SECONDS; }

"$ROOT/tests/buck2/buck2-on-path.sh" "$BUCK2" "$ISO" "$T/bin" "$@"
export PATH="$T/bin:$PATH"
plain() { sed -E -e 's/\x1b\[[0-9;]*m//g' -e 's/^\[[0-9T:.+-]+\] //' "$1"; }   # no colours, no time stamps

# The page's buck2-step blocks, in page order (tests/snapshot/doc-blocks.sh).
"$ROOT/tests/snapshot/doc-blocks.sh" "$T/blocks" "$ROOT/docs/buck2.md"
mapfile -t steps < <("$ROOT/tests/snapshot/doc-select.sh" "$T/blocks" buck2-step)
[ "${#steps[@]}" -ge 5 ] || die "docs/buck2.md has ${#steps[@]} buck2-step blocks"
run_step() { # N: what the page says to do with block N
    local kind path
    read -r kind path < "$T/blocks/$1.args" || true
    case "$kind" in
        file) mkdir -p "$(dirname "$C/$path")"; cat "$T/blocks/$1.body" >> "$C/$path" ;;
        file-top) cat "$T/blocks/$1.body" "$C/$path" > "$T/top" && mv "$T/top" "$C/$path" ;;
        run) (cd "$C" && bash -euo pipefail "$T/blocks/$1.body") >"$T/run.$1.out" 2>&1 \
                || { tail -30 "$T/run.$1.out" >&2; die "the page's block $(cat "$T/blocks/$1.where") failed"; } ;;
        *) die "unknown buck2-step kind '$kind' ($(cat "$T/blocks/$1.where"))" ;;
    esac
}
cd "$C"

step "libs/dep, libs/mylib (two releases r1, r2): docs/buck2.md's steps, its snapshot cut run for r1 and r2"
mkdir -p libs/dep libs/mylib/src libs/mylib/include
cat > libs/dep/dep.h <<'H'
struct dep_point { int x; int y; };
H
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
checkout r1
ran=0
for i in "${steps[@]}"; do
    read -r kind _ < "$T/blocks/$i.args" || true
    if [ "$kind" = run ] && [ "$ran" = 0 ]; then
        MYLIB_COMMIT=r1 run_step "$i"                      # cut r1
        checkout r2
        MYLIB_COMMIT=r2 run_step "$i"                      # cut r2: r1 -> last-stable
        ran=1
    else
        run_step "$i"
    fi
done
[ "$ran" = 1 ] || die "no buck2-step run block"
grep -q "mylib: r1" libs/mylib/snapshots/last-stable/6.4/metadata.txt || die "last-stable does not record r1"
grep -q "mylib: r2" libs/mylib/snapshots/stable/6.4/metadata.txt || die "stable does not record r2"
grep -q '"libs/dep/dep.h"' libs/mylib/stable_checksums.bzl || die "the checksums file records no ABI input libs/dep/dep.h"
. "$ROOT/tests/snapshot/abi-recovery-checks.sh"   # kept, recut_kept
kept stable > "$T/stable.kept"; kept last-stable > "$T/last.kept"
grep -q "mylib.h" "$T/stable.kept" || die "the page's create recorded no header"

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
