#!/usr/bin/env python3
"""Checks a `kpack split` of a real package against the independent decoder
(fatbin_decode.py), then reassembles every split binary and checks that each
bundle comes back in its original format, version, method, entry IDs, order,
offsets and bytes, and that the reassembled file is the original byte for
byte (`cmp`). The one exception: a binary with compressed (CCOB) bundles,
which `kpack reassemble` recompresses (the compressed stream is not kept);
its decompressed bundles must be the original's and every byte outside the
bundle section's file range and the header fields that give its size must
be the original's.

Usage: check_split.py KPACK ART OUT NAME
  ART: the artifact directory given to `kpack split` (artifact_manifest.txt)
  OUT: its output directory; NAME: the --artifact-prefix
Prints one summary line; exits 1 with every mismatch listed.
"""
import atexit
import hashlib
import json
import mmap
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fatbin_decode import decode, sections  # noqa: E402


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_diff(a, b):
    """None when files `a` and `b` are equal, else what differs."""
    r = subprocess.run(["cmp", a, b], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode == 0:
        return None
    return "%d vs %d bytes; %s" % (os.path.getsize(a), os.path.getsize(b), r.stdout.strip())


def outside_bundles(a, b):
    """Where `a` and `b` differ outside the bundle section: its file range
    (up to the larger of the two sizes), in the headers the bundle
    section's size fields (ELF `sh_size`; PE `VirtualSize`,
    `SizeOfRawData`) and the PE `CheckSum`, and the 8-byte words that hold
    an address inside the bundle section in both files (wrapper pointers,
    relocation addends: recompressed bundles may start at other 4096-aligned
    offsets). Empty when nothing else differs."""
    with open(a, "rb") as f, open(b, "rb") as g:
        if os.fstat(f.fileno()).st_size != os.fstat(g.fileno()).st_size:
            return ["size %d vs %d" % (os.fstat(f.fileno()).st_size, os.fstat(g.fileno()).st_size)]
        da = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        db = mmap.mmap(g.fileno(), 0, access=mmap.ACCESS_READ)
        sa, sb = sections(da), sections(db)
        fa, fb = sa[".hip_fatbin"], sb.get(".hip_fatbin", (0, 0, 0))
        skip = [(fa[1], fa[1] + max(fa[2], fb[2]))]
        skip += header_fields(da, ".hip_fatbin")
        ra, rb = address_range(da), address_range(db)
        span = (min(ra[0], rb[0]), max(ra[1], rb[1]))
        out = []
        chunk = 1 << 20
        for c in range(0, len(da), chunk):
            e = min(c + chunk, len(da))
            if da[c:e] == db[c:e] or any(lo <= c and e <= hi for lo, hi in skip):
                continue
            x, y = da[c:e], db[c:e]
            for i in range(e - c):
                if x[i] != y[i] and not any(lo <= c + i < hi for lo, hi in skip):
                    w = (c + i) & ~7
                    if w + 8 <= len(da) and all(span[0] <= struct.unpack_from("<Q", d, w)[0] < span[1]
                                                for d in (da, db)):
                        continue
                    out.append(hex(c + i))
                    if len(out) == 8:
                        return out
        return out


def address_range(data):
    """Run-time addresses of the bundle section (ELF `sh_addr`, PE
    `ImageBase + VirtualAddress`), `VirtualSize`/`sh_size` long."""
    if data[:2] == b"MZ":
        nt, = struct.unpack_from("<I", data, 0x3C)
        nsec, = struct.unpack_from("<H", data, nt + 6)
        opt_size, = struct.unpack_from("<H", data, nt + 20)
        base, = struct.unpack_from("<Q", data, nt + 24 + 24)
        table = nt + 24 + opt_size
        for i in range(nsec):
            h = table + 40 * i
            if data[h:h + 8].rstrip(b"\0").decode("latin-1") in (".hip_fat", ".hip_fatbin"):
                vsize, va = struct.unpack_from("<II", data, h + 8)
                return (base + va, base + va + vsize)
        return (0, 0)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    stroff, = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)
    for i in range(shnum):
        h = shoff + i * shentsize
        n, = struct.unpack_from("<I", data, h)
        if data[stroff + n:stroff + n + 12] == b".hip_fatbin\0":
            addr, _, size = struct.unpack_from("<QQQ", data, h + 0x10)
            return (addr, addr + size)
    return (0, 0)


def header_fields(data, name):
    """File ranges of the size fields of section `name` (and the PE
    CheckSum)."""
    if data[:2] == b"MZ":
        nt, = struct.unpack_from("<I", data, 0x3C)
        nsec, = struct.unpack_from("<H", data, nt + 6)
        opt_size, = struct.unpack_from("<H", data, nt + 20)
        table = nt + 24 + opt_size
        out = [(nt + 24 + 64, nt + 24 + 68)]
        for i in range(nsec):
            h = table + 40 * i
            if data[h:h + 8].rstrip(b"\0").decode("latin-1") in (".hip_fat", ".hip_fatbin"):
                out += [(h + 8, h + 12), (h + 16, h + 20)]
        return out
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    stroff, = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)
    out = []
    for i in range(shnum):
        h = shoff + i * shentsize
        n, = struct.unpack_from("<I", data, h)
        if data[stroff + n:stroff + n + len(name) + 1] == name.encode() + b"\0":
            out.append((h + 0x20, h + 0x28))
    return out


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
    exact, recompressed = 0, 0
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
        diff = file_diff(path, again)
        if diff is None:
            exact += 1
        elif any(b["format"] == "ccob" for b in bundles):
            recompressed += 1
            outside = outside_bundles(path, again)
            if outside:
                bad.append("%s: reassembled with recompressed bundles, but bytes outside the bundle section differ: %s"
                           % (path, outside))
        else:
            bad.append("%s: reassembly is not byte-identical: %s" % (path, diff))
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
          "every code object matches the independent decoder; every bundle comes back; "
          "%d reassembled byte-identically (cmp)%s"
          % (len(fat), bundles_total, objects, len(targets), " ".join(sorted(targets)),
             exact, ", %d with recompressed CCOB bundles (identical but for the bundle section, its size fields and the pointers into it)" % recompressed
             if recompressed else ""))

if __name__ == "__main__":
    main()
