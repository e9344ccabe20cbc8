"""Bazel 7+ (bzlmod): source-snapshot channels as repositories.

    ss = use_extension("@rocpack//rules/bazel:source_snapshot_ext.bzl", "source_snapshots")
    ss.channel(name = "rcl_snapshot_stable", anchor = "//examples/rcclx_source:BUILD.bazel", path = "snapshots/stable")
    use_repo(ss, "rcl_snapshot_stable")

WORKSPACE mode (Bazel 4.2.3): load source_snapshot_repository from
@rocpack//rules/bazel:source_snapshot_repository.bzl instead (a consumer's
complete steps: docs/rules/consumers.md, "Source snapshots").
"""

load("//rules/bazel/private:source_snapshot_repo.bzl", "source_snapshot_repository")

_channel = tag_class(attrs = {
    "name": attr.string(mandatory = True, doc = "Repository name, e.g. \"rcl_snapshot_stable\"."),
    "anchor": attr.label(mandatory = True, doc = "A file of the main repository; `path` is relative to its directory."),
    "path": attr.string(mandatory = True, doc = "The channel directory relative to the anchor's directory."),
})

def _impl(mctx):
    for mod in mctx.modules:
        for t in mod.tags.channel:
            source_snapshot_repository(name = t.name, anchor = t.anchor, path = t.path)

source_snapshots = module_extension(
    implementation = _impl,
    tag_classes = {"channel": _channel},
)
