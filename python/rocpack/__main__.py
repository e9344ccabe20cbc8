"""``python -m rocpack``: print where rocpack's C/C++ files are installed.

    python -m rocpack --includedir   # -I for rocm_kpack/kpack.h
    python -m rocpack --libdir       # -L for -lrocm_kpack (and the rpath)
    python -m rocpack --cmakedir     # rocm_kpack_DIR (or CMAKE_PREFIX_PATH=--prefix)
    python -m rocpack --pkgconfigdir # PKG_CONFIG_PATH for rocm_kpack.pc
    python -m rocpack --prefix       # the tree holding include/ and lib/
    python -m rocpack --kpack        # the kpack executable
    python -m rocpack --version
"""

from __future__ import annotations

import argparse
import sys

import rocpack


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rocpack", allow_abbrev=False,
                                 description="Print where rocpack's files are installed.")
    queries = {
        "includedir": rocpack.get_include,
        "libdir": rocpack.get_lib,
        "cmakedir": rocpack.get_cmake_dir,
        "pkgconfigdir": rocpack.get_pkgconfig_dir,
        "prefix": lambda: str(rocpack._HERE),
        "kpack": lambda: rocpack.executable("kpack"),
        "snapctl": lambda: rocpack.executable("snapctl"),
    }
    for q in queries:
        ap.add_argument(f"--{q}", action="append_const", const=q, dest="queries")
    ap.add_argument("--version", action="store_true", help="the rocpack version")
    args = ap.parse_args(argv)
    if args.version:
        from importlib.metadata import version
        print(version("rocpack"))
    if not args.queries and not args.version:
        ap.print_help(sys.stderr)
        return 2
    try:
        for q in args.queries or []:
            print(queries[q]())
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
