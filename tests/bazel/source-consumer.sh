#!/usr/bin/env bash
# A source snapshot in a consumer workspace, as docs/rules/consumers.md
# ("Source snapshots") tells users: the page's `source-step` blocks run as
# written (files appended: `file all|MODE PATH`, the WORKSPACE lines in
# WORKSPACE mode, the MODULE.bazel ones with bzlmod; the `snapctl create
# --kind source` block run from the workspace root), with libs/rcl/src a
# library of the workspace's own git repository:
#   * two cuts (commits "rcl 1", "rcl 2"): stable holds rcl 2, last-stable rcl 1;
#   * a program linking //libs/rcl prints the working tree's rcl (dev), rcl 2
#     (stable) and rcl 1 (last_stable), selected with the page's flag;
#   * `bazel test //libs/rcl:rcl_check_test` is green, then red after an
#     unrecorded edit of the stable tree, naming the file.
#
#   tests/bazel/source-consumer.sh MODE CONSUMER_DIR
# MODE: workspace or bzlmod; CONSUMER_DIR: a workspace of that mode assembled
# by tests/bazel/vendored.sh (its Bazel server is reused; its commands take
# no flags); needs git.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODE="$1" C="$(cd "$2" && pwd)"
export LC_ALL=C
T="$(mktemp -d /tmp/rocpack-srcsnap.XXXXXX)"
trap 'rm -rf "$T"' EXIT
die() { printf 'FAILED: [source-consumer] %s\n' "$*" >&2; exit 1; }
TS=$SECONDS
step() { printf '    (%ds)\n==> [source-consumer] %s\n' $((SECONDS - TS)) "$*" >&2; TS=$SECONDS; }
case "$MODE" in workspace|bzlmod) ;; *) die "MODE must be workspace or bzlmod" ;; esac
command -v git >/dev/null || die "needs git"

"$ROOT/tests/snapshot/doc-blocks.sh" "$T/blocks" "$ROOT/docs/rules/consumers.md"
mapfile -t steps < <("$ROOT/tests/snapshot/doc-select.sh" "$T/blocks" source-step)
[ "${#steps[@]}" -ge 5 ] || die "docs/rules/consumers.md has ${#steps[@]} source-step blocks"
run_step() { # N: what the page says to do with block N
    local kind mode path
    read -r kind mode path < "$T/blocks/$1.args" || true
    case "$kind" in
        file) [ "$mode" = all ] || [ "$mode" = "$MODE" ] || return 0
              mkdir -p "$(dirname "$C/$path")"; cat "$T/blocks/$1.body" >> "$C/$path" ;;
        run) (cd "$C" && bash -euo pipefail "$T/blocks/$1.body") >"$T/run.$1.out" 2>&1 \
                || { tail -30 "$T/run.$1.out" >&2; die "the page's block $(cat "$T/blocks/$1.where") failed"; } ;;
        *) die "unknown source-step kind '$kind'" ;;
    esac
}

step "libs/rcl/src in the workspace's git repository; the page's steps, the cut run for rcl 1 and rcl 2"
cd "$C"
mkdir -p libs/rcl/src libs/rclapp
cat > libs/rcl/src/BUILD.bazel <<'B'
cc_library(
    name = "rcl",
    srcs = ["rcl.c"],
    visibility = ["//visibility:public"],
)
B
release() { printf 'const char *rcl_release(void) { return "%s"; }\n' "$1" > libs/rcl/src/rcl.c; }
cat > libs/rclapp/BUILD.bazel <<'B'
cc_binary(
    name = "demo",
    srcs = ["demo.c"],
    deps = ["//libs/rcl"],
)
B
cat > libs/rclapp/demo.c <<'H'
#include <stdio.h>
const char *rcl_release(void);
int main(void) { printf("%s\n", rcl_release()); return 0; }
H
[ -d .git ] || git init -q
g() { git -c user.name=rocpack-test -c user.email=test@example.com "$@"; }
release "rcl 1"; g add libs/rcl/src; g commit -qm "rcl 1"
ran=0
for i in "${steps[@]}"; do
    read -r kind _ < "$T/blocks/$i.args" || true
    if [ "$kind" = run ] && [ "$ran" = 0 ]; then
        run_step "$i"                                      # cut rcl 1
        release "rcl 2"; g add libs/rcl/src; g commit -qm "rcl 2"
        run_step "$i"                                      # cut rcl 2: rcl 1 -> last-stable
        ran=1
    else
        run_step "$i"
    fi
done
[ "$ran" = 1 ] || die "no source-step run block"
release "rcl head"   # the working tree: dev
grep -rq 'rcl 2' libs/rcl/snapshots/stable/libs/rcl/src/rcl.c || die "stable does not hold rcl 2"
grep -rq 'rcl 1' libs/rcl/snapshots/last-stable/libs/rcl/src/rcl.c || die "last-stable does not hold rcl 1"

step "each channel, selected with --//libs/rcl:rcl_channel"
for pair in "dev:rcl head" "stable:rcl 2" "last_stable:rcl 1"; do
    ch="${pair%%:*}" want="${pair#*:}"
    got="$(bazel run --//libs/rcl:rcl_channel="$ch" //libs/rclapp:demo 2>"$T/demo.err")" || { tail -30 "$T/demo.err" >&2; die "demo with rcl $ch"; }
    [ "$got" = "$want" ] || die "rcl $ch: '$got', expected '$want'"
    echo "    $ch: $got" >&2
done

step "bazel test //libs/rcl:rcl_check_test: green, then red naming an unrecorded edit"
bazel test //libs/rcl:rcl_check_test >"$T/t1.out" 2>&1 || { tail -30 "$T/t1.out" >&2; die "rcl_check_test on fresh cuts"; }
f=libs/rcl/snapshots/stable/libs/rcl/src/rcl.c
cp "$f" "$T/rcl.c"; chmod u+w "$f"; echo '/* edited */' >> "$f"
if bazel test //libs/rcl:rcl_check_test >"$T/t2.out" 2>&1; then die "rcl_check_test passed after an unrecorded edit"; fi
grep -qF "changed libs/rcl/src/rcl.c (content)" "$T/t2.out" || { tail -30 "$T/t2.out" >&2; die "the red test does not name the edited file"; }
cp "$T/rcl.c" "$f"
bazel test //libs/rcl:rcl_check_test >"$T/t3.out" 2>&1 || { tail -30 "$T/t3.out" >&2; die "rcl_check_test after restoring the file"; }
step "source snapshot consumer as the page says: ok"
