"""Module extensions of rocpack (bzlmod only; never loaded from WORKSPACE).

    # kpack/snapctl toolchain: rocpack's MODULE.bazel registers it; by default
    # the helpers are built from source. The root module may switch to
    # prebuilt release binaries pinned by sha256:
    tc = use_extension("@rocpack//rules/bazel:extensions.bzl", "rocpack_toolchains")
    tc.prebuilt(version = "0.1.0", base_urls = ["https://.../releases/download/v0.1.0"],
                sha256 = {"x86_64-unknown-linux-gnu": "<hex>"})

    rocpack_bin = use_extension("@rocpack//rules/bazel:extensions.bzl", "rocpack_binaries")
    rocpack_bin.release(repo = "rocpack_bin", version = "0.1.0", base_urls = [...], sha256 = {...})
    use_repo(rocpack_bin, "rocpack_bin")

    snaps = use_extension("@rocpack//rules/bazel:extensions.bzl", "rocpack_snapshots")
    snaps.store(prefix = "rcclx_snapshots", url = "https://...", checksums = "//comms/rcclx:stable_checksums.bzl", dict_prefix = "RCCLX")
    use_repo(snaps, "rcclx_snapshots_stable_rocm64", ...)
"""

load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_file")
load("//rules/bazel/private:release_binaries.bzl", "rocpack_release_binaries")
load("//rules/bazel/private:toolchain.bzl", "rocpack_toolchains_repo")
load("//rules/common:snapshot.bzl", "PREBUILT_CHANNELS", "parse_checksums_bzl", "rocm_config_name", "store_blob_path")

# The attributes of a release (rocpack_release_binaries) in the tags that name one.
_RELEASE_ATTRS = {
    "version": attr.string(mandatory = True, doc = "Release version."),
    "base_urls": attr.string_list(mandatory = True, doc = "Base URLs holding rocpack-<version>-<platform>.tar.gz; file:// works."),
    "sha256": attr.string_dict(mandatory = True, doc = "Platform (Rust target triple) -> archive sha256."),
    "platform": attr.string(doc = "Force a platform instead of detecting the host's."),
}

_release = tag_class(
    doc = "One set of release binaries.",
    attrs = dict({
        "repo": attr.string(default = "rocpack_bin", doc = "Repository name (its targets: :kpack, :snapctl)."),
    }, **_RELEASE_ATTRS),
)

def _binaries_impl(mctx):
    for mod in mctx.modules:
        for t in mod.tags.release:
            rocpack_release_binaries(name = t.repo, version = t.version, base_urls = t.base_urls, sha256 = t.sha256, platform = t.platform)

rocpack_binaries = module_extension(
    implementation = _binaries_impl,
    doc = "Downloads kpack/snapctl release binaries pinned by sha256 per platform.",
    tag_classes = {"release": _release},
)

_store = tag_class(
    doc = "A remote snapshot store and the checked-in checksums file pinning its blobs.",
    attrs = {
        "prefix": attr.string(mandatory = True, doc = "Repository name prefix (rcclx_snapshot's remote_repo_prefix)."),
        "url": attr.string(mandatory = True, doc = "Store root URL (http(s):// or file://)."),
        "checksums": attr.label(mandatory = True, doc = "The generated stable_checksums.bzl."),
        "dict_prefix": attr.string(mandatory = True, doc = "Prefix of the dict names in it (the stable_checksums prefix, e.g. \"MYLIB\" for MYLIB_STABLE_CHECKSUMS)."),
    },
)

def _snapshots_impl(mctx):
    for mod in mctx.modules:
        for t in mod.tags.store:
            dicts = parse_checksums_bzl(mctx.read(mctx.path(t.checksums)), t.dict_prefix)
            for channel in PREBUILT_CHANNELS:
                for version, sha in sorted(dicts[channel].items()):
                    http_file(
                        name = "%s_%s_%s" % (t.prefix, channel, rocm_config_name(version)),
                        urls = [t.url.rstrip("/") + "/" + store_blob_path(sha)],
                        sha256 = sha,
                        downloaded_file_path = "blob",
                    )

rocpack_snapshots = module_extension(
    implementation = _snapshots_impl,
    doc = "One http_file per blob pinned in a stable_checksums.bzl (bzlmod counterpart of rocpack_snapshot_blobs).",
    tag_classes = {"store": _store},
)

_prebuilt = tag_class(
    doc = "Use prebuilt release binaries for the kpack/snapctl toolchain instead of building them from source. Only the root module's tag counts.",
    attrs = _RELEASE_ATTRS,
)

def _toolchains_impl(mctx):
    chosen = None
    for mod in mctx.modules:
        if mod.is_root and mod.tags.prebuilt:
            if len(mod.tags.prebuilt) > 1:
                fail("rocpack_toolchains: give at most one prebuilt tag")
            chosen = mod.tags.prebuilt[0]
    kpack = ""
    snapctl = ""
    if chosen:
        rocpack_release_binaries(
            name = "rocpack_toolchains_bin",
            version = chosen.version,
            base_urls = chosen.base_urls,
            sha256 = chosen.sha256,
            platform = chosen.platform,
        )
        kpack = "@rocpack_toolchains_bin//:kpack"
        snapctl = "@rocpack_toolchains_bin//:snapctl"
    rocpack_toolchains_repo(name = "rocpack_toolchains", kpack = kpack, snapctl = snapctl)

rocpack_toolchains = module_extension(
    implementation = _toolchains_impl,
    doc = "The kpack/snapctl toolchain repository @rocpack_toolchains (registered by rocpack's MODULE.bazel): built from source by one cargo invocation, or the root module's `prebuilt` release binaries pinned by sha256.",
    tag_classes = {"prebuilt": _prebuilt},
)
