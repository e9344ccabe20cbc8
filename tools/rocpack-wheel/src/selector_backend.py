"""PEP 517 build backend of a rocpack device selector (written by
`kpack split-wheel --selector`; standard library only, `requires = []`).

The selector distribution `<prefix>` (e.g. `fxpkg-device`) has no files of
its own: the wheel built from it only requires the device wheels
`<prefix>-<target>` of the GPUs of the machine it is built on, chosen when
its metadata is prepared:

1. `ROCPACK_GPU_TARGETS` (comma-separated targets, any spelling rocpack
   accepts: `gfx1100`, `gfx90a:xnack-`, `gfx90a-xnack-`,
   `amdgcn-amd-amdhsa--gfx942:sramecc+`), if set and not empty;
2. else the GPUs the kernel driver lists,
   `$ROCPACK_SYSFS_ROOT/class/kfd/kfd/topology/nodes/*/properties`
   (`gfx_target_version`; `ROCPACK_SYSFS_ROOT` defaults to `/sys`);
3. else the default targets chosen at split time (`selector.json`).

Each target gets its own device wheel, else that of the generic target the
runtime falls back to (`gfx1100` -> `gfx11-generic`); a target with
neither fails the build, naming the targets that exist. `kpack
select-family --detect` implements the same rules (rocpack's tests run
both on the same trees). `python rocpack_selector.py --detect [--json]`
prints what this machine would get.
"""

import base64
import hashlib
import json
import os
import stat
import sys
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_NODES = 4096
MAX_PROPERTIES = 1 << 16
AMDHSA_PREFIX = "amdgcn-amd-amdhsa--"
FEATURES = ("sramecc", "xnack")


class SelectorError(Exception):
    """Why no device wheel could be chosen."""


def _data():
    with open(os.path.join(HERE, "selector.json"), encoding="utf-8") as f:
        return json.load(f)


def _digits(s, i):
    while i < len(s) and s[i].isdigit() and s[i].isascii():
        i += 1
    return i


def base_arch(spelling):
    """The processor of a target in any spelling rocpack accepts, features
    dropped (`gfx90a-xnack-` -> `gfx90a`); None if it is not one."""
    s = spelling
    if s.startswith(AMDHSA_PREFIX) and len(s) > len(AMDHSA_PREFIX):
        s = s[len(AMDHSA_PREFIX):]
    if not s.startswith("gfx"):
        return None
    i = _digits(s, 3)
    if i == 3:
        return None
    j = i
    if s[j:j + 1] == "-" and _digits(s, j + 1) > j + 1:
        j = _digits(s, j + 1)
    if s.startswith("-generic", j):
        i = j + len("-generic")
        proc = s[:i]
    else:
        if i < len(s) and "a" <= s[i] <= "z":
            i += 1
        if i < len(s) and s[i].isascii() and s[i].isalnum():
            return None
        proc = s[:i]
        for suffix in ("-strict", "_strict"):
            end = i + len(suffix)
            if s.startswith(suffix, i) and not (end < len(s) and s[end].isascii() and s[end].isalnum()):
                proc += "-strict"
                i = end
                break
    while i < len(s) and s[i] in ":-":
        rest = s[i + 1:]
        f = next((f for f in FEATURES if rest.startswith(f)), None)
        if f is None:
            break
        sign = i + 1 + len(f)
        if sign < len(s) and s[sign] in "+-":
            i = sign + 1
        else:
            break
    return proc if i == len(s) else None


def target_of_version(v):
    """`gfx_target_version` (major*10000 + minor*100 + stepping) -> target."""
    major, minor, step = v // 10000, (v // 100) % 100, v % 100
    if v <= 0 or minor > 15 or step > 15:
        return None
    return "gfx%d%x%x" % (major, minor, step)


def _node_key(name):
    numeric = name.isascii() and name.isdigit() and len(name) <= 18
    return (0, int(name), "") if numeric else (1, 0, name)


def sysfs_targets(root):
    """GPU targets of the kfd topology below `root` (a sysfs mount), in node
    order, each once; notes about nodes that were skipped."""
    nodes_dir = os.path.join(root, "class", "kfd", "kfd", "topology", "nodes")
    targets, notes = [], []
    try:
        names = sorted(os.listdir(nodes_dir), key=_node_key)[:MAX_NODES]
    except OSError:
        return targets, notes
    for n in names:
        path = os.path.join(nodes_dir, n, "properties")
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise OSError("not a regular file")
            with open(path, "rb") as f:
                text = f.read(MAX_PROPERTIES).decode("utf-8", "replace")
        except OSError:
            notes.append("node %s: cannot read properties" % n)
            continue
        value = None
        for line in text.split("\n"):
            parts = line.split()
            if len(parts) == 2 and parts[0] == "gfx_target_version":
                value = parts[1]
        if value is None:
            continue
        number = int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else None
        if number == 0:
            continue
        t = None if number is None else target_of_version(number)
        if t is None:
            notes.append("node %s: gfx_target_version %s is not a target" % (n, value))
        elif t not in targets:
            targets.append(t)
    return targets, notes


def detect(environ, default):
    """(source, targets, notes): where the targets come from and which."""
    env = environ.get("ROCPACK_GPU_TARGETS", "")
    if env.strip():
        out = []
        for s in env.split(","):
            s = s.strip()
            if not s:
                continue
            b = base_arch(s)
            if b is None:
                raise SelectorError("ROCPACK_GPU_TARGETS: `%s` is not a GPU target (e.g. gfx1100, gfx90a:xnack-)" % s)
            if b not in out:
                out.append(b)
        return "ROCPACK_GPU_TARGETS", out, []
    root = environ.get("ROCPACK_SYSFS_ROOT") or "/sys"
    found, notes = sysfs_targets(root)
    if found:
        return "sysfs", found, notes
    return "default", list(default), notes


def pick(data, targets):
    """[(target, device target, distribution)]; SelectorError naming the
    targets that exist when one has no device wheel."""
    wheels, generic = data["targets"], data["generic"]
    picks, missing = [], []
    for t in targets:
        d = t if t in wheels else generic.get(t) if generic.get(t) in wheels else None
        if d is None:
            missing.append(t)
        elif all(p[1] != d for p in picks):
            picks.append((t, d, wheels[d]))
    return picks, missing


def explain(data, environ=None):
    """Detection and choice as a dict (the `--detect --json` output)."""
    environ = os.environ if environ is None else environ
    source, targets, notes = detect(environ, data.get("default", []))
    picks, missing = pick(data, targets)
    return {
        "ok": bool(targets) and not missing,
        "source": source,
        "targets": targets,
        "notes": notes,
        "packages": [p[2] for p in picks],
        "missing": missing,
        "available": sorted(data["targets"]),
    }


def requirements(data, environ=None):
    r = explain(data, environ)
    avail = ", ".join(r["available"]) or "none"
    hint = ("set ROCPACK_GPU_TARGETS to some of them, or install %s[device-<target>]"
            % data["host"])
    if not r["targets"]:
        raise SelectorError(
            "%s %s: no GPU found (ROCPACK_GPU_TARGETS unset, no GPU node under %s/class/kfd/kfd/topology/nodes) "
            "and no default targets; device wheels exist for: %s; %s"
            % (data["name"], data["version"], os.environ.get("ROCPACK_SYSFS_ROOT") or "/sys", avail, hint))
    if r["missing"]:
        raise SelectorError(
            "%s %s: no device wheel for %s (targets from %s: %s); device wheels exist for: %s; %s"
            % (data["name"], data["version"], ", ".join(r["missing"]), r["source"],
               ", ".join(r["targets"]), avail, hint))
    return ["%s==%s" % (p, data["version"]) for p in r["packages"]], r


def _metadata(data):
    try:
        reqs, r = requirements(data)
    except SelectorError as e:
        raise SystemExit("rocpack selector: error: %s" % e) from None
    sys.stderr.write("rocpack selector: %s -> %s (from %s)\n"
                     % (", ".join(r["targets"]), ", ".join(reqs), r["source"]))
    lines = ["Metadata-Version: 2.1", "Name: " + data["name"], "Version: " + data["version"],
             "Summary: " + data["summary"]]
    lines += ["Requires-Dist: " + q for q in reqs]
    return "\n".join(lines) + "\n\n"


def _dist_info(data):
    return "%s-%s.dist-info" % (data["name"].replace("-", "_"), data["version"])


WHEEL_TEXT = "Wheel-Version: 1.0\nGenerator: rocpack-selector\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    data = _data()
    d = _dist_info(data)
    os.makedirs(os.path.join(metadata_directory, d), exist_ok=True)
    for name, text in (("METADATA", _metadata(data)), ("WHEEL", WHEEL_TEXT)):
        with open(os.path.join(metadata_directory, d, name), "w", encoding="utf-8") as f:
            f.write(text)
    return d


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    data = _data()
    d = _dist_info(data)
    if metadata_directory is not None:
        with open(os.path.join(metadata_directory, "METADATA"), encoding="utf-8") as f:
            meta = f.read()
    else:
        meta = _metadata(data)
    files = [(d + "/METADATA", meta.encode()), (d + "/WHEEL", WHEEL_TEXT.encode())]
    record = ""
    for name, b in files:
        h = base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
        record += "%s,sha256=%s,%d\n" % (name, h, len(b))
    files.append((d + "/RECORD", (record + d + "/RECORD,,\n").encode()))
    wheel = "%s-%s-py3-none-any.whl" % (data["name"].replace("-", "_"), data["version"])
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for name, b in files:
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), b)
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    data = _data()
    base = "%s-%s" % (data["name"].replace("-", "_"), data["version"])
    with tarfile.open(os.path.join(sdist_directory, base + ".tar.gz"), "w:gz") as t:
        for name in ("PKG-INFO", "pyproject.toml", "rocpack_selector.py", "selector.json"):
            info = t.gettarinfo(os.path.join(HERE, name), base + "/" + name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(os.path.join(HERE, name), "rb") as f:
                t.addfile(info, f)
    return base + ".tar.gz"


def main(argv):
    if "--detect" not in argv:
        sys.stderr.write("usage: python rocpack_selector.py --detect [--json]\n")
        return 2
    try:
        r = explain(_data())
    except SelectorError as e:
        sys.stderr.write("rocpack selector: %s\n" % e)
        return 2
    if "--json" in argv:
        print(json.dumps(r, indent=2, sort_keys=True))
    else:
        print("source: %s" % r["source"])
        print("targets: %s" % " ".join(r["targets"]))
        print("packages: %s" % " ".join(r["packages"]))
        if r["missing"]:
            print("no device wheel: %s (available: %s)" % (" ".join(r["missing"]), " ".join(r["available"])))
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
