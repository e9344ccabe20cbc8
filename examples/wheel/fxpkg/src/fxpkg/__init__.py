"""fxpkg: a tiny package whose native library is a HIP fat binary."""
import os

__version__ = "1.0"
LIB = os.path.join(os.path.dirname(__file__), "lib", "libfxpkg.so")


def library_path():
    """Path of the native library (not loaded: loading needs no GPU, but HIP)."""
    return LIB
