#!/usr/bin/env bash
# kpack split-wheel against real pip (issue #14):
#  1. build the example fat wheel with `pip wheel` (examples/wheel/fxpkg);
#  2. split it (host + one device wheel per target + family wheels from a
#     packaging config); byte-identical in two directories and with -j1/-j4;
#     an independent RECORD check (tests/wheel/record_check.py);
#  3. fresh venvs: host + one device wheel, `fxpkg[device-<target>]` and a
#     family extra from --find-links; `pip check`; `kpack verify
#     --installed-tree` resolves every lookup for the target (and fails for a
#     target that was not installed); a device wheel without its host, or
#     with a host of another version, does not resolve;
#  4. never a partial set: failing splits leave nothing in the output;
#     --device-package-prefix (normalised) + --compression none through pip;
#  5. a real ROCm wheel from PyPI (jax-rocm60-plugin 0.5.0, pinned sha256):
#     split, install host + one device wheel, verify; per-wheel summary.
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

PY=python3
if ! $PY -m venv --help >/dev/null 2>&1 || ! $PY -m pip --version >/dev/null 2>&1; then
    need_pkgs python3-venv python3-pip
    PY=/usr/bin/python3
fi
t0=$(date +%s)
stage() { log "$* ($(( $(date +%s) - t0 )) s so far)"; }

stage "helpers (stage 10's build: ci_helpers)"
ci_helpers
KPACK="$KPACK_BIN"
W="$(mktemp -d /tmp/rocpack-wheel.XXXXXX)"
trap 'rm -rf "$W"' EXIT
RC="$PY $ROOT/tests/wheel/record_check.py"
CFG="$ROOT/examples/wheel/packaging-config.json"

newvenv() { rm -rf "$1"; $PY -m venv "$1"; }
site() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])'; }
pipq() { "$1/bin/python" -m pip --disable-pip-version-check -q "${@:2}"; }
expect_fail() { if "$@" >"$W/last.log" 2>&1; then cat "$W/last.log"; die "expected failure: $*"; fi; }

stage "pip wheel examples/wheel/fxpkg"
$PY -m pip wheel --disable-pip-version-check -q --no-deps --no-build-isolation --no-index \
    --no-cache-dir -w "$W/fat" "$ROOT/examples/wheel/fxpkg"
FAT="$W/fat/fxpkg-1.0-py3-none-linux_x86_64.whl"
[ -f "$FAT" ] || die "pip wheel did not produce $FAT"
$RC "$FAT" >/dev/null || die "input wheel fails the RECORD check"

split() { "$KPACK" split-wheel "$FAT" --overlay-root fxpkg --split-databases rocblas --config "$CFG" "$@"; }

stage "split-wheel (twice, -j1 and -j4, different directories)"
split -o "$W/a/out" -j 1 >"$W/a.list"
split -o "$W/b/deeper/out" -j 4 >/dev/null
SOURCE_DATE_EPOCH=1700000000 split -o "$W/epoch" >/dev/null
(cd "$W/a/out" && ls) >"$W/a.names"
(cd "$W/b/deeper/out" && ls) >"$W/b.names"
cmp "$W/a.names" "$W/b.names" || die "different wheel sets"
for f in $(cat "$W/a.names"); do
    cmp "$W/a/out/$f" "$W/b/deeper/out/$f" || die "$f differs between runs (-j1 vs -j4, other directory)"
done
cmp -s "$W/a/out/$(head -1 "$W/a.names")" "$W/epoch/$(head -1 "$W/a.names")" \
    && die "SOURCE_DATE_EPOCH did not change the timestamps"
n=$(wc -l <"$W/a.names")
[ "$n" -eq 13 ] || die "expected 13 wheels (host, 9 targets, 3 families), got $n: $(tr '\n' ' ' <"$W/a.names")"
OUT="$W/a/out"
for t in gfx906 gfx90a gfx942 gfx1100 gfx1101 gfx1102 gfx1151 gfx1200 gfx1201 gfx110x gfx115x gfx120x; do
    [ -f "$OUT/fxpkg_device_${t}-1.0-py3-none-linux_x86_64.whl" ] || die "no device wheel for $t"
done
$RC "$OUT"/*.whl || die "RECORD check"
# The checker can fail: a wheel with a file RECORD does not list.
cp "$OUT/fxpkg-1.0-py3-none-linux_x86_64.whl" "$W/tampered.whl"
$PY -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1], "a").writestr("fxpkg/extra.py", "x=1\n")' "$W/tampered.whl"
expect_fail $RC "$W/tampered.whl"
# Host: no device code, no database file of an arch; the arch-less one stays.
$PY - "$OUT" <<'PYEOF' || die "wheel contents"
import sys, zipfile
out = sys.argv[1]
host = zipfile.ZipFile(out + "/fxpkg-1.0-py3-none-linux_x86_64.whl")
names = host.namelist()
assert "fxpkg/lib/rocblas/library/TensileLibrary.dat" in names, names
assert not any("gfx" in n for n in names), names
assert not any(n.endswith(".kpack") for n in names), names
so = host.getinfo("fxpkg/lib/libfxpkg.so")
assert (so.external_attr >> 16) & 0o777 == 0o755, oct(so.external_attr >> 16)
meta = host.read("fxpkg-1.0.dist-info/METADATA").decode()
assert 'Requires-Dist: fxpkg-device-gfx1100==1.0; extra == "device-gfx1100"' in meta, meta
assert 'Provides-Extra: device-all' in meta, meta
dev = zipfile.ZipFile(out + "/fxpkg_device_gfx90a-1.0-py3-none-linux_x86_64.whl")
kp = sorted(n for n in dev.namelist() if n.endswith(".kpack"))
assert kp == ["fxpkg/.kpack/fxpkg_gfx90a:xnack+.kpack", "fxpkg/.kpack/fxpkg_gfx90a:xnack-.kpack"], kp
d = zipfile.ZipFile(out + "/fxpkg_device_gfx1100-1.0-py3-none-linux_x86_64.whl")
assert "fxpkg/lib/rocblas/library/TensileLibrary_lazy_gfx1100.dat" in d.namelist(), d.namelist()
dm = d.read("fxpkg_device_gfx1100-1.0.dist-info/METADATA").decode()
assert "Requires-Dist: fxpkg==1.0" in dm, dm
assert d.read("fxpkg_device_gfx1100-1.0.dist-info/WHEEL").decode().count("Tag: py3-none-linux_x86_64") == 1
fam = zipfile.ZipFile(out + "/fxpkg_device_gfx120x-1.0-py3-none-linux_x86_64.whl")
fm = fam.read("fxpkg_device_gfx120x-1.0.dist-info/METADATA").decode()
reqs = sorted(l for l in fm.splitlines() if l.startswith("Requires-Dist"))
assert reqs == ["Requires-Dist: fxpkg-device-gfx1200==1.0", "Requires-Dist: fxpkg-device-gfx1201==1.0",
                "Requires-Dist: fxpkg==1.0"], reqs
print("contents ok")
PYEOF

stage "venv: host + one device wheel (files)"
V="$W/v1"; newvenv "$V"
pipq "$V" install --no-index "$OUT/fxpkg-1.0-py3-none-linux_x86_64.whl" \
    "$OUT/fxpkg_device_gfx1100-1.0-py3-none-linux_x86_64.whl"
"$V/bin/python" -m pip check
"$V/bin/python" -c 'import fxpkg, os; assert os.path.exists(fxpkg.library_path())'
"$KPACK" verify --installed-tree "$(site "$V")" --gpu-target gfx1100
# Negative control: nothing installed for gfx942.
expect_fail "$KPACK" verify --installed-tree "$(site "$V")" --gpu-target gfx942
grep -q "FAILED" "$W/last.log" || die "verify for gfx942 did not say FAILED"

stage "venv: fxpkg[device-gfx90a] and fxpkg[device-gfx110x] from --find-links"
V="$W/v2"; newvenv "$V"
pipq "$V" install --no-index --find-links "$OUT" 'fxpkg[device-gfx90a]'
"$V/bin/python" -m pip check
# Devices report their features (MI210: gfx90a:sramecc+:xnack-).
for t in gfx90a:xnack- gfx90a:xnack+ gfx90a:sramecc+:xnack-; do
    "$KPACK" verify --installed-tree "$(site "$V")" --gpu-target "$t"
done
V="$W/v3"; newvenv "$V"
pipq "$V" install --no-index --find-links "$OUT" 'fxpkg[device-gfx110x]'
"$V/bin/python" -m pip check
for t in gfx1100 gfx1101 gfx1102; do
    "$KPACK" verify --installed-tree "$(site "$V")" --gpu-target "$t"
done
expect_fail "$KPACK" verify --installed-tree "$(site "$V")" --gpu-target gfx1200

stage "device wheel without its host / with a host of another version"
mkdir -p "$W/only-device" "$W/mismatch"
cp "$OUT/fxpkg_device_gfx1100-1.0-py3-none-linux_x86_64.whl" "$W/only-device/"
V="$W/v4"; newvenv "$V"
expect_fail pipq "$V" install --no-index --find-links "$W/only-device" fxpkg-device-gfx1100
grep -qi "fxpkg==1.0\|No matching distribution" "$W/last.log" || { cat "$W/last.log"; die "unexpected pip error"; }
# A host of version 1.1 (the same package, version changed) beside the 1.0 device wheel.
cp -r "$ROOT/examples/wheel/fxpkg" "$W/fx11"
sed -i 's/^VERSION = "1.0"/VERSION = "1.1"/' "$W/fx11/_backend/fxbuild.py"
sed -i 's/^version = "1.0"/version = "1.1"/' "$W/fx11/pyproject.toml"
$PY -m pip wheel --disable-pip-version-check -q --no-deps --no-build-isolation --no-index \
    --no-cache-dir -w "$W/fat11" "$W/fx11"
"$KPACK" split-wheel "$W/fat11/fxpkg-1.1-py3-none-linux_x86_64.whl" --overlay-root fxpkg -o "$W/out11" >/dev/null
cp "$W/out11/fxpkg-1.1-py3-none-linux_x86_64.whl" "$OUT/fxpkg_device_gfx1100-1.0-py3-none-linux_x86_64.whl" "$W/mismatch/"
expect_fail pipq "$V" install --no-index --find-links "$W/mismatch" fxpkg-device-gfx1100
expect_fail pipq "$V" install --no-index "$W/mismatch/"*.whl

stage "never a partial set"
expect_fail split -o "$W/none" --gpu-targets gfx1030
[ ! -e "$W/none" ] || die "failed split left $W/none"
mkdir -p "$W/conflict"
touch "$W/conflict/fxpkg_device_gfx942-1.0-py3-none-linux_x86_64.whl"
expect_fail split -o "$W/conflict"
[ "$(ls "$W/conflict")" = "fxpkg_device_gfx942-1.0-py3-none-linux_x86_64.whl" ] \
    || die "failed split left files in $W/conflict: $(ls "$W/conflict")"
ls -A "$W" | grep 'partial\|kpack-split-wheel' >/dev/null && die "temporary directories left in $W"
expect_fail "$KPACK" split-wheel "$FAT" --overlay-root nosuchdir -o "$W/bad"
[ ! -e "$W/bad" ] || die "failed split left $W/bad"

stage "inputs pip would read otherwise or the device wheels would clash with: refused"
# Each variant of the fat wheel is written by Python's zipfile (RECORD kept
# right), and Python's zipfile, as pip, reads every record of it.
$PY - "$FAT" "$W/variants" <<'PYEOF'
import base64, hashlib, os, struct, sys, zipfile
src, out = sys.argv[1:3]
z = zipfile.ZipFile(src)
files = {i.filename: z.read(i) for i in z.infolist()}
rec = "fxpkg-1.0.dist-info/RECORD"
def write(label, files):
    rows = []
    for n, b in files.items():
        if n != rec:
            h = base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
            rows.append("%s,sha256=%s,%d" % (n, h, len(b)))
    files = dict(files, **{rec: ("\n".join(rows + [rec + ",,"]) + "\n").encode()})
    os.makedirs(os.path.join(out, label))
    p = os.path.join(out, label, os.path.basename(src))
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as w:
        for n, b in files.items():
            w.writestr(n, b)
    return p
meta = "fxpkg-1.0.dist-info/METADATA"
m = files[meta].decode()
write("extra", dict(files, **{meta: (m.rstrip("\n").split("\n\n")[0] +
    '\nProvides-Extra: device-gfx1100\nRequires-Dist: fxpkg-device-gfx1100==0.9; extra == "device-gfx1100"\n\n').encode()}))
write("owned", dict(files, **{"fxpkg/.kpack/fxpkg_gfx1100.kpack": b"stale"}))
p = write("eocd", files)
d = bytearray(open(p, "rb").read())
i = d.rfind(b"PK\x05\x06")
n, = struct.unpack_from("<H", d, i + 10)
struct.pack_into("<HH", d, i + 8, n - 1, n - 1)
open(p, "wb").write(d)
assert len(zipfile.ZipFile(p).infolist()) == n, "zipfile reads every record"
PYEOF
for v in extra:"already provides the \`device-gfx1100\` extra" \
         owned:"fxpkg/.kpack/fxpkg_gfx1100.kpack: the input already holds the path" \
         eocd:"declares [0-9]* entries but the central directory holds"; do
    label="${v%%:*}"; want="${v#*:}"
    $RC "$W/variants/$label/fxpkg-1.0-py3-none-linux_x86_64.whl" >/dev/null || [ "$label" = eocd ] \
        || die "$label: the variant fails the RECORD check"
    expect_fail "$KPACK" split-wheel "$W/variants/$label/fxpkg-1.0-py3-none-linux_x86_64.whl" \
        --overlay-root fxpkg -o "$W/variants/$label/out"
    grep -q "$want" "$W/last.log" || { cat "$W/last.log"; die "$label: not refused for the expected reason"; }
    [ ! -e "$W/variants/$label/out" ] || die "$label: output left"
done

stage "--output-format directory, --gpu-targets, --device-requires-dist"
split -o "$W/dirs" --output-format directory --gpu-targets gfx942 gfx90a:xnack- \
    --device-requires-dist 'rocm-sdk-device-@GFXARCH@>=6' 'rocm-sdk-core>=6' >/dev/null
ls "$W/dirs"
[ "$(ls "$W/dirs" | wc -l)" -eq 3 ] || die "expected host + gfx90a + gfx942 directories"
$RC "$W/dirs"/* || die "RECORD check of directories"
m="$W/dirs/fxpkg_device_gfx942-1.0-py3-none-linux_x86_64/fxpkg_device_gfx942-1.0.dist-info/METADATA"
grep -qx 'Requires-Dist: rocm-sdk-device-gfx942>=6' "$m" || die "@GFXARCH@ not expanded: $(cat "$m")"
grep -qx 'Requires-Dist: rocm-sdk-core>=6' "$m" || die "plain --device-requires-dist missing"
# xnack variants are never dropped by a base-arch filter (ROCM-25535).
ls "$W/dirs/fxpkg_device_gfx90a-1.0-py3-none-linux_x86_64/fxpkg/.kpack" | grep 'xnack+' >/dev/null \
    || die "gfx90a:xnack+ dropped by --gpu-targets gfx90a:xnack-"

stage "--device-package-prefix, --compression none: pip resolves the renamed extra"
"$KPACK" split-wheel "$FAT" --overlay-root fxpkg --device-package-prefix Amd.FxPkg_Device \
    --compression none --gpu-targets gfx942 gfx1100 -o "$W/renamed" >/dev/null
ls "$W/renamed"
[ -f "$W/renamed/amd_fxpkg_device_gfx942-1.0-py3-none-linux_x86_64.whl" ] || die "prefix not normalised into the file name"
$RC "$W/renamed"/*.whl || die "RECORD check (renamed)"
V="$W/v5"; newvenv "$V"
pipq "$V" install --no-index --find-links "$W/renamed" 'fxpkg[device-gfx942]'
"$V/bin/python" -m pip check
"$V/bin/python" -m pip list --disable-pip-version-check 2>/dev/null | grep -i '^amd-fxpkg-device-gfx942 *1.0' >/dev/null \
    || die "amd-fxpkg-device-gfx942 not installed by the extra"
"$KPACK" verify --installed-tree "$(site "$V")" --gpu-target gfx942
expect_fail "$KPACK" verify --installed-tree "$(site "$V")" --gpu-target gfx1100

stage "PyPI: a real ROCm wheel"
# The first wheel of tests/pypi/wheels.txt (stage 40's, same cache).
prefetch_wait pypi
line="$(grep -m1 '^jax-rocm60-plugin==0.5.0 ' "$PYPI_WHEELS_FILE")"
read -r _ _ PYPI_WHL PYPI_SHA <<<"$line"
mkdir -p "$W/pypi"
CACHE="$PYPI_CACHE"
rc=0; pypi_fetch "$PY" "$line" "$W/dl.log" || rc=$?
if [ "$rc" -eq 2 ]; then
    cat "$W/dl.log" >&2
    printf '\n!!! SKIPPED: PyPI unreachable; the real-wheel stage did not run !!!\n\n' >&2
    log "45-wheel: ok (PyPI stage SKIPPED) in $(( $(date +%s) - t0 )) s"
    exit 0
fi
[ "$rc" -eq 0 ] || { cat "$W/dl.log" >&2; die "pip download jax-rocm60-plugin==0.5.0 (pinned sha256 $PYPI_SHA)"; }
echo "$PYPI_WHL: sha256 $PYPI_SHA OK"
"$KPACK" split-wheel "$CACHE/$PYPI_WHL" --overlay-root jax_rocm60_plugin -o "$W/pypi/out" --json >"$W/pypi/report.json"
$PY - "$W/pypi/report.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("wheel %s: %d fat binaries, %d targets: %s" % (r["input"], len(r["fat_binaries"]), len(r["targets"]), " ".join(r["targets"])))
for f in r["fat_binaries"]:
    print("  fat binary %s: %s, %d -> %d bytes" % (f["path"], " ".join(f["architectures"]), f["input_bytes"], f["output_bytes"]))
print("  host wheel %s: %d bytes before, %d bytes after" % (r["host"]["file"], r["input_bytes"], r["host"]["bytes"]))
for d in r["device_wheels"]:
    print("  device wheel %s: %d bytes" % (d["wheel"]["file"], d["wheel"]["bytes"]))
assert len(r["fat_binaries"]) >= 4 and len(r["targets"]) >= 10, r
PYEOF
$RC "$W/pypi/out"/*.whl || die "RECORD check (PyPI wheel)"
V="$W/v6"; newvenv "$V"
# --no-deps: the plugin's own dependencies (jax) are not this test's subject.
pipq "$V" install --no-index --no-deps "$W/pypi/out/$PYPI_WHL" \
    "$W/pypi/out/jax_rocm60_plugin_device_gfx942-0.5.0-cp311-cp311-manylinux_2_28_x86_64.whl"
"$KPACK" verify --installed-tree "$(site "$V")" --gpu-target gfx942
expect_fail "$KPACK" verify --installed-tree "$(site "$V")" --gpu-target gfx90a
# Import only what imports without a GPU (the pure-Python version module).
if "$V/bin/python" -c 'import jax_rocm60_plugin.version' 2>"$W/imp.log"; then
    echo "import jax_rocm60_plugin.version: ok"
else
    echo "import jax_rocm60_plugin.version skipped (needs more than a CPU-only venv): $(tail -1 "$W/imp.log")"
fi
log "45-wheel: ok in $(( $(date +%s) - t0 )) s"
