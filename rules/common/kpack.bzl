"""Pure Starlark shared by the Bazel and Buck2 kpack rules.

No load(), no ctx, no native.*, no type annotations: both build systems load
this file unchanged (style.md section 4.8). Functions take and return plain
strings, lists and dicts.
"""

# The group name of the host-code package `kpack recombine` writes once per
# component (`<component>_generic`).
KPACK_GENERIC_GROUP = "generic"

# Mnemonics (Bazel) / categories (Buck2) of the kpack actions.
KPACK_SPLIT_MNEMONIC = "KpackSplit"
KPACK_RECOMBINE_MNEMONIC = "KpackRecombine"

# The directory chores around `kpack split`, one POSIX sh script for both
# build systems (Bazel: stage.sh --kpack-dirs; Buck2: `/bin/sh -c` actions).
# Everything arrives as arguments: nothing is interpolated into the text.
#
#   archs DIR PREFIX EXPECT OUT
#       Writes to OUT the archs of the split in DIR: the names of its
#       <PREFIX>_<arch> subdirectories, sorted bytewise, one per line,
#       <PREFIX>_generic left out. When EXPECT (space-separated archs) is
#       not empty, fails unless DIR's subdirectories are exactly
#       <PREFIX>_generic and <PREFIX>_<arch> for each of them.
#   links DIR PATH TARGET [PATH TARGET]...
#       Makes each DIR/PATH a symlink whose text is TARGET (kpack_split's
#       declared `symlinks`), creating parent directories.
KPACK_DIRS_SCRIPT = """set -eu
cmd=$1; shift
case "$cmd" in
archs)
    dir=$1; prefix=$2; expect=$3; out=$4
    dirs=""
    if [ -d "$dir" ]; then
        dirs=$(cd "$dir" && find . -mindepth 1 -maxdepth 1 -type d | sed 's|^\\./||' | LC_ALL=C sort)
    fi
    printf '%s\\n' "$dirs" | while IFS= read -r d; do
        case "$d" in
            "$prefix"_*) [ "${d#"$prefix"_}" = generic ] || printf '%s\\n' "${d#"$prefix"_}" ;;
        esac
    done > "$out"
    if [ -n "$expect" ]; then
        want=$(for a in generic $expect; do printf '%s_%s\\n' "$prefix" "$a"; done | LC_ALL=C sort)
        if [ "$want" != "$dirs" ]; then
            echo "kpack_split: expected archs [$expect], the split produced [$(tr '\\n' ' ' < "$out" | sed 's/ $//')] (directories: [$(echo $dirs)], expected exactly [$(echo $want)])" >&2
            exit 1
        fi
    fi
    ;;
links)
    dir=$1; shift
    mkdir -p "$dir"
    while [ $# -gt 0 ]; do
        mkdir -p "$dir/$(dirname "$1")"
        ln -s "$2" "$dir/$1"
        shift 2
    done
    ;;
*)
    echo "kpack_dirs: unknown command $cmd" >&2
    exit 2
    ;;
esac
"""

def kpack_package_dir_name(component, group):
    """Name of one package directory, as `kpack split`/`recombine` write it.

    Args:
      component: the component or artifact prefix, e.g. "blas_lib".
      group: an architecture group ("gfx110X"), an arch ("gfx1100") or
        "generic".

    Returns:
      "<component>_<group>", e.g. "blas_lib_gfx110X".
    """
    if not component:
        fail("kpack: empty component name")
    if not group:
        fail("kpack: empty group name for component '%s'" % component)
    return component + "_" + group

def kpack_validate_groups(component, groups):
    """Checks a list of architecture group names from a packaging config.

    Fails on an empty list, empty names, duplicates, names containing "/" or
    ":" and the reserved name "generic".

    Args:
      component: the component the groups belong to (for messages).
      groups: list of group names, in config order.

    Returns:
      The same list.
    """
    if not groups:
        fail("kpack: component '%s' has no architecture groups" % component)
    seen = {}
    for g in groups:
        if not g or "/" in g or ":" in g or " " in g:
            fail("kpack: invalid architecture group name '%s' for component '%s'" % (g, component))
        if g == KPACK_GENERIC_GROUP:
            fail("kpack: architecture group name 'generic' is reserved (component '%s')" % component)
        if g in seen:
            fail("kpack: architecture group '%s' listed twice for component '%s'" % (g, component))
        seen[g] = True
    return groups

def kpack_package_target_names(component, groups):
    """All package targets a packaging config yields for one component.

    Args:
      component: e.g. "blas_lib".
      groups: architecture group names in config order.

    Returns:
      A list of (target name, group) pairs: first ("<component>_generic",
      "generic"), then ("<component>_<group>", group) per group.
    """
    kpack_validate_groups(component, groups)
    out = [(kpack_package_dir_name(component, KPACK_GENERIC_GROUP), KPACK_GENERIC_GROUP)]
    for g in groups:
        out.append((kpack_package_dir_name(component, g), g))
    return out

def kpack_missing_package_format(owner, config, attr):
    """printf format of the error when `kpack recombine` wrote no package for a group.

    Both build systems print it (Bazel: stage.sh, Buck2: the recombine
    action's wrapper) after the helper ran, when a wanted
    `<component>_<group>` directory is missing from its output: the group
    name is not an architecture group of the config, or no shard has code
    for it. Every `%` of the arguments is escaped.

    Args:
      owner: the target whose action failed (label text).
      config: the packaging config's path, as the user knows it.
      attr: the attribute that names the group(s): "group" or "groups".

    Returns:
      A printf format with two `%s`: the missing package directories and
      the ones `kpack recombine` wrote (both space-separated).
    """
    o = owner.replace("%", "%%")
    c = config.replace("%", "%%")
    return "".join([
        "rocpack: %s: no package %%s: the group is not an architecture group of the packaging config %s, or no shard has code for it.\n" % (o, c),
        "  kpack recombine wrote: %s\n",
        "  fix: name in `%s` only keys of \"architecture_groups\" in %s (or \"%s\" for the host code), or add the group to that config.\n" % (attr, c, KPACK_GENERIC_GROUP),
    ])

def kpack_check_shards(component, shards):
    """Checks the shards given to one recombine; fails naming the culprits.

    Two shards may not share a name (each is staged as
    `<input-shards-dir>/<shard>/`), and every shard must split `component`.

    Args:
      component: the recombine's component name.
      shards: list of (shard name, artifact prefix, target label text or
        None), one per kpack_split target.

    Returns:
      The shard names, in the order given.
    """
    seen = {}
    for shard, prefix, label in shards:
        if shard in seen:
            both = " (%s and %s)" % (seen[shard], label) if label else ""
            fail("kpack_recombine: two shards are named '%s'%s; set `shard` on kpack_split" % (shard, both))
        seen[shard] = label
        if prefix != component:
            fail("kpack_recombine: shard '%s'%s splits component '%s', not '%s'" % (shard, " (%s)" % label if label else "", prefix, component))
    return [shard for shard, _, _ in shards]

def kpack_groups_from_config(config):
    """Architecture group names of a decoded packaging-config JSON.

    Args:
      config: the dict `json.decode` returns for a rocm-kpack packaging config
        (keys "primary_shard", "architecture_groups", ...).

    Returns:
      The group names in config order.
    """
    if type(config) != "dict":
        fail("kpack: packaging config must be a JSON object")
    if "primary_shard" not in config:
        fail("kpack: packaging config has no 'primary_shard'")
    groups = config.get("architecture_groups")
    if type(groups) != "dict" or not groups:
        fail("kpack: packaging config has no 'architecture_groups' object")
    for name, g in groups.items():
        if type(g) != "dict" or type(g.get("architectures")) != "list" or not g["architectures"]:
            fail("kpack: architecture group '%s' needs a non-empty 'architectures' list" % name)
    return list(groups.keys())

def kpack_split_arg_list(artifact_prefix, split_databases, compression, exclude_archs):
    """Flags of `kpack split` after --artifact-dir/--output-dir (design 3.1).

    Args:
      artifact_prefix: value of --artifact-prefix.
      split_databases: list of database handler names (rocblas, hipblaslt,
        aotriton, miopen); may be empty.
      compression: "zstd", "none" or "" for the tool's default.
      exclude_archs: list of archs passed to --exclude-arch.

    Returns:
      A list of strings.
    """
    args = ["--artifact-prefix", artifact_prefix]
    if split_databases:
        args.append("--split-databases")
        args.extend(split_databases)
    if compression:
        if compression not in ("zstd", "none"):
            fail("kpack_split: compression must be 'zstd' or 'none', got '%s'" % compression)
        args.extend(["--compression", compression])
    for a in exclude_archs:
        args.extend(["--exclude-arch", a])
    return args

def kpack_manifest_root(paths):
    """Directory holding `artifact_manifest.txt` among a list of file paths.

    Args:
      paths: file paths (strings) of an artifact file set.

    Returns:
      The directory part of the one path whose base name is
      artifact_manifest.txt ("" when it sits at the root).
    """
    roots = []
    for p in paths:
        if p == "artifact_manifest.txt":
            roots.append("")
        elif p.endswith("/artifact_manifest.txt"):
            roots.append(p[:-len("/artifact_manifest.txt")])
    if len(roots) != 1:
        fail("kpack_split: srcs must contain exactly one artifact_manifest.txt, found %d: %s" % (len(roots), roots))
    return roots[0]

def kpack_path_depth(path):
    """Number of components of a relative path ("a/b/c" -> 3).

    A file staged at `path` inside an artifact directory lies `depth` levels
    below the artifact's top: its input's directory that many levels up is
    the tree the staging mirrors (`kpack split --staging-root`).

    Args:
      path: a `/`-separated relative path without `.`/`..` or empty parts.

    Returns:
      The number of components.
    """
    parts = path.split("/")
    for p in parts:
        if p in ("", ".", ".."):
            fail("kpack: '%s' is not a plain relative path" % path)
    return len(parts)

def kpack_relative_path(path, root):
    """`path` relative to directory `root` ("" = no prefix); fails when outside.

    Args:
      path: a file path.
      root: a directory path, or "".

    Returns:
      The relative path.
    """
    if not root:
        return path
    if not path.startswith(root + "/"):
        fail("kpack_split: '%s' is not under the artifact directory '%s'" % (path, root))
    return path[len(root) + 1:]

def kpack_declared_symlinks(symlinks):
    """Checks a kpack_split `symlinks` attribute; returns its (path, target) pairs.

    A build system digests a source symlink as the file it points to: whether
    an input is a link is in no action key, and a remote worker gets a
    regular file. The artifact's links are therefore declared: each is
    staged as a link with exactly this target text, locally and remotely
    alike (`kpack split` keeps it when it stays inside its prefix).

    Args:
      symlinks: dict, path below the artifact directory -> link target text
        (relative, e.g. {"lib/libfoo.so.1": "libfoo.so.1.2"}).

    Returns:
      Sorted list of (path, target).
    """
    out = []
    for path in sorted(symlinks.keys()):
        target = symlinks[path]
        kpack_path_depth(path)
        if not target or target.startswith("/") or "\t" in target or "\n" in target or "\t" in path or "\n" in path:
            fail("kpack_split: symlink '%s' -> '%s': the target must be a non-empty relative path (absolute links leave the artifact)" % (path, target))
        out.append((path, target))
    return out
