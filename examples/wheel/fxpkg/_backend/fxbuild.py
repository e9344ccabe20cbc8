"""Minimal PEP 517 backend (stdlib only): packs src/ into a platform wheel.

Deterministic: sorted entries, fixed timestamps, and Unix modes from the
content (0755 for ELF files, 0644 otherwise), never from the file system:
a checkout's exec bits are not part of a build's inputs (a remote worker
makes every input executable; git may drop the bits), so the wheel would
otherwise differ between machines.
"""
import base64
import hashlib
import os
import zipfile

NAME = "fxpkg"
VERSION = "1.0"
TAG = "py3-none-linux_x86_64"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(HERE, "src")
DIST_INFO = "%s-%s.dist-info" % (NAME, VERSION)
METADATA = (
    "Metadata-Version: 2.1\n"
    "Name: %s\n"
    "Version: %s\n"
    "Summary: rocpack example: a package with a fat HIP library\n"
    "Requires-Python: >=3.8\n" % (NAME, VERSION)
)
WHEEL = (
    "Wheel-Version: 1.0\n"
    "Generator: fxbuild (rocpack example)\n"
    "Root-Is-Purelib: false\n"
    "Tag: %s\n" % TAG
)


def get_requires_for_build_wheel(config_settings=None):
    return []


def _files():
    out = []
    for d, dirs, files in os.walk(SRC):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".pyc"):
                continue
            p = os.path.join(d, f)
            out.append((os.path.relpath(p, SRC).replace(os.sep, "/"), p))
    return sorted(out)


def _add(zf, records, name, data, mode):
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    records.append("%s,sha256=%s,%d" % (name, digest.decode(), len(data)))


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    wheel = "%s-%s-%s.whl" % (NAME, VERSION, TAG)
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as zf:
        for rel, path in _files():
            with open(path, "rb") as f:
                data = f.read()
            mode = 0o755 if data[:4] == b"\x7fELF" else 0o644
            _add(zf, records, rel, data, mode)
        _add(zf, records, DIST_INFO + "/METADATA", METADATA.encode(), 0o644)
        _add(zf, records, DIST_INFO + "/WHEEL", WHEEL.encode(), 0o644)
        records.append(DIST_INFO + "/RECORD,,")
        info = zipfile.ZipInfo(DIST_INFO + "/RECORD", date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o100644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, "\n".join(records) + "\n")
    return wheel
