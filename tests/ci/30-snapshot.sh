#!/usr/bin/env bash
# snapctl against real servers on loopback:
#  * s3:// — moto's S3-compatible server (PyPI `moto[server]`) on a free 127.0.0.1 port,
#    driving `cargo test -p snapctl --test s3 -- --ignored`;
#  * http:// — `python3 -m http.server` serving a local store, driven by the snapctl binary;
#  * tests/stress/snapshot.sh — concurrent creates, kill -9 at random points, ENOSPC on
#    a tiny tmpfs, and the moto server with an artifact rewritten mid-upload (~3 min).
# Servers are stopped on exit. (The in-process http test runs with `cargo test` in 10-rust.sh.)
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

prefetch_wait moto
ensure_moto_venv
VENV="$MOTO_VENV"

# A port for moto's server, below the kernel's ephemeral range: a port
# bound and released there could be handed to an outgoing connection
# before moto binds it.
free_port() {
    python3 -c 'import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    p = random.randrange(10000, max(lo, 12000))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    print(p)
    break'
}

PIDS=()
WORK="$(mktemp -d)"
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

wait_http() { # URL
    for _ in $(seq 1 100); do
        python3 - "$1" <<'PY' && return 0
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1], timeout=1)
except urllib.error.HTTPError:
    pass
except Exception:
    sys.exit(1)
PY
        sleep 0.2
    done
    die "server at $1 did not come up"
}

# --- s3:// -----------------------------------------------------------------
S3_PORT="$(free_port)"
log "starting moto S3 server on 127.0.0.1:$S3_PORT"
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT" >"$WORK/moto.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$S3_PORT/"
python3 - "$S3_PORT" <<'PY'
import sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/rocpack-snapshots", method="PUT")
assert urllib.request.urlopen(req, timeout=10).status == 200
PY

log "cargo test -p snapctl --test s3 -- --ignored"
AWS_ENDPOINT_URL="http://127.0.0.1:$S3_PORT" \
AWS_ACCESS_KEY_ID=rocpack AWS_SECRET_ACCESS_KEY=rocpack AWS_REGION=us-east-1 \
SNAPCTL_TEST_S3_URL="s3://rocpack-snapshots/ci" \
    cargo test -p snapctl --locked --test s3 -- --ignored 2>&1 | tee "$WORK/s3-test.log"
grep -q "test result: ok. 3 passed" "$WORK/s3-test.log" || die "s3 tests did not all run"

# --- http:// (python3 -m http.server) ---------------------------------------
ci_helpers
SNAPCTL="$SNAPCTL_BIN"
bash tests/snapshot/doc-commands.sh "$SNAPCTL" || die "the snapshot docs' commands (tests/snapshot/doc-commands.sh)"
mkdir -p "$WORK/h/root"
head -c 300000 /dev/urandom >"$WORK/h/lib.a"
printf '/* rccl.h */\n' >"$WORK/h/rccl.h"
"$SNAPCTL" create --snapshots-root "$WORK/h/root" --version 6.4 --artifact "$WORK/h/lib.a" --header "$WORK/h/rccl.h" >/dev/null
http_serve "$WORK/h/root/store" "$WORK/http.log" || die "the store's HTTP server did not start"
PIDS+=("$HTTP_PID")
log "HTTP server on 127.0.0.1:$HTTP_PORT serving the store"
wait_http "http://127.0.0.1:$HTTP_PORT/"
URL="http://127.0.0.1:$HTTP_PORT/"
"$SNAPCTL" verify --snapshots-root "$WORK/h/root" --store "$URL"
"$SNAPCTL" fetch --snapshots-root "$WORK/h/root" --store "$URL" --version 6.4 -o "$WORK/h/got.a"
cmp "$WORK/h/lib.a" "$WORK/h/got.a" || die "http fetch returned different bytes"
# A corrupted blob on the server is refused.
blob="$(ls "$WORK/h/root/store/cas/sha256/")"
chmod u+w "$WORK/h/root/store/cas/sha256/$blob"
printf 'corrupt' >"$WORK/h/root/store/cas/sha256/$blob"
set +e
"$SNAPCTL" fetch --snapshots-root "$WORK/h/root" --store "$URL" --version 6.4 -o "$WORK/h/bad.a"
rc=$?
set -e
[ "$rc" -eq 1 ] || die "fetch of a corrupted blob exited $rc, expected 1"
[ ! -e "$WORK/h/bad.a" ] || die "fetch wrote a corrupted blob"

# --- stress: races, kill -9, ENOSPC, S3 mid-upload changes --------------------
log "tests/stress/snapshot.sh (bounded to a few minutes)"
python3 - "$S3_PORT" <<'PY'
import sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/rocpack-stress", method="PUT")
assert urllib.request.urlopen(req, timeout=10).status == 200
PY
AWS_ENDPOINT_URL="http://127.0.0.1:$S3_PORT" \
AWS_ACCESS_KEY_ID=rocpack AWS_SECRET_ACCESS_KEY=rocpack AWS_REGION=us-east-1 \
SNAPCTL_STRESS_S3_URL="s3://rocpack-stress/stress" SNAPCTL="$SNAPCTL" \
    bash "$ROOT/tests/stress/snapshot.sh" 2>&1 | tee "$WORK/stress.log"
grep -q "snapshot stress: all invariants held" "$WORK/stress.log" || die "snapshot stress failed"
if [ "$(id -u)" -eq 0 ]; then
    grep -q "^enospc: .* failed with ENOSPC" "$WORK/stress.log" || die "ENOSPC stress did not run"
fi
grep -q "^s3: .* every one hashes to its name" "$WORK/stress.log" || die "S3 stress did not run"
echo "snapshot: 3 passed, 0 failed"
