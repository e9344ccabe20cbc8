#!/usr/bin/env bash
# The C consumer of librocm_kpack (examples/runtime) built and run as a test
# by a real build system, through rocpack's library targets (//:rocm_kpack
# shared, //:rocm_kpack_static). Called by stages 50 (Bazel 4.2.3), 55
# (Bazel 7, in its chroot) and 60 (Buck2); self-contained (no lib.sh), so it
# runs inside the chroot too.
#
#   tests/ci/runtime-consumer.sh bazel [BAZEL_FLAGS...]
#       bazel test the two targets with the given flags (e.g. --config=prebuilt:
#       the libraries from rules/bazel/prebuilt), then check that the shared
#       test binary needs librocm_kpack.so.0 and the static one does not.
#   tests/ci/runtime-consumer.sh bazel-workspace [BAZEL_FLAGS...]
#       a throwaway WORKSPACE-mode consumer (local_repository rocpack = this
#       checkout) whose cc_binary and cc_test depend on @rocpack//:rocm_kpack
#       and :rocm_kpack_static: tested and run. BAZEL_FLAGS name the
#       libraries, e.g. --@rocpack//:rocm_kpack_libs=@rocpack//rules/bazel/prebuilt:rocm_kpack_libs
#   tests/ci/runtime-consumer.sh buck2 BUCK2_BIN ISOLATION_DIR [BUCK2_ARGS...]
#       buck2 test the same targets (BUCK2_ARGS after the subcommand, e.g.
#       -c rocpack.cargo_profile=dev), then the same checks; then again with
#       [rocpack] tools = prebuilt (libraries and helpers by http_file from a
#       127.0.0.1 server), and a wrong sha256 must be refused.
#   tests/ci/runtime-consumer.sh readme
#       README's runtime recipe, taken from README.md (the fenced blocks after
#       `<!-- ci: run -->` and `<!-- ci: file NAME -->`), run as written in a
#       fresh directory with HOME there and ~/src/rocpack -> this checkout
#       (shared, static, pkg-config shared and --static, CMake both targets;
#       every program must start); then the linkage of each program is
#       checked. RECIPE_PROFILE=debug (the default) swaps the one profile
#       (`--release` -> none, target/release -> target/debug) to reuse CI's
#       debug build; RECIPE_PROFILE=release runs it unchanged (a release build).
#
# Prints each step's time. Exit 0 ok, 1 a check failed, 2 usage error.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
TARGETS=(//examples/runtime:kpack_consumer_test //examples/runtime:kpack_consumer_static_test)
die() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
T0=$SECONDS

# needs EXE: its NEEDED entries, one per line.
needs() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
check_linkage() { # SHARED_EXE STATIC_EXE
    [ -x "$1" ] && [ -x "$2" ] || die "test binaries not found: $1 $2"
    needs "$1" | grep -qx 'librocm_kpack.so.0' || { needs "$1" >&2; die "$1 does not need librocm_kpack.so.0"; }
    ! needs "$2" | grep -q 'librocm_kpack' || { needs "$2" >&2; die "$2 (static) needs a librocm_kpack shared library"; }
    echo "    linkage: the shared test needs librocm_kpack.so.0, the static one no librocm_kpack" >&2
}

# The test can fail: the static test binary run by hand passes on the real
# inputs and fails (exit 1) on a copy of the fat binary with a byte flipped
# every 512 bytes past its first offload bundle.
FAT=examples/kpack/shards/gfx110X-build/blas_lib_gfx110X-dgpu/math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5.2
check_fails() { # STATIC_EXE SPLIT_DIR
    local kp="$2/blas_lib_gfx1100/math-libs/BLAS/rocBLAS/stage/.kpack/blas_lib_gfx1100.kpack"
    local host="$2/blas_lib_generic/math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5.2"
    local bad rc=0
    "$1" "$kp" "$host" "$FAT" gfx1100 >/dev/null || die "$1 failed on the real inputs"
    bad="$(mktemp)"
    python3 - "$FAT" "$bad" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
start = b.find(b"__CLANG_OFFLOAD_BUNDLE__")
assert start >= 0
for i in range(start + 512, len(b), 512):
    b[i] ^= 0x01
open(sys.argv[2], "wb").write(b)
PY
    "$1" "$kp" "$host" "$bad" gfx1100 >/dev/null 2>&1 || rc=$?
    rm -f "$bad"
    [ "$rc" = 1 ] || die "$1 exited $rc on damaged code objects, expected 1"
    echo "    the consumer fails (exit 1) when the original's code objects differ" >&2
}

mode="${1:-}"; [ $# -gt 0 ] && shift
case "$mode" in
    bazel)
        log="$(mktemp)"; trap 'rm -f "$log"' EXIT
        bazel test "$@" --test_output=all "${TARGETS[@]}" >"$log" 2>&1 || { tail -40 "$log" >&2; die "bazel test ${TARGETS[*]}"; }
        n="$(grep -c '^kpack_consumer: gfx1100: .* identical to ' "$log" || true)"
        [ "$n" = 2 ] || { tail -40 "$log" >&2; die "expected the consumer's success line from both tests, got $n"; }
        grep '^kpack_consumer: ' "$log" | head -1 >&2
        bin="$(bazel info "$@" bazel-bin 2>/dev/null)"
        check_linkage "$bin/examples/runtime/kpack_consumer_test" "$bin/examples/runtime/kpack_consumer_static_test"
        check_fails "$bin/examples/runtime/kpack_consumer_static_test" "$bin/examples/kpack/split_gfx110X-build.split"
        ;;
    bazel-workspace)
        ws="$(mktemp -d /tmp/rocpack-rt-consumer.XXXXXX)"
        trap '(cd "$ws" && bazel shutdown >/dev/null 2>&1); rm -rf "$ws"' EXIT
        mkdir -p "$ws/app"
        cat > "$ws/WORKSPACE" <<EOF
workspace(name = "consumer")
local_repository(name = "rocpack", path = "$ROOT")
load("@rocpack//rules/bazel:repositories.bzl", "rocpack_dependencies", "rocpack_register_toolchains")
rocpack_dependencies()
rocpack_register_toolchains()
EOF
        # Offline: every test needs a coverage generator (rocpack's stub).
        printf 'build --nosandbox_debug\nbuild --coverage_report_generator=@rocpack//rules/bazel:coverage_report_generator_stub\n' > "$ws/.bazelrc"
        cat > "$ws/app/BUILD.bazel" <<'EOF'
[cc_binary(name = "app" + s, srcs = ["app.c"], deps = ["@rocpack//:rocm_kpack" + s]) for s in ["", "_static"]]
[cc_test(name = "app_test" + s, srcs = ["app.c"], deps = ["@rocpack//:rocm_kpack" + s]) for s in ["", "_static"]]
EOF
        cat > "$ws/app/app.c" <<'EOF'
#include <stdio.h>
#include <rocm_kpack/kpack.h>
int main(void) {
    kpack_archive_t archive = NULL;
    kpack_error_t rc = kpack_open("/nonexistent.kpack", &archive);
    printf("kpack_open(missing) = %d\n", (int)rc);
    return rc != KPACK_ERROR_FILE_NOT_FOUND;
}
EOF
        (cd "$ws" && bazel test "$@" //app:all >"$ws/log" 2>&1) || { tail -40 "$ws/log" >&2; die "consumer workspace: bazel test"; }
        for s in "" _static; do
            got="$(cd "$ws" && bazel run "$@" "//app:app$s" 2>"$ws/log")" || { tail -20 "$ws/log" >&2; die "consumer workspace: bazel run //app:app$s"; }
            [ "$got" = "kpack_open(missing) = 2" ] || die "consumer workspace: //app:app$s printed '$got'"
        done
        echo "    consumer workspace: @rocpack//:rocm_kpack and :rocm_kpack_static build, run and test" >&2
        ;;
    buck2)
        [ $# -ge 2 ] || usage
        b2="$1" iso="$2"; shift 2
        log="$(mktemp)"; trap 'rm -f "$log"' EXIT
        "$b2" --isolation-dir "$iso" test "$@" "${TARGETS[@]}" >"$log" 2>&1 || { tail -40 "$log" >&2; die "buck2 test ${TARGETS[*]}"; }
        grep -q "Pass 2" "$log" && grep -q "Fail 0" "$log" || { tail -20 "$log" >&2; die "buck2 test did not pass both tests"; }
        out="$(mktemp)"
        "$b2" --isolation-dir "$iso" build "$@" "${TARGETS[@]}" //examples/kpack:split_gfx110X-build --show-full-output >"$out" 2>>"$log" \
            || { tail -20 "$log" >&2; die "buck2 build --show-full-output"; }
        shared="$(awk '$1 ~ /:kpack_consumer_test$/ {print $2}' "$out")"
        static="$(awk '$1 ~ /:kpack_consumer_static_test$/ {print $2}' "$out")"
        split="$(awk '$1 ~ /:split_gfx110X-build$/ {print $2}' "$out")"
        check_linkage "$shared" "$static"
        check_fails "$static" "$split"
        # tools = prebuilt: the same tests with the libraries (and helpers)
        # fetched by http_file from a 127.0.0.1 server, pinned by sha256; a
        # wrong sha256 is refused. (buck2's http_file refuses file:// URLs.)
        "$b2" --isolation-dir "$iso" build "$@" "//:rocm_kpack_libs[shared]" "//:rocm_kpack_libs[static]" \
            "//:rocpack_helpers[kpack]" "//:rocpack_helpers[snapctl]" --show-full-output >"$out" 2>>"$log" \
            || { tail -20 "$log" >&2; die "buck2 build of the libraries and helpers"; }
        srv="$(mktemp -d)"
        for f in $(awk '{print $2}' "$out"); do cp "$f" "$srv/"; done
        ls "$srv/librocm_kpack.so" "$srv/librocm_kpack.a" "$srv/kpack" "$srv/snapctl" >/dev/null || die "libraries or helpers missing from the build outputs"
        python3 -c 'import http.server, functools, sys
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
open(sys.argv[1] + "/.port", "w").write(str(s.server_address[1]))
s.serve_forever()' "$srv" 2>/dev/null &
        pid=$!
        trap 'kill "$pid" 2>/dev/null; rm -rf "$srv"; rm -f "$log" "$out"' EXIT
        for _ in $(seq 100); do [ -s "$srv/.port" ] && break; sleep 0.05; done
        url="http://127.0.0.1:$(cat "$srv/.port")"
        sha() { sha256sum "$srv/$1" | cut -c1-64; }
        pre=(-c rocpack.tools=prebuilt
             -c "rocpack.kpack_url=$url/kpack" -c "rocpack.kpack_sha256=$(sha kpack)"
             -c "rocpack.snapctl_url=$url/snapctl" -c "rocpack.snapctl_sha256=$(sha snapctl)"
             -c "rocpack.rocm_kpack_so_url=$url/librocm_kpack.so" -c "rocpack.rocm_kpack_a_url=$url/librocm_kpack.a"
             -c "rocpack.rocm_kpack_a_sha256=$(sha librocm_kpack.a)")
        "$b2" --isolation-dir "$iso" test "${pre[@]}" -c "rocpack.rocm_kpack_so_sha256=$(sha librocm_kpack.so)" "${TARGETS[@]}" >"$log" 2>&1 \
            || { tail -40 "$log" >&2; die "buck2 test with tools = prebuilt"; }
        grep -q "Pass 2" "$log" && grep -q "Fail 0" "$log" || { tail -20 "$log" >&2; die "tools = prebuilt: buck2 test did not pass both tests"; }
        if "$b2" --isolation-dir "$iso" build "${pre[@]}" -c "rocpack.rocm_kpack_so_sha256=$(sha librocm_kpack.a)" //:rocm_kpack >"$log" 2>&1; then
            die "tools = prebuilt: a wrong rocm_kpack_so_sha256 was accepted"
        fi
        grep -q "Invalid sha256 digest" "$log" || { tail -20 "$log" >&2; die "tools = prebuilt: failed, but not on the digest"; }
        echo "    tools = prebuilt: both tests pass on http_file libraries; a wrong sha256 is refused" >&2
        ;;
    readme)
        command -v cmake >/dev/null && command -v pkg-config >/dev/null \
            || die "readme: cmake and pkg-config are needed (tests/ci/10-rust.sh installs them)"
        w="$(mktemp -d /tmp/rocpack-readme.XXXXXX)"; trap 'rm -rf "$w"' EXIT
        mkdir -p "$w/src" "$w/app"; ln -s "$ROOT" "$w/src/rocpack"
        # Blocks after the markers: run -> recipe.sh, file NAME -> app/NAME.
        python3 - "$ROOT/README.md" "$w" <<'PY'
import re, sys
text, out = open(sys.argv[1]).read(), sys.argv[2]
blocks = re.findall(r"<!-- ci: (run|file [^ ]+) -->\n```[a-z]*\n(.*?)```\n", text, re.S)
assert any(k == "run" for k, _ in blocks) and len(blocks) >= 3, "README: no ci-marked recipe blocks"
for kind, body in blocks:
    path = out + "/recipe.sh" if kind == "run" else out + "/app/" + kind.split(" ", 1)[1]
    open(path, "a").write(body)
PY
        if [ "${RECIPE_PROFILE:-debug}" = debug ]; then
            sed -i 's/cargo build --release /cargo build /; s|target/release|target/debug|g' "$w/recipe.sh"
        fi
        echo "    README recipe (RECIPE_PROFILE=${RECIPE_PROFILE:-debug}):" >&2; sed 's/^/      /' "$w/recipe.sh" >&2
        ch="${CARGO_HOME:-$HOME/.cargo}" rh="${RUSTUP_HOME:-$HOME/.rustup}"
        (cd "$w/app" && HOME="$w" CARGO_HOME="$ch" RUSTUP_HOME="$rh" bash -euo pipefail "$w/recipe.sh") >"$w/log" 2>&1 || { tail -40 "$w/log" >&2; die "README's runtime recipe failed"; }
        n="$(grep -c '^kpack_open(missing.kpack) = 2$' "$w/log" || true)"
        [ "$n" = 6 ] || { cat "$w/log" >&2; die "expected 6 programs to start and print their line, got $n"; }
        a="$w/app"
        for exe in app-shared app-pc build/app-cmake-shared; do
            needs "$a/$exe" | grep -qx 'librocm_kpack.so.0' || die "$exe does not need librocm_kpack.so.0"
            env -u LD_LIBRARY_PATH "$a/$exe" >/dev/null || die "$exe does not start without LD_LIBRARY_PATH"
        done
        for exe in app-static app-pc-static build/app-cmake-static; do
            ! needs "$a/$exe" | grep -q librocm_kpack || die "$exe (static) needs a librocm_kpack shared library"
        done
        echo "    README recipe: 6 programs built and started; shared ones need librocm_kpack.so.0 (found by rpath), static ones none" >&2
        ;;
    *) usage ;;
esac
printf '    (runtime consumer, %s: %ds)\n' "$mode" $((SECONDS - T0)) >&2
