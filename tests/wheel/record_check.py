#!/usr/bin/env python3
"""Independent RECORD check of wheels (stdlib only, no rocpack code).

For each wheel: the zip is readable and every CRC matches (testzip); there
is exactly one *.dist-info/RECORD; every file of the archive is listed in
RECORD exactly once with the right sha256 (urlsafe base64, no padding) and
size, RECORD itself with empty hash and size; RECORD lists nothing that is
not in the archive; no entry is a directory or symlink, no path escapes.
Also accepts exploded wheel directories (same checks on the files).
Exit 0 when every wheel passes, 1 otherwise (each problem printed).
"""
import base64
import csv
import hashlib
import io
import os
import stat
import sys
import zipfile


def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def check_files(label, files):
    """files: dict name -> bytes."""
    problems = []
    records = [n for n in files if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        return ["%s: %d RECORD files" % (label, len(records))]
    rec_name = records[0]
    rows = list(csv.reader(io.StringIO(files[rec_name].decode("utf-8"))))
    listed = {}
    for row in rows:
        if not row:
            continue
        if len(row) != 3:
            problems.append("%s: bad RECORD row %r" % (label, row))
            continue
        if row[0] in listed:
            problems.append("%s: %s listed twice" % (label, row[0]))
        listed[row[0]] = (row[1], row[2])
    for name, data in sorted(files.items()):
        if name.startswith("/") or ".." in name.split("/"):
            problems.append("%s: unsafe path %s" % (label, name))
        if name not in listed:
            problems.append("%s: %s not in RECORD" % (label, name))
            continue
        h, size = listed[name]
        if name == rec_name:
            if h or size:
                problems.append("%s: RECORD lists itself with a hash" % label)
            continue
        if h != digest(data):
            problems.append("%s: %s: hash %s, RECORD says %s" % (label, name, digest(data), h))
        if size != str(len(data)):
            problems.append("%s: %s: size %d, RECORD says %s" % (label, name, len(data), size))
    for name in listed:
        if name not in files:
            problems.append("%s: RECORD lists missing %s" % (label, name))
    return problems


def check_wheel(path):
    problems = []
    with zipfile.ZipFile(path) as zf:
        bad = zf.testzip()
        if bad:
            return ["%s: CRC mismatch in %s" % (path, bad)]
        files = {}
        for info in zf.infolist():
            mode = info.external_attr >> 16
            if info.is_dir() or stat.S_ISLNK(mode):
                problems.append("%s: %s is a directory or symlink entry" % (path, info.filename))
                continue
            if info.filename in files:
                problems.append("%s: %s appears twice" % (path, info.filename))
            files[info.filename] = zf.read(info)
    return problems + check_files(path, files)


def check_dir(path):
    files = {}
    for d, _, names in os.walk(path):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                files[os.path.relpath(p, path).replace(os.sep, "/")] = f.read()
    return check_files(path, files)


def main(argv):
    if not argv:
        print("usage: record_check.py WHEEL_OR_DIR...", file=sys.stderr)
        return 2
    problems = []
    for p in argv:
        problems += check_dir(p) if os.path.isdir(p) else check_wheel(p)
    for p in problems:
        print("FAIL " + p)
    print("%s: %d wheel(s), %d problem(s)" % ("OK" if not problems else "FAILED", len(argv), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
