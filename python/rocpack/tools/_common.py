"""What the rocm-kpack-compatible command lines share: a strict parser and
running ``kpack``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import rocpack


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    # No abbreviations: `--out` must not silently mean `--output-dir`, and an
    # unknown flag fails naming it ("unrecognized arguments: --foo", exit 2).
    return argparse.ArgumentParser(prog=f"python -m rocpack.tools.{prog}",
                                   description=description, allow_abbrev=False)


def add_rocpack_options(ap: argparse.ArgumentParser, *, jobs: bool = True) -> None:
    """Options rocm-kpack does not have, passed to kpack as they are."""
    g = ap.add_argument_group("rocpack options (not in rocm-kpack)")
    if jobs:
        g.add_argument("-j", "--jobs", type=int, metavar="N",
                       help="worker threads (default: one per CPU); the output does not depend on it")
    g.add_argument("--json", action="store_true", help="kpack's JSON report on stdout")


def note(args: argparse.Namespace, msg: str) -> None:
    if getattr(args, "verbose", False):
        print(f"rocpack: {msg}", file=sys.stderr)


def run_kpack(args: argparse.Namespace, kpack_args: list[str], env: dict | None = None) -> int:
    """Run ``kpack KPACK_ARGS``; its exit code (0 ok, 1 a check failed,
    2 usage or input error)."""
    if getattr(args, "jobs", None) is not None:
        kpack_args += ["--jobs", str(args.jobs)]
    if getattr(args, "json", False):
        kpack_args.append("--json")
    try:
        exe = rocpack.executable("kpack")
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    note(args, "running " + " ".join([exe] + kpack_args))
    return subprocess.run([exe] + kpack_args, env=env).returncode


def tmp_env(tmp_dir: str | None) -> dict | None:
    """rocm-kpack exports --tmp-dir as TMPDIR; so does rocpack (kpack
    itself stages beside the output, so it needs none)."""
    if not tmp_dir:
        return None
    os.makedirs(tmp_dir, exist_ok=True)
    return dict(os.environ, TMPDIR=os.path.abspath(tmp_dir))


def parse(ap: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ARGV; flags the command does not have are refused first, all of
    them named (argparse would otherwise report a missing required flag
    when the unknown one is a misspelling of it)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    known = ap._option_string_actions  # noqa: SLF001 (argparse has no public lookup)
    unknown = []
    for tok in argv:
        if tok == "--":
            break
        if tok.startswith("-") and len(tok) > 1 and not tok[1:2].isdigit():
            if tok.split("=", 1)[0] not in known:
                unknown.append(tok.split("=", 1)[0])
    if unknown:
        ap.error("unrecognized arguments: " + " ".join(unknown))
    return ap.parse_args(argv)
