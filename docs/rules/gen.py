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
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
if not os.path.isdir(os.path.join(ROOT, "rules")):  # in Bazel runfiles: cwd is the root
    ROOT = os.getcwd()
OUT = os.path.join(ROOT, "docs", "rules")

PAGES = [
    ("kpack.md", "kpack rules", ["rules/bazel/private/kpack_split.bzl", "rules/bazel/private/kpack_recombine.bzl", "rules/bazel/private/kpack_packages.bzl"]),
    ("snapshots.md", "Snapshot rules", ["rules/bazel/private/rcclx_snapshot.bzl", "rules/bazel/private/stable_checksums.bzl"]),
    ("helpers.md", "Helper binaries, flags and tests", ["rules/bazel/private/cargo_binary.bzl", "rules/bazel/private/string_flag.bzl", "rules/bazel/private/script_test.bzl", "rules/bazel/private/release_binaries.bzl", "rules/bazel/repositories.bzl", "rules/bazel/extensions.bzl", "rules/bazel/private/providers.bzl"]),
    ("common.md", "Shared Starlark (rules/common, loaded by Bazel and Buck2)", ["rules/common/kpack.bzl", "rules/common/snapshot.bzl"]),
]

KINDS = ("rule", "repository_rule", "module_extension", "tag_class", "provider")


def lit(node):
    try:
        return ast.literal_eval(node)
    except Exception:
        return ast.unparse(node)


def kw(call, name):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def attrs_of(node):
    """Attribute name -> attr.* call, from a dict literal or dict({...}, **x)."""
    out = []
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "dict" and node.args:
        node = node.args[0]
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values):
            if k is None or not isinstance(v, ast.Call):
                continue
            name = lit(k)
            if isinstance(name, str) and not name.startswith("_"):
                out.append((name, v))
    return out


def attr_row(name, call):
    kind = ast.unparse(call.func).replace("attr.", "")
    doc = lit(kw(call, "doc")) if kw(call, "doc") is not None else "(undocumented)"
    mandatory = kw(call, "mandatory")
    default = kw(call, "default")
    if mandatory is not None and lit(mandatory) is True:
        dflt = "required"
    elif default is not None:
        dflt = "`%s`" % ast.unparse(default)
    else:
        dflt = "optional"
    doc = " ".join(str(doc).split()).replace("|", "\\|")
    return "| `%s` | %s | %s | %s |" % (name, kind, dflt, doc)


def render_file(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
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
                if tc is not None:
                    lines += ["Tag classes: %s" % ast.unparse(tc), ""]
            if attrs_node is not None:
                rows = attrs_of(attrs_node)
                if rows:
                    lines += ["| attribute | type | default | description |", "|---|---|---|---|"]
                    lines += [attr_row(n, c) for n, c in rows]
                    lines.append("")
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
            lines += ["### `%s`" % node.name, "", "```python", "%s(%s)" % (node.name, ", ".join(sig)), "```", ""]
            lines += [(doc or "(undocumented)").strip(), ""]
    return lines


def pages():
    out = {}
    index = ["# rocpack rules reference", "", "Generated by `python3 docs/rules/gen.py` from the Starlark sources; "
             "`bazel test //tests/bazel:rules_docs_test` fails when a page is stale.", "",
             "Public entry points: `rules/bazel/defs.bzl` (rules and macros), `rules/bazel/repositories.bzl` "
             "(WORKSPACE), `rules/bazel/extensions.bzl` (bzlmod), `rules/common/*.bzl` (shared with Buck2).", "",
             "## Using the rules", "",
             "* Helpers: every action runs `kpack`/`snapctl` through the label_flags `//rules/bazel:kpack` and "
             "`//rules/bazel:snapctl`. Default: built from this repository by cargo (`cargo_binary`, offline, locked). "
             "`--config=prebuilt` uses `rules/bazel/prebuilt/{kpack,snapctl}`, copied there by `rules/bazel/prebuilt/install.sh` after `cargo build --release -p kpack -p snapctl`. "
             "Outside this repository: `rocpack_release_binaries` (WORKSPACE) or the `rocpack_binaries` module extension "
             "downloads release archives pinned by sha256, then `--@rocpack//rules/bazel:kpack=@rocpack_bin//:kpack` "
             "(same for snapctl).",
             "* Channels and ROCm versions: `--config=rcclx_dev|rcclx_stable|rcclx_last_stable` and "
             "`--config=rocm62|rocm64|rocm70` (`.bazelrc`), i.e. `--//rules/bazel:snapshot_channel=...` and "
             "`--//rules/bazel:rocm_version=...`.",
             "* Bazel versions: Debian bookworm's 4.2.3 reads `WORKSPACE`; Bazel 7 reads `MODULE.bazel` (offline with "
             "Debian sid's 7.7.1: `--config=debian7`). `ROCPACK_BAZEL7=1 tests/ci/55-bazel7.sh` (root) checks both modes "
             "of 7.7.1 in a debootstrap chroot.",
             "* Tests: `tests/ci/50-bazel.sh` runs `tests/bazel/e2e.sh` (build, test, outputs, caching, hermeticity, "
             "release-binary download).", ""]
    for fname, title, files in PAGES:
        lines = ["# %s" % title, "", "<!-- Generated by docs/rules/gen.py. Do not edit. -->", ""]
        for p in files:
            lines += render_file(p)
        out[fname] = "\n".join(lines).rstrip() + "\n"
        index.append("* [%s](%s): %s" % (title, fname, ", ".join("`%s`" % p for p in files)))
    out["README.md"] = "\n".join(index) + "\n"
    return out


def main():
    check = "--check" in sys.argv[1:]
    stale = 0
    for name, text in sorted(pages().items()):
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
