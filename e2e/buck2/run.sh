#!/usr/bin/env bash
# run.sh BUCK2 DIR ISOLATION [buck2 -c flags...]
#
# Assembles a consumer project in DIR (which must not exist): this
# directory's files, a copy of the rocpack checkout (tracked and untracked,
# non-ignored files, as a fresh clone has them) at third_party/rocpack (as
# docs/buck2.md says), and a copy of one example shard as the consumer's own
# artifact. Then, with the real BUCK2: build and test everything (every
# rocpack rule under the consumer's names), run the consumer's program with
# its two snapshot libraries in separately chosen channels, and check a
# missing snapshot of either fails with that library's own message and fix.
#
# HELPERS_DIR=DIR (kpack, snapctl): prebuilt helpers instead of cargo, made
# into a release by tools/release/make-prebuilt.sh, served on 127.0.0.1 and
# pasted into .buckconfig as printed. Then also: a ROCm version of the
# project's own (7.2, `[rocpack] rocm_versions`) gets a snapshot and is
# linked; a rebuild with another PATH runs nothing; `kpack verify` checks the
# packages given as symlinked package dirs; no target/ appears in the tree.
#
# docs/buck2.md's blocks of this project run as written: its console
# blocks marked `buck2-transcript: e2e` (tests/buck2/transcript.sh) and, with
# HELPERS_DIR, its `buck2-run: verify` block (kpack verify through the
# toolchain). A kpack_split whose `archs` differ fails its own build and a
# recombine's.
#
# Then ABI drift under a guarded snapshot of the project's own, made from
# docs/buck2.md's blocks and recovered by running the guard's printed fixes
# (tests/buck2/abi-recovery.sh).
#
# FROM_SOURCE_SEED=TARGET_DIR (a dev `cargo build -p kpack -p snapctl`): then
# the helpers are built from source with the default cargo target dir,
# interrupted by kill -9 of cargo and rebuilt (e2e/interrupted-build.sh);
# the package they make equals the prebuilt helpers'.
set -euo pipefail
BUCK2="$1" DIR="$2" ISO="$3"; shift 3
CFG=("$@")
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
fail() { echo "e2e/buck2 FAILED: $*" >&2; exit 1; }

# docs/buck2.md shows this project's .buckconfig and toolchains/BUCK as
# complete files: they must be these, byte for byte.
for f in .buckconfig toolchains/BUCK; do
    awk -v f="$f" '
        /^<!-- buck2-consumer-file: / { want = ($3 == f); next }
        want && /^```/ { if (inblock) exit; inblock = 1; next }
        inblock { print }' "$repo/docs/buck2.md" | diff -u - "$here/$f" >&2 \
        || fail "docs/buck2.md's $f differs from e2e/buck2/$f"
done

[ ! -e "$DIR" ] || fail "$DIR exists"
mkdir -p "$DIR/third_party/rocpack"
(cd "$here" && tar -cf - --exclude=run.sh .) | (cd "$DIR" && tar -xf -)
(cd "$repo" && git ls-files -co --exclude-standard -z | tar -cf - --null -T -) \
    | (cd "$DIR/third_party/rocpack" && tar -xf -)
cp -a "$repo/examples/kpack/shards/gfx1151-build/blas_lib_gfx1151" "$DIR/app/art"

cd "$DIR"
b2() { local sub="$1"; shift; "$BUCK2" --isolation-dir "$ISO" "$sub" "${CFG[@]}" "$@"; }
# docs/buck2.md's blocks run as written, with `buck2` on PATH as b2.
"$repo/tests/buck2/buck2-on-path.sh" "$BUCK2" "$ISO" "$DIR.bin" "${CFG[@]}"
server_pid="" CLEAN_TD=""
# The daemon of this project (and the release's HTTP server) end with the
# run, and the default cargo target dir of the from-source step goes.
trap '"$BUCK2" --isolation-dir "$ISO" kill >/dev/null 2>&1 || true; [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true; [ -z "$CLEAN_TD" ] || rm -rf "$CLEAN_TD"; rm -rf "$DIR.bin" "$DIR.doc"' EXIT

if [ -n "${HELPERS_DIR:-}" ]; then
    # The release, as tools/release/make-prebuilt.sh makes it, on a local
    # HTTP server (127.0.0.1 only); its .buckconfig lines pasted as printed.
    rel="$DIR.release"
    rm -rf "$rel"
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    "$repo/tools/release/make-prebuilt.sh" --out "$rel" --bin-dir "$HELPERS_DIR" --base-url "http://127.0.0.1:$port" > "$rel.snippets"
    python3 -m http.server --bind 127.0.0.1 --directory "$rel" "$port" >/dev/null 2>&1 &
    server_pid=$!
    for _ in $(seq 50); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/SHA256SUMS')" 2>/dev/null && break; sleep 0.1; done
    awk '/^# --- Buck2/ { on = 1; next } /^# --- / { on = 0 } on' "$rel.snippets" >> .buckconfig
    grep -q '^  tools = prebuilt' .buckconfig || fail "no Buck2 lines in make-prebuilt.sh's output"
fi

b2 build //... || fail "buck2 build //..."
if [ -n "${HELPERS_DIR:-}" ]; then
    "$BUCK2" --isolation-dir "$ISO" log what-ran > "$DIR/cold-ran" 2>/dev/null || fail "buck2 log what-ran"
    ! grep -q cargo_build "$DIR/cold-ran" || fail "cargo built the helpers although .buckconfig says tools = prebuilt"
    grep -q "http_file\|download" "$DIR/cold-ran" || echo "e2e/buck2: (no download listed by what-ran)" >&2
fi
b2 test //... || fail "buck2 test //..."
# rocpack's own targets, reached through the cell.
b2 build rocpack//examples/kpack:blas_lib_gfx110X || fail "buck2 build rocpack//examples/kpack:blas_lib_gfx110X"

# A group missing from the packaging config (a typo): rocpack's message
# naming the target, the group, the config file and the fix, as Bazel's
# (rules/common/kpack.bzl), not buck2's missing-path error.
cp app/BUCK "$DIR.BUCK"
cat >> app/BUCK <<'EOF2'

kpack_recombine(
    name = "mathlib_typo",
    component = "mathlib",
    config = "packaging-config.json",
    group = "gfx115x",
    shards = [":split"],
)
EOF2
rc=0; b2 build //app:mathlib_typo >/dev/null 2>"$DIR/typo.err" || rc=$?
cp "$DIR.BUCK" app/BUCK
[ "$rc" -ne 0 ] || fail "a group missing from the packaging config built"
for want in "rocpack: root//app:mathlib_typo: no package mathlib_gfx115x: the group is not an architecture group of the packaging config app/packaging-config.json" \
    "kpack recombine wrote: mathlib_generic mathlib_gfx115X" \
    'fix: name in `group` only keys of "architecture_groups" in app/packaging-config.json'; do
    grep -qF -- "$want" "$DIR/typo.err" || { cat "$DIR/typo.err" >&2; fail "the missing-group message lacks: $want"; }
done
! grep -q "does not exist in the artifact" "$DIR/typo.err" || fail "buck2's own missing-path error instead of rocpack's"
echo "e2e/buck2: ok: a group missing from the config: $(grep -m1 -o '^rocpack: root//app:mathlib_typo: no package [^:]*' "$DIR/typo.err")" >&2

# kpack_split's `archs` is checked whenever the split is built or used, not
# only when its [archs] sub-target is: a split whose archs differ fails
# `buck2 build` of the split itself and of a recombine over it.
cat >> app/BUCK <<'EOF2'

kpack_split(
    name = "split_wrong_archs",
    srcs = glob(["art/**"]),
    archs = ["gfx1151", "gfx90a"],
    artifact_prefix = "mathlib",
    shard = "gfx1151-build",
    split_databases = ["rocblas"],
)

kpack_recombine(
    name = "mathlib_wrong_archs",
    component = "mathlib",
    config = "packaging-config.json",
    group = "gfx115X",
    shards = [":split_wrong_archs"],
)
EOF2
t0=$SECONDS
for t in split_wrong_archs mathlib_wrong_archs; do
    rc=0; b2 build "//app:$t" >/dev/null 2>"$DIR/archs.err" || rc=$?
    [ "$rc" -ne 0 ] || { cp "$DIR.BUCK" app/BUCK; fail "//app:$t built although the split's archs are not [gfx1151 gfx90a]"; }
    grep -qF "kpack_split: expected archs [gfx1151 gfx90a], the split produced [gfx1151 gfx906 gfx906:xnack-]" "$DIR/archs.err" \
        || { cp "$DIR.BUCK" app/BUCK; cat "$DIR/archs.err" >&2; fail "//app:$t failed without the archs message"; }
done
cp "$DIR.BUCK" app/BUCK
echo "e2e/buck2: ok: a split with other archs fails its build and a recombine over it ($((SECONDS - t0)) s)" >&2

# The commit of a snapshot, from its metadata.txt (what snapctl recorded).
commit_of() { # METADATA LIBRARY
    sed -n "s/^  $2: \([0-9a-f]\{40\}\)\$/\1/p" "$1"
}
fooccl_stable_64="$(commit_of fooccl/snapshots/stable/6.4/metadata.txt fooccl)"
rcclx_last_64="$(commit_of third_party/rocpack/examples/rcclx/snapshots/last-stable/6.4/metadata.txt rcclx)"
[ -n "$fooccl_stable_64" ] && [ -n "$rcclx_last_64" ] || fail "no commit in the snapshots' metadata.txt"

# expect_hello NAME WANT -m ...: one `buck2 run` of //app:hello (both libraries
# in one build, one configuration) prints exactly WANT.
expect_hello() {
    local name="$1" want="$2"; shift 2
    local got
    got="$(b2 run "$@" //app:hello 2>"$DIR/$name.err")" || { tail -30 "$DIR/$name.err" >&2; fail "buck2 run $* //app:hello"; }
    [ "$got" = "$want" ] || fail "$name ($*): got
$got
expected
$want"
    echo "e2e/buck2: ok: buck2 run $* //app:hello" >&2
}
# Defaults: both from dev (the global channel), ROCm 6.4.
expect_hello default "consumer: fooccl channel=dev rocm=6.4 commit=source prod=24
consumer: rcclx channel=dev rocm=6.4 commit=source sum=6"
# fooccl's own channel stable, rcclx on the global default (dev).
expect_hello a_stable_b_dev "consumer: fooccl channel=stable rocm=6.4 commit=$fooccl_stable_64 prod=24
consumer: rcclx channel=dev rocm=6.4 commit=source sum=6" -m fooccl_stable -m rocm64
# Global channel last-stable for every library, fooccl's own back to dev.
expect_hello global_last_stable_a_dev "consumer: fooccl channel=dev rocm=6.4 commit=source prod=24
consumer: rcclx channel=last_stable rocm=6.4 commit=$rcclx_last_64 sum=6" -m snapshot_last_stable -m fooccl_dev
# Dev for a version without any snapshot.
expect_hello dev_71 "consumer: fooccl channel=dev rocm=7.1 commit=source prod=24
consumer: rcclx channel=dev rocm=7.1 commit=source sum=6" -m rocm71

# docs/buck2.md's console blocks of this project (`buck2-transcript: e2e`),
# every command as written, its `buck2 run` output exactly.
t=$SECONDS
"$repo/tests/snapshot/doc-blocks.sh" "$DIR.doc" "$repo/docs/buck2.md"
ntx=0
for k in $("$repo/tests/snapshot/doc-select.sh" "$DIR.doc" buck2-transcript e2e); do
    "$repo/tests/buck2/transcript.sh" "$BUCK2" "$ISO" "$DIR.doc/$k.body" "$(cat "$DIR.doc/$k.where")" "${CFG[@]}" \
        || fail "docs/buck2.md's transcript at $(cat "$DIR.doc/$k.where")"
    ntx=$((ntx + 1))
done
[ "$ntx" -ge 1 ] || fail "docs/buck2.md has no buck2-transcript: e2e block"
echo "e2e/buck2: ok: docs/buck2.md's $ntx console block(s) of this project ($((SECONDS - t)) s)" >&2

# A missing snapshot of the consumer's own library: its names, not rcclx's.
if b2 build -m fooccl_last_stable -m rocm70 //app:hello >/dev/null 2>"$DIR/missing.err"; then
    fail "a missing fooccl snapshot built"
fi
for want in "no last-stable snapshot of fooccl for ROCm 7.0" "(-m fooccl_last_stable)" \
    "snapctl create --snapshots-root fooccl/snapshots --store fooccl/store --version 7.0 --artifact <path to libfooccl.a> --prefix FOOCCL" \
    "buck2 run //fooccl:stable_checksums.update"; do
    grep -qF -- "$want" "$DIR/missing.err" || { cat "$DIR/missing.err" >&2; fail "fooccl missing-snapshot message lacks: $want"; }
done
# rcclx's, while fooccl (dev) is fine.
if b2 build -m rcclx_last_stable -m rocm71 //app:hello >/dev/null 2>"$DIR/missing2.err"; then
    fail "a missing rcclx snapshot built"
fi
grep -qF "no last-stable snapshot of rcclx for ROCm 7.1" "$DIR/missing2.err" \
    || { cat "$DIR/missing2.err" >&2; fail "rcclx missing-snapshot message"; }

# The consumer's checksums file: .update keeps an up-to-date file as it is.
cp fooccl/stable_checksums.bzl "$DIR/fooccl-checksums.orig"
b2 run //fooccl:stable_checksums.update >/dev/null 2>&1 || fail "buck2 run //fooccl:stable_checksums.update"
cmp "$DIR/fooccl-checksums.orig" fooccl/stable_checksums.bzl || fail ".update changed fooccl's up-to-date checksums file"
grep -q "^FOOCCL_STABLE_CHECKSUMS = " fooccl/stable_checksums.bzl || fail "fooccl's checksums file lost its FOOCCL_ names"
if [ -n "${HELPERS_DIR:-}" ]; then
    # A ROCm version of the project's own: a stable 7.2 snapshot of fooccl.
    gcc -c -O2 -fPIC -Ifooccl/include -DFOOCCL_ROCM_VERSION=7.2 -DFOOCCL_COMMIT=v72 fooccl/src/fooccl.c -o "$DIR/fooccl72.o"
    ar rcsD "$DIR/libfooccl72.a" "$DIR/fooccl72.o"
    cp "$DIR/libfooccl72.a" "$DIR/libfooccl.a"
    "$HELPERS_DIR/snapctl" create --snapshots-root fooccl/snapshots --store fooccl/store --version 7.2 \
        --artifact "$DIR/libfooccl.a" --prefix FOOCCL --header fooccl/include/fooccl.h --commit fooccl=v72 >/dev/null \
        || fail "snapctl create 7.2"
    b2 run //fooccl:stable_checksums.update >/dev/null 2>&1 || fail "buck2 run //fooccl:stable_checksums.update (7.2)"
    grep -q '"7.2"' fooccl/stable_checksums.bzl || fail "no 7.2 in fooccl's checksums"
    got="$(b2 run -m fooccl_stable -m rocm72 //app:hello 2>"$DIR/h72.err" | sed -n 1p)" || { tail -20 "$DIR/h72.err" >&2; fail "hello with fooccl stable 7.2"; }
    [ "$got" = "consumer: fooccl channel=stable rocm=7.2 commit=v72 prod=24" ] || fail "7.2: $got"
    b2 test //fooccl:stable_checksums_test >/dev/null 2>&1 || fail "checksums test after the 7.2 snapshot"
    echo "e2e/buck2: ok: ROCm 7.2 ([rocpack] rocm_versions): $got" >&2

    # The same build with another PATH runs nothing.
    b2 build //... >/dev/null 2>&1 || fail "rebuild"
    mkdir -p "$DIR.otherbin"
    PATH="$DIR.otherbin:$PATH" b2 build //... >/dev/null 2>&1 || fail "rebuild with another PATH"
    "$BUCK2" --isolation-dir "$ISO" log what-ran > "$DIR/what-ran" 2>/dev/null || fail "buck2 log what-ran"
    [ ! -s "$DIR/what-ran" ] || { cat "$DIR/what-ran" >&2; fail "a PATH change reran actions"; }
    echo "e2e/buck2: ok: another PATH, nothing ran" >&2

    # kpack verify of the packages, given as symlinked package dirs, through
    # the toolchain: docs/buck2.md's block (`buck2-run: verify`) as written.
    b2 build //app:mathlib_generic //app:mathlib_gfx115X --show-full-output > "$DIR/pk.out" 2>/dev/null || fail "packages"
    PATH="$DIR.bin:$PATH" "$repo/tests/snapshot/doc-run.sh" "$repo/docs/buck2.md" buck2-run verify > "$DIR/verify.out" 2>&1 \
        || { cat "$DIR/verify.out" >&2; fail "docs/buck2.md's kpack verify of symlinked package dirs"; }
    [ "$(ls "$DIR/verify" | wc -l)" = 2 ] && [ -L "$DIR/verify/mathlib_gfx115X" ] || fail "verify/ holds: $(ls -l "$DIR/verify")"
    grep -Eq 'OK: [1-9][0-9]* packages?' "$DIR/verify.out" || { cat "$DIR/verify.out" >&2; fail "kpack verify checked no package"; }
    echo "e2e/buck2: ok: kpack verify: $(grep -E 'OK: ' "$DIR/verify.out" | head -1)" >&2
    listing() { (cd "$1" && find -L . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum); }
    listing "$(awk '$1 == "root//app:mathlib_gfx115X" {print $2}' "$DIR/pk.out")" > "$DIR/gfx115X.prebuilt"
fi
bash "$repo/tests/buck2/abi-recovery.sh" "$BUCK2" "$DIR" "$ISO" "${CFG[@]}" || fail "ABI drift recovery (tests/buck2/abi-recovery.sh)"
if [ -n "${FROM_SOURCE_SEED:-}" ]; then
    # The helpers from source with the defaults (docs/buck2.md): cargo builds
    # in ${XDG_CACHE_HOME:-~/.cache}/rocpack/cargo-target/<first 16 hex
    # digits of the sha256 of the Cargo.toml path> (the buck2 daemon's
    # environment), never in the project; killed mid-build, the next build
    # keeps what cargo finished (e2e/interrupted-build.sh).
    manifest="$(readlink -f third_party/rocpack/Cargo.toml)"
    TD="${XDG_CACHE_HOME:-$HOME/.cache}/rocpack/cargo-target/$(printf '%s' "$manifest" | sha256sum | cut -c1-16)"
    CLEAN_TD="$TD"
    "$repo/e2e/interrupted-build.sh" "$TD" "$manifest" "$FROM_SOURCE_SEED" -- "$BUCK2" --isolation-dir "$ISO" build "${CFG[@]}" \
        -c rocpack.tools=cargo -c rocpack.cargo_target_dir= -c rocpack.cargo_profile=dev //app:mathlib_gfx115X \
        || fail "the interrupted from-source helper build"
    "$BUCK2" --isolation-dir "$ISO" build "${CFG[@]}" -c rocpack.tools=cargo -c rocpack.cargo_target_dir= -c rocpack.cargo_profile=dev \
        //app:mathlib_gfx115X --show-full-output > "$DIR/src.out" 2>/dev/null || fail "mathlib_gfx115X with helpers from source"
    if [ -f "$DIR/gfx115X.prebuilt" ]; then
        listing "$(awk '$1 == "root//app:mathlib_gfx115X" {print $2}' "$DIR/src.out")" | diff "$DIR/gfx115X.prebuilt" - >&2 \
            || fail "mathlib_gfx115X from the rebuilt kpack differs from the prebuilt kpack's"
        echo "e2e/buck2: ok: mathlib_gfx115X from the rebuilt kpack is byte-identical to the prebuilt kpack's" >&2
    fi
    echo "e2e/buck2: ok: cargo built in $TD" >&2
fi
# The helpers' build never writes into the consumer's tree.
[ ! -e target ] || fail "a target/ directory appeared in the consumer's project root"
echo "e2e/buck2: consumer project ok" >&2
