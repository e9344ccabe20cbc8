#!/usr/bin/env bash
# kill -9 at random points of `kpack split` and `kpack recombine`, into a new
# output directory and into an existing one that holds unrelated files.
#
# After every kill the output directory must hold the complete old state
# (nothing of the run) or the complete new state (byte-identical to a clean
# reference run); the one allowed in-between state is an interrupted commit
# into an existing directory whose durable commit list sits beside it, which
# the next run must roll forward. Then the same command is re-run: it must
# succeed (nothing was committed) or refuse because its outputs exist (the
# run had committed, possibly through the roll-forward), the directory must then
# equal the reference, and no staging directory or lock may be left.
#
# Two more modes abort split and recombine inside their commit into an
# existing directory (ROCPACK_FAULT_COMMIT_AFTER=k, k random), the window
# random kills rarely hit, so the roll-forward is exercised every time.
#
# Bounded: STRESS_SECONDS (default 100) of kill iterations, at most
# STRESS_ITERATIONS (default 1000). Prints counts; exits 1 on any broken
# invariant. KPACK selects the binary (default: target/release/kpack, built
# when missing). Fixtures: $ROCPACK_SHARED/fixtures (tests/ci/lib.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export ROCPACK_SHARED="${ROCPACK_SHARED:-$ROOT/target/rocpack-shared}"
FIX="$ROCPACK_SHARED/fixtures"
[ -d "$FIX/artifacts/gfx120X-build" ] || { echo "FAILED: fixtures not found in $FIX (source tests/ci/lib.sh first)" >&2; exit 1; }
KPACK="${KPACK:-$ROOT/target/release/kpack}"
if [ ! -x "$KPACK" ]; then
    (cd "$ROOT" && nice cargo build -q --release -p kpack)
fi
BUDGET="${STRESS_SECONDS:-100}"
MAX_ITER="${STRESS_ITERATIONS:-1000}"

W="$(mktemp -d "${TMPDIR:-/tmp}/kpack-stress.XXXXXX")"
trap 'rm -rf "$W"' EXIT

SPLIT_IN="$FIX/artifacts/gfx120X-build"
CONFIG="$FIX/artifacts/packaging-config.json"
DBS=(--split-databases rocblas hipblaslt aotriton)

# Commands, the output directory appended (run directly, so that $! is
# kpack itself and the kill reaches it, not a wrapper shell).
SPLIT=("$KPACK" split --batch-artifact-parent-dir "$SPLIT_IN" "${DBS[@]}" --output-dir)
RECOMBINE=("$KPACK" recombine --input-shards-dir "$W/shards" --config "$CONFIG" --output-dir)
split_cmd() { "${SPLIT[@]}" "$1"; }
recombine_cmd() { "${RECOMBINE[@]}" "$1"; }

# Content digest of a directory tree: every path, its type, file bytes and
# link targets; unrelated.txt (the pre-existing file) is left out.
tree_digest() {
    (cd "$1" && find . -mindepth 1 ! -name unrelated.txt -printf '%y %p %l\n' | LC_ALL=C sort \
        && find . -type f ! -name unrelated.txt -print0 | LC_ALL=C sort -z | xargs -0r sha256sum) \
        | sha256sum | cut -d' ' -f1
}
empty_digest() { local e="$W/.empty"; mkdir -p "$e"; tree_digest "$e"; }
now_ms() { date +%s%3N; }

# References (clean runs) and their durations.
for sh in gfx110X-build gfx1151-build gfx120X-build; do
    "$KPACK" split --batch-artifact-parent-dir "$FIX/artifacts/$sh" --output-dir "$W/shards/$sh" "${DBS[@]}" >/dev/null 2>&1
done
t0=$(now_ms); split_cmd "$W/ref-split" >/dev/null 2>&1; t_split=$(( $(now_ms) - t0 ))
t0=$(now_ms); recombine_cmd "$W/ref-rec" >/dev/null 2>&1; t_rec=$(( $(now_ms) - t0 ))
REF_SPLIT="$(tree_digest "$W/ref-split")"
N_SPLIT_OUT=$(find "$W/ref-split" -mindepth 1 -maxdepth 1 | wc -l)
REF_REC="$(tree_digest "$W/ref-rec")"
N_REC_OUT=$(find "$W/ref-rec" -mindepth 1 -maxdepth 1 | wc -l)
EMPTY="$(empty_digest)"
echo "kpack stress: reference split ${t_split} ms, recombine ${t_rec} ms; ${BUDGET}s budget"

iters=0; killed=0; finished=0; st_old=0; st_new=0; st_rolling=0; rerun_ok=0; rerun_refused=0; fails=0
declare -A per_mode=()
failed_at=()
fail() { echo "INVARIANT BROKEN (iteration $iters, $mode, kill after ${delay_ms} ms): $*" >&2; fails=$((fails + 1)); failed_at+=("$iters"); }

start=$(date +%s)
while [ $(( $(date +%s) - start )) -lt "$BUDGET" ] && [ "$iters" -lt "$MAX_ITER" ]; do
    mode_n=$(( iters % 6 ))
    case $mode_n in
        5) mode=recombine-commit-fault; cmd=recombine_cmd; ref=$REF_REC ;;
        4) mode=split-commit-fault; cmd=split_cmd; ref=$REF_SPLIT ;;
        0) mode=split-new; cmd=split_cmd; ref=$REF_SPLIT ;;
        1) mode=split-existing; cmd=split_cmd; ref=$REF_SPLIT ;;
        2) mode=recombine-new; cmd=recombine_cmd; ref=$REF_REC ;;
        3) mode=recombine-existing; cmd=recombine_cmd; ref=$REF_REC ;;
    esac
    per_mode[$mode]=$(( ${per_mode[$mode]:-0} + 1 ))
    it="$W/it$iters"; out="$it/out"; mkdir -p "$it"
    # split shares an existing directory with other files; recombine takes
    # an existing directory only when it is empty.
    if [[ $mode == split-existing || $mode == split-commit-fault ]]; then
        mkdir "$out"; echo kept >"$out/unrelated.txt"
    fi
    if [[ $mode == recombine-existing || $mode == recombine-commit-fault ]]; then mkdir "$out"; fi
    # Kill somewhere in [0, 1.2 x the run time), the run time being the
    # last uninterrupted run of this command (the machine's load varies);
    # every other iteration aims at the last half, where commits happen.
    if [[ $mode == split-* ]]; then t=$t_split; else t=$t_rec; fi
    if (( iters % 8 < 4 )); then
        delay_ms=$(( RANDOM * RANDOM % (t * 12 / 10 + 1) ))
    else
        delay_ms=$(( t / 2 + RANDOM * RANDOM % (t * 7 / 10 + 1) ))
    fi
    if [[ $mode == split-commit-fault ]]; then
        # The commit hook aborts (no cleanup, as kill -9) right after rename
        # k of the commit into the existing directory: the kill lands inside
        # the commit, which random timing rarely hits.
        k=$(( RANDOM % N_SPLIT_OUT ))
        ROCPACK_FAULT_COMMIT_AFTER=$k "${SPLIT[@]}" "$out" >/dev/null 2>&1 & pid=$!
    elif [[ $mode == recombine-commit-fault ]]; then
        k=$(( RANDOM % N_REC_OUT ))
        ROCPACK_FAULT_COMMIT_AFTER=$k "${RECOMBINE[@]}" "$out" >/dev/null 2>&1 & pid=$!
    elif [[ $mode == split-* ]]; then "${SPLIT[@]}" "$out" >/dev/null 2>&1 & pid=$!
    else "${RECOMBINE[@]}" "$out" >/dev/null 2>&1 & pid=$!; fi
    if [[ $mode != *-commit-fault ]]; then
        sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
        kill -9 "$pid" 2>/dev/null || true
    fi
    set +e; wait "$pid" 2>/dev/null; rc=$?; set -e
    # 137: the kill landed (134: the commit hook aborted); anything else:
    # the run had ended by itself.
    if [ $rc -eq 137 ] || [ $rc -eq 134 ]; then killed=$((killed + 1)); else finished=$((finished + 1)); fi

    # State right after the kill.
    if [ ! -e "$out" ]; then
        [[ $mode == *new ]] || fail "existing output directory vanished"
        st_old=$((st_old + 1))
    else
        d="$(tree_digest "$out")"
        if [ "$d" = "$EMPTY" ]; then st_old=$((st_old + 1))
        elif [ "$d" = "$ref" ]; then st_new=$((st_new + 1))
        elif [[ $mode == *-existing || $mode == *-commit-fault ]] \
            && compgen -G "$it/.out.partial-*/.commit" >/dev/null; then
            st_rolling=$((st_rolling + 1))
        else
            fail "partial output without a commit list: $(cd "$out" && ls | tr '\n' ' ')"
        fi
        if [[ $mode == split-existing || $mode == split-commit-fault ]] \
            && [ "$(cat "$out/unrelated.txt" 2>/dev/null)" != kept ]; then
            fail "unrelated file lost"
        fi
    fi

    # Re-run: succeeds, or refuses because the outputs exist; then complete.
    t0=$(now_ms)
    set +e; err="$("$cmd" "$out" 2>&1 >/dev/null)"; rc=$?; set -e
    if [ $rc -eq 0 ]; then
        d=$(( $(now_ms) - t0 ))
        if [[ $mode == split-* ]]; then t_split=$(( (t_split + d) / 2 )); else t_rec=$(( (t_rec + d) / 2 )); fi
    fi
    if [ $rc -eq 0 ]; then rerun_ok=$((rerun_ok + 1))
    elif [ $rc -eq 2 ] && [[ $err == *"already exists"* || $err == *"exists and is not empty"* ]]; then
        rerun_refused=$((rerun_refused + 1))
    else fail "re-run exit $rc: $err"
    fi
    [ -d "$out" ] && [ "$(tree_digest "$out")" = "$ref" ] || fail "output after the re-run differs from the reference"
    left="$(cd "$it" && ls -A | grep -v '^out$' || true)"
    [ -z "$left" ] || fail "leftovers beside the output: $left"
    rm -rf "$it"
    iters=$((iters + 1))
done

modes=""; for m in split-new split-existing split-commit-fault recombine-new recombine-existing recombine-commit-fault; do modes+=" $m ${per_mode[$m]:-0},"; done
echo "kpack stress: $iters kill -9 iterations (${modes%,}); killed mid-run $killed, finished before the kill $finished"
echo "kpack stress: state after the kill: old $st_old, new $st_new, interrupted commit (rolled forward by the re-run) $st_rolling"
echo "kpack stress: re-runs: completed $rerun_ok, refused as already complete $rerun_refused"
# One line per iteration outcome: an iteration fails when any of its checks broke.
failed_iters=$(printf '%s\n' "${failed_at[@]}" | sort -u | grep -c . || true)
echo "kpack-stress: $((iters - failed_iters)) passed, $failed_iters failed"
[ "$fails" -eq 0 ] || exit 1
