#!/usr/bin/env python3
"""Generates docs/rules/*.md from the rules' Starlark sources.

Starlark's syntax is (for these files) a subset of Python's, so the files are
parsed with Python's `ast`: every public rule(), repository_rule(),
module_extension() and tag_class() with its attributes' doc strings, and every
public function with its docstring. `--check` compares instead of writing and
exits 1 with a diff when a committed page is stale.

    python3 docs/rules/gen.py           # regenerate
    python3 docs/rules/gen.py --check   # freshness test (tests/bazel:rules_docs_test)
"""
import ast
import difflib
import re
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
if not os.path.isdir(os.path.join(ROOT, "rules")):  # in Bazel runfiles: cwd is the root
    ROOT = os.getcwd()
OUT = os.path.join(ROOT, "docs", "rules")
# Before each signature block: tests/snapshot/doc-commands.sh accounts for
# every block of these pages, and a signature is not a command to run.
SIGNATURE_MARKER = "<!-- not-run: a signature (placeholders), not a command -->"

PAGES = [
    ("kpack.md", "kpack rules", ["rules/bazel/private/kpack_split.bzl", "rules/bazel/private/kpack_recombine.bzl", "rules/bazel/private/kpack_packages.bzl"]),
    ("wheels.md", "Wheel rules", ["rules/bazel/private/kpack_wheel_split.bzl"]),
    ("snapshots.md", "Snapshot rules", ["rules/bazel/private/prebuilt_snapshot.bzl", "rules/bazel/private/snapshot_blob.bzl", "rules/bazel/private/abi_guard.bzl", "rules/bazel/private/stable_checksums.bzl", "rules/bazel/private/source_snapshot.bzl", "rules/bazel/private/source_snapshot_repo.bzl", "rules/bazel/source_snapshot_ext.bzl"]),
    ("helpers.md", "Helper binaries, flags and tests", ["rules/bazel/private/cargo_binary.bzl", "rules/bazel/private/toolchain.bzl", "rules/bazel/private/string_flag.bzl", "rules/bazel/private/script_test.bzl", "rules/bazel/private/release_binaries.bzl", "rules/bazel/repositories.bzl", "rules/bazel/extensions.bzl", "rules/bazel/private/providers.bzl"]),
    ("common.md", "Shared Starlark (rules/common, loaded by Bazel and Buck2)", ["rules/common/kpack.bzl", "rules/common/snapshot.bzl", "rules/common/stable_checksums.bzl", "rules/common/wheel.bzl", "rules/common/env.bzl"]),
]

KINDS = ("rule", "repository_rule", "module_extension", "tag_class", "provider")


# Module-level constants of the file being rendered and of the files it
# loads (e.g. KPACK_GENERIC_GROUP), so defaults and docs show evaluated values.
ENV = {}


def _eval(node):
    # Constant expressions only: literals, names of constants, %, +, .format;
    # no builtins.
    return eval(compile(ast.Expression(node), "<expr>", "eval"), {"__builtins__": {}}, dict(ENV))


def lit(node):
    try:
        return ast.literal_eval(node)
    except Exception:
        pass
    try:
        v = _eval(node)
        if isinstance(v, (str, int, bool, list, dict, tuple)) or v is None:
            return v
    except Exception:
        pass
    return ast.unparse(node)


def constants(path, seen=None):
    """Literal module-level assignments of a .bzl file and of what it loads."""
    seen = set() if seen is None else seen
    if path in seen or not os.path.exists(os.path.join(ROOT, path)):
        return {}
    seen.add(path)
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    env = {}
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) else None
        if call is not None and getattr(call.func, "id", "") == "load" and call.args:
            label = ast.literal_eval(call.args[0])
            if label.startswith("//") or label.startswith("@rocpack//"):
                pkg, _, name = label.split("//", 1)[1].partition(":")
            elif label.startswith(":"):
                pkg, name = os.path.dirname(path), label[1:]
            else:
                continue
            loaded = constants(os.path.join(pkg, name), seen)
            for a in call.args[1:]:
                n = ast.literal_eval(a)
                if n in loaded:
                    env[n] = loaded[n]
            for k in call.keywords:
                n = ast.literal_eval(k.value)
                if n in loaded:
                    env[k.arg] = loaded[n]
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                env[node.targets[0].id] = eval(compile(ast.Expression(node.value), "<expr>", "eval"), {"__builtins__": {}}, dict(env))
            except Exception:
                # Not a constant (e.g. a dict of attr.* calls shared by two
                # rules): kept as syntax, for attrs_of's `**NAME`.
                env[node.targets[0].id] = Syntax(node.value)
    return env


class Syntax:
    """A module-level value that is not a constant: its expression's AST."""

    def __init__(self, node):
        self.node = node


def kw(call, name):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def attrs_of(node):
    """Attribute name -> attr.* call, from a dict literal or dict({...}, **x)."""
    out = []
    if isinstance(node, ast.Name) and isinstance(ENV.get(node.id), Syntax):
        return attrs_of(ENV[node.id].node)
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "dict" and node.args:
        for k in node.keywords:
            if k.arg is None:  # dict({...}, **SHARED): the shared attributes follow
                out += attrs_of(k.value)
        return attrs_of(node.args[0]) + out
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values):
            if k is None or not isinstance(v, ast.Call):
                continue
            name = lit(k)
            if isinstance(name, str) and not name.startswith("_"):
                out.append((name, v))
    return out


def json_like(v):
    # Starlark spelling of an evaluated value: "x", ["a"], True, None.
    if isinstance(v, str):
        return '"%s"' % v.replace("\\", "\\\\").replace('"', '\\"')
    if isinstance(v, (list, tuple)):
        return "[%s]" % ", ".join(json_like(x) for x in v)
    if isinstance(v, dict):
        return "{%s}" % ", ".join("%s: %s" % (json_like(k), json_like(x)) for k, x in v.items())
    return repr(v)


def attr_row(name, call):
    kind = ast.unparse(call.func).replace("attr.", "")
    doc = lit(kw(call, "doc")) if kw(call, "doc") is not None else "(undocumented)"
    mandatory = kw(call, "mandatory")
    default = kw(call, "default")
    if mandatory is not None and lit(mandatory) is True:
        dflt = "required"
    elif default is not None:
        v = lit(default)
        dflt = "`%s`" % (json_like(v) if not isinstance(v, str) or v != ast.unparse(default) else v)
    else:
        dflt = "optional"
    doc = " ".join(str(doc).split()).replace("|", "\\|")
    return "| `%s` | %s | %s | %s |" % (name, kind, dflt, doc)


def attr_table(attrs_node):
    rows = attrs_of(attrs_node) if attrs_node is not None else []
    if not rows:
        return []
    return ["| attribute | type | default | description |", "|---|---|---|---|"] + [attr_row(n, c) for n, c in rows] + [""]


# Defaults of the shared attribute tables' kinds (rules/common/*.bzl: name ->
# (kind, doc), turned into attr.* by each build system's wrapper).
_SHARED_KIND_DEFAULTS = {"label": "optional", "string": '`""`', "string_list": "`[]`", "bool": "`False`"}


def shared_attr_table(attrs_node):
    """Rows of a rule whose attrs come from a shared table: `dict(_attrs(), ...)`
    where the file builds them from a loaded `*_ATTRS` dict of (kind, doc)."""
    if attrs_node is None or "_attrs()" not in ast.unparse(attrs_node):
        return []
    rows = []
    for name, table in sorted(ENV.items()):
        if not name.endswith("_ATTRS") or not isinstance(table, dict):
            continue
        for attr, v in table.items():
            if not (isinstance(v, tuple) and len(v) == 2):
                return []
            kind, doc = v
            dflt = _SHARED_KIND_DEFAULTS.get(kind, "optional")
            if attr == "wheel":
                dflt = "required"
            rows.append("| `%s` | %s | %s | %s |" % (attr, kind, dflt, " ".join(doc.split()).replace("|", "\\|")))
    if not rows:
        return []
    return ["| attribute | type | default | description |", "|---|---|---|---|"] + rows + [""]


def render_file(path):
    global ENV
    ENV = constants(path)
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    # tag_class() assignments by variable name (usually private), for the
    # module extensions that use them.
    tags = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "tag_class":
            if isinstance(node.targets[0], ast.Name):
                tags[node.targets[0].id] = node.value
    lines = ["## `%s`" % path, ""]
    mod_doc = ast.get_docstring(tree)
    if mod_doc:
        lines += [mod_doc.strip(), ""]
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            name = node.targets[0].id if isinstance(node.targets[0], ast.Name) else None
            kind = getattr(node.value.func, "id", "")
            if not name or name.startswith("_") or kind not in KINDS:
                continue
            call = node.value
            lines += ["### `%s` (%s)" % (name, kind), ""]
            doc = kw(call, "doc")
            if doc is not None:
                lines += [str(lit(doc)).strip(), ""]
            if kind == "provider":
                fields = kw(call, "fields")
                if isinstance(fields, ast.Dict):
                    lines += ["| field | description |", "|---|---|"]
                    for k, v in zip(fields.keys, fields.values):
                        lines.append("| `%s` | %s |" % (lit(k), " ".join(str(lit(v)).split())))
                    lines.append("")
                continue
            attrs_node = kw(call, "attrs")
            if kind == "module_extension":
                tc = kw(call, "tag_classes")
                if isinstance(tc, ast.Dict):
                    for k, v in zip(tc.keys, tc.values):
                        tag = lit(k)
                        lines += ["#### Tag `%s`" % tag, ""]
                        t = tags.get(getattr(v, "id", ""))
                        if t is None:
                            lines += ["(tag class %s)" % ast.unparse(v), ""]
                            continue
                        if kw(t, "doc") is not None:
                            lines += [str(lit(kw(t, "doc"))).strip(), ""]
                        lines += [SIGNATURE_MARKER, "```python", "%s.%s(%s)" % (name, tag, ", ".join(n + " = ..." for n, _ in attrs_of(kw(t, "attrs")))), "```", ""]
                        lines += attr_table(kw(t, "attrs"))
            table = attr_table(attrs_node)
            if not table and kind == "rule":
                table = shared_attr_table(attrs_node)
            lines += table
        elif isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            args = [a.arg for a in node.args.args]
            defaults = node.args.defaults
            sig = []
            for i, a in enumerate(args):
                j = i - (len(args) - len(defaults))
                sig.append(a if j < 0 else "%s = %s" % (a, ast.unparse(defaults[j])))
            if node.args.kwarg:
                sig.append("**" + node.args.kwarg.arg)
            lines += ["### `%s`" % node.name, "", SIGNATURE_MARKER, "```python", "%s(%s)" % (node.name, ", ".join(sig)), "```", ""]
            lines += [(doc or "(undocumented)").strip(), ""]
    return lines


def pages():
    out = {}
    index = ["# rocpack rules reference", "", "Generated by `python3 docs/rules/gen.py` from the Starlark sources; "
             "`bazel test //tests/bazel:rules_docs_test` fails when a page is stale.", "",
             "Public entry points: `rules/bazel/defs.bzl` (rules and macros), `rules/bazel/repositories.bzl` "
             "(WORKSPACE), `rules/bazel/extensions.bzl` (bzlmod), `rules/common/*.bzl` (shared with Buck2).", "",
             "## Using the rules", "",
             "* From your own repository (WORKSPACE and bzlmod, exact lines): [consumers.md](consumers.md).",
             "* Helpers: every action runs `kpack`/`snapctl` through the label_flags `@rocpack//rules/bazel:kpack` and "
             "`@rocpack//rules/bazel:snapctl`. Default: the binaries of the resolved toolchain "
             "(`@rocpack//rules/bazel/toolchain:toolchain_type`), registered by rocpack's `MODULE.bazel` or by "
             "`rocpack_register_toolchains()` (WORKSPACE): built from source by ONE `cargo build --offline --locked "
             "-p kpack -p snapctl`, or prebuilt release binaries pinned by sha256 (`rocpack_toolchains.prebuilt` / "
             "`rocpack_register_toolchains(prebuilt = {...})`). A warm cargo target dir: "
             "`--@rocpack//rules/bazel:cargo_target_dir=/abs/target` (or `--host_action_env=ROCPACK_CARGO_TARGET_DIR=...`). "
             "Inside this repository `--config=prebuilt` uses `rules/bazel/prebuilt/{kpack,snapctl}` "
             "(`rules/bazel/prebuilt/install.sh`).",
             "* Channels: each `prebuilt_snapshot` (alias `rcclx_snapshot`) library has its own flag "
             "`//<pkg>:<name>_channel`; empty (default) follows `@rocpack//rules/bazel:snapshot_channel`. ROCm version: "
             "`@rocpack//rules/bazel:rocm_version`. Shortcuts in this repository's `.bazelrc`: "
             "`--config=rcclx_dev|rcclx_stable|rcclx_last_stable`, `--config=rocm62|rocm64|rocm70|rocm71`.",
             "* Bazel versions: Debian bookworm's 4.2.3 reads `WORKSPACE`; Bazel 7 reads `MODULE.bazel` (offline with "
             "Debian sid's 7.7.1: `--config=debian7`). `tests/ci/55-bazel7.sh` (root) checks both modes "
             "of 7.7.1 in a cached debootstrap chroot, over the examples and `e2e/bazel-*`.",
             "* Tests: `tests/ci/50-bazel.sh` runs `tests/bazel/e2e.sh` (build, test, outputs, caching, hermeticity, "
             "toolchains) and `tests/bazel/consumer.sh e2e/bazel-workspace` (every rule from a consumer workspace, "
             "per-library channels, the missing-snapshot fix).", ""]
    for fname, title, files in PAGES:
        lines = ["# %s" % title, "", "<!-- Generated by docs/rules/gen.py. Do not edit. -->", ""]
        for p in files:
            lines += render_file(p)
        out[fname] = "\n".join(lines).rstrip() + "\n"
        index.append("* [%s](%s): %s" % (title, fname, ", ".join("`%s`" % p for p in files)))
    out["README.md"] = "\n".join(index) + "\n"
    return out


def lint(all_pages):
    """Issue 13 bug 5: defaults and docs are evaluated (no raw `'...' % NAME`
    expressions) and every module extension documents its tags."""
    problems = []
    for name, text in sorted(all_pages.items()):
        for line in text.splitlines():
            if line.startswith("|") and (re.search(r"['\"] % [A-Z_(]", line) or re.search(r"\b[A-Z][A-Z_]{3,} %", line)):
                problems.append("%s: unevaluated expression: %s" % (name, line))
        # Issue 24 item 9: kpack_wheel_split had no attribute table.
        for rule_name in re.findall(r"^### `(\w+)` \(rule\)$", text, re.M):
            part = text.split("### `%s` (rule)" % rule_name, 1)[1].split("\n### ", 1)[0]
            if "| attribute |" not in part:
                problems.append("%s: rule %s has no attribute table" % (name, rule_name))
        for ext in re.findall(r"^### `(\w+)` \(module_extension\)$", text, re.M):
            part = text.split("### `%s` (module_extension)" % ext, 1)[1].split("\n### ", 1)[0]
            if "#### Tag `" not in part or "| attribute |" not in part:
                problems.append("%s: module extension %s has no documented tag attributes" % (name, ext))
    return problems


def main():
    check = "--check" in sys.argv[1:]
    stale = 0
    all_pages = pages()
    problems = lint(all_pages)
    for p in problems:
        print("docs/rules/" + p, file=sys.stderr)
    if problems:
        return 1
    for name, text in sorted(all_pages.items()):
        path = os.path.join(OUT, name)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        if old == text:
            continue
        if check:
            stale += 1
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), "committed/" + name, "generated/" + name))
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print("wrote docs/rules/" + name)
    if stale:
        print("\n%d page(s) of docs/rules are stale; run: python3 docs/rules/gen.py" % stale, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
