#!/usr/bin/env bash
# A consumer workspace made the way docs/rules/consumers.md tells users, from
# that page's `consumer-file` blocks as written: rocpack vendored at
# third_party/rocpack (a copy of this checkout's files), prebuilt helpers
# made by tools/release/make-prebuilt.sh (file:// URL), the packages of
# e2e/bazel-workspace. Then:
#   * bazel build //... and bazel test //... (the nested checkout ignored);
#     //... still builds with a stale bazel-<workspace> link once the page's
#     line adds it to .bazelignore;
#   * the same build with another PATH runs nothing (execution log empty);
#   * a ROCm version no list names (7.2): snapctl create + .update, then the
#     stable 7.2 snapshot of fooccl is linked;
#   * kpack verify (through @rocpack//rules/bazel/toolchain:resolved_kpack)
#     of the kpack_packages outputs, given as symlinked package dirs;
#   * a guarded snapshot library from the page, a dependency header changed
#     under it, and the printed fix run (tests/bazel/abi-recovery.sh);
#   * the page's `consumer-run` blocks as written (kpack verify of symlinked
#     packages, per-library channels), and its source-snapshot section, in
#     either mode (tests/bazel/source-consumer.sh; needs git);
#   * a group missing from the packaging config fails with rocpack's message;
#   * with FROM_SOURCE_SEED=TARGET_DIR (a cargo target dir holding a dev
#     `cargo build -p kpack -p snapctl`): the helpers from source with the
#     default target dir (~/.cache/rocpack/cargo-target/<hash>, seeded with
#     that dir's crates.io crates), cargo killed (-9) after some crates
#     finished, then a rebuild that compiles only the rest; no target/ in the
#     consumer's tree; the rebuilt kpack's packages equal the prebuilt one's.
#
#   tests/bazel/vendored.sh MODE KPACK SNAPCTL [BAZEL FLAG...]
#     MODE: workspace (WORKSPACE) or bzlmod (MODULE.bazel + WORKSPACE.bzlmod)
#     KPACK, SNAPCTL: helper binaries packed by the release script.
# Prints the time of each step; exit 0 ok, 1 a check failed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODE="$1" KPACK="$2" SNAPCTL="$3"; shift 3
F=("$@")
case "$MODE" in workspace|bzlmod) ;; *) echo "MODE must be workspace or bzlmod" >&2; exit 2 ;; esac
export LC_ALL=C
T="$(mktemp -d /tmp/rocpack-vendored.XXXXXX)"
C="$T/consumer"
die() { printf 'FAILED: [vendored %s] %s\n' "$MODE" "$*" >&2; exit 1; }
TS=$SECONDS
step() { printf '    (%ds)\n==> [vendored %s] %s\n' $((SECONDS - TS)) "$MODE" "$*" >&2; TS=$SECONDS; }
CLEAN_TD=""
cleanup() {
    local rc=$?
    [ -d "$C" ] && (cd "$C" && bazel shutdown >/dev/null 2>&1) || true
    rm -rf "$T" ${CLEAN_TD:+"$CLEAN_TD"}
    exit $rc
}
trap cleanup EXIT

step "assemble: e2e/bazel-workspace's packages, rocpack at third_party/rocpack, files from docs/rules/consumers.md"
mkdir -p "$C/third_party/rocpack"
for d in app fx libs wheel; do cp -R "$ROOT/e2e/bazel-workspace/$d" "$C/"; done
# What a clone of rocpack holds (tracked and untracked, non-ignored files);
# outside a git checkout (the Bazel 7 chroot's copy has no .git): the tree
# minus build outputs.
if command -v git >/dev/null && git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$ROOT" && git ls-files -co --exclude-standard -z | tar -cf - --null -T -)
else
    tar -C "$ROOT" --exclude='./bazel-*' --exclude='./e2e/*/bazel-*' --exclude=./target --exclude=./.git \
        --exclude=./buck-out --exclude=./user.bazelrc -cf - .
fi | tar -C "$C/third_party/rocpack" -xf -
# The page cut into blocks (tests/snapshot/doc-blocks.sh); every block marked
# `<!-- consumer-file: MODE|all PATH -->` appended to PATH.
"$ROOT/tests/snapshot/doc-blocks.sh" "$T/doc" "$ROOT/docs/rules/consumers.md"
for i in $("$ROOT/tests/snapshot/doc-select.sh" "$T/doc" consumer-file); do
    read -r m f < "$T/doc/$i.args"
    [ "$m" = "$MODE" ] || [ "$m" = all ] || continue
    mkdir -p "$(dirname "$C/$f")"; cat "$T/doc/$i.body" >> "$C/$f"
done
doc_run() { # PAGE NAME: PAGE's `<!-- consumer-run: NAME -->` block, as written, from the workspace root
    (cd "$C" && "$ROOT/tests/snapshot/doc-run.sh" "$ROOT/$1" consumer-run "$2") >"$T/run.$2.out" 2>&1 \
        || { tail -30 "$T/run.$2.out" >&2; die "$1's consumer-run: $2 block failed"; }
}
for f in .bazelignore .bazelrc $([ "$MODE" = bzlmod ] && echo MODULE.bazel WORKSPACE.bzlmod || echo WORKSPACE); do
    [ -f "$C/$f" ] || die "docs/rules/consumers.md gives no $f for $MODE mode"
done

step "prebuilt helpers: tools/release/make-prebuilt.sh, pasted as the docs say"
bindir="$T/bin"; mkdir -p "$bindir"; cp "$KPACK" "$bindir/kpack"; cp "$SNAPCTL" "$bindir/snapctl"
# The whole release, librocm_kpack included: the callers' helper directories
# (target/ci-helpers, rules/bazel/prebuilt) hold both libraries beside kpack.
"$ROOT/tools/release/make-prebuilt.sh" --out "$T/release" --bin-dir "$bindir" --lib-dir "$(dirname "$KPACK")" \
    --base-url "file://$T/release" > "$T/snippets" 2> "$T/release.err" || { cat "$T/release.err" >&2; die "make-prebuilt.sh"; }
! grep -q WARNING "$T/release.err" || { cat "$T/release.err" >&2; die "make-prebuilt.sh warned"; }
tar -tzf "$T/release"/rocpack-*.tar.gz > "$T/release.list"
grep -qx 'lib/librocm_kpack.a' "$T/release.list" || { cat "$T/release.list" >&2; die "the release archive holds no lib/librocm_kpack.a"; }
section() { awk -v s="$1" '/^# --- / { on = index($0, s) > 0; next } on' "$T/snippets"; }
if [ "$MODE" = bzlmod ]; then
    section "MODULE.bazel" >> "$C/MODULE.bazel"
    grep -q 'tc.prebuilt(' "$C/MODULE.bazel" || die "no tc.prebuilt in the release script's output"
else
    grep -q '^rocpack_register_toolchains()' "$C/WORKSPACE" || die "the docs' WORKSPACE has no rocpack_register_toolchains()"
    section "WORKSPACE" > "$T/ws.prebuilt"
    grep -q 'rocpack_register_toolchains(prebuilt = {' "$T/ws.prebuilt" || die "no prebuilt WORKSPACE lines"
    awk -v f="$T/ws.prebuilt" '/^rocpack_register_toolchains\(\)/ { while ((getline l < f) > 0) print l; next } { print }' \
        "$C/WORKSPACE" > "$T/WORKSPACE" && mv "$T/WORKSPACE" "$C/WORKSPACE"
fi
cd "$C"

step "bazel build //... (cold; prebuilt helpers: no cargo)"
bazel build "${F[@]}" --execution_log_json_file="$T/cold.json" //... || die "bazel build //..."
! grep -q '"CargoBuild"' "$T/cold.json" || die "cargo ran although the helpers are prebuilt"
echo "    cold build of the consumer: $((SECONDS - TS)) s" >&2
# kpack_packages (fx_lib: generic, rdna3, rdna4) is ONE recombine; the
# kpack_recombine target fx_lib_rdna4_only is the other.
n="$(grep -c '"mnemonic": *"KpackRecombine"' "$T/cold.json" || true)"
[ "$n" = 2 ] || die "$n kpack recombine actions, expected 2 (one for kpack_packages, one for fx_lib_rdna4_only)"
step "bazel test //..."
bazel test "${F[@]}" //... || die "bazel test //..."

step "a stale bazel-<workspace> link (left by another --output_base): the page's .bazelignore line keeps //... working"
# What such a link leads to: that output base's execroot, whose entries
# link back to the workspace's, third_party/rocpack included.
stale="$T/other-output-base/execroot/$(basename "$C")"
mkdir -p "$stale" && ln -s "$C/third_party" "$stale/third_party"
ln -sfn "$stale" "$C/bazel-$(basename "$C")"
if bazel build "${F[@]}" //... >"$T/stale.out" 2>&1; then
    echo "    without the line: this Bazel skipped the stale link" >&2
else
    echo "    without the line: $(grep -m1 'ERROR' "$T/stale.out" | cut -c1-160)" >&2
fi
ln -sfn "$stale" "$C/bazel-$(basename "$C")"
doc_run docs/rules/consumers.md stale-link
bazel build "${F[@]}" //... >"$T/stale.out" 2>&1 || { tail -20 "$T/stale.out" >&2; die "bazel build //... with a stale bazel-$(basename "$C") link listed in .bazelignore"; }

step "a group missing from the packaging config (a typo): rocpack's message naming the group, the config and the fix"
cp fx/BUILD.bazel "$T/fx.BUILD"
cat >> fx/BUILD.bazel <<'EOF2'

kpack_recombine(
    name = "fx_lib_typo",
    component = "fx_lib",
    config = "packaging-config.json",
    group = "rnda4",
    shards = [":split_" + s for s in SHARDS],
    tags = ["manual"],
)
EOF2
rc=0; bazel build "${F[@]}" //fx:fx_lib_typo >"$T/typo.out" 2>&1 || rc=$?
cp "$T/fx.BUILD" fx/BUILD.bazel
[ "$rc" -ne 0 ] || die "a group missing from the config built"
for want in "rocpack: //fx:fx_lib_typo: no package fx_lib_rnda4: the group is not an architecture group of the packaging config fx/packaging-config.json" \
    "kpack recombine wrote: fx_lib_generic fx_lib_rdna3 fx_lib_rdna4" \
    'fix: name in `group` only keys of "architecture_groups" in fx/packaging-config.json'; do
    grep -qF -- "$want" "$T/typo.out" || { cat "$T/typo.out" >&2; die "the missing-group message lacks: $want"; }
done
grep -A2 -F "rocpack: //fx:fx_lib_typo" "$T/typo.out" | sed 's/^/    /' >&2

step "the same build with another PATH runs nothing"
mkdir -p "$T/otherbin"
PATH="$T/otherbin:$PATH" bazel build "${F[@]}" --execution_log_json_file="$T/path.json" //... || die "rebuild"
if grep -q '"commandArgs"' "$T/path.json"; then
    grep -o '"mnemonic": *"[A-Za-z]*"' "$T/path.json" | sort | uniq -c >&2
    die "a PATH change reran actions"
fi

step "ROCm 7.2 (in no list): snapctl create, .update, the stable 7.2 snapshot linked"
KP=(bazel run "${F[@]}" @rocpack//rules/bazel/toolchain:resolved_snapctl --)
gcc -c -O2 -fPIC -Ilibs/fooccl/include -DFOOCCL_ROCM_VERSION=7.2 -DFOOCCL_COMMIT=v72 libs/fooccl/src/fooccl.c -o "$T/fooccl.o"
ar rcsD "$T/libfooccl.a" "$T/fooccl.o"
"${KP[@]}" create --snapshots-root "$C/libs/fooccl/snapshots" --store "$C/libs/fooccl/store" --version 7.2 \
    --artifact "$T/libfooccl.a" --prefix FOOCCL --header "$C/libs/fooccl/include/fooccl.h" --commit fooccl=v72 >/dev/null \
    || die "snapctl create 7.2 (through resolved_snapctl)"
bazel run "${F[@]}" //libs/fooccl:stable_checksums.update || die ".update"
grep -q '"7.2"' libs/fooccl/stable_checksums.bzl || die "no 7.2 in the regenerated checksums"
out="$(bazel run "${F[@]}" --//libs/fooccl:fooccl_channel=stable --@rocpack//rules/bazel:rocm_version=7.2 //app:hello 2>"$T/run.err")" \
    || { tail -20 "$T/run.err" >&2; die "hello with fooccl stable 7.2"; }
[ "$(echo "$out" | sed -n 1p)" = "fooccl channel=stable rocm=7.2 commit=v72" ] || die "hello says: $out"
echo "    $(echo "$out" | sed -n 1p)" >&2
bazel test "${F[@]}" //libs/fooccl:stable_checksums_test || die "checksums test after the 7.2 snapshot"

step "kpack verify of the packages, as symlinked package dirs (docs: Verifying rule outputs)"
BIN="$(bazel info "${F[@]}" bazel-bin 2>/dev/null)"
(cd "$BIN/fx/fx_lib_rdna3" && find -L . -type f -print0 | sort -z | xargs -0 sha256sum) > "$T/rdna3.prebuilt.sha"
mkdir -p "$C/verify"
for p in fx_lib_generic fx_lib_rdna3 fx_lib_rdna4; do
    [ -d "$BIN/fx/$p" ] || die "no $BIN/fx/$p"
    ln -sfn "$BIN/fx/$p" "$C/verify/$p"
done
bazel run "${F[@]}" @rocpack//rules/bazel/toolchain:resolved_kpack -- verify --artifacts-dir "$C/verify" >"$T/verify.out" 2>"$T/verify.err" \
    || { cat "$T/verify.out" "$T/verify.err" >&2; die "kpack verify of symlinked package dirs"; }
grep -Eq 'OK: [1-9][0-9]* packages?' "$T/verify.out" || { cat "$T/verify.out" >&2; die "kpack verify checked no package"; }
echo "    $(grep -E 'OK: ' "$T/verify.out" | head -1)" >&2

step "ABI drift under a guarded snapshot, recovered as the page says (tests/bazel/abi-recovery.sh)"
# The page's commands take no flags: its `common:debian7` lines as `common` lines (the page allows both).
grep '^common:debian7 ' .bazelrc | sed 's/^common:debian7 /common /' >> .bazelrc || true
bash "$ROOT/tests/bazel/abi-recovery.sh" "$C" || die "abi-recovery"

step "the docs' consumer-run blocks as written: Verifying rule outputs, per-library channels (consumers.md, README), counting spawns (remote-execution.md)"
doc_run docs/rules/consumers.md verify
grep -Eq 'OK: [1-9][0-9]* packages?' "$T/run.verify.out" || { cat "$T/run.verify.out" >&2; die "the page's kpack verify checked no package"; }
doc_run docs/rules/consumers.md channels
doc_run README.md channels
grep -q '^fooccl channel=stable rocm=7.0 commit=' "$T/run.channels.out" || { cat "$T/run.channels.out" >&2; die "README's per-library channels: fooccl is not stable 7.0"; }
grep -q '^barccl channel=dev rocm=7.0 commit=source' "$T/run.channels.out" || { cat "$T/run.channels.out" >&2; die "README's per-library channels: barccl is not dev"; }
doc_run docs/remote-execution.md execlog
grep -q '^total [0-9]* spawns' "$T/run.execlog.out" || { cat "$T/run.execlog.out" >&2; die "execlog.py printed no summary"; }
step "a source snapshot as the page says, $MODE mode (tests/bazel/source-consumer.sh)"
bash "$ROOT/tests/bazel/source-consumer.sh" "$MODE" "$C" || die "source-consumer"
[ -n "${FROM_SOURCE_SEED:-}" ] || { step "vendored consumer ($MODE) passed"; exit 0; }

step "helpers from source with the defaults, interrupted by kill -9 of cargo, then rebuilt"
# docs/rules/consumers.md: without a target dir the cargo action builds in
# ~/.cache/rocpack/cargo-target/<first 16 hex digits of the sha256 of the
# Cargo.toml path> (~: the home of the user running Bazel), kept between
# builds (an interrupted build resumes there), nothing in the consumer's tree.
home="$(getent passwd "$(id -u)" | cut -d: -f6)"
manifest="$(readlink -f "$C/third_party/rocpack/Cargo.toml")"
TD="$home/.cache/rocpack/cargo-target/$(printf '%s' "$manifest" | sha256sum | cut -c1-16)"
CLEAN_TD="$TD"
SRC=(--@rocpack//rules/bazel:kpack=@rocpack//:kpack_from_source --@rocpack//rules/bazel:snapctl=@rocpack//:snapctl_from_source
    --@rocpack//rules/bazel:cargo_profile=dev)
"$ROOT/e2e/interrupted-build.sh" "$TD" "$manifest" "$FROM_SOURCE_SEED" -- \
    bazel build "${F[@]}" "${SRC[@]}" //fx:fx_lib_rdna3 || die "interrupted from-source build"
for d in "$C/target" "$C/third_party/rocpack/target"; do [ ! -e "$d" ] || die "$d appeared: cargo wrote into the consumer's tree"; done
echo "    cargo built in $TD (the default docs/rules/consumers.md names); no target/ in the consumer's tree" >&2
# Correct helpers: the packages made by the from-source kpack equal the
# prebuilt ones, byte for byte.
BIN="$(bazel info "${F[@]}" bazel-bin 2>/dev/null)"
diff <(cd "$BIN/fx/fx_lib_rdna3" && find -L . -type f -print0 | sort -z | xargs -0 sha256sum) "$T/rdna3.prebuilt.sha" >&2 \
    || die "fx_lib_rdna3 made by the from-source kpack differs from the prebuilt kpack's"
echo "    fx_lib_rdna3 from the rebuilt kpack is byte-identical to the prebuilt kpack's" >&2
step "vendored consumer ($MODE) passed"
