"""Shared logic of kpack_wheel_split (Bazel and Buck2 wrappers call these).

`kpack split-wheel` turns one fat wheel into a host wheel (same file name),
one device wheel per GPU target and, with a packaging config, one family
wheel per architecture group present (docs/cli/split-wheel.md). The device
wheel names depend on the targets found in the wheel, so the rule's main
output is one directory holding the whole set, plus the JSON report.
"""

KPACK_WHEEL_SPLIT_MNEMONIC = "KpackWheelSplit"

KPACK_WHEEL_SPLIT_DOC = """Splits a fat Python wheel with `kpack split-wheel`.

Outputs: the directory `<name>.wheels/` with the host wheel (the input's file
name), `<prefix>_<target>-<version>-<tags>.whl` per GPU target and, when
`config` is given, one family wheel per architecture group with targets in the
wheel; with `selector`, the device selector sdist `<prefix>-<version>.tar.gz`
(docs/python.md); and `<name>.json`, the split report (fat binaries, targets, sizes). The
action fails, leaving nothing, unless every target gets its wheel; with
`expect_targets` it also fails unless exactly those targets come out.
Deterministic: same wheel and attributes, byte-identical outputs.
"""

# name -> (kind, doc); kind is "label", "string", "string_list" or "bool".
KPACK_WHEEL_SPLIT_ATTRS = {
    "wheel": ("label", "The fat wheel (a single .whl file with a PEP 427 file name)."),
    "overlay_root": ("string", "Wheel directory whose fat binaries are split and where .kpack/ goes (e.g. \"torch\"); empty: the wheel root."),
    "device_package_prefix": ("string", "Device distributions are <prefix>-<target>; empty: \"<host distribution>-device\"."),
    "device_requires_dist": ("string_list", "Extra Requires-Dist of device wheels; @GFXARCH@ is replaced by the target (such entries go to per-target wheels only)."),
    "split_databases": ("string_list", "Database handlers (rocblas, hipblaslt, hipsparselt, aotriton, miopen, composablekernel, hipkernelprovider, hotswap_cache) or the preset torch-fat."),
    "gpu_targets": ("string_list", "Keep only these GPU targets (base-arch match: gfx90a keeps gfx90a:xnack+ and gfx90a:xnack-)."),
    "compression": ("string", "--compression of the .kpack archives: \"zstd\", \"zstd:LEVEL\", \"none\" or \"\" (tool default)."),
    "config": ("label", "Packaging config JSON (as kpack_recombine's): one family wheel per architecture_groups entry with targets in the wheel."),
    "expect_targets": ("string_list", "Targets (base archs) the split must produce, e.g. [\"gfx1100\", \"gfx942\"]; empty: no check."),
    "selector": ("bool", "Also write the device selector sdist <prefix>-<version>.tar.gz into the directory, and give the host wheel a `device` extra requiring it: pip/uv then install the device wheels of the installing machine's GPUs (ROCPACK_GPU_TARGETS, else the kernel driver's topology, else selector_default)."),
    "selector_default": ("string_list", "Targets the selector picks when no GPU is named or found (each must have a device wheel); needs selector = True."),
    "device_extra_names": ("string", "Per-target extras of the host wheel: \"rocm\" (device-gfx1100, the default when empty) or \"pytorch\" (gfx1100)."),
}

def kpack_wheel_split_check(compression, gpu_targets, expect_targets, device_requires_dist, selector = False, selector_default = [], device_extra_names = ""):
    """Fails on attribute values the tool would refuse (so errors point at the BUILD file).

    Args:
      compression: the compression attribute.
      gpu_targets: the gpu_targets attribute.
      expect_targets: the expect_targets attribute.
      device_requires_dist: the device_requires_dist attribute.
      selector: the selector attribute.
      selector_default: the selector_default attribute.
      device_extra_names: the device_extra_names attribute.
    """
    if selector_default and not selector:
        fail("kpack_wheel_split: selector_default needs selector = True")
    if device_extra_names not in ("", "rocm", "pytorch"):
        fail("kpack_wheel_split: device_extra_names must be rocm or pytorch, got '%s'" % device_extra_names)
    if compression and compression != "none" and compression != "zstd" and not compression.startswith("zstd:"):
        fail("kpack_wheel_split: compression must be zstd, zstd:LEVEL or none, got '%s'" % compression)
    for t in gpu_targets + expect_targets + selector_default:
        if not t.startswith("gfx"):
            fail("kpack_wheel_split: '%s' is not a GPU target (e.g. gfx942)" % t)
    for r in device_requires_dist:
        if not r.strip():
            fail("kpack_wheel_split: empty device_requires_dist entry")

def kpack_wheel_split_arg_list(overlay_root, device_package_prefix, device_requires_dist, split_databases, gpu_targets, compression, selector = False, selector_default = [], device_extra_names = ""):
    """Flags of `kpack split-wheel` after WHEEL and --output-dir (no paths).

    Args:
      overlay_root: --overlay-root ("" for none).
      device_package_prefix: --device-package-prefix ("" for the default).
      device_requires_dist: --device-requires-dist values.
      split_databases: --split-databases handlers.
      gpu_targets: --gpu-targets values.
      compression: --compression ("" for the tool default).
      selector: --selector.
      selector_default: --selector-default values.
      device_extra_names: --device-extra-names ("" for the tool default).

    Returns:
      A list of strings.
    """
    args = []
    if overlay_root:
        args.extend(["--overlay-root", overlay_root])
    if device_package_prefix:
        args.extend(["--device-package-prefix", device_package_prefix])
    for r in device_requires_dist:
        args.extend(["--device-requires-dist", r])
    if split_databases:
        args.append("--split-databases")
        args.extend(split_databases)
    if gpu_targets:
        args.append("--gpu-targets")
        args.extend(gpu_targets)
    if compression:
        args.extend(["--compression", compression])
    if selector:
        args.append("--selector")
    if selector_default:
        args.append("--selector-default")
        args.extend(selector_default)
    if device_extra_names:
        args.extend(["--device-extra-names", device_extra_names])
    return args

# Runs kpack split-wheel with the report on stdout into $2, then checks the
# expected targets ($3, space-separated, may be empty). Arguments:
#   $1 kpack  $2 report  $3 expected targets  $4... split-wheel arguments.
# Paths arrive as arguments: nothing is interpolated into the script.
KPACK_WHEEL_SPLIT_SCRIPT = """set -eu
kpack=$1; report=$2; expect=$3; shift 3
"$kpack" split-wheel --json "$@" > "$report"
if [ -n "$expect" ]; then
    got=$(tr -d ' \\n' < "$report" | sed -n 's/.*"targets":\\[\\([^]]*\\)\\].*/\\1/p' | tr -d '"' | tr ',' ' ')
    if [ "$got" != "$expect" ]; then
        echo "kpack_wheel_split: expected targets [$expect], the split produced [$got]" >&2
        exit 1
    fi
fi
"""

def kpack_wheel_split_expect(expect_targets):
    """The expected-targets argument of KPACK_WHEEL_SPLIT_SCRIPT (sorted as the report sorts them).

    Args:
      expect_targets: list of targets.

    Returns:
      A space-separated string ("" for no check).
    """
    return " ".join(sorted(expect_targets))
