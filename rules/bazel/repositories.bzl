"""WORKSPACE (Bazel 4.x / --noenable_bzlmod) macros of rocpack.

    load("@rocpack//rules/bazel:repositories.bzl", "rocpack_dependencies", "rocpack_register_toolchains")
    rocpack_dependencies()          # offline @rules_cc / @rules_java stand-ins
    rocpack_register_toolchains()   # kpack + snapctl built from source (or prebuilt = {...})

    load("@rocpack//rules/bazel:repositories.bzl", "rocpack_snapshot_blobs")
"""

load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_file")
load("//rules/bazel/private:release_binaries.bzl", _rocpack_release_binaries = "rocpack_release_binaries")
load("//rules/bazel/private:toolchain.bzl", "rocpack_toolchains_repo")
load("//rules/common:snapshot.bzl", "PREBUILT_CHANNELS", "available_versions", "checksum_sha256", "rocm_config_name", "store_blob_path")

rocpack_release_binaries = _rocpack_release_binaries

_OFFLINE_FILES = {
    "rules_cc": ["WORKSPACE", "BUILD.bazel", "cc/BUILD.bazel", "cc/defs.bzl"],
    "rules_java": ["WORKSPACE", "BUILD.bazel", "java/BUILD.bazel", "java/defs.bzl"],
}

def _offline_repo_impl(rctx):
    # rocpack's checkout: rules/bazel/offline/<which>/ beside this BUILD file.
    base = str(rctx.path(Label("//rules/bazel:BUILD.bazel")).dirname) + "/offline/" + rctx.attr.which
    for rel in _OFFLINE_FILES[rctx.attr.which]:
        rctx.symlink(rctx.path(base + "/" + rel), rel)

_offline_repo = repository_rule(
    implementation = _offline_repo_impl,
    doc = "A local stand-in for @rules_cc or @rules_java that forwards to Bazel's native rules (rules/bazel/offline/).",
    attrs = {"which": attr.string(mandatory = True, values = ["rules_cc", "rules_java"], doc = "Which repository.")},
)

def rocpack_dependencies(offline_rules_cc = True):
    """Repositories rocpack needs in WORKSPACE mode.

    Bazel 4.2 loads @rules_cc and @rules_java as soon as a native cc rule is
    used (prebuilt_snapshot makes cc_library / cc_import targets) and would
    download them. With `offline_rules_cc` (the default) this declares local
    stand-ins from rocpack's checkout that forward to the native rules, unless
    the workspace already declares a repository of that name (declare the real
    ones first to use them).

    Args:
      offline_rules_cc: declare the @rules_cc / @rules_java stand-ins.
    """
    if offline_rules_cc:
        for which in ("rules_cc", "rules_java"):
            if not native.existing_rule(which):
                _offline_repo(name = which, which = which)

def rocpack_register_toolchains(name = "rocpack_toolchains", prebuilt = None):
    """Registers the kpack/snapctl toolchain (WORKSPACE counterpart of the rocpack_toolchains extension).

    By default the helpers are built from rocpack's sources, both in ONE
    `cargo build --offline --locked -p kpack -p snapctl` (crates must be in
    ~/.cargo: `cargo fetch`). With `prebuilt`, release binaries are
    downloaded, pinned by sha256 per platform, and no cargo is needed.

    Toolchain resolution makes Bazel load every registered toolchain,
    including its own Java ones, which need @rules_java: offline, call
    rocpack_dependencies() too.

    Args:
      name: name of the generated repository holding the toolchain.
      prebuilt: optional dict with the keys of rocpack_release_binaries:
        {"version": "0.1.0", "base_urls": [...], "sha256": {"x86_64-unknown-linux-gnu": "<hex>"}}.
    """
    kpack = ""
    snapctl = ""
    if prebuilt:
        bin_repo = name + "_bin"
        _rocpack_release_binaries(
            name = bin_repo,
            version = prebuilt["version"],
            base_urls = prebuilt["base_urls"],
            sha256 = prebuilt["sha256"],
            platform = prebuilt.get("platform", ""),
        )
        kpack = "@%s//:kpack" % bin_repo
        snapctl = "@%s//:snapctl" % bin_repo
    rocpack_toolchains_repo(name = name, kpack = kpack, snapctl = snapctl)
    native.register_toolchains("@%s//:toolchain" % name)

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
