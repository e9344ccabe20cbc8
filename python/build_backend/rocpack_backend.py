"""PEP 517 build backend of the ``rocpack`` Python distribution (in-tree,
no build requirements but a Rust toolchain to build a wheel).

``pip wheel .`` at the repository root builds, with cargo's release
profile into the workspace's ``target/`` (``CARGO_TARGET_DIR`` honoured,
so other release builds share it), ``kpack``, ``snapctl`` and
``librocm_kpack``, and packs a wheel holding:

* ``rocpack-V.data/scripts/{kpack,snapctl}``: installed on ``PATH``;
* ``rocpack/``: the Python package (``python -m rocpack --includedir``, the
  rocm-kpack-compatible ``rocpack.tools.*`` command lines);
* ``rocpack/lib/librocm_kpack.so.0`` (SONAME name; ``librocm_kpack.so`` is a
  one-line linker script naming it, as wheels cannot hold symlinks),
  ``rocpack/include/rocm_kpack/*.h``, ``rocpack/lib/pkgconfig/rocm_kpack.pc``
  and ``rocpack/lib/cmake/{rocm_kpack,rocm-kpack}/`` (paths relative to
  their own location, so they work wherever the wheel is installed).

The platform tag is computed from the binaries: ``manylinux_2_N_<arch>``
with N the newest glibc symbol version any of them references.

Environment: ``ROCPACK_PREBUILT_DIR=DIR`` packs ``DIR/{kpack,snapctl,
librocm_kpack.so}`` instead of running cargo; ``ROCPACK_WHEEL_CARGO_PROFILE``
(default ``release``); ``SOURCE_DATE_EPOCH`` sets the entries' timestamps
(default 1980-01-01). The same inputs give a byte-identical wheel.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import subprocess
import tarfile
import time
import zipfile
from pathlib import Path

try:
    from . import _elfinfo  # type: ignore
except ImportError:  # loaded as a top-level module (backend-path)
    import _elfinfo  # type: ignore

ROOT = Path(__file__).resolve().parents[2]
PYSRC = ROOT / "python" / "rocpack"
RUNTIME = ROOT / "tools" / "rocpack-runtime"
NAME = "rocpack"
SUMMARY = "ROCm kernel packs: split, recombine and check GPU device code; librocm_kpack"
BINARIES = ("kpack", "snapctl")
LIBRARY = "librocm_kpack.so"
SONAME = "librocm_kpack.so.0"


def version() -> str:
    text = (ROOT / "Cargo.toml").read_text(encoding="utf-8")
    m = re.search(r'^\[workspace\.package\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    if not m:
        raise RuntimeError(f"no [workspace.package] version in {ROOT / 'Cargo.toml'}")
    return m.group(1)


def _metadata() -> str:
    readme = "See https://github.com/rocpack/rocpack and docs/python.md.\n"
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version()}\n"
        f"Summary: {SUMMARY}\n"
        "License: Apache-2.0\n"
        "Requires-Python: >=3.8\n"
        "Project-URL: Source, https://github.com/rocpack/rocpack\n"
        "Classifier: Programming Language :: Rust\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + readme
    )


# scikit-build-core adds an entry point's package directory to
# CMAKE_PREFIX_PATH: find_package(rocm_kpack) then needs no hint.
ENTRY_POINTS = "[cmake.prefix]\nrocpack = rocpack\n"


def _dist_info() -> str:
    return f"{NAME}-{version()}.dist-info"


# -- building the binaries ---------------------------------------------------


def _build_dir() -> Path:
    prebuilt = os.environ.get("ROCPACK_PREBUILT_DIR")
    if prebuilt:
        return Path(prebuilt)
    profile = os.environ.get("ROCPACK_WHEEL_CARGO_PROFILE", "release")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    cmd = ["cargo", "build", "--locked", "--profile", profile,
           "-p", "kpack", "-p", "snapctl", "-p", "rocpack-runtime"]
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    try:
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    except FileNotFoundError:
        raise RuntimeError(
            "building the rocpack wheel needs cargo (a Rust toolchain) on PATH; "
            "installing the built wheel does not") from None
    return target / ("debug" if profile == "dev" else profile)


def _binaries(build: Path) -> dict[str, Path]:
    files = {name: build / name for name in BINARIES}
    files[LIBRARY] = build / LIBRARY
    for path in files.values():
        if not path.is_file():
            raise RuntimeError(f"{path} is missing (build it, or fix ROCPACK_PREBUILT_DIR)")
    return files


# -- the package's files -----------------------------------------------------


def _subst(template: Path) -> bytes:
    text = template.read_text(encoding="utf-8")
    return text.replace("@VERSION@", version()).replace("@REAL@", SONAME).encode()


def _dev_files() -> dict[str, bytes]:
    """Headers, pkg-config and CMake files under ``rocpack/``."""
    files: dict[str, bytes] = {}
    for h in sorted((RUNTIME / "include" / "rocm_kpack").glob("*.h")):
        files[f"rocpack/include/rocm_kpack/{h.name}"] = h.read_bytes()
    cm = RUNTIME / "cmake"
    # rocm_kpack.pc takes the shared library from rocm_kpack-shared.pc. The
    # wheel carries no librocm_kpack.a, so its rocm_kpack.pc names none:
    # `pkg-config --static` links the shared library here.
    pc = _subst(cm / "rocm_kpack.pc.in").replace(b" -l:librocm_kpack.a", b"")
    files["rocpack/lib/pkgconfig/rocm_kpack.pc"] = pc
    files["rocpack/lib/pkgconfig/rocm_kpack-shared.pc"] = _subst(cm / "rocm_kpack-shared.pc.in")
    for n in ("rocm_kpack-config", "rocm_kpack-config-version"):
        files[f"rocpack/lib/cmake/rocm_kpack/{n}.cmake"] = _subst(cm / f"{n}.cmake.in")
        alias = n.replace("rocm_kpack", "rocm-kpack")
        files[f"rocpack/lib/cmake/rocm-kpack/{alias}.cmake"] = (
            f'include("${{CMAKE_CURRENT_LIST_DIR}}/../rocm_kpack/{n}.cmake")\n'.encode())
    # -lrocm_kpack at link time: a linker script (GNU ld, gold, lld) naming
    # the real file, found through the same -L directory.
    files[f"rocpack/lib/{LIBRARY}"] = f"INPUT({SONAME})\n".encode()
    return files


def _python_files() -> dict[str, bytes]:
    files = {}
    for p in sorted(PYSRC.rglob("*.py")):
        files["rocpack/" + p.relative_to(PYSRC).as_posix()] = p.read_bytes()
    return files


# -- writing the wheel ----------------------------------------------------------


def _date_time() -> tuple:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.isdigit():
        t = time.gmtime(max(int(epoch), 315532800))
        return t[:6]
    return (1980, 1, 1, 0, 0, 0)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def _write_zip(path: Path, entries: list[tuple[str, bytes, int]]) -> None:
    """Entries (name, data, unix mode) in the given order; then RECORD."""
    dt = _date_time()
    record = "".join(_record_line(n, d) for n, d, _ in entries)
    record += f"{_dist_info()}/RECORD,,\n"
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w") as zf:
        for name, data, mode in entries + [(f"{_dist_info()}/RECORD", record.encode(), 0o644)]:
            info = zipfile.ZipInfo(name, dt)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3
            zf.writestr(info, data, compresslevel=6)
    os.replace(tmp, path)


def _wheel_entries(bins: dict[str, Path], tag: str) -> list[tuple[str, bytes, int]]:
    data_dir = f"{NAME}-{version()}.data"
    entries = [(n, d, 0o644) for n, d in sorted({**_python_files(), **_dev_files()}.items())]
    entries.append((f"rocpack/lib/{SONAME}", bins[LIBRARY].read_bytes(), 0o755))
    for b in BINARIES:
        entries.append((f"{data_dir}/scripts/{b}", bins[b].read_bytes(), 0o755))
    wheel = ("Wheel-Version: 1.0\nGenerator: rocpack_backend\n"
             f"Root-Is-Purelib: false\nTag: {tag}\n")
    di = _dist_info()
    entries += [(f"{di}/METADATA", _metadata().encode(), 0o644),
                (f"{di}/WHEEL", wheel.encode(), 0o644),
                (f"{di}/entry_points.txt", ENTRY_POINTS.encode(), 0o644)]
    if (ROOT / "LICENSE").is_file():
        entries.append((f"{di}/LICENSE", (ROOT / "LICENSE").read_bytes(), 0o644))
    return entries


# -- PEP 517 hooks -------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = Path(metadata_directory) / _dist_info()
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(_metadata(), encoding="utf-8")
    (d / "entry_points.txt").write_text(ENTRY_POINTS, encoding="utf-8")
    return d.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    bins = _binaries(_build_dir())
    plat = _elfinfo.platform_tag([bins[b] for b in BINARIES] + [bins[LIBRARY]])
    tag = f"py3-none-{plat}"
    name = f"{NAME}-{version()}-{tag}.whl"
    _write_zip(Path(wheel_directory) / name, _wheel_entries(bins, tag))
    return name


def _sdist_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                             capture_output=True).stdout
        return sorted(f for f in out.decode().split("\0") if f and (ROOT / f).is_file())
    except (OSError, subprocess.CalledProcessError):
        raise RuntimeError("the rocpack sdist is made from a git checkout (git ls-files)") from None


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{version()}"
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    name = f"{base}.tar.gz"
    path = Path(sdist_directory) / name
    pkg_info = _metadata().encode()
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for rel, data in [("PKG-INFO", pkg_info)] + [(f, None) for f in _sdist_files()]:
            src = ROOT / rel
            if data is None:
                data = src.read_bytes()
            info = tarfile.TarInfo(f"{base}/{rel}")
            info.size, info.mtime = len(data), mtime
            info.mode = 0o755 if rel != "PKG-INFO" and os.access(src, os.X_OK) else 0o644
            tf.addfile(info, io.BytesIO(data))
    return name
