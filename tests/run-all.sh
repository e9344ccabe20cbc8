#!/usr/bin/env bash
# The test command (README): installs what it needs, then runs every test.
# Each stage is a script in tests/ci/, run in name order; any failure stops
# the run with a non-zero exit, naming the stage.
#
# Budget: a cold run (fresh machine: empty ~/.cargo registry and target/,
# no /var/tmp caches) must finish in 40 minutes on a quiet 2-core machine.
# Every stage has a share of it (BUDGET below, seconds); each stage prints
# its wall time, CPU time (user+sys) and its share used, and a stage over
# its share prints a WARNING (the run goes on), so a slow new test is seen
# when it lands. A new stage needs a line in BUDGET (else it is warned
# about); keep the sum of the stages that do not run beside others
# (BESIDE below) within TOTAL_BUDGET.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_T0=$SECONDS
ROCPACK_DEFER_FIXTURES=1 . tests/ci/lib.sh
. tests/ci/prefetch.sh

TOTAL_BUDGET=2400
# Shares: the measured time of quiet cold runs 4 and 5 (README) plus a
# small margin; stages 30-50 run beside the fuzz stage and share the CPU
# with it.
declare -A BUDGET=(
    [05-fixtures]=100    # Debian packages (one apt-get run) + fixtures
    [10-rust]=880       # fmt, clippy, the dev build, cargo test
    [15-kpack-stress]=140  # before the fuzz stage: its kill iterations are bounded by time
    [20-fuzz]=900       # beside stages 30-65 (BESIDE, nice 10): fuzz build (ASan, release) + 11 targets x 20 s
    [30-snapshot]=155
    [40-pypi]=60
    [45-wheel]=65
    [47-python]=60     # pip wheel . from stage 10's helpers, venv installs, selector installs
    [50-bazel]=445      # cold 5: 442 s (the fuzz stage ends during it)
    [55-bazel7]=150     # the chroot itself is made in the background
    [60-buck2]=115
    [65-remote]=195
)

# Disk is the resource a CI machine runs short of first; say what there is
# before and after each stage so a "No space left on device" can be placed.
disk() { df -h --output=avail,target "$ROOT" /tmp 2>/dev/null | tail -n +2 | awk '{printf "%s free on %s; ", $1, $2}'; }
# cpu_now: CPU=the CPU seconds (user + sys) of the finished children so far
# (`times` in this shell: in a subshell it would count the subshell's).
CPU_F="$(mktemp)"
cpu_now() {
    times >"$CPU_F"
    CPU=$(tail -1 "$CPU_F" | awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] } printf "%.0f", n }')
}
log "disk: $(disk)"

# Every stage's Debian packages in one apt-get run (a no-op when installed;
# not root: each stage checks its own, and skips or fails as it did alone).
[ "$(id -u)" -ne 0 ] || need_pkgs "${CI_PKGS[@]}" "${FIXTURE_PKGS[@]}" "${WIN_FIXTURE_PKGS[@]}"
trap 'prefetch_stop; rm -f "$CPU_F"' EXIT
prefetch_start
log "background fetches started ($ROCPACK_PREFETCH_DIR/*.log): crates, PyPI wheels, moto, sid chroot"
ensure_fixtures
ensure_win_fixtures

over=()
summary=()
# Stages that run beside the ones after them: they need only the tree
# and stage 10's crates, share no state with later stages, and are CPU-bound
# while the later stages mostly wait on Bazel, Buck2 and servers (a quiet
# cold run left one core idle for most of stages 25-65). The kill stress,
# bounded by time, runs before it (stage 15) so its iterations stay as
# many (beside the fuzz build: 49 instead of 420). Such a stage starts
# when its turn comes, its output goes to its own log, printed when it ends;
# between stages the run checks on it, and a failure stops the run naming it.
declare -A BESIDE=([20-fuzz]=1)
declare -A bg_pid=() bg_log=() bg_time=()
# account NAME WALL CPU: the stage's line in the table, and its warning.
account() {
    local name="$1" wall="$2" c="$3" b="${BUDGET[$1]:-0}" share="no share set" tag="${4:-}"
    [ "$b" -eq 0 ] || share="$((wall * 100 / b)) % of its ${b} s share"
    log "stage $name ok${tag}: ${wall} s wall, ${c} s CPU; $share ($(disk)target $(du -sh "$ROOT/target" 2>/dev/null | cut -f1))"
    summary+=("$(printf '%-16s %5d s %5d s CPU  %s%s' "$name" "$wall" "$c" "$share" "$tag")")
    if [ "$b" -eq 0 ]; then
        over+=("$name: ${wall} s, no share in tests/run-all.sh's BUDGET")
    elif [ "$wall" -gt "$b" ]; then
        over+=("$name: ${wall} s, over its ${b} s share")
        printf '\n!!! WARNING: stage %s took %d s, over its %d s share of the %d-minute budget (tests/run-all.sh) !!!\n' \
            "$name" "$wall" "$b" $((TOTAL_BUDGET / 60)) >&2
    fi
}
# bg_reap [wait]: reports each beside stage that has ended (with "wait":
# waits for all of them); a failed one stops the run.
bg_reap() {
    local name rc wall c
    for name in "${!bg_pid[@]}"; do
        # The job writes "rc wall cpu" to its time file when it ends.
        while [ "${1:-}" = wait ] && [ ! -s "${bg_time[$name]}" ]; do
            kill -0 "${bg_pid[$name]}" 2>/dev/null || break
            sleep 1
        done
        if [ ! -s "${bg_time[$name]}" ]; then
            ! kill -0 "${bg_pid[$name]}" 2>/dev/null || continue
            sleep 1  # it may have ended between the two checks
            [ -s "${bg_time[$name]}" ] || { cat "${bg_log[$name]}" >&2; die "stage $name (tests/ci/$name.sh) was killed; its output is above"; }
        fi
        read -r rc wall c <"${bg_time[$name]}"
        log "stage $name (ran beside the stages after it): its output"
        cat "${bg_log[$name]}" >&2
        [ "$rc" -eq 0 ] || die "stage $name (tests/ci/$name.sh) failed (exit $rc) after $wall s; its output is above"
        account "$name" "$wall" "$c" " (beside)"
        rm -f "${bg_log[$name]}" "${bg_time[$name]}"
        unset "bg_pid[$name]"
    done
}
bg_stop() {
    local p
    for p in ${bg_pid[@]+"${bg_pid[@]}"}; do kill -TERM -- "-$p" 2>/dev/null || true; done
}
trap 'bg_stop; prefetch_stop; rm -f "$CPU_F"' EXIT
stages=(tests/ci/[0-9][0-9]-*.sh)
for s in "${stages[@]}"; do
    name="$(basename "$s" .sh)"
    bg_reap
    if [ -n "${BESIDE[$name]:-}" ]; then
        log "stage $name: started beside the stages after it (its output is printed when it ends)"
        bg_log[$name]="$(mktemp)" bg_time[$name]="$(mktemp)"
        # A session of its own (bg_stop ends all of it), not a child of
        # this shell (its CPU time is not that of the stage running when it
        # ends); it measures its own wall and CPU time. At nice 10: the
        # stages in the foreground come first (cold run 4: stage 50's
        # from-source cargo build took 251 s beside the fuzz build at equal
        # priority, 123 s alone), and it uses the CPU they leave idle.
        ( setsid nice -n 10 bash -c 'echo $$ >"$2.pid"; s=$SECONDS; bash "$1"; rc=$?; times >"$2.cpu"
            awk -v rc=$rc -v w=$((SECONDS - s)) '"'"'END { n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] } printf "%d %d %.0f\n", rc, w, n }'"'"' "$2.cpu" >"$2.tmp"
            rm -f "$2.cpu" "$2.pid"; mv "$2.tmp" "$2"' _ "$s" "${bg_time[$name]}" >"${bg_log[$name]}" 2>&1 </dev/null & )
        for _ in $(seq 50); do [ -s "${bg_time[$name]}.pid" ] && break; sleep 0.1; done
        bg_pid[$name]="$(cat "${bg_time[$name]}.pid" 2>/dev/null || echo 0)"
        continue
    fi
    log "stage $name"
    start=$SECONDS; cpu_now; c0=$CPU
    bash "$s" || die "stage $name (tests/ci/$name.sh) failed after $((SECONDS - start)) s"
    # The fixtures were built when lib.sh was sourced, before the first stage.
    [ "$name" != 05-fixtures ] || start=$RUN_T0
    cpu_now
    account "$name" $((SECONDS - start)) $((CPU - c0))
done
bg_reap wait
total=$((SECONDS - RUN_T0))
log "stage times (wall, CPU of the stage's processes, share of the budget):"
printf '    %s\n' "${summary[@]}" >&2
printf '    %-16s %5d s of the %d s budget\n' total "$total" "$TOTAL_BUDGET" >&2
for o in ${over[@]+"${over[@]}"}; do printf '!!! WARNING: %s\n' "$o" >&2; done
[ "$total" -le "$TOTAL_BUDGET" ] || printf '!!! WARNING: the run took %d s, over the %d s budget\n' "$total" "$TOTAL_BUDGET" >&2
log "all stages passed"
