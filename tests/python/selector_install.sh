#!/usr/bin/env bash
# The device selector through pip from a local package index
# (docs/python.md, "The device package chosen at install time"):
#  1. split the example fat wheel (examples/wheel/fxpkg) with --selector;
#     the selector's two implementations (kpack select-family --detect and
#     the sdist's backend) agree on fake sysfs trees (selector_agree.py);
#  2. a PEP 503 tree of the outputs served by `python -m http.server` on
#     127.0.0.1 (port picked by the kernel);
#  3. `pip install --index-url … 'fxpkg[device]'` (fresh --target directory,
#     --no-cache-dir) with a fake sysfs of gfx1100; of gfx942 + gfx1100;
#     with ROCPACK_GPU_TARGETS set (it wins over sysfs); the explicit
#     `device-<target>` extra on a GPU-less machine: exactly the expected
#     device wheels are installed and `kpack verify --installed-tree` passes
#     for each (and fails for a target that was not installed);
#  4. a GPU without a device wheel (gfx1030) and a GPU-less machine without
#     a default: pip fails naming the targets that exist; nothing installed;
#  5. with uv too, when `uv` is on PATH.
#
#   tests/python/selector_install.sh KPACK WORK_DIR
#
# Uses python3 (with pip and setuptools) from PATH. Exit 0 ok, 1 a check failed.
. "$(dirname "$0")/../ci/lib.sh"
KPACK="$1"; W="$2"; mkdir -p "$W"
PY=${PY:-python3}
pipq() { "$PY" -m pip --disable-pip-version-check "$@"; }

pipq wheel -q --no-deps --no-build-isolation --no-index --no-cache-dir -w "$W/fat" "$ROOT/examples/wheel/fxpkg"
"$KPACK" split-wheel "$W/fat/fxpkg-1.0-py3-none-linux_x86_64.whl" --overlay-root fxpkg \
    --split-databases rocblas --selector -o "$W/out" >"$W/split.list"
SDIST="$W/out/fxpkg_device-1.0.tar.gz"
grep -qx "$SDIST" "$W/split.list" || die "split-wheel --selector did not list $SDIST"
"$PY" "$ROOT/tests/python/selector_agree.py" "$KPACK" "$SDIST" "$W/agree" >"$W/agree.log" \
    || { cat "$W/agree.log"; die "kpack and the selector backend disagree"; }
tail -1 "$W/agree.log" >&2

# PEP 503 tree: simple/<normalised name>/index.html with sha256 fragments.
"$PY" - "$W/out" "$W/index/simple" <<'PYEOF'
import hashlib, os, re, shutil, sys
out, simple = sys.argv[1:3]
projects = {}
for f in sorted(os.listdir(out)):
    name = f[: -len(".tar.gz")].rsplit("-", 1)[0] if f.endswith(".tar.gz") else f.split("-")[0]
    projects.setdefault(re.sub(r"[-_.]+", "-", name).lower(), []).append(f)
for p, files in projects.items():
    os.makedirs(os.path.join(simple, p))
    links = []
    for f in files:
        shutil.copy(os.path.join(out, f), os.path.join(simple, p, f))
        h = hashlib.sha256(open(os.path.join(out, f), "rb").read()).hexdigest()
        links.append('<a href="%s#sha256=%s">%s</a><br>' % (f, h, f))
    open(os.path.join(simple, p, "index.html"), "w").write(
        "<!DOCTYPE html><html><body>\n%s\n</body></html>\n" % "\n".join(links))
open(os.path.join(simple, "index.html"), "w").write(
    "<!DOCTYPE html><html><body>\n%s\n</body></html>\n"
    % "\n".join('<a href="%s/">%s</a><br>' % (p, p) for p in sorted(projects)))
PYEOF
http_serve "$W/index" "$W/http.log" || die "http.server did not start"
trap 'kill "$HTTP_PID" 2>/dev/null || true' EXIT
INDEX="http://127.0.0.1:$HTTP_PORT/simple/"

# fake_sysfs DIR VERSION...: kfd topology with a CPU node and one GPU node per version.
fake_sysfs() {
    local d="$1" i=1 v; shift
    mkdir -p "$d/class/kfd/kfd/topology/nodes/0"
    printf 'cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\n' >"$d/class/kfd/kfd/topology/nodes/0/properties"
    for v in "$@"; do
        mkdir -p "$d/class/kfd/kfd/topology/nodes/$i"
        printf 'cpu_cores_count 0\nsimd_count 192\ngfx_target_version %s\n' "$v" >"$d/class/kfd/kfd/topology/nodes/$i/properties"
        i=$((i + 1))
    done
}
fake_sysfs "$W/sys-gfx1100" 110000
fake_sysfs "$W/sys-gfx942-gfx1100" 90402 110000
fake_sysfs "$W/sys-gfx1030" 100300
fake_sysfs "$W/sys-none"

# installed DIR: the device distributions installed in DIR, sorted, one line.
installed() { (cd "$1" && ls -d fxpkg_device*.dist-info 2>/dev/null | sed 's/-1\.0\.dist-info$//' | LC_ALL=C sort | tr '\n' ' '); }

# case_ok NAME SYSFS "ROCPACK_GPU_TARGETS or -" REQUIREMENT "EXPECTED DEVICE DISTS" "DEVICE ISAS" [INSTALLER]
case_ok() {
    local name="$1" sys="$2" env="$3" req="$4" want="$5" isas="$6" tool="${7:-pip}" t d got
    d="$W/site-$name-$tool"
    log "selector: $name ($tool)"
    (
        export ROCPACK_SYSFS_ROOT="$W/$sys"
        if [ "$env" = - ]; then unset ROCPACK_GPU_TARGETS; else export ROCPACK_GPU_TARGETS="$env"; fi
        if [ "$tool" = uv ]; then
            uv pip install -q --no-cache --python "$PY" --target "$d" --index-url "$INDEX" "$req"
        else
            pipq install -q --no-cache-dir --target "$d" --index-url "$INDEX" "$req"
        fi
    ) >"$W/$name.log" 2>&1 || { cat "$W/$name.log"; die "$name: install failed"; }
    got="$(installed "$d")"
    [ "$got" = "$want" ] || die "$name: installed device distributions '$got', expected '$want'"
    for t in $isas; do
        "$KPACK" verify --installed-tree "$d" --gpu-target "$t" >"$W/$name.verify" \
            || { cat "$W/$name.verify"; die "$name: verify --installed-tree for $t"; }
    done
    # Only those: a target that was not installed does not resolve.
    if "$KPACK" verify --installed-tree "$d" --gpu-target gfx1201 >/dev/null 2>&1; then
        die "$name: gfx1201 resolves without its device wheel"
    fi
}

# case_fail NAME SYSFS REQUIREMENT TEXT...: the install fails, its output has every TEXT, nothing installed.
case_fail() {
    local name="$1" sys="$2" req="$3" d="$W/site-$1" s; shift 3
    log "selector: $name (expected failure)"
    if (export ROCPACK_SYSFS_ROOT="$W/$sys"; unset ROCPACK_GPU_TARGETS
        pipq install --no-cache-dir --target "$d" --index-url "$INDEX" "$req") >"$W/$name.log" 2>&1; then
        cat "$W/$name.log"; die "$name: install succeeded"
    fi
    for s in "$@"; do
        grep -qF -- "$s" "$W/$name.log" || { cat "$W/$name.log"; die "$name: pip output lacks '$s'"; }
    done
    [ -z "$(ls "$d" 2>/dev/null)" ] || die "$name: something was installed: $(ls "$d")"
}

case_ok gfx1100 sys-gfx1100 - 'fxpkg[device]' "fxpkg_device fxpkg_device_gfx1100 " gfx1100
case_ok gfx942-gfx1100 sys-gfx942-gfx1100 - 'fxpkg[device]' \
    "fxpkg_device fxpkg_device_gfx1100 fxpkg_device_gfx942 " "gfx942 gfx1100"
case_ok env sys-gfx1100 'gfx90a:xnack-,gfx942:sramecc+' 'fxpkg[device]' \
    "fxpkg_device fxpkg_device_gfx90a fxpkg_device_gfx942 " "gfx90a:xnack- gfx90a:xnack+ gfx942"
case_ok explicit sys-none - 'fxpkg[device-gfx906]' "fxpkg_device_gfx906 " gfx906
case_fail no-wheel sys-gfx1030 'fxpkg[device]' "no device wheel for gfx1030" \
    "device wheels exist for: gfx1100, gfx1101, gfx1102, gfx1151, gfx1200, gfx1201, gfx906, gfx90a, gfx942"
case_fail gpu-less sys-none 'fxpkg[device]' "no GPU found" "fxpkg[device-<target>]"
if command -v uv >/dev/null 2>&1; then
    case_ok gfx942-gfx1100 sys-gfx942-gfx1100 - 'fxpkg[device]' \
        "fxpkg_device fxpkg_device_gfx1100 fxpkg_device_gfx942 " "gfx942 gfx1100" uv
else
    log "selector: uv not on PATH; uv case skipped"
fi
