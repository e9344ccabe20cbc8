"""Unit tests of the pure Starlark in rules/common (run at analysis time).

The test rule evaluates every check while Bazel analyses it and writes a
script that prints the failures and exits 1 when any check failed.
"""

load("//rules/common:env.bzl", "HELPER_ENV")
load("//rules/common:kpack.bzl", "kpack_check_shards", "kpack_groups_from_config", "kpack_manifest_root", "kpack_missing_package_format", "kpack_package_dir_name", "kpack_package_target_names", "kpack_relative_path", "kpack_split_arg_list")
load("//rules/common:snapshot.bzl", "abi_check_expect_args", "abi_check_message_args", "abi_guard_args", "available_versions", "channel_config_name", "channel_dir", "checksum_sha256", "checksums_dict_name", "default_artifact", "default_checksums_prefix", "missing_snapshot_message", "package_path", "parse_checksums_bzl", "prebuilt_snapshot_plan", "rocm_config_name", "snapshot_dir", "snapshot_target_name", "store_blob_path", "under_snapshots_root", "version_key")
load("//rules/common:stable_checksums.bzl", "stable_checksums_check_prefix", "stable_checksums_test_script")

_SHA_A = "a" * 64
_SHA_B = "0123456789abcdef" * 4

_CHECKSUMS_TEXT = """# AUTO-GENERATED FILE - DO NOT EDIT MANUALLY

RCCLX_STABLE_CHECKSUMS = {
    "6.2": "%s",
    "6.4": "%s",
}

RCCLX_LAST_STABLE_CHECKSUMS = {}

RCCLX_ARTIFACTS = {
    "%s": {
        "sha256": "%s",
        "size": 10,
    },
}
""" % (_SHA_A, _SHA_B, _SHA_A, _SHA_A)

_NESTED_TEXT = """RCCLX_STABLE_CHECKSUMS = {
    "7.0": {
        "sha256": "%s",
        "size": 1798,
    },
}
RCCLX_LAST_STABLE_CHECKSUMS = {
    "7.0": "%s",
}
""" % (_SHA_B, _SHA_A)

_PLAN = prebuilt_snapshot_plan(
    "fooccl",
    "libs/fooccl",
    "snapshots",
    {"6.4": _SHA_A},
    {},
    local_store = "store",
    abi_inputs = ["//dep:dep.h"],
    snapshot_artifacts = {"stable": {"6.4": {"abi_inputs": {"libs/dep/dep.h": _SHA_B}}}},
)

_FIX = struct(
    snapctl = "bazel run //tc:snapctl --",
    workspace = '"$(bazel info workspace)"',
    artifact = '"$(bazel info bazel-bin)"/libs/fooccl/libfooccl_dev.a',
    rebuild = "bazel build //libs/fooccl:fooccl_dev",
    docs = "docs/x.md, \"When the ABI guard fires\"",
    metadata = "libs/fooccl/snapshots/stable/6.4/metadata.txt",
)

_FIX_LAST = struct(snapctl = "snapctl", workspace = "/ws", artifact = "/ws/out/libfooccl.a", rebuild = "buck2 build //libs/fooccl:dev", docs = "docs/y.md", metadata = None)

def _checks():
    # (description, actual, expected)
    return [
        ("package path", [package_path("libs/a", "snapshots"), package_path("", "snapshots")], ["libs/a/snapshots", "snapshots"]),
        ("snapshot dir", snapshot_dir("r", "last_stable", "7.0"), "r/last-stable/7.0"),
        ("under root", under_snapshots_root([("a/r/stable/6.4/metadata.txt", 1), ("a/r/x.h", 2)], "a/r"), {"stable/6.4/metadata.txt": 1, "x.h": 2}),
        ("plan", [_PLAN.library, _PLAN.artifact, _PLAN.root_path, _PLAN.store, _PLAN.by_channel], ["fooccl", "libfooccl.a", "libs/fooccl/snapshots", "libs/fooccl/store", {"stable": {"6.4": _SHA_A}, "last_stable": {}}]),
        ("plan: remote store, root package", [
            prebuilt_snapshot_plan("x", "", "s", {}, {}, library = "lib", artifact = "a.a", remote_repo_prefix = "p").store,
            prebuilt_snapshot_plan("x", "pkg", "s", {}, {}, store_url = "https://s/", local_store = "ignored").store,
            prebuilt_snapshot_plan("x", "", "s", {}, {}, local_store = "st").store,
            prebuilt_snapshot_plan("x", "", "s", {}, {}, library = "lib", artifact = "a.a").artifact,
        ], ["p", "https://s/", "st", "a.a"]),
        # The printed fix: snapctl recut/rollback on the snapshots root made
        # absolute with fix.workspace (the plan's root is workspace-relative),
        # --abi-base the workspace; a last-stable snapshot has no rollback.
        ("abi guard args", abi_guard_args(_PLAN, "fooccl_stable_rocm64", ":fooccl_stable_rocm64_blob", "stable", "6.4", "--//libs/fooccl:fooccl_channel=dev", _FIX), {
            "name": "fooccl_stable_rocm64_abi",
            "archive": ":fooccl_stable_rocm64_blob",
            "inputs": ["//dep:dep.h"],
            "expect": {"libs/dep/dep.h": _SHA_B},
            "snapshot_metadata": "libs/fooccl/snapshots/stable/6.4/metadata.txt",
            "library": "fooccl",
            "channel": "stable",
            "version": "6.4",
            "recut": "bazel run //tc:snapctl -- recut --snapshots-root \"$(bazel info workspace)\"/libs/fooccl/snapshots --channel stable --version 6.4 --artifact \"$(bazel info bazel-bin)\"/libs/fooccl/libfooccl_dev.a --abi-base \"$(bazel info workspace)\"",
            "rebuild": "bazel build //libs/fooccl:fooccl_dev",
            "rollback": "bazel run //tc:snapctl -- rollback --snapshots-root \"$(bazel info workspace)\"/libs/fooccl/snapshots --version 6.4",
            "dev": "--//libs/fooccl:fooccl_channel=dev",
            "docs": "docs/x.md, \"When the ABI guard fires\"",
        }),
        ("abi guard args: last-stable, cut without --abi-input, no archive (the test)", abi_guard_args(_PLAN, "t", None, "last_stable", "6.4", "-m //libs/fooccl:dev", _FIX_LAST), {
            "name": "t_abi",
            "inputs": ["//dep:dep.h"],
            "expect": {},
            "snapshot_metadata": None,
            "library": "fooccl",
            "channel": "last_stable",
            "version": "6.4",
            "recut": "snapctl recut --snapshots-root /ws/libs/fooccl/snapshots --channel last-stable --version 6.4 --artifact /ws/out/libfooccl.a --abi-base /ws",
            "rebuild": "buck2 build //libs/fooccl:dev",
            "rollback": "",
            "dev": "-m //libs/fooccl:dev",
            "docs": "docs/y.md",
        }),
        ("package dir", kpack_package_dir_name("blas_lib", "gfx110X"), "blas_lib_gfx110X"),
        ("target names", kpack_package_target_names("blas_lib", ["gfx110X", "gfx120X"]), [("blas_lib_generic", "generic"), ("blas_lib_gfx110X", "gfx110X"), ("blas_lib_gfx120X", "gfx120X")]),
        ("groups from config", kpack_groups_from_config(json.decode('{"primary_shard": "s", "architecture_groups": {"gfx120X": {"architectures": ["gfx1200"]}, "gfx110X": {"architectures": ["gfx1100"]}}}')), ["gfx120X", "gfx110X"]),
        # Issue 24 item 10: the message of a group without a package names
        # the target, the group (first %s), the config and the fix; a % in a
        # path stays literal for printf.
        ("missing package message", [
            s in kpack_missing_package_format("//fx:fx_lib_all_packages", "fx/50%.json", "groups")
            for s in ["rocpack: //fx:fx_lib_all_packages: no package %s: ", "packaging config fx/50%%.json,", "kpack recombine wrote: %s", "name in `groups` only keys of \"architecture_groups\" in fx/50%%.json"]
        ], [True, True, True, True]),
        ("missing package message has two %s", kpack_missing_package_format("t", "c", "group").replace("%%", "").count("%s"), 2),
        ("manifest root", kpack_manifest_root(["a/b/x.so", "a/b/artifact_manifest.txt"]), "a/b"),
        ("manifest root at top", kpack_manifest_root(["artifact_manifest.txt", "x"]), ""),
        ("relative path", kpack_relative_path("a/b/lib/x.so", "a/b"), "lib/x.so"),
        ("split args", kpack_split_arg_list("blas_lib", ["rocblas"], "zstd", ["gfx906"]), ["--artifact-prefix", "blas_lib", "--split-databases", "rocblas", "--compression", "zstd", "--exclude-arch", "gfx906"]),
        ("split args minimal", kpack_split_arg_list("p", [], "", []), ["--artifact-prefix", "p"]),
        ("version key", version_key("6.4.2"), "642"),
        ("rocm config", rocm_config_name("7.0"), "rocm70"),
        ("channel config", channel_config_name("rcclx", "last_stable"), "rcclx_last_stable"),
        ("channel dir", channel_dir("last_stable"), "last-stable"),
        ("dict name", checksums_dict_name("RCCLX", "last_stable"), "RCCLX_LAST_STABLE_CHECKSUMS"),
        ("snapshot target", snapshot_target_name("rcclx", "stable", "6.4"), "rcclx_stable_rocm64"),
        ("sha from string", checksum_sha256(_SHA_A), _SHA_A),
        ("sha from dict", checksum_sha256({"sha256": _SHA_B, "size": 3}), _SHA_B),
        ("available", available_versions({"7.0": _SHA_A, "6.2": _SHA_A}), ["6.2", "7.0"]),
        ("blob path", store_blob_path(_SHA_A), "cas/sha256/" + _SHA_A),
        ("parse flat", parse_checksums_bzl(_CHECKSUMS_TEXT, "RCCLX"), {"stable": {"6.2": _SHA_A, "6.4": _SHA_B}, "last_stable": {}}),
        ("parse nested", parse_checksums_bzl(_NESTED_TEXT, "RCCLX"), {"stable": {"7.0": _SHA_B}, "last_stable": {"7.0": _SHA_A}}),
        ("message names all", [
            s in missing_snapshot_message("rcclx", "stable", "7.1", ["6.2", "6.4"], "comms/rcclx/snapshots", "s3://b/p", "librcclx-dev.a")
            for s in ["stable", "7.1", "6.2, 6.4", "snapctl create --snapshots-root comms/rcclx/snapshots --store s3://b/p --version 7.1", "--config=rocm71", "--config=rcclx_stable"]
        ], [True, True, True, True, True, True]),
        ("message carries the library's prefix", "--artifact <path to libmy.a> --prefix MYLIB " in missing_snapshot_message("mylib", "stable", "6.4", [], "r", "s", "libmy.a", None, "MYLIB"), True),
        ("default prefix", default_checksums_prefix("my-lib2"), "MY_LIB2"),
        ("default artifact", default_artifact("fooccl"), "libfooccl.a"),
        # Issue 13 bugs 3/5: a non-rcclx library's message never says rcclx,
        # names its own selection flags and carries --prefix in both commands.
        ("message for another library", [
            s in missing_snapshot_message("fooccl", "stable", "7.1", ["6.4"], "libs/fooccl/snapshots", "libs/fooccl/store", "libfooccl.a", None, "FOOCCL", "--//libs/fooccl:fooccl_channel=stable", "--@rocpack//rules/bazel:rocm_version=7.1")
            for s in ["rcclx", "--config=", "channel: stable (--//libs/fooccl:fooccl_channel=stable)", "ROCm version: 7.1 (--@rocpack//rules/bazel:rocm_version=7.1)", "--prefix FOOCCL [", "gen-checksums --snapshots-root libs/fooccl/snapshots --output <stable_checksums.bzl> --prefix FOOCCL"]
        ], [False, False, True, True, True, True]),
        ("message with none available", "versions with a last-stable snapshot: none" in missing_snapshot_message("rcclx", "last_stable", "6.4", [], "r", "s", "a"), True),
    ]

# The freshness test's script as both build systems wrote it before it was
# shared (Buck2: arguments in variables; Bazel: paths filled in).
_STALE_TEST_BUCK2 = """if diff -u "$checked_in" "$generated"; then
    echo "$checked_in is up to date"
    exit 0
fi
echo >&2
echo "$checked_in is stale (diff above: checked-in vs generated). Fix with:" >&2
echo "    buck2 run $update" >&2
exit 1
"""

_STALE_TEST_BAZEL = """if diff -u "a/stable_checksums.bzl" "a/gen/stable_checksums.bzl"; then
    echo "a/stable_checksums.bzl is up to date"
    exit 0
fi
echo >&2
echo "a/stable_checksums.bzl is stale (diff above: checked-in vs generated). Fix with:" >&2
echo "    bazel run //a:stable_checksums.update" >&2
exit 1
"""

def _shared_checks():
    abi = struct(library = "rcclx", channel = "stable", version = "7.0", recut = "snapctl recut", rebuild = "bazel build //x", rollback = "", dev = "--config=rcclx_dev", docs = "docs/x.md")
    return [
        ("stale test, Buck2 form", stable_checksums_test_script("$checked_in", "$generated", "buck2 run $update"), _STALE_TEST_BUCK2),
        ("stale test, Bazel form", stable_checksums_test_script("a/stable_checksums.bzl", "a/gen/stable_checksums.bzl", "bazel run //a:stable_checksums.update"), _STALE_TEST_BAZEL),
        ("prefix kept", stable_checksums_check_prefix("x", "MYLIB"), "MYLIB"),
        ("helper env", HELPER_ENV, {"LC_ALL": "C", "TZ": "UTC"}),
        ("shards in order", kpack_check_shards("blas_lib", [("s2", "blas_lib", "//k:s2"), ("s1", "blas_lib", None)]), ["s2", "s1"]),
        ("abi expect sorted", abi_check_expect_args({"b.h": _SHA_A, "a.h": _SHA_B}), ["--expect", "a.h=" + _SHA_B, "--expect", "b.h=" + _SHA_A]),
        ("abi message flags", abi_check_message_args(abi, ["--abi-input a.h=/w/a.h"]), [
            "--library=rcclx",
            "--channel=stable",
            "--version=7.0",
            "--recut=snapctl recut --abi-input a.h=/w/a.h",
            "--rebuild=bazel build //x",
            "--rollback=",
            "--dev=--config=rcclx_dev",
            "--docs=docs/x.md",
        ]),
    ]

def _impl(ctx):
    failures = []
    checks = _checks() + _shared_checks()
    for desc, actual, expected in checks:
        if actual != expected:
            failures.append("%s: got %r, expected %r" % (desc, actual, expected))
    exe = ctx.actions.declare_file(ctx.label.name + ".sh")
    if failures:
        body = "".join(["echo %s >&2\n" % repr("FAIL " + f).replace("$", "\\$") for f in failures]) + "exit 1\n"
    else:
        body = "echo '%d rules/common checks passed'\n" % len(checks)
    ctx.actions.write(exe, "#!/bin/bash\n" + body, is_executable = True)
    return [DefaultInfo(executable = exe)]

common_unit_test = rule(
    implementation = _impl,
    test = True,
    doc = "Checks the pure functions of rules/common.",
)
