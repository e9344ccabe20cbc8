#!/usr/bin/env bash
# An interrupted from-source helper build must not throw away what cargo
# finished (issue 24 item 3). Used by tests/bazel/vendored.sh (Bazel) and
# e2e/buck2/run.sh (Buck2) on their consumer projects:
#
#   e2e/interrupted-build.sh TARGET_DIR MANIFEST SEED -- BUILD COMMAND...
#
# TARGET_DIR  the cargo target dir the rules' cargo action uses (the default
#             one: it must not exist yet; it is created and seeded here)
# MANIFEST    the Cargo.toml that action builds (absolute)
# SEED        a cargo target dir holding a dev `cargo build -p kpack -p
#             snapctl` of the same sources: its crates.io crates are copied
#             into TARGET_DIR (they are fresh there), so only the rocpack
#             crates compile, not a 20-minute cold build
# BUILD...    the build-system command that runs the cargo action (dev profile)
#
# Runs BUILD in the background until cargo has finished at least one crate,
# kills that cargo process and its compilers at once (kill -9, as a crash
# would), checks the build failed and TARGET_DIR is still there, runs BUILD
# again and checks it succeeds, compiles at least one crate, recompiles none
# of those finished before the kill, and leaves kpack and snapctl in
# TARGET_DIR/debug. Prints what it counted. Exit 0 ok, 1 a check failed.
set -euo pipefail
TD="$1" MANIFEST="$2" SEED="$3"; shift 3
[ "$1" = -- ] || { echo "usage: $0 TARGET_DIR MANIFEST SEED -- BUILD..." >&2; exit 2; }
shift
die() { printf 'FAILED: [interrupted build] %s\n' "$*" >&2; exit 1; }
export LC_ALL=C
W="$(mktemp -d /tmp/rocpack-interrupt.XXXXXX)"
bpid=""
trap '[ -z "$bpid" ] || kill "$bpid" 2>/dev/null || true; rm -rf "$W"' EXIT

[ ! -e "$TD" ] || die "$TD exists before the first build"
# The workspace's own crates (package and target names, as cargo spells
# them in file names) are not seeded.
cargo metadata --offline --no-deps --format-version 1 --manifest-path "$MANIFEST" | python3 -c '
import json, sys
names = set()
for p in json.load(sys.stdin)["packages"]:
    names.add(p["name"])
    names.update(t["name"] for t in p["targets"])
print("\n".join(sorted(n.replace("-", "_") for n in names)))' > "$W/workspace"
[ -s "$W/workspace" ] || die "cargo metadata listed no workspace crate"
# unit NAME: the crate of a deps/, build/ or .fingerprint/ entry
# (lib<crate>-<16 hex>.rlib, <crate>-<16 hex>.d, <package>-<16 hex>/).
unit() { printf '%s\n' "$1" | sed -E 's|/.*||; s/^lib//; s/-[0-9a-f]{16}(\..*)?$//; s/-/_/g'; }
mkdir -p "$TD/debug"
for d in deps build .fingerprint; do
    mkdir -p "$TD/debug/$d"
    (cd "$SEED/debug/$d" && ls -A) | while IFS= read -r e; do
        grep -qxF -- "$(unit "$e")" "$W/workspace" || printf '%s\0' "$e"
    done | (cd "$SEED/debug/$d" && xargs -0 -r cp -a -t "$TD/debug/$d" 2>"$W/cp.err") \
        || { ! grep -v "cannot stat" "$W/cp.err" >&2 || die "copying the seed failed"; }
    # (an entry the seed's own cargo run removed meanwhile is not needed)
done
echo "    seeded $TD with the crates.io crates of $SEED ($(du -sh "$TD" | cut -f1))" >&2

# finished: units cargo completed (it writes their fingerprint file last).
finished() {
    (cd "$TD/debug/.fingerprint" 2>/dev/null || exit 0
     for f in */lib-* */bin-* */run-build-script-* */build-script-build-script-build; do
         [ -f "$f" ] && [ "${f%.json}" = "$f" ] && echo "$f"
     done) | sort
}
# our_cargo: the pid of the cargo process building MANIFEST (a relative
# --manifest-path is resolved from that process's working directory).
our_cargo() {
    local pid m
    for pid in $(pgrep -x cargo || true); do
        m="$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | sed -n '/^--manifest-path$/{n;p;q}')" || continue
        [ -n "$m" ] || continue
        case "$m" in /*) ;; *) m="/proc/$pid/cwd/$m" ;; esac
        [ "$(readlink -f "$m" 2>/dev/null)" = "$MANIFEST" ] && { echo "$pid"; return 0; }
    done
    return 0
}

finished > "$W/seed"
"$@" > "$W/first.log" 2>&1 &
bpid=$!
cpid=""
for _ in $(seq 3000); do
    cpid="$(our_cargo)"
    [ -n "$cpid" ] && [ -n "$(comm -13 "$W/seed" <(finished))" ] && break
    kill -0 "$bpid" 2>/dev/null || break
    sleep 0.1
done
[ -n "$cpid" ] && kill -0 "$cpid" 2>/dev/null || { tail -30 "$W/first.log" >&2; die "no cargo process to interrupt (the build ended first)"; }
kids="$(pgrep -P "$cpid" | tr '\n' ' ' || true)"
# shellcheck disable=SC2086 # one pid per word
kill -9 "$cpid" $kids 2>/dev/null || true
if wait "$bpid"; then bpid=""; die "the build survived kill -9 of its cargo process"; fi
bpid=""
sleep 1
[ -d "$TD/debug" ] || die "the failed build removed its cargo target dir $TD"
finished > "$W/killed"
comm -13 "$W/seed" "$W/killed" > "$W/before"
k="$(wc -l < "$W/before")"
[ "$k" -ge 1 ] || die "no crate had finished when cargo was killed"
times() { (cd "$TD/debug/.fingerprint" && xargs -r stat -c '%n %Y %y' < "$W/before"); }
times > "$W/before.times"

"$@" > "$W/second.log" 2>&1 || { tail -30 "$W/second.log" >&2; die "the build after the interrupted one failed"; }
finished > "$W/after"
comm -13 "$W/killed" "$W/after" > "$W/rebuilt"
r="$(wc -l < "$W/rebuilt")"
times | diff "$W/before.times" - >&2 || die "the rebuild recompiled crates finished before the kill"
[ "$r" -ge 1 ] || die "the rebuild compiled nothing (was cargo killed after its last crate?)"
[ -x "$TD/debug/kpack" ] && [ -x "$TD/debug/snapctl" ] || die "no kpack/snapctl in $TD/debug"
echo "    kill -9 of cargo after $k of $((k + r)) crates: the rebuild compiled the other $r ($(sed 's|-[0-9a-f]\{16\}/.*||' "$W/rebuilt" | sort -u | tr '\n' ' ')), none of the $k again" >&2
# The seed covered every crates.io crate: only rocpack crates compiled.
cat "$W/before" "$W/rebuilt" | while IFS= read -r f; do
    grep -qxF -- "$(unit "$f")" "$W/workspace" || echo "    note: ${f%%/*} is not a rocpack crate and compiled too (not in the seed)" >&2
done
exit 0
