#!/usr/bin/env bash
# Every fenced block of the snapshot and consumer docs accounted for, and the
# snapctl ones run as written:
#   * README's `snapctl`, `Bazel` and `Buck2` sections, docs/cli/snapctl.md,
#     docs/rules/snapshots.md, docs/rules/consumers.md, docs/buck2.md and
#     docs/remote-execution.md are cut into blocks by
#     tests/snapshot/doc-blocks.sh; a block with no marker (or a `not-run`
#     without a reason, a `consumer-run` or `buck2-run` no test runs) fails,
#     naming FILE:LINE;
#   * each `doc-run: snapctl` block runs, in page order, with `bash -euo
#     pipefail` in one work directory holding the files the page names
#     (librcclx-dev.a, rccl.h, liblib.a, dep/include/point.h,
#     rebuilt/liblib.a; ~/src/upstream: a git repository with comms/rcclx
#     at tag v2.28) and SNAPCTL first on PATH;
#   * `abi-step`, `consumer-file`, `consumer-run` and `source-step` blocks
#     are run by tests/bazel/vendored.sh, tests/bazel/abi-recovery.sh and
#     tests/bazel/source-consumer.sh (stages 50 and 55); `buck2-transcript`,
#     `buck2-run`, `buck2-step` and `buck2-consumer-file` ones by
#     tests/ci/60-buck2.sh, e2e/buck2/run.sh and tests/buck2/abi-recovery.sh
#     (stage 60): here only counted.
#
#   tests/snapshot/doc-commands.sh SNAPCTL
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SNAPCTL="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
export LC_ALL=C
T="$(mktemp -d /tmp/rocpack-doccmd.XXXXXX)"
trap 'rm -rf "$T"' EXIT
die() { printf 'FAILED: [doc-commands] %s\n' "$*" >&2; exit 1; }

B="$T/blocks"
for sec in '## `snapctl`' '## Bazel' '## Buck2'; do
    "$ROOT/tests/snapshot/doc-blocks.sh" "$B" "$ROOT/README.md" "$sec"
done
for f in docs/cli/snapctl.md docs/rules/snapshots.md docs/rules/consumers.md docs/buck2.md docs/remote-execution.md; do
    "$ROOT/tests/snapshot/doc-blocks.sh" "$B" "$ROOT/$f"
done
n="$(find "$B" -name '*.where' | wc -l)"
[ "$n" -ge 85 ] || die "only $n blocks in the snapshot and consumer docs"
declare -A count=()
bad=""
runs=()
for i in $(seq 1 "$n"); do
    m="$(cat "$B/$i.marker")" a="$(cat "$B/$i.args")" w="$(cat "$B/$i.where")"
    w="${w#"$ROOT"/}" page="${w%:*}"
    case "$m" in
        abi-step|consumer-file|source-step|buck2-step|buck2-consumer-file) ;;
        consumer-run) grep -q "^doc_run $page $a\$" "$ROOT/tests/bazel/vendored.sh" \
            || bad+="  $w: consumer-run: $a, but tests/bazel/vendored.sh has no 'doc_run $page $a'"$'\n' ;;
        buck2-run) grep -qE "buck2-run $a( |\$)" "$ROOT/tests/ci/60-buck2.sh" "$ROOT/e2e/buck2/run.sh" \
            || bad+="  $w: buck2-run: $a, but neither tests/ci/60-buck2.sh nor e2e/buck2/run.sh runs it"$'\n' ;;
        buck2-transcript) case "$a" in root|e2e) ;; *) bad+="  $w: buck2-transcript: '$a' (root or e2e)"$'\n' ;; esac ;;
        doc-run) [ "$a" = snapctl ] || bad+="  $w: doc-run of '$a' (only snapctl)"$'\n'; runs+=("$i") ;;
        not-run) [ -n "$a" ] || bad+="  $w: not-run without a reason"$'\n' ;;
        *) bad+="  $w: no marker (abi-step, consumer-file, consumer-run, source-step, buck2-transcript, buck2-run, buck2-step, buck2-consumer-file, doc-run or not-run: REASON)"$'\n' ;;
    esac
    count[${m:-none}]=$(( ${count[${m:-none}]:-0} + 1 ))
done
[ -z "$bad" ] || { printf '%s' "$bad" >&2; die "blocks no test accounts for"; }
echo "    $n blocks: $(for k in "${!count[@]}"; do printf '%s %s, ' "$k" "${count[$k]}"; done | sed 's/, $//')" >&2
[ "${#runs[@]}" -ge 2 ] || die "no doc-run blocks (README's snapctl section)"

# The files the pages name, and a HOME whose ~/src/upstream is a git repository.
W="$T/work"; mkdir -p "$W/dep/include" "$W/rebuilt" "$T/home/src"
cd "$W"
printf 'struct point { int x, y; };\n' > dep/include/point.h
printf 'int rccl_dummy(void);\n' > rccl.h
printf 'int lib(void) { return 1; }\n' > "$T/lib.c"
cc -c "$T/lib.c" -o "$T/lib.o" && ar rcsD liblib.a "$T/lib.o"
cp liblib.a librcclx-dev.a
printf 'int lib(void) { return 2; }\n' > "$T/lib.c"
cc -c "$T/lib.c" -o "$T/lib.o" && ar rcsD rebuilt/liblib.a "$T/lib.o"
U="$T/home/src/upstream"
mkdir -p "$U/comms/rcclx/src" "$U/comms/rcclx/tests"
printf 'int init(void) { return 0; }\n' > "$U/comms/rcclx/src/init.c"
printf 'test\n' > "$U/comms/rcclx/tests/t.txt"
git -C "$U" init -q
git -C "$U" add -A
git -C "$U" -c user.name=doc -c user.email=doc@example.com commit -qm "rcclx v2.28"
git -C "$U" tag v2.28
export HOME="$T/home" PATH="$(dirname "$SNAPCTL"):$PATH" SOURCE_DATE_EPOCH=1769508672
[ "$(command -v snapctl)" = "$SNAPCTL" ] || die "snapctl on PATH is $(command -v snapctl)"
for i in "${runs[@]}"; do
    w="$(cat "$B/$i.where")"; w="${w#"$ROOT"/}"
    if ! bash -euo pipefail "$B/$i.body" >"$T/run.$i.out" 2>&1; then
        tail -20 "$T/run.$i.out" >&2
        die "$w, as written, failed"
    fi
    echo "    ran $w: $(grep -c '^snapctl ' "$B/$i.body") snapctl commands" >&2
done
echo "doc-commands: ${#runs[@]} blocks run, every block accounted for" >&2
