"""``python -m rocpack.tools.recombine_artifacts``: rocm-kpack's
``recombine_artifacts`` command line, run by ``kpack recombine``.

``--input-shards-dir DIR --config FILE --output-dir OUT [--component
NAME]``: writes ``OUT/<component>_generic/`` once and
``OUT/<component>_<group>/`` per architecture group with content.
"""

from __future__ import annotations

import sys

from rocpack.tools import _common


def build_parser():
    ap = _common.parser("recombine_artifacts", "Recombine split artifact shards into package groups.")
    ap.add_argument("--input-shards-dir", required=True, metavar="DIR",
                    help="directory whose subdirectories are split shards")
    ap.add_argument("--config", required=True, metavar="FILE", help="packaging config (JSON)")
    ap.add_argument("--output-dir", required=True, metavar="DIR")
    ap.add_argument("--component", metavar="NAME", help="only this component")
    ap.add_argument("--verbose", "-v", action="store_true")
    _common.add_rocpack_options(ap)
    ap.add_argument("--hardlink", action="store_true",
                    help="rocpack: hard-link output files to the shards instead of copying")
    return ap


def kpack_args(args) -> list[str]:
    out = ["recombine", "--input-shards-dir", args.input_shards_dir, "--config", args.config,
           "--output-dir", args.output_dir]
    if args.component:
        out += ["--component", args.component]
    if args.verbose:
        out.append("--verbose")
    if args.hardlink:
        out.append("--hardlink")
    return out


def main(argv=None) -> int:
    args = _common.parse(build_parser(), argv)
    return _common.run_kpack(args, kpack_args(args))


if __name__ == "__main__":
    sys.exit(main())
