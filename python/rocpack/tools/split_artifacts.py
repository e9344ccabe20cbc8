"""``python -m rocpack.tools.split_artifacts``: rocm-kpack's
``split_artifacts`` command line, run by ``kpack split``.

Single artifact: ``--artifact-dir DIR --artifact-prefix NAME --output-dir
OUT`` (rocm-kpack's older spellings ``--input-dir``, ``--component-name``
too); batch: ``--batch-artifact-parent-dir DIR --output-dir OUT`` (every
``<prefix>_<family>`` directory, ``*_generic`` skipped). Writes
``OUT/NAME_generic/`` and ``OUT/NAME_<arch>/`` as rocm-kpack does.
"""

from __future__ import annotations

import sys

from rocpack.tools import _common


def build_parser():
    ap = _common.parser("split_artifacts", "Split TheRock artifacts into generic and per-arch artifacts.")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--artifact-dir", "--input-dir", dest="artifact_dir", metavar="DIR",
                     help="one artifact directory (holding artifact_manifest.txt)")
    src.add_argument("--batch-artifact-parent-dir", metavar="DIR",
                     help="split every <prefix>_<family> artifact directory under DIR")
    ap.add_argument("--artifact-prefix", "--component-name", dest="artifact_prefix", metavar="NAME",
                    help="output names NAME_generic and NAME_<arch> (with --artifact-dir)")
    ap.add_argument("--output-dir", required=True, metavar="DIR")
    ap.add_argument("--split-databases", nargs="*", default=[], metavar="HANDLER",
                    help="database handlers: rocblas hipblaslt aotriton miopen (and rocpack's others)")
    ap.add_argument("--tmp-dir", metavar="DIR", help="exported as TMPDIR")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--clang-offload-bundler", metavar="PATH",
                    help="accepted; not needed (rocpack reads offload bundles itself)")
    _common.add_rocpack_options(ap)
    ap.add_argument("--compression", metavar="SCHEME",
                    help="rocpack: .kpack compression, zstd (default), zstd:LEVEL or none "
                         "(rocm-kpack writes none)")
    return ap


def kpack_args(args) -> list[str]:
    if args.artifact_dir is not None:
        if not args.artifact_prefix:
            raise ValueError("--artifact-prefix (or --component-name) is required with --artifact-dir")
        out = ["split", "--artifact-dir", args.artifact_dir, "--artifact-prefix", args.artifact_prefix]
    else:
        if args.artifact_prefix:
            raise ValueError("--artifact-prefix cannot be used with --batch-artifact-parent-dir")
        out = ["split", "--batch-artifact-parent-dir", args.batch_artifact_parent_dir]
    out += ["--output-dir", args.output_dir]
    if args.split_databases:
        out += ["--split-databases"] + args.split_databases
    if args.compression:
        out += ["--compression", args.compression]
    return out


def main(argv=None) -> int:
    ap = build_parser()
    args = _common.parse(ap, argv)
    try:
        cmd = kpack_args(args)
    except ValueError as e:
        ap.error(str(e))
    if args.clang_offload_bundler:
        _common.note(args, "--clang-offload-bundler is not needed; ignored")
    return _common.run_kpack(args, cmd, _common.tmp_env(args.tmp_dir))


if __name__ == "__main__":
    sys.exit(main())
