"""The device selector's two implementations agree: `kpack select-family
--detect --selector SDIST --json` (Rust, rocpack_wheel::selector) and the
sdist's own backend, `python rocpack_selector.py --detect --json`, on the
same fake sysfs trees and ROCPACK_GPU_TARGETS values; and the results are
the expected ones.

    python3 tests/python/selector_agree.py KPACK SELECTOR_SDIST WORK_DIR

The selector must come from a split of examples/wheel/fxpkg (device wheels
gfx906 gfx90a gfx942 gfx1100 gfx1101 gfx1102 gfx1151 gfx1200 gfx1201).
"""

import json
import os
import subprocess
import sys
import tarfile

kpack, sdist, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
with tarfile.open(sdist) as t:
    t.extractall(work, filter="data") if hasattr(tarfile, "data_filter") else t.extractall(work)
src = os.path.join(work, os.path.basename(sdist)[: -len(".tar.gz")])
backend = os.path.join(src, "rocpack_selector.py")

NODES = "class/kfd/kfd/topology/nodes"


def tree(name, nodes):
    """nodes: {node name: properties text, or None for a directory without
    properties, or b"dir" for properties that is a directory}."""
    root = os.path.join(work, "sysfs", name)
    for n, text in nodes.items():
        d = os.path.join(root, NODES, n)
        os.makedirs(d, exist_ok=True)
        if text == b"dir":
            os.makedirs(os.path.join(d, "properties"), exist_ok=True)
        elif text is not None:
            with open(os.path.join(d, "properties"), "w") as f:
                f.write(text)
    os.makedirs(root, exist_ok=True)
    return root


CPU = "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\n"


def gpu(v):
    return "cpu_cores_count 0\nsimd_count 192\ngfx_target_version %d\nmax_waves_per_simd 16\n" % v


# (label, sysfs nodes, ROCPACK_GPU_TARGETS or None, expected source, targets, packages, missing)
CASES = [
    ("gfx1100", {"0": CPU, "1": gpu(110000)}, None, "sysfs", ["gfx1100"], ["fxpkg-device-gfx1100"], []),
    ("gfx942+gfx1100", {"0": CPU, "1": gpu(90402), "2": gpu(110000), "3": gpu(90402)}, None,
     "sysfs", ["gfx942", "gfx1100"], ["fxpkg-device-gfx942", "fxpkg-device-gfx1100"], []),
    ("numeric order", {"10": gpu(110000), "9": gpu(90010), "2": CPU}, None,
     "sysfs", ["gfx90a", "gfx1100"], ["fxpkg-device-gfx90a", "fxpkg-device-gfx1100"], []),
    ("no wheel", {"0": CPU, "1": gpu(100300)}, None, "sysfs", ["gfx1030"], [], ["gfx1030"]),
    ("gpu-less", {"0": CPU}, None, "default", [], [], []),
    ("no kfd", {}, None, "default", [], [], []),
    ("odd nodes", {"0": CPU, "1": None, "2": b"dir", "3": "gfx_target_version x12\n",
                   "4": "gfx_target_version 91700\n", "5": gpu(120001), "cpu": gpu(90006)}, None,
     "sysfs", ["gfx1201", "gfx906"], ["fxpkg-device-gfx1201", "fxpkg-device-gfx906"], []),
    ("env wins", {"1": gpu(110000)}, "gfx90a:xnack-, amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-,gfx90a-xnack+",
     "ROCPACK_GPU_TARGETS", ["gfx90a", "gfx942"], ["fxpkg-device-gfx90a", "fxpkg-device-gfx942"], []),
    ("env no wheel", {}, "gfx1151,gfx1030", "ROCPACK_GPU_TARGETS", ["gfx1151", "gfx1030"],
     ["fxpkg-device-gfx1151"], ["gfx1030"]),
    ("env blank", {"1": gpu(110002)}, " ", "sysfs", ["gfx1102"], ["fxpkg-device-gfx1102"], []),
]


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    try:
        return p.returncode, json.loads(p.stdout)
    except ValueError:
        sys.exit("FAILED: %s: no JSON (exit %d): %s %s" % (cmd[0], p.returncode, p.stdout, p.stderr))


failures = 0
for label, nodes, env_targets, source, targets, packages, missing in CASES:
    env = dict(os.environ)
    env.pop("ROCPACK_GPU_TARGETS", None)
    env["ROCPACK_SYSFS_ROOT"] = tree(label.replace(" ", "_").replace("+", "_"), nodes)
    if env_targets is not None:
        env["ROCPACK_GPU_TARGETS"] = env_targets
    rc_rust, rust = run([kpack, "select-family", "--detect", "--selector", sdist, "--json"], env)
    rc_py, py = run([sys.executable, backend, "--detect", "--json"], env)
    want = {"source": source, "targets": targets, "packages": packages, "missing": missing}
    got = {k: rust[k] for k in want}
    ok = rust == py and rc_rust == rc_py and got == want and rc_rust == (0 if targets and not missing else 1)
    print("%-4s %-16s rust=%s python=%s" % ("ok" if ok else "FAIL", label, json.dumps(got), "same" if rust == py else json.dumps(py)))
    if not ok:
        failures += 1
        print("     rust (exit %d): %s\n     python (exit %d): %s" % (rc_rust, rust, rc_py, py))

# Generic fallback (a selector with a gfx11-generic wheel and no gfx1103 one,
# as `kpack split-wheel` writes it): gfx1103 gets the generic wheel.
gsrc = src + "-generic"
os.makedirs(gsrc, exist_ok=True)
for n in os.listdir(src):
    with open(os.path.join(src, n), "rb") as f, open(os.path.join(gsrc, n), "wb") as g:
        g.write(f.read())
with open(os.path.join(gsrc, "selector.json")) as f:
    data = json.load(f)
data["targets"]["gfx11-generic"] = "fxpkg-device-gfx11-generic"
data["generic"] = {t: "gfx11-generic" for t in ("gfx1103", "gfx1150", "gfx1152", "gfx1153")}
with open(os.path.join(gsrc, "selector.json"), "w") as f:
    json.dump(data, f)
env = dict(os.environ, ROCPACK_SYSFS_ROOT=tree("generic", {"1": gpu(110003), "2": gpu(110000), "3": gpu(110500)}))
env.pop("ROCPACK_GPU_TARGETS", None)
rc_rust, rust = run([kpack, "select-family", "--detect", "--selector", gsrc, "--json"], env)
rc_py, py = run([sys.executable, os.path.join(gsrc, "rocpack_selector.py"), "--detect", "--json"], env)
want = ["fxpkg-device-gfx11-generic", "fxpkg-device-gfx1100"]
if rust != py or rc_rust != 0 or rust["packages"] != want:
    failures += 1
    print("FAIL generic fallback: rust %s python %s" % (rust, py))
else:
    print("ok   generic fallback  %s" % json.dumps(rust["packages"]))

# A bad spelling in ROCPACK_GPU_TARGETS is an error in both (exit 2 python, nonzero kpack).
env = dict(os.environ, ROCPACK_GPU_TARGETS="gfx1100,GFX942")
for cmd in ([kpack, "select-family", "--detect", "--selector", sdist], [sys.executable, backend, "--detect"]):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode == 0 or "`GFX942` is not a GPU target" not in p.stderr:
        failures += 1
        print("FAIL bad spelling accepted by %s: %s %s" % (cmd[0], p.stdout, p.stderr))
print("selector agreement: %d cases, %d failures" % (len(CASES) + 3, failures))
sys.exit(1 if failures else 0)
