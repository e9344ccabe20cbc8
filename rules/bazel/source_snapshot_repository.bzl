"""WORKSPACE mode: `load("@rocpack//rules/bazel:source_snapshot_repository.bzl", "source_snapshot_repository")`."""

load("//rules/bazel/private:source_snapshot_repo.bzl", _source_snapshot_repository = "source_snapshot_repository")

source_snapshot_repository = _source_snapshot_repository
