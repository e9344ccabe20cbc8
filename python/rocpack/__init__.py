"""rocpack from Python: where the installed ``librocm_kpack`` files and the
``kpack`` and ``snapctl`` executables are.

``python -m rocpack --includedir`` (and ``--libdir``, ``--cmakedir``,
``--pkgconfigdir``) prints the directories a C or C++ build needs;
``rocpack.tools.*`` are rocm-kpack's command lines run by ``kpack``.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def get_include() -> str:
    """Directory holding ``rocm_kpack/kpack.h``."""
    return str(_HERE / "include")


def get_lib() -> str:
    """Directory holding ``librocm_kpack.so.0`` (and ``librocm_kpack.so`` to link with)."""
    return str(_HERE / "lib")


def get_cmake_dir() -> str:
    """``rocm_kpack_DIR`` for CMake's ``find_package(rocm_kpack)``."""
    return str(_HERE / "lib" / "cmake" / "rocm_kpack")


def get_pkgconfig_dir() -> str:
    """Directory holding ``rocm_kpack.pc`` (for ``PKG_CONFIG_PATH``)."""
    return str(_HERE / "lib" / "pkgconfig")


def _script_dirs() -> list[Path]:
    dirs = [Path(sysconfig.get_path("scripts"))]
    try:
        dirs.append(Path(sysconfig.get_path("scripts", f"{os.name}_user")))
    except KeyError:
        pass
    dirs.append(Path(sys.executable).parent)
    return dirs


def executable(name: str) -> str:
    """Path of an installed rocpack executable (``kpack`` or ``snapctl``):
    ``ROCPACK_KPACK``/``ROCPACK_SNAPCTL`` if set, else the one installed with
    this package (the interpreter's scripts directory), else ``PATH``."""
    override = os.environ.get(f"ROCPACK_{name.upper()}")
    if override:
        return override
    for d in _script_dirs():
        cand = d / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(
        f"rocpack: `{name}` is not installed next to this Python ({_script_dirs()[0]}) "
        f"nor on PATH; install the rocpack wheel or set ROCPACK_{name.upper()}")
