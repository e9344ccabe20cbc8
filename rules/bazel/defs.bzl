"""Public API of the rocpack Bazel rules.

    load("@rocpack//rules/bazel:defs.bzl", "kpack_split", "kpack_packages", "stable_checksums", "prebuilt_snapshot")

(`rcclx_snapshot` is the former name of `prebuilt_snapshot`; both work.)

Helpers: the rules run `kpack` and `snapctl` through the label_flags
//rules/bazel:kpack and //rules/bazel:snapctl (default: built from source by
cargo; `--config=prebuilt` or `--//rules/bazel:kpack=<label>` to override).
Reference: docs/rules/.
"""

load("//rules/bazel/private:cargo_binary.bzl", _cargo_binary = "cargo_binary")
load("//rules/bazel/private:kpack_packages.bzl", _kpack_packages = "kpack_packages")
load("//rules/bazel/private:kpack_recombine.bzl", _kpack_recombine = "kpack_recombine")
load("//rules/bazel/private:kpack_split.bzl", _kpack_split = "kpack_split")
load("//rules/bazel/private:kpack_wheel_split.bzl", _kpack_wheel_split = "kpack_wheel_split")
load("//rules/bazel/private:providers.bzl", _FlagValueInfo = "FlagValueInfo", _KpackPackageInfo = "KpackPackageInfo", _KpackSplitInfo = "KpackSplitInfo", _SnapshotBlobInfo = "SnapshotBlobInfo")
load("//rules/bazel/private:prebuilt_snapshot.bzl", _prebuilt_snapshot = "prebuilt_snapshot")
load("//rules/bazel/private:source_snapshot.bzl", _source_snapshot = "source_snapshot")
load("//rules/bazel/private:script_test.bzl", _rocpack_script_test = "rocpack_script_test")
load("//rules/bazel/private:snapshot_blob.bzl", _snapshot_blob = "snapshot_blob")
load("//rules/bazel/private:stable_checksums.bzl", _stable_checksums = "stable_checksums")
load("//rules/bazel/private:string_flag.bzl", _string_flag = "string_flag")

kpack_split = _kpack_split
kpack_recombine = _kpack_recombine
kpack_packages = _kpack_packages
kpack_wheel_split = _kpack_wheel_split
stable_checksums = _stable_checksums
prebuilt_snapshot = _prebuilt_snapshot
rcclx_snapshot = _prebuilt_snapshot  # the former name: the same macro
source_snapshot = _source_snapshot
snapshot_blob = _snapshot_blob
cargo_binary = _cargo_binary
string_flag = _string_flag
rocpack_script_test = _rocpack_script_test

KpackSplitInfo = _KpackSplitInfo
KpackPackageInfo = _KpackPackageInfo
FlagValueInfo = _FlagValueInfo
SnapshotBlobInfo = _SnapshotBlobInfo
