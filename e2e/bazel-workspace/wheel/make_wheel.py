"""Writes a minimal, deterministic PEP 427 wheel holding one fat library.

    make_wheel.py OUT.whl LIBRARY
"""
import base64
import hashlib
import sys
import zipfile

out, lib = sys.argv[1], sys.argv[2]
name, version = "fxwheel", "1.0"
dist = "%s-%s.dist-info" % (name, version)
with open(lib, "rb") as f:
    lib_bytes = f.read()
files = [
    ("fxwheel/__init__.py", b'"""fxwheel: a fat GPU library in a wheel."""\n'),
    ("fxwheel/libfx.so", lib_bytes),
    (dist + "/METADATA", ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version)).encode()),
    (dist + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: make_wheel.py\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"),
]


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d\n" % (path, digest, len(data))


record = "".join(record_line(p, d) for p, d in files) + dist + "/RECORD,,\n"
files.append((dist + "/RECORD", record.encode()))
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for path, data in files:
        info = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
        info.external_attr = (0o755 if path.endswith(".so") else 0o644) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, data)
