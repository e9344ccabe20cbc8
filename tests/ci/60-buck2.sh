#!/usr/bin/env bash
# Buck2 for real: the examples and the consumer cell (e2e/buck2) built and
# tested by a real buck2 binary:
#  * ../shared/tools/buck2 when present, else `buck2` on PATH, else the stage
#    is skipped with a loud message (users install buck2 from its releases);
#  * a cold `buck2 build //...` (fresh daemon and buck-out; the helpers come
#    from the cargo target dir shared with stage 10, so they are not rebuilt);
#  * `buck2 test //...`; every command of the console blocks of README's
#    Buck2 section and docs/buck2.md (marked `buck2-transcript: root`), with
#    its output compared (runs exactly, builds and tests line by line;
#    tests/buck2/transcript.sh);
#  * source snapshots per channel and their freshness test (naming the edited
#    file); the ABI-drift guard with a real break (examples/abi_guard/check-buck2.sh);
#  * the missing-snapshot failure; stable_checksums `.update` and its test
#    (stale file caught, `.update` restores it byte for byte);
#  * kpack outputs byte-identical to the kpack CLI on the same inputs, and to
#    Bazel's (stage 50's bazel-bin/examples/kpack) when those are present;
#  * a no-change rebuild that runs nothing (`buck2 log what-ran` empty);
#  * the consumer cell e2e/buck2 (rocpack as an external cell), including a
#    group missing from its packaging config (rocpack's message) and its
#    helpers built from source in the default cargo target dir with cargo
#    killed mid-build (the rebuild keeps what cargo finished);
#  * time of a split through buck2 vs the helper alone.
# Every step prints its time.
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

BUCK2_BIN=""
if [ -x "$ROCPACK_SHARED_DIR/tools/buck2" ]; then
    BUCK2_BIN="$ROCPACK_SHARED_DIR/tools/buck2"
elif command -v buck2 >/dev/null; then
    BUCK2_BIN="$(command -v buck2)"
fi
if [ -z "$BUCK2_BIN" ]; then
    printf '\n%s\n%s\n%s\n\n' \
        '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!' \
        '!!! SKIPPED: no buck2 (../shared/tools/buck2 or buck2 on PATH).       !!!' \
        '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!' >&2
    exit 0
fi
need_pkgs gcc g++ libc6-dev binutils zstd

# One daemon and buck-out of its own (buck-out/rocpack-ci), so a developer's
# buck2 state is left alone; the helpers' cargo build shares the target dir.
ISO=rocpack-ci
CARGO_TD="${ROCPACK_CARGO_TARGET_DIR:-$ROOT/target}"
# dev (CI: stage 10 built most of it); release reuses a release build.
CARGO_PROFILE="${ROCPACK_CARGO_PROFILE:-dev}"
PROFILE_DIR=debug
[ "$CARGO_PROFILE" = dev ] || PROFILE_DIR="$CARGO_PROFILE"
CFG=(-c "rocpack.cargo_profile=$CARGO_PROFILE" -c "rocpack.cargo_target_dir=$CARGO_TD")
b2() { "$BUCK2_BIN" --isolation-dir "$ISO" "$@"; }
b2c() { local sub="$1"; shift; b2 "$sub" "${CFG[@]}" "$@"; }

WORK="$(mktemp -d /tmp/rocpack-buck2-ci.XXXXXX)"
CHECKSUMS=examples/rcclx/stable_checksums.bzl
cp "$CHECKSUMS" "$WORK/checksums.orig"
cleanup() {
    cmp -s "$WORK/checksums.orig" "$CHECKSUMS" || cp "$WORK/checksums.orig" "$CHECKSUMS"
    b2 kill >/dev/null 2>&1 || true
    [ -n "${E2E:-}" ] && (cd "$E2E" && "$BUCK2_BIN" --isolation-dir "$ISO" kill >/dev/null 2>&1 || true)
    rm -rf "$WORK"
}
trap cleanup EXIT

STEP_T0=0
step() { STEP_NAME="$*"; log "$*"; STEP_T0=$(date +%s.%N); }
done_step() { printf '    [%s: %.1f s]\n' "$STEP_NAME" "$(echo "$(date +%s.%N) - $STEP_T0" | bc)" >&2; }
need_pkgs bc

# run_logged NAME CMD...: stdout/stderr to $WORK/NAME.{out,err}; the tail of
# stderr is shown when it fails.
run_logged() {
    local n="$1"; shift
    if ! "$@" >"$WORK/$n.out" 2>"$WORK/$n.err"; then
        tail -40 "$WORK/$n.err" >&2
        return 1
    fi
}

step "helpers: cargo build -p kpack -p snapctl ($CARGO_PROFILE, target dir $CARGO_TD)"
# docs/buck2.md's block, as written (its `buck2-run: cargo-fetch`).
tests/snapshot/doc-run.sh docs/buck2.md buck2-run cargo-fetch >"$WORK/fetch.out" 2>&1 || { cat "$WORK/fetch.out" >&2; die "docs/buck2.md's cargo fetch"; }
CARGO_TARGET_DIR="$CARGO_TD" cargo build --locked -q --profile "$CARGO_PROFILE" -p kpack -p snapctl
KPACK="$CARGO_TD/$PROFILE_DIR/kpack"
done_step

step "cold buck2 build //... (new daemon, empty buck-out/$ISO)"
b2 kill >/dev/null 2>&1 || true
rm -rf "buck-out/$ISO"
run_logged build-cold b2c build //... || die "buck2 build //..."
grep -q "BUILD SUCCEEDED" "$WORK/build-cold.err" || die "no BUILD SUCCEEDED"
done_step

step "buck2 test //..."
run_logged test b2c test //... || die "buck2 test //..."
grep -E "^Tests finished|Pass [0-9]+" "$WORK/test.err" >&2 || true
grep -q "Fail 0" "$WORK/test.err" || die "buck2 test //... reported failures"
done_step

step "C consumer of librocm_kpack: examples/runtime on rocpack//:rocm_kpack{,_static} (cargo-built library)"
bash tests/ci/runtime-consumer.sh buck2 "$BUCK2_BIN" "$ISO" "${CFG[@]}" || die "runtime consumer"
done_step

step "the docs' Buck2 transcripts: README's and docs/buck2.md's console blocks, every command as written (tests/buck2/transcript.sh)"
# The blocks marked `<!-- buck2-transcript: root -->` (tests/snapshot/doc-blocks.sh):
# "$ buck2 ..." lines and their output; `buck2 run` stdout exactly, the
# other commands line by line. (docs/buck2.md's `e2e` ones run in the
# consumer project, e2e/buck2/run.sh.)
tests/snapshot/doc-blocks.sh "$WORK/tx" README.md '## Buck2'
tests/snapshot/doc-blocks.sh "$WORK/tx" docs/buck2.md
blocks=0 cmds=0
for k in $(tests/snapshot/doc-select.sh "$WORK/tx" buck2-transcript root); do
    i="$WORK/tx/$k"
    t=$SECONDS
    tests/buck2/transcript.sh "$BUCK2_BIN" "$ISO" "$i.body" "$(cat "$i.where")" "${CFG[@]}" || die "the docs' transcript at $(cat "$i.where")"
    blocks=$((blocks + 1)); cmds=$((cmds + $(grep -c '^\$ buck2 ' "$i.body")))
    printf '    %s: %d s\n' "$(cat "$i.where")" $((SECONDS - t)) >&2
done
[ "$blocks" -ge 8 ] && [ "$cmds" -ge 24 ] || die "only $blocks transcript blocks ($cmds commands) in README's Buck2 section and docs/buck2.md"
echo "    $blocks blocks, $cmds buck2 commands as written" >&2
done_step

step "source snapshots: examples/rcclx_source per channel (each channel dir a cell), rcl_check_test red on an unrecorded edit"
for pair in "rcl head:" "rcl 2:-m rcl_stable" "rcl 1:-m snapshot_last_stable"; do
    want="${pair%%:*}"; mods="${pair#*:}"
    # shellcheck disable=SC2086
    got="$(b2c run $mods //examples/rcclx_source:hello 2>"$WORK/src.err")" || { cat "$WORK/src.err" >&2; die "rcclx_source $mods"; }
    echo "  ${mods:-(default)} -> $got"
    [ "$got" = "$want" ] || die "rcclx_source ${mods:-(default)} printed '$got', expected '$want'"
done
b2c test //examples/rcclx_source:rcl_check_test >"$WORK/src.out" 2>&1 || { cat "$WORK/src.out" >&2; die "rcl_check_test on clean trees"; }
SRC_EDIT=examples/rcclx_source/snapshots/stable/examples/rcclx_source/rcl/rcl.c
cp "$SRC_EDIT" "$WORK/rcl.c.orig"
echo '/* unrecorded hotfix */' >>"$SRC_EDIT"
if b2c test //examples/rcclx_source:rcl_check_test >"$WORK/src.out" 2>&1; then
    cp "$WORK/rcl.c.orig" "$SRC_EDIT"; die "rcl_check_test passed with an unrecorded edit"
fi
cp "$WORK/rcl.c.orig" "$SRC_EDIT"
grep -q "edited without being recorded" "$WORK/src.out" || { cat "$WORK/src.out" >&2; die "rcl_check_test failed for another reason"; }
grep -q "changed examples/rcclx_source/rcl/rcl.c (content)" "$WORK/src.out" || { cat "$WORK/src.out" >&2; die "rcl_check_test does not name the edited file"; }
done_step

step "ABI-drift guard: examples/abi_guard with a real struct-layout break (check-buck2.sh)"
examples/abi_guard/check-buck2.sh "$BUCK2_BIN" --isolation-dir "$ISO" -- "${CFG[@]}" || die "examples/abi_guard/check-buck2.sh"

step "missing snapshot: -m rcclx_stable -m rocm71 fails at analysis with the fix"
if b2c build -m rcclx_stable -m rocm71 //examples/rcclx:hello >"$WORK/miss.out" 2>"$WORK/miss.err"; then
    die "a missing snapshot built"
fi
for want in "no stable snapshot of rcclx for ROCm 7.1" "snapctl create --snapshots-root examples/rcclx/snapshots" \
    "buck2 run //examples/rcclx:stable_checksums.update"; do
    grep -qF "$want" "$WORK/miss.err" || { cat "$WORK/miss.err" >&2; die "missing-snapshot message lacks: $want"; }
done
done_step

step "stable_checksums: .update, stale file caught by the test, .update restores it"
run_logged upd1 b2c run //examples/rcclx:stable_checksums.update || die ".update"
cmp "$WORK/checksums.orig" "$CHECKSUMS" || die ".update changed an up-to-date file"
# Stale as after a rotation: the first entry holds another snapshot's sha256
# (one that is in the store, so the package still loads and .update can run).
other="$(awk '/sha256:/ {print $2; exit}' examples/rcclx/snapshots/last-stable/6.4/metadata.txt)"
[ -n "$other" ] || die "no sha256 in last-stable/6.4/metadata.txt"
sed -i -E '0,/"[0-9a-f]{64}"/s//"'"$other"'"/' "$CHECKSUMS"
cmp -s "$WORK/checksums.orig" "$CHECKSUMS" && die "could not make the file stale"
if b2c test //examples/rcclx:stable_checksums_test >"$WORK/stale.out" 2>"$WORK/stale.err"; then
    die "stable_checksums_test passed on a stale file"
fi
# The fix it names is the .update target (absolute label), not a command
# with an internal buck-out path.
grep -qF "buck2 run //examples/rcclx:stable_checksums.update" "$WORK/stale.out" "$WORK/stale.err" \
    || { cat "$WORK/stale.out" "$WORK/stale.err" >&2; die "the stale-checksums failure does not name the .update target"; }
! grep -q "regenerate it with: snapctl" "$WORK/stale.out" "$WORK/stale.err" || die "the stale-checksums failure suggests snapctl with a buck-out path"
run_logged upd2 b2c run //examples/rcclx:stable_checksums.update || die ".update (stale)"
cmp "$WORK/checksums.orig" "$CHECKSUMS" || die ".update did not restore the file byte for byte"
run_logged fresh b2c test //examples/rcclx:stable_checksums_test || die "stable_checksums_test on the restored file"
done_step

step "kpack_wheel_split: --show-output names the wheel directory; [wheels] and [report] sub-targets; the selector sdist"
run_logged wheels b2c build //examples/wheel:fxpkg_wheels "//examples/wheel:fxpkg_wheels[report]" --show-full-output || die "buck2 build of the wheel split"
wdir="$(awk '$1 == "rocpack//examples/wheel:fxpkg_wheels" {print $2}' "$WORK/wheels.out")"
wrep="$(awk '$1 == "rocpack//examples/wheel:fxpkg_wheels[report]" {print $2}' "$WORK/wheels.out")"
[ -n "$wdir" ] && [ -d "$wdir" ] && ls "$wdir"/*.whl >/dev/null 2>&1 || { cat "$WORK/wheels.out" >&2; die "--show-output of fxpkg_wheels is not the wheel directory: '$wdir'"; }
[ -f "$wrep" ] || die "[report] is not the JSON report: '$wrep'"
[ -f "$wdir/fxpkg_device-1.0.tar.gz" ] || die "selector = True wrote no selector sdist: $(ls "$wdir")"
grep -q '"file": "fxpkg_device-1.0.tar.gz"' "$wrep" || die "the report does not name the selector"
done_step

step "kpack_packages: one kpack recombine for every package"
b2c build //examples/kpack:blas_lib_generic //examples/kpack:blas_lib_gfx110X //examples/kpack:blas_lib_gfx115X //examples/kpack:blas_lib_gfx120X \
    -m rcclx_last_stable -m rocm71 >/dev/null 2>&1 || die "build of the packages"
b2 log what-ran > "$WORK/pk-ran" 2>/dev/null || die "buck2 log what-ran"
# Count actions by their category "(kpack_recombine <id>)": the recombine's
# command line (a multi-line sh -c wrapper) names kpack_recombine again.
n="$(grep -c '(kpack_recombine ' "$WORK/pk-ran" || true)"
[ "$n" = 1 ] || { cat "$WORK/pk-ran" >&2; die "$n kpack recombine runs for the 4 packages of blas_lib, expected 1"; }
done_step

step "kpack outputs byte-identical to the kpack CLI"
# listing DIR: one line per entry (type, mode, symlink target, sha256).
listing() {
    (cd "$1" && find . -mindepth 1 -printf '%P %y %m %l\n' | LC_ALL=C sort
     find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)
}
declare -A SHARDS=([gfx110X-build]=blas_lib_gfx110X-dgpu [gfx1151-build]=blas_lib_gfx1151 [gfx120X-build]=blas_lib_gfx120X-all)
for shard in "${!SHARDS[@]}"; do
    TZ=UTC LC_ALL=C "$KPACK" split --artifact-dir "examples/kpack/shards/$shard/${SHARDS[$shard]}" \
        --output-dir "$WORK/cli/shards/$shard" --artifact-prefix blas_lib --split-databases rocblas >/dev/null \
        || die "kpack split $shard"
done
"$KPACK" recombine --input-shards-dir "$WORK/cli/shards" --config examples/kpack/packaging-config.json \
    --output-dir "$WORK/cli/out" >/dev/null || die "kpack recombine"
targets=()
for shard in "${!SHARDS[@]}"; do targets+=("//examples/kpack:split_$shard"); done
for g in generic gfx110X gfx115X gfx120X; do targets+=("//examples/kpack:blas_lib_$g"); done
run_logged outputs b2c build "${targets[@]}" --show-full-output || die "buck2 build of the kpack targets"
compared=0
while read -r target path; do
    name="${target##*:}"
    case "$name" in
        split_*) want="$WORK/cli/shards/${name#split_}" ;;
        *) want="$WORK/cli/out/$name" ;;
    esac
    [ -d "$want" ] || die "the CLI made no $want"
    diff <(listing "$want") <(listing "$path") >&2 || die "$target differs from the kpack CLI"
    compared=$((compared + 1))
done < <(grep '^rocpack//examples/kpack:' "$WORK/outputs.out")
[ "$compared" -eq 7 ] || die "compared $compared outputs, expected 7"
# Bazel's packages of the same example inputs, when stage 50 left them in
# this checkout's bazel-bin (it builds //examples/... in the default output
# base); otherwise say so: the CLI comparison above is then the only oracle.
bazel_compared=0
if [ -d bazel-bin/examples/kpack ]; then
    for g in generic gfx110X gfx115X gfx120X; do
        want="bazel-bin/examples/kpack/blas_lib_$g"
        [ -d "$want" ] || continue
        path="$(awk -v t="rocpack//examples/kpack:blas_lib_$g" '$1 == t {print $2}' "$WORK/outputs.out")"
        # Bazel makes every output 0555: compare bytes, types and links.
        diff <(listing "$want" | sed -E 's/^([^ ]+ [a-z]) [0-7]+ /\1 /') \
             <(listing "$path" | sed -E 's/^([^ ]+ [a-z]) [0-7]+ /\1 /') >&2 \
            || die "blas_lib_$g differs from Bazel's ($want)"
        bazel_compared=$((bazel_compared + 1))
    done
fi
if [ "$bazel_compared" -gt 0 ]; then
    printf '    %d packages byte-identical to Bazel'"'"'s (bazel-bin/examples/kpack)\n' "$bazel_compared" >&2
elif [ "${CI:-}" = true ]; then
    # In CI stage 50 has just built them: their absence is a failure.
    die "no Bazel outputs in bazel-bin/examples/kpack to compare with (stage 50 builds them)"
else
    printf '    no Bazel outputs in bazel-bin/examples/kpack: compared with the kpack CLI only\n' >&2
fi
done_step

step "no-change rebuild runs no action"
run_logged nochange1 b2c build //... || die "rebuild"
run_logged nochange2 b2c build //... || die "no-change rebuild"
what_ran() {
    local i
    for i in 1 2 3 4 5; do
        # The event log of the last command may still be being written.
        if b2 log what-ran >"$WORK/what-ran" 2>"$WORK/what-ran.err"; then return 0; fi
        sleep 1
    done
    cat "$WORK/what-ran.err" >&2; return 1
}
what_ran || die "buck2 log what-ran"
grep -q "nochange\|build //..." "$WORK/what-ran.err" || true
if [ -s "$WORK/what-ran" ]; then
    cat "$WORK/what-ran" >&2; die "the no-change rebuild ran actions"
fi
done_step

step "split through buck2 vs the helper alone (examples/kpack, 3 shards)"
# The helper alone: the three splits, warm page cache, best of 3.
best() { sort -n | head -1; }
t_cli=$(for r in 1 2 3; do
    rm -rf "$WORK/bench"
    s=$(date +%s.%N)
    for shard in "${!SHARDS[@]}"; do
        TZ=UTC "$KPACK" split --artifact-dir "examples/kpack/shards/$shard/${SHARDS[$shard]}" \
            --output-dir "$WORK/bench/$shard" --artifact-prefix blas_lib --split-databases rocblas >/dev/null
    done
    echo "$(date +%s.%N) - $s" | bc
done | best)
# Through buck2: the split targets in a configuration not built yet (a new
# ROCm version hash), so exactly the split actions run; warm daemon.
split_targets=()
for shard in "${!SHARDS[@]}"; do split_targets+=("//examples/kpack:split_$shard"); done
t_b2=$(for m in rocm62 rocm70 rocm71; do
    s=$(date +%s.%N)
    b2c build -m "$m" "${split_targets[@]}" >/dev/null 2>&1 || exit 1
    echo "$(date +%s.%N) - $s" | bc
done | best) || die "buck2 build of the split targets"
b2 log what-ran > "$WORK/split-ran" 2>/dev/null || true
printf '    kpack split alone: %.3f s; through buck2 (whole command, warm daemon): %.3f s; ratio %.2f\n' \
    "$t_cli" "$t_b2" "$(echo "$t_b2 / $t_cli" | bc -l)" >&2
done_step

if [ -d e2e/buck2 ]; then
    step "consumer cell e2e/buck2 (rocpack as an external cell)"
    E2E="$WORK/consumer"
    # Helpers from tools/release/make-prebuilt.sh (what the docs show first);
    # then from source in the default cargo target dir, seeded with the
    # crates.io crates of the dev build above, cargo killed mid-build.
    seed=""; [ "$CARGO_PROFILE" = dev ] && seed="$CARGO_TD"
    HELPERS_DIR="$CARGO_TD/$PROFILE_DIR" FROM_SOURCE_SEED="$seed" bash e2e/buck2/run.sh "$BUCK2_BIN" "$E2E" "$ISO" "${CFG[@]}" || die "e2e/buck2"
    done_step
fi

log "buck2 stage passed"
