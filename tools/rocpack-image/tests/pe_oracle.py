#!/usr/bin/env python3
"""Independent check of a split PE32+ image against its fat original, with pefile.

usage: pe_oracle.py FAT SPLIT MARKER_HEX
Prints one line per check failure and exits 1 when any fails; prints a summary
line "ok ..." otherwise. Nothing here uses rocpack code.
"""
import struct
import sys

import pefile

fat_path, split_path, marker_hex = sys.argv[1:4]
marker = bytes.fromhex(marker_hex)
fat_raw = open(fat_path, "rb").read()
split_raw = open(split_path, "rb").read()
fat = pefile.PE(data=fat_raw)
pe = pefile.PE(data=split_raw)
bad = []


def check(cond, msg):
    if not cond:
        bad.append(msg)


def real_name(pe_obj, raw, s):
    n = s.Name.rstrip(b"\0")
    if n.startswith(b"/"):
        sym = pe_obj.FILE_HEADER.PointerToSymbolTable
        strtab = sym + 18 * pe_obj.FILE_HEADER.NumberOfSymbols
        off = strtab + int(n[1:])
        n = raw[off:raw.index(b"\0", off)]
    return n.decode()


for w in pe.get_warnings():
    # pefile warns about things linkers do too; only report what the fat file does not have.
    # (pefile's "Byte 0x00 makes up N% of the file" is a heuristic about content, not structure)
    if w not in fat.get_warnings() and "of the file's contents" not in w:
        bad.append("pefile warning: " + w)

names = [real_name(pe, split_raw, s) for s in pe.sections]
fat_names = [real_name(fat, fat_raw, s) for s in fat.sections]
check(names[:-1] == fat_names, f"sections {names} vs fat {fat_names}")
check(names[-1] == ".kpackrf", f"last section {names[-1]}")
k = pe.sections[-1]
check(k.Characteristics == 0x40000040, f".kpackrf characteristics {k.Characteristics:#x}")
check(k.get_data()[: len(marker)] == marker, ".kpackrf content is not the marker")
fat_idx = [i for i, n in enumerate(fat_names) if n in (".hip_fat", ".hip_fatbin")][0]
fs = pe.sections[fat_idx]
check(fs.SizeOfRawData == 0, f"bundle section still has {fs.SizeOfRawData} bytes of file data")
check(fs.Misc_VirtualSize == fat.sections[fat_idx].Misc_VirtualSize, "bundle section VirtualSize changed")
removed = fat.sections[fat_idx].SizeOfRawData
check(len(split_raw) < len(fat_raw) or removed <= k.SizeOfRawData, "device bytes not removed")
opt = pe.OPTIONAL_HEADER
# Headers: the section table (with .kpackrf) fits in SizeOfHeaders, which may have grown by whole
# FileAlignment blocks, stays at or before the first section's data and below its RVA.
grown = opt.SizeOfHeaders - fat.OPTIONAL_HEADER.SizeOfHeaders
table_end = pe.sections[-1].get_file_offset() + 40
check(table_end <= opt.SizeOfHeaders, f"section table ends at {table_end:#x} after SizeOfHeaders {opt.SizeOfHeaders:#x}")
check(grown >= 0 and grown % opt.FileAlignment == 0 and opt.SizeOfHeaders % opt.FileAlignment == 0,
      f"SizeOfHeaders {fat.OPTIONAL_HEADER.SizeOfHeaders:#x} -> {opt.SizeOfHeaders:#x}")
check(all(opt.SizeOfHeaders <= s.PointerToRawData for s in pe.sections if s.SizeOfRawData),
      "a section's data starts inside the headers")
check(opt.SizeOfHeaders <= min(s.VirtualAddress for s in pe.sections), "headers overlap the first section's RVA")
check(len(split_raw) == len(fat_raw) - removed + k.SizeOfRawData + grown,
      "file size is not fat - bundle data + marker data + header growth")
end = max(s.VirtualAddress + max(s.Misc_VirtualSize, s.SizeOfRawData) for s in pe.sections)
sa = opt.SectionAlignment
check(opt.SizeOfImage == (end + sa - 1) // sa * sa, f"SizeOfImage {opt.SizeOfImage:#x} vs end {end:#x}")
# Sections contiguous in RVA, file data aligned and inside the file.
for a, b in zip(pe.sections, pe.sections[1:]):
    check(b.VirtualAddress == a.VirtualAddress + (max(a.Misc_VirtualSize, 1) + sa - 1) // sa * sa,
          f"RVA gap before {b.Name}")
for s in pe.sections:
    if s.SizeOfRawData:
        check(s.PointerToRawData % opt.FileAlignment == 0, f"{s.Name} data misaligned")
        check(s.PointerToRawData + s.SizeOfRawData <= len(split_raw), f"{s.Name} data outside file")
# Every other section's bytes are unchanged (the wrappers change, and the
# debug directory's PointerToRawData fields follow the data they point at).
dbg_rva = opt.DATA_DIRECTORY[6].VirtualAddress
for i, (a, b) in enumerate(zip(fat.sections, pe.sections)):
    if i == fat_idx or fat_names[i] in (".hipFatB", ".hipFatBinSegment"):
        continue
    if dbg_rva and a.VirtualAddress <= dbg_rva < a.VirtualAddress + max(a.Misc_VirtualSize, 1):
        continue
    check(a.get_data() == b.get_data(), f"content of {fat_names[i]} changed")
if fat.OPTIONAL_HEADER.CheckSum:
    check(opt.CheckSum == pe.generate_checksum(), f"CheckSum {opt.CheckSum:#x} != {pe.generate_checksum():#x}")
else:
    check(opt.CheckSum == 0, "CheckSum set on an image that had none")
# Wrappers: HIPK, index, pointer = ImageBase + RVA(.kpackrf), each covered by a DIR64 base relocation.
wi = [i for i, n in enumerate(names) if n in (".hipFatB", ".hipFatBinSegment")][0]
ws = pe.sections[wi]
wdata = ws.get_data()[: ws.Misc_VirtualSize]
relocs = {}
for blk in getattr(pe, "DIRECTORY_ENTRY_BASERELOC", []):
    for e in blk.entries:
        relocs[e.rva] = e.type
fat_relocs = {}
for blk in getattr(fat, "DIRECTORY_ENTRY_BASERELOC", []):
    for e in blk.entries:
        fat_relocs[e.rva] = e.type
check(relocs == fat_relocs, "base relocations changed")
n = len(wdata) // 24
for i in range(n):
    magic, ver, ptr, co = struct.unpack_from("<IIQI", wdata, 24 * i)
    check(magic == 0x4B504948, f"wrapper {i} magic {magic:#x}")
    check(ver == 1, f"wrapper {i} version {ver}")
    check(ptr == opt.ImageBase + k.VirtualAddress, f"wrapper {i} pointer {ptr:#x}")
    if relocs:
        check(relocs.get(ws.VirtualAddress + 24 * i + 8) == 10, f"wrapper {i} pointer has no DIR64 base relocation")
    # after rebasing by any delta the pointer still lands in .kpackrf
    delta = 0x7FF0_0000_0000 - opt.ImageBase
    rebased = ptr + delta - (opt.ImageBase + delta)
    check(k.VirtualAddress <= rebased < k.VirtualAddress + k.Misc_VirtualSize, f"wrapper {i} not in .kpackrf after rebase")
# Debug directory entries still point at the same bytes.
def debug_blobs(p, raw):
    out = []
    for d in getattr(p, "DIRECTORY_ENTRY_DEBUG", []):
        s = d.struct
        out.append(raw[s.PointerToRawData : s.PointerToRawData + s.SizeOfData])
    return out
check(debug_blobs(pe, split_raw) == debug_blobs(fat, fat_raw), "debug data not found at its PointerToRawData")
# COFF symbol/string table (data after the last section) kept and still found.
fsym, ssym = fat.FILE_HEADER.PointerToSymbolTable, pe.FILE_HEADER.PointerToSymbolTable
if fsym:
    tail = fat_raw[fsym:]
    check(split_raw[ssym:] == tail, "COFF symbol table not kept after the last section")
fat_end = max(s.PointerToRawData + s.SizeOfRawData for s in fat.sections)
split_end = max(s.PointerToRawData + s.SizeOfRawData for s in pe.sections)
check(split_raw[split_end:] == fat_raw[fat_end:], "data after the last section changed")
# Imports and exports still parse to the same thing.
imp = lambda p: [(e.dll, [i.name for i in e.imports]) for e in getattr(p, "DIRECTORY_ENTRY_IMPORT", [])]
exp = lambda p: [(e.name, e.address) for e in getattr(getattr(p, "DIRECTORY_ENTRY_EXPORT", None), "symbols", [])]
check(imp(pe) == imp(fat), "imports differ")
check(exp(pe) == exp(fat), "exports differ")
for b in bad:
    print(b)
if bad:
    sys.exit(1)
print(f"ok {split_path}: {len(pe.sections)} sections, {n} wrappers, {len(fat_raw)} -> {len(split_raw)} bytes, headers +{grown}")
