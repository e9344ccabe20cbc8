# Background fetches for tests/run-all.sh (sourced after tests/ci/lib.sh).
# What the later stages download (the network is idle while stage 10
# compiles) is fetched from the start of the run, each fetch a process
# group of its own:
#   crates       the crates of the workspace (stage 10) and tools/fuzz (20)
#   pypi         the wheels of tests/pypi/wheels.txt (stages 40, 45)
#   moto         moto[server] in its venv (stage 30)
#   sid-chroot   Debian sid + bazel-bootstrap in the chroot (stages 55, 65)
# Each leaves $ROCPACK_PREFETCH_DIR/NAME.pending while it runs and its
# output in NAME.log; a stage calls prefetch_wait NAME before it uses one.
# A fetch that fails is not an error here: the stage then fetches (or
# skips, loudly) as it does when run alone, and says why.
# A new stage with a download of its own: add a prefetch_job line below and
# a prefetch_wait in the stage.

export ROCPACK_PREFETCH_DIR="${ROCPACK_PREFETCH_DIR:-$ROOT/target/ci-prefetch}"
PREFETCH_PIDS=()

# prefetch_job NAME COMMAND: runs the bash COMMAND (with lib.sh's helpers)
# in the background, in a session of its own (prefetch_stop ends all of it),
# not a child of this shell (its CPU time is not any stage's).
prefetch_job() {
    local name="$1" f="$ROCPACK_PREFETCH_DIR/$1"
    mkdir -p "$ROCPACK_PREFETCH_DIR"
    touch "$f.pending"
    ( ROCPACK_DEFER_FIXTURES=1 setsid bash -c '
        . "$1/tests/ci/lib.sh"
        s=$SECONDS
        if ( eval "$3" ); then echo "$2: done in $((SECONDS - s)) s"; else echo "$2: FAILED after $((SECONDS - s)) s (the stage fetches it itself)"; fi
        rm -f "$ROCPACK_PREFETCH_DIR/$2.pending"' _ "$ROOT" "$name" "$2" >"$f.log" 2>&1 </dev/null &
      echo $! >"$f.pid" )
    PREFETCH_PIDS+=("$(cat "$f.pid")")
}

prefetch_start() {
    # Debris of an interrupted run: nobody is fetching any more.
    rm -f "$ROCPACK_PREFETCH_DIR"/*.pending
    prefetch_job crates 'cd "$ROOT"; cargo fetch --locked && cargo fetch --manifest-path tools/fuzz/Cargo.toml'
    prefetch_job pypi 'cd "$ROOT"; PY=python3; $PY -m pip --version >/dev/null 2>&1 || PY=/usr/bin/python3
        for line in $(grep -v "^#" "$PYPI_WHEELS_FILE" | grep . | tr " " "|"); do
            pypi_fetch "$PY" "${line//|/ }" "$ROCPACK_PREFETCH_DIR/pypi.one.log" || { cat "$ROCPACK_PREFETCH_DIR/pypi.one.log"; exit 1; }
        done'
    prefetch_job moto 'ensure_moto_venv'
    if [ "$(id -u)" -eq 0 ] && [ "${ROCPACK_BAZEL7:-1}" != 0 ]; then
        prefetch_job sid-chroot 'bash "$ROOT/tests/ci/55-bazel7.sh" --prepare'
    fi
}

# prefetch_stop: ends the fetches still running (a stage failed).
prefetch_stop() {
    local p i
    for p in ${PREFETCH_PIDS[@]+"${PREFETCH_PIDS[@]}"}; do kill -TERM -- "-$p" 2>/dev/null || true; done
    # Not our children: wait (10 s at most) until their groups are gone.
    for p in ${PREFETCH_PIDS[@]+"${PREFETCH_PIDS[@]}"}; do
        for i in $(seq 100); do kill -0 -- "-$p" 2>/dev/null || break; sleep 0.1; done
    done
    rm -f "$ROCPACK_PREFETCH_DIR"/*.pending
}
