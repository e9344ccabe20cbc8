#!/usr/bin/env bash
# The ABI-drift guard with a real break, built by Buck2 (run by tests/ci/60-buck2.sh):
#   1. layout 1: the guarded program links and prints 2 + 3 = 5;
#   2. layout 2 without the guard: it links and prints a wrong sum;
#   3. layout 2 with the guard: the build fails naming dep/point.h and the
#      ways out, the check ran and no link action did (`buck2 log what-ran`);
#   4. layout 2, stable not selected: `buck2 build //examples/abi_guard/...`
#      works, and the stable snapshot's _abi_test fails naming channel, file
#      and fix.
#
#   examples/abi_guard/check-buck2.sh BUCK2 [buck2 flags before the subcommand…] -- [flags after it…]
# e.g. check-buck2.sh buck2 --isolation-dir ci -- -c rocpack.cargo_profile=dev
set -euo pipefail
cd "$(dirname "$0")/../.."
BUCK2="$1"; shift
PRE=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do PRE+=("$1"); shift; done
[ $# -gt 0 ] && shift
POST=("$@")
b2() { local sub="$1"; shift; "$BUCK2" "${PRE[@]}" "$sub" "${POST[@]}" "$@"; }
M=(-m snapshot_stable -m rocm70)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
fail() { echo "abi_guard (buck2): FAILED: $*" >&2; exit 1; }

got="$(b2 run "${M[@]}" //examples/abi_guard:app 2>"$out/1.err")" || { tail -30 "$out/1.err" >&2; fail "layout 1 did not build"; }
echo "  layout 1, guarded:            $got"
[ "$got" = "2 + 3 = 5" ] || fail "layout 1 printed '$got'"

got="$(b2 run "${M[@]}" -c abi_guard.point_layout=v2 //examples/abi_guard:app_unguarded 2>"$out/2.err")" \
    || { tail -30 "$out/2.err" >&2; fail "the unguarded program did not build"; }
echo "  layout 2, without the guard:  $got   (silently wrong)"
[ "$got" != "2 + 3 = 5" ] || fail "the layout change did not break the prebuilt archive"
if b2 build "${M[@]}" -c abi_guard.point_layout=v2 //examples/abi_guard:app >"$out/3.out" 2>&1; then
    fail "the guarded program built against layout 2"
fi
for want in "ABI drift" "changed: examples/abi_guard/dep/point.h" "Ways out" "re-cut this snapshot" \
    "--abi-input examples/abi_guard/dep/point.h=" "-m //examples/abi_guard:lib_channel_dev"; do
    grep -qF -- "$want" "$out/3.out" || { cat "$out/3.out" >&2; fail "message lacks '$want'"; }
done
# What ran in that build: the guard did, no link did (links run as cxx_link:
# `buck2 log what-ran` after a fresh build of :app lists cxx_link_executable).
"$BUCK2" "${PRE[@]}" log what-ran >"$out/ran" 2>/dev/null || fail "buck2 log what-ran"
grep -q "snapshot_abi_check" "$out/ran" || { cat "$out/ran" >&2; fail "no snapshot_abi_check action ran"; }
if grep -q "cxx_link" "$out/ran"; then cat "$out/ran" >&2; fail "a link action ran"; fi
echo "  layout 2, with the guard:     build stopped before linking:"
sed -n '/ABI drift/,/from source/{p;/from source/q}' "$out/3.out" | sed 's/^/    /'
# The escape hatch it names works: the library's own dev channel builds and is right.
got="$(b2 run "${M[@]}" -c abi_guard.point_layout=v2 -m //examples/abi_guard:lib_channel_dev //examples/abi_guard:app 2>"$out/4.err")" \
    || { tail -30 "$out/4.err" >&2; fail "the dev way out did not build"; }
echo "  layout 2, -m …:lib_channel_dev: $got"
[ "$got" = "2 + 3 = 5" ] || fail "the dev way out printed '$got'"

# Nobody selects stable: the package builds; its drift is a red test.
b2 build -c abi_guard.point_layout=v2 //examples/abi_guard/... >"$out/5.out" 2>&1 || { tail -30 "$out/5.out" >&2; fail "//examples/abi_guard/... failed on an unselected drifted channel"; }
if b2 test -c abi_guard.point_layout=v2 //examples/abi_guard:lib_stable_rocm70_abi_test >"$out/6.out" 2>&1; then
    fail "the stable snapshot's _abi_test passed against layout 2"
fi
for want in "ABI drift: the lib stable snapshot of ROCm 7.0" "changed: examples/abi_guard/dep/point.h" "recut --snapshots-root"; do
    grep -qF -- "$want" "$out/6.out" || { cat "$out/6.out" >&2; fail "the _abi_test output lacks '$want'"; }
done
echo "  layout 2, stable not selected: //examples/abi_guard/... builds; lib_stable_rocm70_abi_test is red"
