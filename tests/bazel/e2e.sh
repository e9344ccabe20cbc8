#!/usr/bin/env bash
# End-to-end tests of the Bazel rules with a real Bazel (Debian's 4.2.3, or
# whatever `bazel` is on PATH). Run by tests/ci/50-bazel.sh; can be run by
# hand from any directory:
#
#   tests/bazel/e2e.sh                      # helpers from target/release (cargo build --release -p kpack -p snapctl),
#                                           # installed into rules/bazel/prebuilt for --config=prebuilt
#   HELPER_FLAGS="--//rules/bazel:kpack=... --//rules/bazel:snapctl=..." tests/bazel/e2e.sh
#
# Never modifies the checkout: edits happen in a temporary copy. Every Bazel
# server it starts is shut down at the end, and so is nginx.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export LC_ALL=C

KPACK_BIN="${KPACK_BIN:-$ROOT/target/release/kpack}"
SNAPCTL_BIN="${SNAPCTL_BIN:-$ROOT/target/release/snapctl}"
read -r -a HELPER <<< "${HELPER_FLAGS:---config=prebuilt}"
# Profile of the cargo_binary check (CI passes dev: its target/debug is warm).
CARGO_PROFILE="${CARGO_PROFILE:-release}"
T="$(mktemp -d /tmp/rocpack-bazel-e2e.XXXXXX)"
BASES=()
NGINX_PID=""

log() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }
cleanup() {
    local rc=$?
    [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null || true
    for b in "${BASES[@]}"; do bazel --output_base="$b" shutdown >/dev/null 2>&1 || true; done
    for d in "$T"/ws "$T"/consumer; do [ -d "$d" ] && (cd "$d" && bazel shutdown >/dev/null 2>&1) || true; done
    bazel shutdown >/dev/null 2>&1 || true
    chmod -R u+w "$T" 2>/dev/null || true
    rm -rf "$T"
    exit $rc
}
trap cleanup EXIT

# Count spawns in an --execution_log_json_file log (concatenated JSON objects).
spawns() { grep -c '"commandArgs"' "$1" || true; }
cache_hits() { grep -c '"remoteCacheHit": true' "$1" || true; }
# "mnemonic runner" per spawn.
spawn_list() { awk -F'"' '/"mnemonic":/ {m=$4} /"runner":/ {print m, $4}' "$1"; }
# sha256 of every file under the given directories, paths relative to $1's parent.
tree_sums() {
    local base="$1"; shift
    (cd "$base" && find -L "$@" -type f -print0 | sort -z | xargs -0 sha256sum)
}

DIGEST_ITEMS=(
    examples/kpack/blas_lib_generic examples/kpack/blas_lib_gfx110X examples/kpack/blas_lib_gfx115X
    examples/kpack/blas_lib_gfx120X examples/kpack/split_gfx110X-build.split examples/kpack/split_gfx1151-build.split
    examples/kpack/split_gfx120X-build.split examples/rcclx/stable_checksums/stable_checksums.bzl
    examples/rcclx/rcclx_stable_rocm64_blob examples/rcclx/rcclx_last_stable_rocm70_blob
)

if [ "${HELPER[*]}" = "--config=prebuilt" ]; then
    rules/bazel/prebuilt/install.sh "$KPACK_BIN" "$SNAPCTL_BIN"
fi

# ---------------------------------------------------------------------------
log "bazel build //... && bazel test //...  (helpers: ${HELPER[*]})"
bazel build "${HELPER[@]}" //...
bazel test "${HELPER[@]}" //...
BIN="$(bazel info "${HELPER[@]}" bazel-bin 2>/dev/null)"

log "caching: a second build with no change executes 0 actions"
bazel build "${HELPER[@]}" --execution_log_json_file="$T/noop.json" //...
n="$(spawns "$T/noop.json")"
[ "$n" = 0 ] || { spawn_list "$T/noop.json" >&2; die "no-change rebuild executed $n actions"; }
echo "  no-change rebuild: 0 actions" >&2


log "package contents"
bash examples/kpack/check_packages.sh "$BIN/examples/kpack/blas_lib_generic" "$BIN/examples/kpack/blas_lib_gfx110X"
for g in gfx115X gfx120X; do
    [ -f "$BIN/examples/kpack/blas_lib_$g/artifact_manifest.txt" ] || die "blas_lib_$g has no manifest"
done
[ -n "$(cd "$BIN/examples/kpack/blas_lib_gfx120X" && find -L . -type f -name blas_lib_gfx1200.kpack)" ] \
    || die "blas_lib_gfx120X has no gfx1200 .kpack"

# ---------------------------------------------------------------------------
log "hello per channel and ROCm version"
commit_of() { awk '/^ *rcclx: *[0-9a-f]+/ {print $2; exit}' "examples/rcclx/snapshots/$1/$2/metadata.txt"; }
check_hello() { # expected-line bazel-args...
    local want="$1"; shift
    local got
    got="$(bazel run "${HELPER[@]}" "$@" //examples/rcclx:hello 2>"$T/run.err")" || { cat "$T/run.err" >&2; die "bazel run $* failed"; }
    printf '  %-45s %s\n' "$*" "$got" >&2
    case "$got" in "$want"*) ;; *) die "hello with [$*]: got '$got', expected '$want...'" ;; esac
}
check_hello "rcclx channel=dev rocm=6.4 commit=source"
check_hello "rcclx channel=dev rocm=7.0 commit=source" --config=rocm70
check_hello "rcclx channel=dev rocm=6.2 commit=source" --config=rcclx_dev --config=rocm62
# rcclx's own channel flag (made by the macro) wins over the global one.
check_hello "rcclx channel=last_stable rocm=6.4 commit=$(commit_of last-stable 6.4)" --config=rcclx_stable --//examples/rcclx:rcclx_channel=last_stable
for v in 6.2 6.4 7.0; do
    key="rocm${v/./}"
    check_hello "rcclx channel=stable rocm=$v commit=$(commit_of stable "$v")" --config=rcclx_stable "--config=$key"
    check_hello "rcclx channel=last_stable rocm=$v commit=$(commit_of last-stable "$v")" --config=rcclx_last_stable "--config=$key"
done
[ "$(commit_of stable 6.4)" != "$(commit_of last-stable 6.4)" ] || die "stable and last-stable 6.4 are the same commit"

log "a version without a snapshot fails at analysis time with the clear message"
if bazel build "${HELPER[@]}" --config=rcclx_stable --config=rocm71 //examples/rcclx:hello >"$T/missing.out" 2>&1; then
    die "build with --config=rocm71 succeeded"
fi
for want in "no stable snapshot of rcclx for ROCm 7.1" "versions with a stable snapshot: 6.2, 6.4, 7.0" \
    "snapctl create --snapshots-root examples/rcclx/snapshots --store examples/rcclx/store --version 7.1" \
    "bazel run //examples/rcclx:stable_checksums.update"; do
    grep -qF "$want" "$T/missing.out" || { cat "$T/missing.out" >&2; die "message lacks: $want"; }
done
grep -q "Analysis of target" "$T/missing.out" || die "not an analysis-time failure"
sed -n '/Error in fail/,/stable_checksums.update/p' "$T/missing.out" >&2

# ---------------------------------------------------------------------------
log "hermeticity: helper actions ran in linux-sandbox"
OB2="$T/ob2"; BASES+=("$OB2")
bazel --output_base="$OB2" build "${HELPER[@]}" --execution_log_json_file="$T/cold.json" //examples/...
spawn_list "$T/cold.json" | sort | uniq -c >&2
bad="$(spawn_list "$T/cold.json" | awk '$1 ~ /^(KpackSplit|KpackRecombine|SnapshotVerify|SnapctlGenChecksums)$/ && $2 != "linux-sandbox"')"
[ -z "$bad" ] || die "helper actions outside linux-sandbox: $bad"
spawn_list "$T/cold.json" > "$T/cold.list"
grep -q '^KpackSplit linux-sandbox' "$T/cold.list" || die "no sandboxed KpackSplit in the cold build"
BIN2="$(bazel --output_base="$OB2" info "${HELPER[@]}" bazel-bin 2>/dev/null)"

log "determinism: two output bases give byte-identical outputs"
tree_sums "$BIN" "${DIGEST_ITEMS[@]}" > "$T/sums1"
tree_sums "$BIN2" "${DIGEST_ITEMS[@]}" > "$T/sums2"
[ -s "$T/sums1" ] || die "no outputs to compare"
diff -u "$T/sums1" "$T/sums2" || die "outputs differ between output bases"
echo "  $(wc -l < "$T/sums1") files identical" >&2

log "hermeticity: no absolute paths in outputs"
OB1="$(bazel info output_base 2>/dev/null)"
for needle in "$ROOT" "$OB1" "$OB2" "$T" "/tmp/rocpack." "$HOME"; do
    if (cd "$BIN" && find -L "${DIGEST_ITEMS[@]}" -type f -print0 | xargs -0 grep -l -F -- "$needle"); then
        die "outputs contain the absolute path $needle"
    fi
done
echo "  none found" >&2

# ---------------------------------------------------------------------------
log "caching: clean output base + --disk_cache -> 100 % cache hits"
bazel --output_base="$OB2" clean
bazel --output_base="$OB2" build "${HELPER[@]}" --disk_cache="$T/dc" //examples/...
OB3="$T/ob3"; BASES+=("$OB3")
bazel --output_base="$OB3" build "${HELPER[@]}" --disk_cache="$T/dc" --execution_log_json_file="$T/disk.json" //examples/...
n="$(spawns "$T/disk.json")"; h="$(cache_hits "$T/disk.json")"
echo "  disk cache: $h of $n actions were cache hits" >&2
[ "$n" -gt 0 ] && [ "$n" = "$h" ] || { spawn_list "$T/disk.json" >&2; die "disk cache: $h/$n hits"; }
bazel --output_base="$OB3" shutdown

log "caching: the same against a real HTTP remote cache (nginx WebDAV on 127.0.0.1)"
if command -v nginx >/dev/null; then
    mkdir -p "$T/nginx/store" "$T/nginx/tmp" "$T/nginx/logs"
    # As root, nginx workers run as an unprivileged user: let them in.
    chmod 755 "$T" "$T/nginx"
    chmod 777 "$T/nginx/store" "$T/nginx/tmp"
    # Below the kernel's ephemeral range (32768 and up by default): a port
    # there is never handed to an outgoing connection before nginx binds it.
    port=$(( 10000 + RANDOM % 20000 ))
    cat > "$T/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $T/nginx/nginx.pid;
error_log $T/nginx/logs/error.log;
events { worker_connections 64; }
http {
    access_log $T/nginx/logs/access.log;
    client_body_temp_path $T/nginx/tmp;
    proxy_temp_path $T/nginx/tmp;
    fastcgi_temp_path $T/nginx/tmp;
    uwsgi_temp_path $T/nginx/tmp;
    scgi_temp_path $T/nginx/tmp;
    server {
        listen 127.0.0.1:$port;
        location / {
            root $T/nginx/store;
            dav_methods PUT;
            create_full_put_path on;
            client_max_body_size 0;
        }
    }
}
EOF
    nginx -c "$T/nginx/nginx.conf" -p "$T/nginx" &
    NGINX_PID=$!
    for _ in $(seq 50); do
        curl -s -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null && break
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
    RC=(--remote_cache="http://127.0.0.1:$port")
    bazel --output_base="$OB2" clean
    bazel --output_base="$OB2" build "${HELPER[@]}" "${RC[@]}" //examples/...
    uploaded="$(find "$T/nginx/store" -type f | wc -l)"
    [ "$uploaded" -gt 0 ] || die "nothing was uploaded to the remote cache"
    bazel --output_base="$OB2" clean
    bazel --output_base="$OB2" build "${HELPER[@]}" "${RC[@]}" --execution_log_json_file="$T/remote.json" //examples/...
    n="$(spawns "$T/remote.json")"; h="$(cache_hits "$T/remote.json")"
    echo "  remote cache ($uploaded blobs stored): $h of $n actions were cache hits" >&2
    [ "$n" -gt 0 ] && [ "$n" = "$h" ] || { spawn_list "$T/remote.json" >&2; die "remote cache: $h/$n hits"; }
    kill "$NGINX_PID"; wait "$NGINX_PID" 2>/dev/null || true; NGINX_PID=""
else
    die "nginx is not installed (tests/ci/50-bazel.sh installs it)"
fi
bazel --output_base="$OB2" shutdown

# ---------------------------------------------------------------------------
log "temporary copy of the workspace for edits"
W="$T/ws"
mkdir -p "$W"
tar -C "$ROOT" --exclude='./bazel-*' --exclude=./target --exclude=./.git --exclude=./buck-out --exclude=./tools/fuzz -cf - . | tar -C "$W" -xf -
cd "$W"

log "caching: changing one shard re-runs only the actions that depend on it"
bazel build "${HELPER[@]}" --disk_cache="$T/dc" //examples/...
f="$(find examples/kpack/shards/gfx1151-build -name 'TensileLibrary_lazy_gfx1151.dat')"
printf 'changed\n' >> "$f"
bazel build "${HELPER[@]}" --disk_cache="$T/dc" --execution_log_json_file="$T/shard.json" //examples/...
spawn_list "$T/shard.json" | awk '{print $1}' | sort | uniq -c | tee "$T/shard.counts" >&2
got="$(awk '{printf "%s=%s ", $2, $1}' "$T/shard.counts")"
# kpack_packages recombines every package in ONE action (issue 24: it was
# one full recombine per package, groups + 1 of them).
[ "$got" = "KpackRecombine=1 KpackSplit=1 " ] || die "after changing one shard: [$got], expected [KpackRecombine=1 KpackSplit=1]"
grep -q 'split_gfx1151-build' "$T/shard.json" || die "the re-run split is not the gfx1151 one"

log "kpack_split archs: a split that does not produce exactly the declared archs fails"
sed -i 's/"gfx1100", "gfx1101", "gfx1102"\]/"gfx1100", "gfx1101"]/' examples/kpack/BUILD.bazel
if bazel build "${HELPER[@]}" //examples/kpack:split_gfx110X-build >"$T/archs.out" 2>&1; then
    die "kpack_split accepted an undeclared arch"
fi
grep -q 'expected exactly' "$T/archs.out" || { tail -20 "$T/archs.out" >&2; die "no archs mismatch message"; }
grep -m1 'produced directories' "$T/archs.out" >&2 || true
sed -i 's/"gfx1100", "gfx1101"\]/"gfx1100", "gfx1101", "gfx1102"]/' examples/kpack/BUILD.bazel

log "staleness: stable_checksums_test fails after a metadata edit, passes after bazel run ...update"
bazel test "${HELPER[@]}" //examples/rcclx:stable_checksums_test
# Roll last-stable 7.0 back to what stable 7.0 is (a real, present blob).
cp examples/rcclx/snapshots/stable/7.0/metadata.txt examples/rcclx/snapshots/last-stable/7.0/metadata.txt
if bazel test "${HELPER[@]}" //examples/rcclx:stable_checksums_test >"$T/stale.out" 2>&1; then
    die "stable_checksums_test passed with a stale stable_checksums.bzl"
fi
grep -q 'bazel run //examples/rcclx:stable_checksums.update' "bazel-testlogs/examples/rcclx/stable_checksums_test/test.log" \
    || die "staleness failure does not name the update command"
grep -q '^[-+] *"7.0"' "bazel-testlogs/examples/rcclx/stable_checksums_test/test.log" || die "staleness failure shows no diff"
grep -A3 -- '^---' bazel-testlogs/examples/rcclx/stable_checksums_test/test.log >&2 || true
bazel run "${HELPER[@]}" //examples/rcclx:stable_checksums.update
bazel test "${HELPER[@]}" //examples/rcclx:stable_checksums_test
got="$(bazel run "${HELPER[@]}" --config=rcclx_last_stable --config=rocm70 //examples/rcclx:hello 2>/dev/null)"
case "$got" in *"commit=$(commit_of stable 7.0)"*) ;; *) die "after the rollback hello says: $got" ;; esac
echo "  after update, last-stable 7.0 = stable 7.0: $got" >&2

bazel shutdown
cd "$ROOT"

log "helper default: the toolchain builds kpack AND snapctl in ONE cargo invocation (profile $CARGO_PROFILE)"
# Regression (issue 13, bug 4): the helpers build in the exec configuration,
# which --action_env does not reach on Bazel 4.2. The cargo_target_dir flag
# and --host_action_env=ROCPACK_CARGO_TARGET_DIR both must reach cargo. Each
# run gets a fresh target dir whose profile directory links to the checkout's
# warm one; cargo writes .rustc_info.json into the target dir it really uses.
if [ "${HELPER[*]}" = "--config=prebuilt" ]; then
    pdir=release; [ "$CARGO_PROFILE" = dev ] && pdir=debug
    [ -d "$ROOT/target/$pdir" ] || die "no target/$pdir to reuse (cargo build -p kpack -p snapctl)"
    for how in flag env; do
        td="$T/cargo-td-$how"; mkdir -p "$td"; ln -s "$ROOT/target/$pdir" "$td/$pdir"
        if [ "$how" = flag ]; then tflag=(--//rules/bazel:cargo_target_dir="$td"); else tflag=(--host_action_env=ROCPACK_CARGO_TARGET_DIR="$td"); fi
        bazel build "${tflag[@]}" --//rules/bazel:cargo_profile="$CARGO_PROFILE" \
            --execution_log_json_file="$T/cargo-$how.json" //examples/kpack:blas_lib_gfx110X //examples/rcclx:stable_checksums
        spawn_list "$T/cargo-$how.json" > "$T/cargo.list"
        n="$(grep -c '^CargoBuild' "$T/cargo.list" || true)"
        [ "$n" = 1 ] || { cat "$T/cargo.list" >&2; die "$n CargoBuild actions for kpack + snapctl ($how), expected 1"; }
        [ -f "$td/.rustc_info.json" ] || die "cargo did not use the target dir given by $how (${tflag[*]})"
        echo "  ${tflag[*]%%=*}: one CargoBuild, in the given target dir" >&2
    done
    diff <(grep ' examples/kpack/blas_lib_gfx110X/' "$T/sums1") <(tree_sums "$BIN" examples/kpack/blas_lib_gfx110X) \
        || die "cargo-built helper gives other outputs"
    cmp "$BIN/examples/rcclx/stable_checksums/stable_checksums.bzl" examples/rcclx/stable_checksums.bzl \
        || die "cargo-built snapctl gives another stable_checksums.bzl"
    echo "  cargo-built kpack gives identical blas_lib_gfx110X, snapctl an identical stable_checksums.bzl" >&2
fi

# ---------------------------------------------------------------------------
log "release binaries: a consumer workspace's toolchain downloads kpack/snapctl pinned by sha256 (rocpack_register_toolchains(prebuilt = ...), file:// URL)"
REL="$T/release"
mkdir -p "$REL/stage"
cp "$KPACK_BIN" "$REL/stage/kpack"; cp "$SNAPCTL_BIN" "$REL/stage/snapctl"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$REL/stage" -czf "$REL/rocpack-0.1.0-x86_64-unknown-linux-gnu.tar.gz" kpack snapctl
sha="$(sha256sum "$REL/rocpack-0.1.0-x86_64-unknown-linux-gnu.tar.gz" | cut -c1-64)"
C="$T/consumer"
mkdir -p "$C/pkg" "$C/snap"
cp -R examples/kpack/shards examples/kpack/packaging-config.json "$C/pkg/"
write_consumer_ws() { # sha256
    cat > "$C/WORKSPACE" <<EOF
workspace(name = "consumer")
local_repository(name = "rocpack", path = "$ROOT")
load("@rocpack//rules/bazel:repositories.bzl", "rocpack_dependencies", "rocpack_register_toolchains")
# Toolchain resolution loads every registered toolchain, Bazel's Java ones
# too: without network those need the @rules_java stand-in.
rocpack_dependencies()
rocpack_register_toolchains(prebuilt = {
    "version": "0.1.0",
    "base_urls": ["file://$REL"],
    "sha256": {"x86_64-unknown-linux-gnu": "$1"},
})
load("@rocpack//rules/bazel:repositories.bzl", "rocpack_snapshot_blobs")
load("@rocpack//examples/rcclx:stable_checksums.bzl", "RCCLX_LAST_STABLE_CHECKSUMS", "RCCLX_STABLE_CHECKSUMS")
rocpack_snapshot_blobs(
    prefix = "rcclx_snapshots",
    store_url = "file://$ROOT/examples/rcclx/store",
    stable_checksums = RCCLX_STABLE_CHECKSUMS,
    last_stable_checksums = RCCLX_LAST_STABLE_CHECKSUMS,
)
EOF
}
write_consumer_ws "$sha"
cat > "$C/pkg/BUILD.bazel" <<'EOF'
load("@rocpack//rules/bazel:defs.bzl", "kpack_packages", "kpack_split")
SHARDS = {"gfx110X-build": "blas_lib_gfx110X-dgpu", "gfx1151-build": "blas_lib_gfx1151", "gfx120X-build": "blas_lib_gfx120X-all"}
[kpack_split(name = "split_" + s, srcs = glob(["shards/%s/%s/**" % (s, a)]), artifact_prefix = "blas_lib", shard = s, split_databases = ["rocblas"], symlinks = {"math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5": "librocblas.so.5.2"}) for s, a in SHARDS.items()]
kpack_packages(component = "blas_lib", config = "packaging-config.json", groups = ["gfx110X", "gfx115X", "gfx120X"], shards = [":split_" + s for s in SHARDS])
EOF
cat > "$C/snap/BUILD.bazel" <<'EOF'
load("@rocpack//examples/rcclx:stable_checksums.bzl", "RCCLX_STABLE_CHECKSUMS")
load("@rocpack//rules/bazel:defs.bzl", "snapshot_blob")
# A blob of the remote store, fetched by http_file (sha256-pinned) and verified again by the rule.
snapshot_blob(name = "stable_rocm64", blob = "@rcclx_snapshots_stable_rocm64//file", sha256 = RCCLX_STABLE_CHECKSUMS["6.4"],
              out = "librcclx-dev.a", channel = "stable", version = "6.4")
EOF
cat > "$C/.bazelrc" <<'EOF'
build --nosandbox_debug
EOF
(cd "$C" && bazel build --execution_log_json_file="$T/consumer.json" //pkg:blas_lib_gfx110X)
! grep -q '"CargoBuild"' "$T/consumer.json" || die "the consumer ran cargo although its toolchain is prebuilt"
CBIN="$(cd "$C" && bazel info bazel-bin 2>/dev/null)"
diff <(cd "$CBIN/pkg/blas_lib_gfx110X" && find -L . -type f -print0 | sort -z | xargs -0 sha256sum) \
     <(cd "$BIN/examples/kpack/blas_lib_gfx110X" && find -L . -type f -print0 | sort -z | xargs -0 sha256sum) \
    || die "consumer package differs"
echo "  consumer build with the prebuilt toolchain (no cargo): identical blas_lib_gfx110X" >&2
(cd "$C" && bazel build //snap:stable_rocm64)
cmp "$(cd "$C" && bazel info bazel-bin 2>/dev/null)/snap/stable_rocm64/librcclx-dev.a" \
    "examples/rcclx/store/cas/sha256/$(awk '/sha256:/ {print $2; exit}' examples/rcclx/snapshots/stable/6.4/metadata.txt)" \
    || die "remote snapshot blob differs"
echo "  remote store (http_file, file:// URL): stable 6.4 blob fetched and verified" >&2
write_consumer_ws "$(printf '0%.0s' $(seq 63))1"
if (cd "$C" && bazel build //pkg:blas_lib_gfx110X >"$T/badsha.out" 2>&1); then
    die "a wrong sha256 pin was accepted"
fi
grep -qi 'checksum' "$T/badsha.out" || { tail -5 "$T/badsha.out" >&2; die "wrong pin failed without a checksum error"; }
echo "  wrong sha256 pin rejected" >&2
(cd "$C" && bazel shutdown)

log "bazel e2e: all checks passed"
