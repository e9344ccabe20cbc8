#!/usr/bin/env python3
"""An independent decoder of HIP fat binaries, written for the tests from the
published format (clang offload bundles, CCOB v1-v3; ELF64 section headers).
It shares no code with rocpack: it is the oracle the PyPI stage checks
rocpack's split and reassembly against.

Usage: fatbin_decode.py FILE...   -> JSON on stdout:
  {FILE: null (no device code) | [bundle, ...]}
  bundle = {"format": "uncompressed" | "ccob", "version": int, "method": str,
            "sha256": hex of the uncompressed bundle,
            "entries": [{"id": str, "offset": int, "size": int, "sha256": hex}]}
zstd payloads are decompressed with the `zstd` command, zlib with Python's.
"""
import hashlib
import json
import struct
import subprocess
import sys
import zlib

BUNDLE = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB = b"CCOB"


def pe_sections(data):
    """PE32+ image: `.hip_fat` (lld-link truncates `.hip_fatbin`) as
    `.hip_fatbin`, its stored bytes min(VirtualSize, SizeOfRawData)."""
    nt, = struct.unpack_from("<I", data, 0x3C)
    if data[nt:nt + 4] != b"PE\0\0":
        return {}
    nsec, = struct.unpack_from("<H", data, nt + 6)
    opt_size, = struct.unpack_from("<H", data, nt + 20)
    table = nt + 24 + opt_size
    out = {}
    for i in range(nsec):
        h = table + 40 * i
        name = data[h:h + 8].rstrip(b"\0").decode("latin-1")
        vsize, _, rsize, roff = struct.unpack_from("<IIII", data, h + 8)
        if name in (".hip_fat", ".hip_fatbin"):
            name = ".hip_fatbin"
        out[name] = (1, roff, min(vsize, rsize) if vsize else rsize)
    return out


def sections(data):
    if data[:2] == b"MZ":
        return pe_sections(data)
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0:
        return {}
    if shnum == 0:
        shnum, = struct.unpack_from("<Q", data, shoff + 0x20)
    hdrs = []
    for i in range(shnum):
        name, typ, flags, addr, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        hdrs.append((name, typ, off, size))
    stroff = hdrs[shstrndx][2]
    out = {}
    for name, typ, off, size in hdrs:
        end = data.find(b"\0", stroff + name)
        out[data[stroff + name:end].decode()] = (typ, off, size)
    return out


def parse_uncompressed(b):
    if b[:24] != BUNDLE:
        raise ValueError("not an uncompressed bundle")
    n, = struct.unpack_from("<Q", b, 24)
    pos, entries, end = 32, [], 32
    for _ in range(n):
        off, size, idlen = struct.unpack_from("<QQQ", b, pos)
        ident = b[pos + 24:pos + 24 + idlen].decode()
        pos += 24 + idlen
        code = b[off:off + size]
        if len(code) != size:
            raise ValueError("entry %s outside the bundle" % ident)
        entries.append({"id": ident, "offset": off, "size": size,
                        "sha256": hashlib.sha256(code).hexdigest()})
        end = max(end, off + size, pos)
    return entries, max(end, pos)


def decompress(method, payload, size):
    if method == 0:
        out = zlib.decompress(payload)
    elif method == 1:
        out = subprocess.run(["zstd", "-q", "-d", "-c"], input=payload,
                             stdout=subprocess.PIPE, check=True).stdout
    else:
        raise ValueError("unknown CCOB method %d" % method)
    if size is not None and len(out) != size:
        raise ValueError("CCOB payload is %d bytes, header says %d" % (len(out), size))
    return out


def bundles(sec):
    pos, out = 0, []
    while pos < len(sec):
        if sec[pos:pos + 4] == CCOB:
            version, method = struct.unpack_from("<HH", sec, pos + 4)
            if version == 2:
                total, usize, h = struct.unpack_from("<IIQ", sec, pos + 8)
                hlen = 24
            elif version == 3:
                total, usize, h = struct.unpack_from("<QQQ", sec, pos + 8)
                hlen = 32
            else:
                raise ValueError("CCOB v%d is not handled by this decoder" % version)
            raw = decompress(method, sec[pos + hlen:pos + total], usize)
            if hashlib.md5(raw).digest()[:8] != struct.pack("<Q", h):
                raise ValueError("CCOB hash mismatch")
            entries, _ = parse_uncompressed(raw)
            out.append({"format": "ccob", "version": version,
                        "method": {0: "zlib", 1: "zstd"}[method],
                        "sha256": hashlib.sha256(raw).hexdigest(), "entries": entries})
            pos += total
        elif sec[pos:pos + 24] == BUNDLE:
            entries, size = parse_uncompressed(sec[pos:])
            out.append({"format": "uncompressed", "version": 0, "method": "",
                        "sha256": hashlib.sha256(sec[pos:pos + size]).hexdigest(),
                        "entries": entries})
            pos += size
        else:
            pos += 1
    return out


def decode(path):
    with open(path, "rb") as f:
        data = f.read()
    secs = sections(data)
    fb = secs.get(".hip_fatbin")
    if fb is None or fb[0] == 8 or fb[2] == 0:  # absent, NOBITS or empty: no device code
        return None
    return bundles(data[fb[1]:fb[1] + fb[2]])


if __name__ == "__main__":
    json.dump({p: decode(p) for p in sys.argv[1:]}, sys.stdout, indent=1, sort_keys=True)
