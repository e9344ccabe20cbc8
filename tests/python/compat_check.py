"""rocm-kpack's command lines through ``python -m rocpack.tools.*`` give the
same trees, byte for byte, as ``kpack split``/``recombine`` given the same
inputs; ``kpack verify`` passes on them; unknown or abbreviated flags fail
naming the flag.

    python tests/python/compat_check.py KPACK SHARDS_DIR CONFIG WORK_DIR

Run with the interpreter the rocpack wheel is installed in (the tools run
the ``kpack`` installed with it; KPACK is the one the results are compared
with). Exit 0 ok, 1 a check failed.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under ROOT: (kind, bytes or link target, mode bits)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p), 0)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", b"", 0)
            else:
                out[rel] = ("file", p.read_bytes(), stat.S_IMODE(st.st_mode) & 0o111)
    return out


def same_tree(a: Path, b: Path) -> int:
    ta, tb = tree(a), tree(b)
    if ta.keys() != tb.keys():
        sys.exit(f"FAILED: {a} and {b} differ in entries: only in the first "
                 f"{sorted(ta.keys() - tb.keys())[:5]}, only in the second {sorted(tb.keys() - ta.keys())[:5]}")
    for k in ta:
        if ta[k] != tb[k]:
            sys.exit(f"FAILED: {k} differs between {a} and {b}")
    return sum(1 for v in ta.values() if v[0] == "file")


def run(cmd: list[str], expect: int = 0, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != expect:
        sys.exit(f"FAILED: {' '.join(cmd)} exited {r.returncode}, expected {expect}\n{r.stdout}{r.stderr}")
    return r


def tool(name: str, *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", f"rocpack.tools.{name}", *args], expect=expect)


def check_flags(shards: Path, work: Path) -> None:
    """Unknown and abbreviated flags fail naming them; rocm-kpack's
    argument rules hold."""
    one = next(p for p in sorted(shards.iterdir()) if p.is_dir())
    art = next(p for p in sorted(one.iterdir()) if p.is_dir())
    cases = [
        (["split_artifacts", "--batch-artifact-parent-dir", str(one), "--output-dir", str(work / "x"),
          "--no-such-flag"], "--no-such-flag"),
        (["split_artifacts", "--batch-artifact-parent-dir", str(one), "--out", str(work / "x")], "--out"),
        (["split_artifacts", "--artifact-dir", str(art), "--output-dir", str(work / "x")], "--artifact-prefix"),
        (["split_artifacts", "--artifact-dir", str(art), "--batch-artifact-parent-dir", str(one),
          "--output-dir", str(work / "x")], "not allowed with"),
        (["recombine_artifacts", "--input-shards-dir", str(work), "--config", "c.json",
          "--output-dir", str(work / "x"), "--frobnicate"], "--frobnicate"),
        (["verify_artifacts", "--artifacts-dir", str(work), "--strict"], "--strict"),
    ]
    for args, needle in cases:
        r = tool(*args, expect=2)
        if needle not in r.stderr:
            sys.exit(f"FAILED: {args}: the message does not name {needle}: {r.stderr}")
    if (work / "x").exists():
        sys.exit("FAILED: a refused command line wrote output")


def main() -> int:
    kpack, shards, config, work = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    work.mkdir(parents=True)
    check_flags(shards, work)
    names = sorted(p.name for p in shards.iterdir() if p.is_dir())
    # Map phase, as TheRock runs it: one batch split per shard.
    for shard in names:
        tool("split_artifacts", "--batch-artifact-parent-dir", str(shards / shard),
             "--output-dir", str(work / "py-split" / shard), "--split-databases", "rocblas", "hipblaslt",
             "--clang-offload-bundler", "/nonexistent/clang-offload-bundler", "--verbose",
             "--tmp-dir", str(work / "tmp"))
        run([kpack, "split", "--batch-artifact-parent-dir", str(shards / shard),
             "--output-dir", str(work / "kp-split" / shard), "--split-databases", "rocblas", "hipblaslt"])
        n = same_tree(work / "py-split" / shard, work / "kp-split" / shard)
        print(f"split {shard}: {n} files, identical to kpack split")
        tool("verify_artifacts", "--artifacts-dir", str(work / "py-split" / shard),
             "--clang-offload-bundler", "/nonexistent/clang-offload-bundler")
    # The tutorial's single-artifact spelling.
    art = next(p for p in sorted((shards / names[0]).iterdir()) if p.is_dir())
    tool("split_artifacts", "--input-dir", str(art), "--component-name", "blas_lib",
         "--output-dir", str(work / "py-one"), "--split-databases", "rocblas")
    run([kpack, "split", "--artifact-dir", str(art), "--artifact-prefix", "blas_lib",
         "--output-dir", str(work / "kp-one"), "--split-databases", "rocblas"])
    print(f"split --input-dir/--component-name: {same_tree(work / 'py-one', work / 'kp-one')} files, identical")
    # Reduce phase.
    tool("recombine_artifacts", "--input-shards-dir", str(work / "py-split"), "--config", config,
         "--output-dir", str(work / "py-out"), "--verbose")
    run([kpack, "recombine", "--input-shards-dir", str(work / "kp-split"), "--config", config,
         "--output-dir", str(work / "kp-out")])
    n = same_tree(work / "py-out", work / "kp-out")
    print(f"recombine: {n} files, identical to kpack recombine "
          f"({', '.join(sorted(p.name for p in (work / 'py-out').iterdir()))})")
    tool("verify_artifacts", "--artifacts-dir", str(work / "py-out"), "--verbose")
    run([kpack, "verify", "--artifacts-dir", str(work / "py-out"), "--config", config])
    # verify_artifacts fails (exit 1) on a broken tree.
    kp = next(p for p in sorted((work / "py-out").rglob("*.kpack")) if p.is_file())
    kp.write_bytes(b"KPAK" + b"\0" * 12)
    tool("verify_artifacts", "--artifacts-dir", str(work / "py-out"), expect=1)
    print("verify_artifacts: passes on the outputs, fails (exit 1) on a damaged .kpack")
    return 0


if __name__ == "__main__":
    sys.exit(main())
