"""Public API of the rocpack Buck2 rules (same names and attributes as rules/bazel).

    load("@root//rules/buck2:defs.bzl", "kpack_split", "kpack_packages", "stable_checksums", "prebuilt_snapshot")  # rcclx_snapshot: former name

Helpers: every rule runs `kpack` / `snapctl` from the toolchain
`toolchains//:rocpack` (default: built from this repository by cargo;
`[rocpack] tools = prebuilt` in .buckconfig fetches pinned release binaries).
Channel and ROCm version: `-m rcclx_stable -m rocm64` (one library's
channel; `-m snapshot_stable` for every library; aliases in the root PACKAGE). Reference: docs/buck2.md.
"""

load("//rules/buck2/private:cargo_build.bzl", _rocpack_cargo_build = "rocpack_cargo_build")
load("//rules/buck2/private:config.bzl", _default_modifiers = "default_modifiers", _library_channel_constraints = "library_channel_constraints", _rocpack_cfg_constructor = "rocpack_cfg_constructor", _snapshot_constraints = "snapshot_constraints", _snapshot_modifier_aliases = "snapshot_modifier_aliases")
load("//rules/buck2/private:kpack_packages.bzl", _kpack_packages = "kpack_packages")
load("//rules/buck2/private:kpack_recombine.bzl", _kpack_recombine = "kpack_recombine")
load("//rules/buck2/private:kpack_split.bzl", _kpack_split = "kpack_split")
load("//rules/buck2/private:kpack_wheel_split.bzl", _kpack_wheel_split = "kpack_wheel_split")
load("//rules/buck2/private:providers.bzl", _KpackPackageInfo = "KpackPackageInfo", _KpackSplitInfo = "KpackSplitInfo", _RocpackToolchainInfo = "RocpackToolchainInfo", _SnapshotBlobInfo = "SnapshotBlobInfo")
load("//rules/buck2/private:prebuilt_snapshot.bzl", _prebuilt_snapshot = "prebuilt_snapshot")
load("//rules/buck2/private:source_snapshot.bzl", _source_snapshot = "source_snapshot")
load("//rules/buck2/private:snapshot_blob.bzl", _snapshot_blob = "snapshot_blob")
load("//rules/buck2/private:stable_checksums.bzl", _stable_checksums = "stable_checksums")
load("//rules/buck2/private:toolchain.bzl", _rocpack_helper_tools = "rocpack_helper_tools", _rocpack_toolchain = "rocpack_toolchain")

# Kernel packs: split one artifact directory, recombine shards, one package per group.
kpack_split, kpack_recombine, kpack_packages = _kpack_split, _kpack_recombine, _kpack_packages

# Python wheels: a fat wheel into host + per-target device wheels.
kpack_wheel_split = _kpack_wheel_split

# Prebuilt snapshots: dev / stable / last-stable selection and the checksums file.
prebuilt_snapshot, rcclx_snapshot, snapshot_blob, stable_checksums = _prebuilt_snapshot, _prebuilt_snapshot, _snapshot_blob, _stable_checksums  # rcclx_snapshot: the former name

# Source snapshots: each channel directory is a cell; dev = HEAD.
source_snapshot = _source_snapshot

# The helper binaries and the toolchain that hands them to actions.
rocpack_cargo_build, rocpack_toolchain, rocpack_helper_tools = _rocpack_cargo_build, _rocpack_toolchain, _rocpack_helper_tools

# Channel and ROCm version constraints, -m aliases, PACKAGE defaults.
# Per-library channels: each rcclx_snapshot declares its own (library_channel_constraints).
snapshot_constraints, snapshot_modifier_aliases, default_modifiers = _snapshot_constraints, _snapshot_modifier_aliases, _default_modifiers
library_channel_constraints = _library_channel_constraints
rocpack_cfg_constructor = _rocpack_cfg_constructor

# Providers.
KpackSplitInfo, KpackPackageInfo, RocpackToolchainInfo, SnapshotBlobInfo = _KpackSplitInfo, _KpackPackageInfo, _RocpackToolchainInfo, _SnapshotBlobInfo
