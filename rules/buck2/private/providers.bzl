"""Providers of the rocpack Buck2 rules (field names match rules/bazel)."""

RocpackToolchainInfo = provider(
    doc = "The helper binaries, as the toolchains//:rocpack target provides them.",
    fields = {
        # RunInfo of `kpack`.
        "kpack": provider_field(typing.Any),
        # RunInfo of `snapctl`.
        "snapctl": provider_field(typing.Any),
    },
)

KpackSplitInfo = provider(
    doc = "The output of kpack_split: one artifact directory split into host code and per-arch packs.",
    fields = {
        # Sorted archs declared with the `archs` attribute (checked by the action), or None.
        "archs": provider_field(typing.Any, default = None),
        # File listing the archs the split really produced, one per line, sorted.
        "archs_file": provider_field(typing.Any),
        # The --artifact-prefix (component name) used.
        "artifact_prefix": provider_field(str),
        # Output directory holding <prefix>_generic/ and <prefix>_<arch>/.
        "dir": provider_field(typing.Any),
        # Shard name: the directory kpack recombine sees under --input-shards-dir.
        "shard": provider_field(str),
    },
)

KpackPackageInfo = provider(
    doc = "One recombined package (a group's device code, or the generic host code).",
    fields = {
        # Component name.
        "component": provider_field(str),
        # Directory with the package contents (artifact_manifest.txt + prefixes).
        "dir": provider_field(typing.Any),
        # Architecture group name, or "generic".
        "group": provider_field(str),
    },
)

SnapshotBlobInfo = provider(
    doc = "A prebuilt snapshot artifact, verified against its pinned sha256 and metadata.",
    fields = {
        # stable or last_stable.
        "channel": provider_field(str),
        # The verified artifact (e.g. librcclx-dev.a).
        "file": provider_field(typing.Any),
        # Its sha256.
        "sha256": provider_field(str),
        # ROCm version.
        "version": provider_field(str),
    },
)
