"""``python -m rocpack.tools.verify_artifacts``: rocm-kpack's
``verify_artifacts`` command line, run by ``kpack verify``.

``--artifacts-dir DIR``: every artifact directory under DIR (a split
shard's or a recombined output) is checked; exit 0 pass, 1 a check failed,
2 cannot run.
"""

from __future__ import annotations

import sys

from rocpack.tools import _common


def build_parser():
    ap = _common.parser("verify_artifacts", "Check split or recombined artifacts.")
    ap.add_argument("--artifacts-dir", required=True, metavar="DIR")
    ap.add_argument("--verbose", "-v", action="store_true")
    ap.add_argument("--clang-offload-bundler", metavar="PATH", help="accepted; not needed")
    _common.add_rocpack_options(ap, jobs=False)
    ap.add_argument("--config", metavar="FILE",
                    help="rocpack: packaging config (exact architectures of group artifacts)")
    return ap


def kpack_args(args) -> list[str]:
    out = ["verify", "--artifacts-dir", args.artifacts_dir]
    if args.config:
        out += ["--config", args.config]
    if args.verbose:
        out.append("--verbose")
    return out


def main(argv=None) -> int:
    args = _common.parse(build_parser(), argv)
    return _common.run_kpack(args, kpack_args(args))


if __name__ == "__main__":
    sys.exit(main())
