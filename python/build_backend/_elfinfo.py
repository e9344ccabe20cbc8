"""What a Linux ELF binary needs from the C library, for the wheel's platform tag.

Reads the version-needs table (``SHT_GNU_verneed``) of an ELF64
little-endian file and returns the ``GLIBC_x.y`` versions it references,
plus its machine. Every read is bounded by the file's size; a malformed
file raises ``ValueError`` naming it.
"""

from __future__ import annotations

import struct
from pathlib import Path

SHT_GNU_VERNEED = 0x6FFFFFFE
MACHINES = {62: "x86_64", 183: "aarch64"}
MAX_SECTIONS = 65535
MAX_VERNEED = 4096


class ElfInfo:
    def __init__(self, machine: str, glibc: tuple[int, int] | None, needed_versions: list[str]):
        self.machine = machine
        self.glibc = glibc  # highest GLIBC_x.y referenced, or None
        self.needed_versions = needed_versions


def _u(fmt: str, data: bytes, off: int, path: Path) -> tuple:
    size = struct.calcsize(fmt)
    if off < 0 or off + size > len(data):
        raise ValueError(f"{path}: truncated ELF (read of {size} bytes at {off})")
    return struct.unpack_from(fmt, data, off)


def _cstr(data: bytes, off: int, path: Path) -> str:
    if off < 0 or off >= len(data):
        raise ValueError(f"{path}: string offset {off} outside the file")
    end = data.find(b"\0", off)
    if end < 0:
        raise ValueError(f"{path}: unterminated string at {off}")
    return data[off:end].decode("ascii", "replace")


def read(path: Path) -> ElfInfo:
    if not path.is_file():
        raise ValueError(f"{path}: not a regular file")
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or len(data) < 64:
        raise ValueError(f"{path}: not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    (machine,) = _u("<H", data, 18, path)
    (shoff,) = _u("<Q", data, 40, path)
    shentsize, shnum = _u("<HH", data, 58, path)
    if machine not in MACHINES:
        raise ValueError(f"{path}: unsupported machine {machine}")
    if shnum > MAX_SECTIONS or (shnum and shentsize < 64):
        raise ValueError(f"{path}: bad section header table")
    sections = [_u("<IIQQQQIIQQ", data, shoff + i * shentsize, path) for i in range(shnum)]
    versions: set[str] = set()
    for sh in sections:
        if sh[1] != SHT_GNU_VERNEED:
            continue
        offset, size, link, count = sh[4], sh[5], sh[6], sh[7]
        if link >= len(sections) or offset + size > len(data) or count > MAX_VERNEED:
            raise ValueError(f"{path}: bad version-needs section")
        strtab = sections[link][4]
        pos = offset
        for _ in range(count):
            _ver, cnt, _file, aux, nxt = _u("<HHIII", data, pos, path)
            apos = pos + aux
            for _ in range(min(cnt, MAX_VERNEED)):
                _hash, _flags, _other, name, anext = _u("<IHHII", data, apos, path)
                versions.add(_cstr(data, strtab + name, path))
                if not anext:
                    break
                apos += anext
            if not nxt:
                break
            pos += nxt
    glibc = None
    for v in versions:
        if v.startswith("GLIBC_") and not v.startswith("GLIBC_PRIVATE"):
            parts = v[len("GLIBC_"):].split(".")
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                ver = (int(parts[0]), int(parts[1]))
                glibc = ver if glibc is None or ver > glibc else glibc
    return ElfInfo(MACHINES[machine], glibc, sorted(versions))


def platform_tag(paths: list[Path]) -> str:
    """The manylinux tag every one of these binaries can run under: the
    newest GLIBC symbol version any of them references (never below 2.17,
    the oldest glibc Rust's standard library supports)."""
    machine = None
    glibc = (2, 17)
    for p in paths:
        info = read(p)
        if machine is not None and info.machine != machine:
            raise ValueError(f"{p}: {info.machine}, the other binaries are {machine}")
        machine = info.machine
        if info.glibc is not None and info.glibc > glibc:
            glibc = info.glibc
    if machine is None:
        raise ValueError("no binaries")
    return f"manylinux_{glibc[0]}_{glibc[1]}_{machine}"
