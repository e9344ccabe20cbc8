#!/usr/bin/env python3
"""Checks a `kpack split` of a real package against the independent decoder
(fatbin_decode.py), then reassembles every split binary and checks that each
bundle comes back in its original format, version, method, entry IDs, order,
offsets and bytes.

Usage: check_split.py KPACK ART OUT NAME
  ART: the artifact directory given to `kpack split` (artifact_manifest.txt)
  OUT: its output directory; NAME: the --artifact-prefix
Prints one summary line; exits 1 with every mismatch listed.
"""
import atexit
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fatbin_decode import decode  # noqa: E402


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    kpack, art, out, name = sys.argv[1:5]
    prefixes = [l.strip() for l in open(os.path.join(art, "artifact_manifest.txt")) if l.strip()]
    bad = []
    fat = {}  # kernel_name -> (path, bundles)
    for p in prefixes:
        root = os.path.join(art, p)
        for d, _, files in os.walk(root):
            for f in sorted(files):
                path = os.path.join(d, f)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                b = decode(path)
                if b:
                    fat[p + "/" + os.path.relpath(path, root)] = (path, b)

    # Every code object of every .kpack, hashed here from the unpacked files.
    stored = {}
    tmp = tempfile.mkdtemp(prefix="pypi-check-")
    # Unpacked archives and reassembled binaries: gigabytes for a large
    # wheel; removed however the check ends.
    atexit.register(shutil.rmtree, tmp, True)
    kpacks = []
    for d, _, files in os.walk(out):
        kpacks += [os.path.join(d, f) for f in files if f.endswith(".kpack")]
    for i, k in enumerate(sorted(kpacks)):
        dst = os.path.join(tmp, str(i))
        man = json.loads(subprocess.run([kpack, "unpack", "--json", "-o", dst, k],
                                        check=True, stdout=subprocess.PIPE).stdout)
        for e in man["kernels"]:
            key = (e["key"], e["target"])
            h = sha(os.path.join(dst, e["file"]))
            if stored.setdefault(key, h) != h:
                bad.append("%s: %s differs between archives" % (k, key))

    objects, targets, seen = 0, set(), set()
    bundles_total = 0
    for kname, (path, bundles) in sorted(fat.items()):
        bundles_total += len(bundles)
        for i, b in enumerate(bundles):
            for e in b["entries"]:
                if e["id"].startswith("host"):
                    continue
                arch = e["id"].rsplit("--", 1)[-1]
                key = ("%s#%d" % (kname, i), arch)
                objects += 1
                targets.add(arch)
                seen.add(key)
                got = stored.get(key)
                if got is None:
                    bad.append("%s bundle %d %s: in no .kpack" % (path, i, arch))
                elif got != e["sha256"]:
                    bad.append("%s bundle %d %s: .kpack bytes differ" % (path, i, arch))
        prefix, rel = kname.split("/", 1)
        host = os.path.join(out, name + "_generic", prefix, rel)
        if decode(host):
            bad.append("%s: the host binary still carries device code" % host)
        again = os.path.join(tmp, "re-" + rel.replace("/", "_"))
        r = subprocess.run([kpack, "reassemble", "--host", host, "--kpack-dir", out, "-o", again],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            bad.append("%s: reassemble failed: %s" % (host, r.stderr.strip()))
            continue
        if "canonical form" in r.stderr:
            bad.append("%s: %s" % (host, r.stderr.strip()))
        back = decode(again) or []
        if back != bundles:
            for j, (x, y) in enumerate(zip(bundles, back)):
                for field in ("format", "version", "method", "sha256", "entries"):
                    if x[field] != y[field]:
                        bad.append("%s bundle %d: %s differs after reassembly" % (path, j, field))
            if len(back) != len(bundles):
                bad.append("%s: %d bundles after reassembly, %d before" % (path, len(back), len(bundles)))
    extra = set(stored) - seen
    for k in sorted(extra)[:10]:
        bad.append("%s %s: in a .kpack but not in any input bundle" % k)
    if not fat:
        bad.append("no fat binary found: the input is not what this test expects")
    if bad:
        print("\n".join("FAILED: " + b for b in bad), file=sys.stderr)
        sys.exit(1)
    print("  %d fat binaries, %d bundles, %d code objects, %d targets (%s); "
          "every code object matches the independent decoder; all %d reassembled exactly"
          % (len(fat), bundles_total, objects, len(targets), " ".join(sorted(targets)),
             len(fat)))

if __name__ == "__main__":
    main()
