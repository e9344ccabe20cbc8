#!/usr/bin/env bash
# End-to-end test of a consumer workspace of rocpack (e2e/bazel-workspace in
# WORKSPACE mode, e2e/bazel-bzlmod in bzlmod mode): every rule with its own
# names, per-library channels in one invocation, the missing-snapshot
# message and the fix it prints (run for real in a copy).
#
#   tests/bazel/consumer.sh e2e/bazel-workspace [BAZEL FLAG...]
#
# Environment:
#   CC_RULES=0     skip what needs native cc rules (Bazel 7 in WORKSPACE mode
#                  offline has no rules_java toolchains): hello, the fix run.
#   SNAPCTL_BIN    snapctl for running the printed fix (default: the
#                  workspace's rocpack checkout target/{debug,release}).
# Flags are passed to every bazel build/test/run (e.g. helper labels,
# --noenable_bzlmod, --config=debian7).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WS="$(cd "$1" && pwd)"; shift
F=("$@")
CC_RULES="${CC_RULES:-1}"
export LC_ALL=C
T="$(mktemp -d /tmp/rocpack-consumer.XXXXXX)"
log() { printf '\n==> [%s] %s\n' "$(basename "$WS")" "$*" >&2; }
die() { printf 'FAILED: [%s] %s\n' "$(basename "$WS")" "$*" >&2; exit 1; }
cleanup() {
    local rc=$?
    (cd "$WS" && bazel shutdown >/dev/null 2>&1) || true
    [ -d "$T/copy" ] && (cd "$T/copy" && bazel shutdown >/dev/null 2>&1) || true
    rm -rf "$T"
    exit $rc
}
trap cleanup EXIT
cd "$WS"
commit_of() { # LIB CHANNEL_DIR VERSION
    awk -v l="$1" '$1 == l":" {print $2; exit}' "libs/$1/snapshots/$2/$3/metadata.txt"
}

if [ "$CC_RULES" = 1 ]; then
    TARGETS=(//...)
else
    TARGETS=(//fx/... //wheel/... //libs/fooccl:stable_checksums_test //libs/barccl:stable_checksums_test
        //libs/fooccl:fooccl_stable_rocm64_blob //libs/barccl:barccl_last_stable_rocm70_blob)
fi
log "bazel build + test ${TARGETS[*]} (${F[*]})"
bazel build "${F[@]}" "${TARGETS[@]}"
bazel test "${F[@]}" "${TARGETS[@]}"
BIN="$(bazel info "${F[@]}" bazel-bin 2>/dev/null)"

log "a changed PATH reruns no cargo build (issue 24: the cargo action took the shell's environment)"
mkdir -p "$T/otherbin"
PATH="$T/otherbin:$PATH" bazel build "${F[@]}" --execution_log_json_file="$T/path.json" "${TARGETS[@]}"
if grep -q '"CargoBuild"' "$T/path.json"; then die "the cargo action reran after a PATH change"; fi
if grep -q '"commandArgs"' "$T/path.json"; then
    grep -o '"mnemonic": *"[A-Za-z]*"' "$T/path.json" | sort | uniq -c >&2
    die "a PATH change reran actions (.bazelrc has --incompatible_strict_action_env)"
fi
echo "  rebuild with another PATH: nothing ran" >&2

log "kpack_split / kpack_packages / kpack_recombine: fx_lib with groups rdna3, rdna4"
for p in fx_lib_generic fx_lib_rdna3 fx_lib_rdna4 fx_lib_rdna4_only; do
    [ -f "$BIN/fx/$p/artifact_manifest.txt" ] || die "$p has no artifact_manifest.txt"
done
names() { (cd "$BIN/fx/$1" && find -L . -type f -name '*.kpack' | sed 's|.*/||' | sort | tr '\n' ' '); }
[ "$(names fx_lib_rdna3)" = "fx_lib_gfx1100.kpack fx_lib_gfx1101.kpack fx_lib_gfx1102.kpack " ] \
    || die "fx_lib_rdna3 packs: $(names fx_lib_rdna3)"
[ "$(names fx_lib_rdna4)" = "fx_lib_gfx1200.kpack fx_lib_gfx1201.kpack " ] || die "fx_lib_rdna4 packs: $(names fx_lib_rdna4)"
[ -z "$(names fx_lib_generic)" ] || die "fx_lib_generic holds packs: $(names fx_lib_generic)"
diff <(cd "$BIN/fx/fx_lib_rdna4" && find -L . -type f -print0 | sort -z | xargs -0 sha256sum) \
     <(cd "$BIN/fx/fx_lib_rdna4_only" && find -L . -type f -print0 | sort -z | xargs -0 sha256sum) \
    || die "kpack_recombine(group = rdna4) differs from kpack_packages' fx_lib_rdna4"
echo "  fx_lib_generic, fx_lib_rdna3 (3 packs), fx_lib_rdna4 (2 packs) = fx_lib_rdna4_only" >&2

log "kpack_wheel_split: host + device + family wheels of fxwheel"
wheels="$(cd "$BIN/wheel/fxwheel_split.wheels" && ls | sort | tr '\n' ' ')"
echo "  $wheels" >&2
for w in fxwheel-1.0- fxwheel_device_gfx1100- fxwheel_device_gfx1101- fxwheel_device_gfx1102- fxwheel_device_gfx906-; do
    case " $wheels" in *" $w"*) ;; *) die "no wheel $w* in: $wheels" ;; esac
done
case "$wheels" in *rdna3*) ;; *) die "no family wheel for group rdna3 in: $wheels" ;; esac
case "$wheels" in *rdna4*) die "a family wheel for rdna4, which the wheel has no target of: $wheels" ;; esac

log "stable_checksums_test of each library passes; snapshot blobs verified"
for lib in fooccl barccl; do
    [ -f "$BIN/libs/$lib/stable_checksums/stable_checksums.bzl" ] || [ "$CC_RULES" = 0 ] || die "$lib: no generated stable_checksums.bzl"
done
cmp "$BIN/libs/fooccl/fooccl_stable_rocm64_blob/libfooccl.a" \
    "libs/fooccl/store/cas/sha256/$(awk '/sha256:/ {print $2; exit}' libs/fooccl/snapshots/stable/6.4/metadata.txt)" \
    || die "fooccl stable 6.4 blob differs from the store"

[ "$CC_RULES" = 1 ] || { log "consumer checks passed (no cc rules)"; exit 0; }

log "per-library channels: hello links fooccl and barccl"
run_hello() { # bazel args...
    bazel run "${F[@]}" "$@" //app:hello 2>"$T/run.err" || { cat "$T/run.err" >&2; die "bazel run $* failed"; }
}
check() { # "want fooccl line" "want barccl line" args...
    local wf="$1" wb="$2"; shift 2
    local out; out="$(run_hello "$@")"
    printf '  %-70s | %s\n' "$*" "$(echo "$out" | tr '\n' '|')" >&2
    [ "$(echo "$out" | sed -n 1p)" = "$wf" ] || die "[$*] fooccl: got '$(echo "$out" | sed -n 1p)', expected '$wf'"
    [ "$(echo "$out" | sed -n 2p)" = "$wb" ] || die "[$*] barccl: got '$(echo "$out" | sed -n 2p)', expected '$wb'"
}
check "fooccl channel=dev rocm=6.4 commit=source" "barccl channel=dev rocm=6.4 commit=source"
check "fooccl channel=stable rocm=6.4 commit=$(commit_of fooccl stable 6.4)" \
      "barccl channel=stable rocm=6.4 commit=$(commit_of barccl stable 6.4)" --config=stable --config=rocm64
# The done-means case: A from stable and B from dev in ONE invocation.
check "fooccl channel=stable rocm=7.0 commit=$(commit_of fooccl stable 7.0)" \
      "barccl channel=dev rocm=7.0 commit=source" \
      --//libs/fooccl:fooccl_channel=stable --//libs/barccl:barccl_channel=dev --config=rocm70
# A library's own flag wins over the global one; the other follows the global one.
check "fooccl channel=last_stable rocm=7.0 commit=$(commit_of fooccl last-stable 7.0)" \
      "barccl channel=stable rocm=7.0 commit=$(commit_of barccl stable 7.0)" \
      --config=stable --//libs/fooccl:fooccl_channel=last_stable --config=rocm70
check "fooccl channel=dev rocm=6.4 commit=source" \
      "barccl channel=stable rocm=6.4 commit=$(commit_of barccl stable 6.4)" --config=barccl_stable
[ "$(commit_of fooccl stable 7.0)" != "$(commit_of barccl stable 7.0)" ] || die "both libraries have the same commit"
bazel build "${F[@]}" --//libs/fooccl:fooccl_channel=stable --//libs/barccl:barccl_channel=dev --config=rocm70 //app:hello
echo "  one 'bazel build' with fooccl stable + barccl dev: OK" >&2

log "missing snapshot: the message names this library's flags, store, artifact, --prefix and update target"
if bazel build "${F[@]}" --//libs/fooccl:fooccl_channel=stable --config=rocm71 //app:hello >"$T/missing.out" 2>&1; then
    die "fooccl stable ROCm 7.1 built without a snapshot"
fi
sed -n '/Error in fail/,/checksums file/p' "$T/missing.out" >&2
for want in "no stable snapshot of fooccl for ROCm 7.1" "versions with a stable snapshot: 6.4, 7.0" \
    "--//libs/fooccl:fooccl_channel=stable" "--@rocpack//rules/bazel:snapshot_channel=stable" \
    "--@rocpack//rules/bazel:rocm_version=7.1" \
    "snapctl create --snapshots-root libs/fooccl/snapshots --store libs/fooccl/store --version 7.1 --artifact <path to libfooccl.a> --prefix FOOCCL" \
    "bazel run //libs/fooccl:stable_checksums.update"; do
    grep -qF -- "$want" "$T/missing.out" || die "message lacks: $want"
done
if sed -n '/Error in fail/,/checksums file/p' "$T/missing.out" | grep -qi rcclx; then
    die "the message for fooccl mentions rcclx"
fi

log "the printed fix works: run its snapctl create + update target in a copy, then build"
snapctl="${SNAPCTL_BIN:-}"
if [ -z "$snapctl" ]; then
    for c in "$ROOT/target/debug/snapctl" "$ROOT/target/release/snapctl" "$ROOT/rules/bazel/prebuilt/snapctl"; do
        [ -x "$c" ] && { snapctl="$c"; break; }
    done
fi
[ -x "$snapctl" ] || die "no snapctl binary to run the fix (set SNAPCTL_BIN)"
C="$T/copy"
mkdir -p "$C"
# Dereferenced (e2e/bazel-bzlmod's packages are links), without Bazel's links.
tar -C "$WS" --exclude='./bazel-*' --exclude=./user.bazelrc -chf - . | tar -C "$C" -xf -
# The copy lives elsewhere: point it at this rocpack checkout (absolute).
sed -i "s|path = \"../..\"|path = \"$ROOT\"|" "$C"/WORKSPACE "$C"/MODULE.bazel 2>/dev/null || true
sed -i "s|=../../rules/|=$ROOT/rules/|" "$C/.bazelrc"
cmd="$(grep -o 'snapctl create --snapshots-root [^[]*' "$T/missing.out" | head -1)"
lib_a="$T/libfooccl.a"
gcc -c -O2 -fPIC -Ilibs/fooccl/include -DFOOCCL_ROCM_VERSION=7.1 -DFOOCCL_COMMIT=fix71 libs/fooccl/src/fooccl.c -o "$T/fooccl.o"
ar rcsD "$lib_a" "$T/fooccl.o"
cmd="${cmd/<path to libfooccl.a>/$lib_a}"
echo "  running: ${cmd/snapctl/$snapctl} --header libs/fooccl/include/fooccl.h --commit fooccl=fix71" >&2
(cd "$C" && eval "\"$snapctl\" ${cmd#snapctl }" --header libs/fooccl/include/fooccl.h --commit fooccl=fix71)
grep -q '^prefix *= *FOOCCL' "$C/libs/fooccl/snapshots/snapctl.conf" || { cat "$C/libs/fooccl/snapshots/snapctl.conf" >&2; die "snapctl.conf lost the FOOCCL prefix"; }
upd="$(grep -o 'bazel run //libs/fooccl:stable_checksums.update' "$T/missing.out" | head -1)"
(cd "$C" && bazel run "${F[@]}" "${upd#bazel run }")
grep -q '^FOOCCL_STABLE_CHECKSUMS' "$C/libs/fooccl/stable_checksums.bzl" || die "regenerated stable_checksums.bzl lost the FOOCCL_ names"
out="$(cd "$C" && bazel run "${F[@]}" --//libs/fooccl:fooccl_channel=stable --config=rocm71 //app:hello 2>"$T/run.err")" \
    || { cat "$T/run.err" >&2; die "build after the fix failed"; }
echo "  $out" | head -1 >&2
[ "$(echo "$out" | sed -n 1p)" = "fooccl channel=stable rocm=7.1 commit=fix71" ] || die "after the fix: $out"
(cd "$C" && bazel test "${F[@]}" //libs/fooccl:stable_checksums_test)
(cd "$C" && bazel shutdown >/dev/null 2>&1) || true

log "consumer checks passed"
