"""Providers of the rocpack Bazel rules."""

KpackSplitInfo = provider(
    doc = "The output of kpack_split: one artifact directory split into host code and per-arch packs.",
    fields = {
        "dir": "Tree artifact holding <prefix>_generic/ and <prefix>_<arch>/ directories.",
        "artifact_prefix": "The --artifact-prefix (component name) used.",
        "shard": "Shard name this split belongs to (the subdirectory name kpack recombine sees).",
        "archs": "Sorted list of archs declared with the `archs` attribute (checked by the action), or None when not declared.",
        "archs_file": "File listing the archs the split really produced, one per line, sorted.",
    },
)

KpackPackageInfo = provider(
    doc = "One recombined package (a group's device code, or the generic host code).",
    fields = {
        "dir": "Tree artifact with the package contents (artifact_manifest.txt + prefixes).",
        "component": "Component name.",
        "group": "Architecture group name, or \"generic\".",
    },
)

FlagValueInfo = provider(
    doc = "Value of a rocpack string_flag, readable by rules that depend on the flag.",
    fields = {"value": "The flag's string value."},
)

SnapshotBlobInfo = provider(
    doc = "A prebuilt snapshot artifact, verified against its pinned sha256.",
    fields = {
        "file": "The verified artifact (e.g. librcclx-dev.a).",
        "sha256": "Its sha256.",
        "channel": "stable or last_stable.",
        "version": "ROCm version.",
    },
)
