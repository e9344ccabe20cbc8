"""WORKSPACE (Bazel 4.x / --noenable_bzlmod) macros of rocpack.

    load("@rocpack//rules/bazel:repositories.bzl", "rocpack_release_binaries", "rocpack_snapshot_blobs")
"""

load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_file")
load("//rules/bazel/private:release_binaries.bzl", _rocpack_release_binaries = "rocpack_release_binaries")
load("//rules/common:snapshot.bzl", "PREBUILT_CHANNELS", "available_versions", "checksum_sha256", "rocm_config_name", "store_blob_path")

rocpack_release_binaries = _rocpack_release_binaries

def rocpack_snapshot_blobs(prefix, store_url, stable_checksums, last_stable_checksums):
    """One http_file per pinned snapshot blob of a remote store.

    Creates @<prefix>_<channel>_rocm<key> for every entry, downloading
    <store_url>/cas/sha256/<hex> checked against that sha256. Use with
    rcclx_snapshot(remote_repo_prefix = prefix, ...).

    Args:
      prefix: repository name prefix, e.g. "rcclx_snapshots".
      store_url: http(s):// or file:// URL of the store root.
      stable_checksums: <PREFIX>_STABLE_CHECKSUMS from stable_checksums.bzl.
      last_stable_checksums: <PREFIX>_LAST_STABLE_CHECKSUMS.
    """
    by_channel = {"stable": stable_checksums, "last_stable": last_stable_checksums}
    for channel in PREBUILT_CHANNELS:
        for version in available_versions(by_channel[channel]):
            sha = checksum_sha256(by_channel[channel][version])
            http_file(
                name = "%s_%s_%s" % (prefix, channel, rocm_config_name(version)),
                urls = [store_url.rstrip("/") + "/" + store_blob_path(sha)],
                sha256 = sha,
                downloaded_file_path = "blob",
            )
