#!/usr/bin/env bash
# The ABI-drift guard with a real break, built by Bazel (run by tests/ci/50-bazel.sh):
#   1. layout 1: the guarded program links and prints 2 + 3 = 5;
#   2. layout 2 without the guard: it links and prints a wrong sum;
#   3. layout 2 with the guard: the build fails naming dep/point.h and both
#      ways out, and no link action runs.
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
for want in "ABI drift" "changed: examples/abi_guard/dep/point.h" "Two ways out" \
    "re-cut the snapshot" "--abi-input examples/abi_guard/dep/point.h" "--//examples/abi_guard:lib_channel=dev"; do
    grep -qF -- "$want" "$out/3.out" || { cat "$out/3.out" >&2; fail "message lacks '$want'"; }
done
# The log names each spawn's mnemonic: the guard ran, no link did.
grep -q '"mnemonic": "SnapshotAbiCheck"' "$out/exec.json" || fail "no SnapshotAbiCheck in the execution log"
if grep -q '"mnemonic": "CppLink"' "$out/exec.json"; then fail "a link action ran"; fi
echo "  layout 2, with the guard:     build stopped before linking:"
sed -n '/ABI drift/,/from source/p' "$out/3.out" | sed 's/^/    /'
