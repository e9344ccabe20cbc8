#!/usr/bin/env bash
# The ABI-drift guard with a real break, built by Bazel (run by tests/ci/50-bazel.sh):
#   1. layout 1: the guarded program links and prints 2 + 3 = 5;
#   2. layout 2 without the guard: it links and prints a wrong sum;
#   3. layout 2 with the guard: the build fails naming dep/point.h and the
#      ways out, and no link action runs;
#   4. layout 2, stable not selected: `bazel build //examples/abi_guard/...`
#      works, and the stable snapshot's _abi_test fails naming channel, file
#      and fix.
# Extra arguments go to every bazel command (e.g. --config=prebuilt).
set -euo pipefail
cd "$(dirname "$0")/../.."
F=(--config=rcclx_stable --config=rocm70 "$@")
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
fail() { echo "abi_guard: FAILED: $*" >&2; exit 1; }

got="$(bazel run "${F[@]}" //examples/abi_guard:app 2>"$out/1.err")" || { cat "$out/1.err" >&2; fail "layout 1 did not build"; }
echo "  layout 1, guarded:            $got"
[ "$got" = "2 + 3 = 5" ] || fail "layout 1 printed '$got'"

got="$(bazel run "${F[@]}" --define=point_layout=v2 //examples/abi_guard:app_unguarded 2>"$out/2.err")" \
    || { cat "$out/2.err" >&2; fail "the unguarded program did not build"; }
echo "  layout 2, without the guard:  $got   (silently wrong)"
[ "$got" != "2 + 3 = 5" ] || fail "the layout change did not break the prebuilt archive"

if bazel build "${F[@]}" --define=point_layout=v2 --execution_log_json_file="$out/exec.json" \
    //examples/abi_guard:app >"$out/3.out" 2>&1; then
    fail "the guarded program built against layout 2"
fi
for want in "ABI drift" "changed: examples/abi_guard/dep/point.h" "Ways out" \
    "re-cut this snapshot" "--abi-input examples/abi_guard/dep/point.h=" "--//examples/abi_guard:lib_channel=dev"; do
    grep -qF -- "$want" "$out/3.out" || { cat "$out/3.out" >&2; fail "message lacks '$want'"; }
done
# The log names each spawn's mnemonic: the guard ran, no link did.
grep -q '"mnemonic": "SnapshotAbiCheck"' "$out/exec.json" || fail "no SnapshotAbiCheck in the execution log"
if grep -q '"mnemonic": "CppLink"' "$out/exec.json"; then fail "a link action ran"; fi
echo "  layout 2, with the guard:     build stopped before linking:"
sed -n '/ABI drift/,/from source/p' "$out/3.out" | sed 's/^/    /'

# Nobody selects stable: the package builds; its drift is a red test.
D=("$@" --define=point_layout=v2)
bazel build "${D[@]}" //examples/abi_guard/... >"$out/4.out" 2>&1 || { tail -30 "$out/4.out" >&2; fail "//examples/abi_guard/... failed on an unselected drifted channel"; }
if bazel test "${D[@]}" --test_output=errors //examples/abi_guard:lib_stable_rocm70_abi_test >"$out/5.out" 2>&1; then
    fail "the stable snapshot's _abi_test passed against layout 2"
fi
for want in "ABI drift: the lib stable snapshot of ROCm 7.0" "changed: examples/abi_guard/dep/point.h" "recut --snapshots-root"; do
    grep -qF -- "$want" "$out/5.out" || { cat "$out/5.out" >&2; fail "the _abi_test output lacks '$want'"; }
done
echo "  layout 2, stable not selected: //examples/abi_guard/... builds; lib_stable_rocm70_abi_test is red"
