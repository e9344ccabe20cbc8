#!/usr/bin/env bash
# examples/rcclx_source with Bazel (run by tests/ci/50-bazel.sh): each channel
# builds its own tree (dev = HEAD), the snapshot's own packages and load()s
# resolve inside it, HEAD's headers never leak in, and the freshness test
# turns red on an unrecorded edit, naming the file. Extra arguments go to every bazel command.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "rcclx_source: FAILED: $*" >&2; exit 1; }
expect() {
    local want="$1"; shift
    got="$(bazel run "$@" //examples/rcclx_source:hello 2>/tmp/rcclx_source.err)" || { cat /tmp/rcclx_source.err >&2; fail "$*"; }
    echo "  ${*:-(default)} -> $got"
    [ "$got" = "$want" ] || fail "$* printed '$got', expected '$want'"
}
F=("$@")
expect "rcl head" "${F[@]}"
expect "rcl 2" "${F[@]}" --config=rcclx_stable
expect "rcl 1" "${F[@]}" --config=rcclx_last_stable
expect "rcl 1" "${F[@]}" --//examples/rcclx_source:rcl_channel=last_stable
bazel test "${F[@]}" //examples/rcclx_source:rcl_check_test >/dev/null 2>&1 || fail "check_test on clean trees"
f=examples/rcclx_source/snapshots/stable/examples/rcclx_source/rcl/rcl.c
cp "$f" /tmp/rcclx_source.keep
trap 'cp /tmp/rcclx_source.keep "$f"' EXIT
echo '/* unrecorded hotfix */' >>"$f"
if bazel test "${F[@]}" --test_output=errors //examples/rcclx_source:rcl_check_test >/tmp/rcclx_source.out 2>&1; then
    fail "check_test passed with an unrecorded edit"
fi
# The log names the file (the snapshot's manifest.txt against the tree).
grep -q "changed examples/rcclx_source/rcl/rcl.c (content)" /tmp/rcclx_source.out \
    || { cat /tmp/rcclx_source.out >&2; fail "check_test does not name the edited file"; }
echo "  unrecorded edit of stable -> rcl_check_test FAILED (as it must), naming examples/rcclx_source/rcl/rcl.c"
