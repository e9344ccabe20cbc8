# Fake of the Buck2 globals that rocpack's Buck2 files use. Test-only: this
# file is evaluated by tests/buck2 (src/lib.rs) and never by buck2 itself.
# Names in double underscores are Rust natives (src/lib.rs) or internals.
# The behaviour copied from Buck2 is what the rules rely on: attribute
# checking, declared outputs bound exactly once, snake_case categories,
# providers, select() over constraint values, cmd_args flattening.

AnalysisContext = typing.Any
AnalysisActions = typing.Any
Artifact = typing.Any
OutputArtifact = typing.Any
Provider = typing.Any
ProviderCollection = typing.Any
Dependency = typing.Any
Label = typing.Any
CommandLineArgLike = typing.Any
ConfigurationInfo = typing.Any

_NO_DEFAULT = struct(__no_default__ = True)

# ---- providers --------------------------------------------------------------

def provider_field(ty, default = _NO_DEFAULT):
    return struct(__provider_field__ = True, ty = ty, default = default)

def provider(doc = "", fields = None):
    if type(doc) != "string":
        fail("provider: doc must be a string")
    if type(fields) == "list":
        names = fields
    elif type(fields) == "dict":
        names = list(fields.keys())
        for n, f in fields.items():
            if not (type(f) == "struct" and hasattr(f, "__provider_field__")):
                fail("provider: field `%s` must be a provider_field(...)" % n)
    else:
        fail("provider: `fields` must be a list or a dict, got %s" % type(fields))
    for n in names:
        if type(n) != "string":
            fail("provider: field names must be strings")
    return __new_provider(__next_id(), names)

DefaultInfo = provider(fields = ["default_output", "default_outputs", "other_outputs", "sub_targets"])
RunInfo = provider(fields = ["args"])
ExternalRunnerTestInfo = provider(fields = ["type", "command", "env", "labels", "contacts", "use_project_relative_paths", "run_from_project_root", "default_executor", "executor_overrides", "local_resources", "required_local_resources", "worker_count"])
ConstraintValueInfo = provider(fields = ["setting", "label"])
# Execution platforms (rules/buck2/remote/defs.bzl).
PlatformInfo = provider(fields = ["label", "configuration"])
ExecutionPlatformInfo = provider(fields = ["label", "configuration", "executor_config"])
ExecutionPlatformRegistrationInfo = provider(fields = ["platforms"])

def CommandExecutorConfig(local_enabled, remote_enabled, **kwargs):
    return struct(local_enabled = local_enabled, remote_enabled = remote_enabled, **kwargs)

def _is_provider_instance(v):
    return type(v) == "struct" and hasattr(v, "__provider__")

def fake_collection(providers, what):
    if type(providers) != "list":
        fail("%s: a rule implementation must return a list of providers, got %s" % (what, type(providers)))
    out = {}
    for p in providers:
        if not _is_provider_instance(p):
            fail("%s: returned a value that is not a provider: %r" % (what, p))
        if p.__provider__ in out:
            fail("%s: provider %s returned twice" % (what, p.__provider__))
        out[p.__provider__] = p
    if DefaultInfo not in out:
        fail("%s: the returned providers have no DefaultInfo" % what)
    return out

# ---- attributes -------------------------------------------------------------

def _attr(kind, default, doc, **extra):
    if type(doc) != "string":
        fail("attrs.%s: doc must be a string" % kind)
    return struct(__attr__ = kind, default = default, doc = doc, **extra)

def _string(default = _NO_DEFAULT, doc = "", validate = None):
    return _attr("string", default, doc)

def _bool(default = _NO_DEFAULT, doc = ""):
    return _attr("bool", default, doc)

def _int(default = _NO_DEFAULT, doc = ""):
    return _attr("int", default, doc)

def _enum(variants, default = _NO_DEFAULT, doc = ""):
    for v in variants:
        if type(v) != "string":
            fail("attrs.enum: variants must be strings")
    return _attr("enum", default, doc, variants = variants)

def _inner(what, a):
    if not (type(a) == "struct" and hasattr(a, "__attr__")):
        fail("attrs.%s: the element type must be an attribute (attrs.*), got %r" % (what, a))
    return a

def _list(inner, default = _NO_DEFAULT, doc = ""):
    return _attr("list", default, doc, inner = _inner("list", inner))

def _dict(key, value, default = _NO_DEFAULT, doc = "", sorted = False):
    return _attr("dict", default, doc, key = _inner("dict", key), value = _inner("dict", value))

def _option(inner, default = _NO_DEFAULT, doc = ""):
    return _attr("option", default, doc, inner = _inner("option", inner))

def _source(default = _NO_DEFAULT, doc = "", allow_directory = False):
    return _attr("source", default, doc)

def _dep(providers = [], default = _NO_DEFAULT, doc = "", pulls_plugins = None, pulls_and_pushes_plugins = None):
    return _attr("dep", default, doc, providers = providers)

def _exec_dep(providers = [], default = _NO_DEFAULT, doc = ""):
    return _attr("exec_dep", default, doc, providers = providers)

def _toolchain_dep(providers = [], default = _NO_DEFAULT, doc = ""):
    return _attr("toolchain_dep", default, doc, providers = providers)

def _arg(default = _NO_DEFAULT, doc = "", json = False, allow_empty = True):
    return _attr("arg", default, doc)

def _any(default = _NO_DEFAULT, doc = ""):
    return _attr("any", default, doc)

def _label(default = _NO_DEFAULT, doc = ""):
    return _attr("label", default, doc)

def _default_only(inner, doc = ""):
    i = _inner("default_only", inner)
    if i.default == _NO_DEFAULT:
        fail("attrs.default_only: the inner attribute needs a default")
    return _attr("default_only", i.default, doc or i.doc, inner = i)

attrs = struct(
    string = _string,
    bool = _bool,
    int = _int,
    enum = _enum,
    list = _list,
    dict = _dict,
    option = _option,
    source = _source,
    dep = _dep,
    exec_dep = _exec_dep,
    toolchain_dep = _toolchain_dep,
    arg = _arg,
    any = _any,
    label = _label,
    default_only = _default_only,
)

# ---- rules ------------------------------------------------------------------

# Attributes every Buck2 target accepts.
_COMMON_ATTRS = [
    "name",
    "visibility",
    "within_view",
    "metadata",
    "tests",
    "modifiers",
    "default_target_platform",
    "target_compatible_with",
    "compatible_with",
    "exec_compatible_with",
]

def rule(impl, attrs, doc = "", is_toolchain_rule = False, is_configuration_rule = False, cfg = None, supports_incoming_transition = None):
    if type(attrs) != "dict":
        fail("rule: attrs must be a dict")
    if type(doc) != "string":
        fail("rule: doc must be a string")
    for name, a in attrs.items():
        if not (type(a) == "struct" and hasattr(a, "__attr__")):
            fail("rule: attribute `%s` is not an attrs.* value: %r" % (name, a))
        if name in _COMMON_ATTRS:
            fail("rule: attribute `%s` is reserved" % name)
        if name.startswith("_") and a.default == _NO_DEFAULT:
            fail("rule: hidden attribute `%s` needs a default" % name)
    rule_id = __next_id()
    __stash("__rule_spec_%d" % rule_id, struct(impl = impl, attrs = attrs, doc = doc, is_toolchain_rule = is_toolchain_rule))
    return __new_rule(rule_id)

def _is_select(v):
    return type(v) == "struct" and hasattr(v, "__select__")

def fake_instantiate(kind, rule_id, spec, kwargs):
    info = __ctx_info()
    if info["kind"] != "buck":
        fail("rule `%s` called outside of a BUCK file (from a %s file)" % (kind, info["kind"]))
    name = kwargs.get("name")
    if type(name) != "string" or not name:
        fail("rule `%s`: missing or invalid `name`" % kind)
    for k, v in kwargs.items():
        if k in _COMMON_ATTRS:
            continue
        if k.startswith("_"):
            fail("rule `%s` (target `%s`): hidden attribute `%s` cannot be set" % (kind, name, k))
        if k not in spec.attrs:
            fail("Found `%s` extra named parameter(s) for call to %s (target `%s`): unexpected parameter named `%s`" % (k, kind, name, k))
        _check_shape(kind, name, k, spec.attrs[k], v)
    for k, a in spec.attrs.items():
        if not k.startswith("_") and a.default == _NO_DEFAULT and k not in kwargs:
            fail("Missing parameter `%s` for call to %s (target `%s`)" % (k, kind, name))
    __record(struct(record = "target", kind = kind, rule_id = rule_id, name = name, attrs = kwargs))
    return None

def _check_shape(kind, name, k, a, v):
    # Coercion-time checks Buck2 does while loading a BUCK file.
    if _is_select(v) or v == None and a.__attr__ == "option":
        return
    t = a.__attr__
    expected = {
        "string": "string",
        "bool": "bool",
        "int": "int",
        "enum": "string",
        "list": "list",
        "dict": "dict",
        "source": "string",
        "dep": "string",
        "exec_dep": "string",
        "toolchain_dep": "string",
        "label": "string",
    }.get(t)
    if expected and type(v) != expected and not (t == "list" and type(v) == "tuple"):
        fail("target `%s` (%s): attribute `%s` expects %s, got %s (%r)" % (name, kind, k, expected, type(v), v))
    if t == "enum" and v not in a.variants:
        fail("target `%s` (%s): attribute `%s` must be one of %s, got %r" % (name, kind, k, a.variants, v))
    if t == "list":
        for x in v:
            _check_shape(kind, name, k, a.inner, x)

def select(d):
    if type(d) != "dict":
        fail("select: expected a dict, got %s" % type(d))
    for k in d.keys():
        if type(k) != "string" or not (k == "DEFAULT" or ":" in k):
            fail("select: key `%s` is not a configuration label or DEFAULT" % k)
    return struct(__select__ = d)

# ---- command lines ----------------------------------------------------------

def _is_artifact(v):
    return type(v) == "struct" and hasattr(v, "__artifact__")

def _is_output(v):
    return type(v) == "struct" and hasattr(v, "__output__")

def _is_cmd_args(v):
    return type(v) == "struct" and hasattr(v, "__cmd_args__")

def _flatten(args, what):
    out = []
    stack = [args]
    for _ in range(100000):
        if not stack:
            return out
        v = stack.pop()
        if type(v) in ("list", "tuple"):
            stack.extend(reversed(list(v)))
        elif _is_cmd_args(v):
            stack.append(v.items)
        elif _is_provider_instance(v) and v.__provider__ == RunInfo:
            stack.append(v.args)
        elif type(v) == "string" or _is_artifact(v) or _is_output(v):
            out.append(v)
        else:
            fail("%s: `%r` (type %s) is not a command line argument" % (what, v, type(v)))
    fail("%s: command line too deep" % what)

def cmd_args(*args, hidden = [], format = None, delimiter = None, quote = None, prepend = None, ignore_artifacts = False, absolute_prefix = None, absolute_suffix = None, parent = 0, relative_to = None, replace_regex = None):
    items = _flatten(list(args), "cmd_args")
    if parent:
        # Like Buck2: every artifact stands for its `parent`-th directory.
        items = [_parent_artifact(x, parent) if _is_artifact(x) else x for x in items]
    hidden_items = _flatten([hidden], "cmd_args(hidden)")
    if format != None:
        # An artifact keeps its format: the harness renders it with the
        # artifact's path (`{}` replaced), as buck2 does.
        items = [format.replace("{}", x) if type(x) == "string" else (_artifact(x.path, x.short_path, x.is_source, x.is_dir, x.owner, format) if _is_artifact(x) else x) for x in items]
    return struct(__cmd_args__ = True, items = items, hidden = hidden_items, delimiter = delimiter)

# ---- artifacts and actions --------------------------------------------------

def _artifact(path, short_path, is_source, is_dir, owner, format = None):
    return struct(
        __artifact__ = True,
        format = format,
        path = path,
        short_path = short_path,
        basename = path.split("/")[-1],
        extension = ("." + path.split("/")[-1].split(".")[-1]) if "." in path.split("/")[-1] else "",
        is_source = is_source,
        is_dir = is_dir,
        owner = owner,
        as_output = lambda: _as_output(path, short_path, is_source, is_dir, owner),
        project = lambda sub, hide_prefix = False: _artifact(path + "/" + sub, short_path + "/" + sub, is_source, False, owner),
    )

def _parent_artifact(a, n):
    path = a.path.split("/")
    short = a.short_path.split("/")
    if n >= len(path):
        fail("cmd_args(parent = %d): `%s` has no such parent" % (n, a.path))
    return _artifact("/".join(path[:-n]), "/".join(short[:-n]) if n < len(short) else "", a.is_source, True, a.owner)

def _as_output(path, short_path, is_source, is_dir, owner):
    if is_source:
        fail("as_output(): `%s` is a source file, not a declared output" % path)
    return struct(__output__ = True, path = path, short_path = short_path, is_dir = is_dir, owner = owner)

def fake_source_artifact(path, short_path):
    # buck2: a source file's `owner` is None.
    return _artifact(path, short_path, True, False, None)

def _target_label(cell, package, name):
    # buck2's `Label` (ctx.label, and the `owner` of an artifact a rule
    # declared): cell, package, name, and raw_target(), the unconfigured
    # target; the fake's TargetLabel is its string, "cell//package:name",
    # which is what str() and "%s" of buck2's TargetLabel give.
    return struct(
        cell = cell,
        package = package,
        name = name,
        raw_target = lambda: "%s//%s:%s" % (cell, package, name),
    )

def _valid_category(c):
    if type(c) != "string" or not c or not c[0].isalpha():
        return False
    for ch in c.elems():
        if not (ch.islower() or ch.isdigit() or ch == "_"):
            return False
    return True

def fake_make_actions(label):
    state = {"declared": {}, "bound": {}, "actions": [], "keys": {}}
    out_dir = "buck-out/v2/gen/%s/%s/__%s__" % (label.cell, label.package, label.name)

    def _declare(prefix, filename = None, dir = False, has_content_based_path = False, uses_experimental_content_based_path_hashing = False):
        if type(prefix) != "string" or not prefix or prefix.startswith("/") or ".." in prefix.split("/"):
            fail("declare_output: invalid output name %r" % (prefix,))
        p = prefix if filename == None else prefix + "/" + filename
        if p in state["declared"]:
            fail("declare_output: conflicting output `%s` declared twice" % p)
        a = _artifact(out_dir + "/" + p, p, False, dir, label)
        state["declared"][p] = a
        return a

    def _out(v, what, dir = False):
        # Actions taking `output` accept a string (declared on the fly), an
        # artifact or an output artifact.
        if type(v) == "string":
            v = _declare(v, dir = dir)
        if _is_artifact(v):
            v = v.as_output()
        if not _is_output(v):
            fail("%s: output must be a declared artifact, got %r" % (what, v))
        return v

    def _bind(o, what):
        if o.path not in [a.path for a in state["declared"].values()]:
            fail("%s: `%s` was not declared by this rule" % (what, o.path))
        if o.path in state["bound"]:
            fail("%s: `%s` is already bound to another action" % (what, o.path))
        state["bound"][o.path] = what
        for p, a in state["declared"].items():
            if a.path == o.path:
                return a
        return None

    def _key(category, identifier):
        if not _valid_category(category):
            fail("category `%s` must be snake_case (lower-case letters, digits, underscores)" % category)
        k = "%s/%s" % (category, identifier)
        if k in state["keys"]:
            fail("action category `%s` with identifier `%s` is used twice in one target; give each action a distinct `identifier`" % (category, identifier))
        state["keys"][k] = True

    def run(arguments, category, identifier = None, env = {}, local_only = False, prefer_local = False, prefer_remote = False, always_print_stderr = False, weight = 1, allow_cache_upload = None, exe = None, allow_offline_output_cache = False, no_outputs_cleanup = False, unique_input_inodes = False, error_handler = None):
        _key(category, identifier)
        cmd = cmd_args(arguments)
        if _is_cmd_args(arguments):
            # Keep the hidden items of a cmd_args passed as is (buck2 does).
            cmd = struct(__cmd_args__ = True, items = cmd.items, hidden = cmd.hidden + arguments.hidden, delimiter = cmd.delimiter)
        for k, v in env.items():
            if type(k) != "string":
                fail("run: env keys must be strings")
            _flatten([v], "run(env)")
        outputs = [x for x in cmd.items + cmd.hidden if _is_output(x)]
        if not outputs:
            fail("run (category %s): the action has no outputs (use .as_output())" % category)
        # One output may appear several times in one command line (buck2
        # accepts it: kpack_recombine's wrapper names the directory it checks).
        bound = {}
        for o in outputs:
            if o.path not in bound:
                bound[o.path] = True
                _bind(o, "run(%s)" % category)
        state["actions"].append(struct(kind = "run", category = category, identifier = identifier, argv = cmd.items, hidden = cmd.hidden, env = env, local_only = local_only))
        return None

    def write(output, content, is_executable = False, allow_args = False, with_inputs = False, absolute = False, uses_experimental_content_based_path_hashing = False, has_content_based_path = False):
        o = _out(output, "write")
        if type(content) != "string":
            _flatten([content], "write(content)")
        a = _bind(o, "write")
        state["actions"].append(struct(kind = "write", output = o, is_executable = is_executable))
        return a

    def write_json(output, value, with_inputs = False, pretty = False, absolute = False, uses_experimental_content_based_path_hashing = False, has_content_based_path = False):
        o = _out(output, "write_json")
        a = _bind(o, "write_json")
        state["actions"].append(struct(kind = "write_json", output = o))
        return a

    def copy_file(dest, src, uses_experimental_content_based_path_hashing = False, has_content_based_path = False):
        if not _is_artifact(src):
            fail("copy_file: src must be an artifact, got %r" % (src,))
        o = _out(dest, "copy_file", dir = src.is_dir)
        a = _bind(o, "copy_file")
        state["actions"].append(struct(kind = "copy_file", output = o, src = src))
        return a

    symlink_file = copy_file

    # Recorded with their kind: the harness's executor (run_actions)
    # stages them as Buck2 does, and the two differ for symlinked inputs.
    def _dir_action(kind, output, srcs):
        if type(srcs) != "dict":
            fail("%s: srcs must be a dict of path -> artifact" % kind)
        for k, v in srcs.items():
            if type(k) != "string" or not _is_artifact(v):
                fail("%s: srcs must map strings to artifacts, got %r: %r" % (kind, k, v))
            if k.startswith("/") or ".." in k.split("/"):
                fail("%s: invalid destination `%s`" % (kind, k))
        o = _out(output, kind, dir = True)
        a = _bind(o, kind)
        state["actions"].append(struct(kind = kind, output = o, srcs = srcs))
        return a

    def copied_dir(output, srcs, uses_experimental_content_based_path_hashing = False, has_content_based_path = False):
        return _dir_action("copied_dir", output, srcs)

    def symlinked_dir(output, srcs, uses_experimental_content_based_path_hashing = False, has_content_based_path = False):
        return _dir_action("symlinked_dir", output, srcs)

    def download_file(output, url, vpnless_url = None, sha1 = None, sha256 = None, is_executable = False, is_deferrable = False, size_bytes = None):
        if sha1 == None and sha256 == None:
            fail("download_file: needs sha1 or sha256")
        o = _out(output, "download_file")
        a = _bind(o, "download_file")
        state["actions"].append(struct(kind = "download_file", output = o, url = url, sha256 = sha256))
        return a

    actions = struct(
        declare_output = _declare,
        run = run,
        write = write,
        write_json = write_json,
        copy_file = copy_file,
        symlink_file = symlink_file,
        copied_dir = copied_dir,
        symlinked_dir = symlinked_dir,
        download_file = download_file,
    )
    return actions, state

# ---- analysis ---------------------------------------------------------------

def _dep_collection(label, spec_providers, what):
    sub = None
    base = label
    if label.endswith("]") and "[" in label:
        base = label[:label.index("[")]
        sub = label[label.index("[") + 1:-1]
    c = __analyze_dep(base)
    if sub != None:
        subs = c[DefaultInfo].sub_targets or {}
        if sub not in subs:
            fail("%s: `%s` has no sub-target `%s` (has %s)" % (what, base, sub, sorted(subs.keys())))
        c = fake_collection(subs[sub], label)
    for p in spec_providers:
        if p not in c:
            fail("%s: `%s` does not provide %s" % (what, label, p))
    return c

def _coerce(a, v, what):
    # A select's value may be another select (Buck2 resolves nested ones).
    for _ in range(16):
        if not _is_select(v):
            break
        v = __resolve_select(v.__select__, what)
    if _is_select(v):
        fail("%s: selects nested more than 16 deep" % what)
    t = a.__attr__
    if t in ("string", "enum", "bool", "int", "any", "arg", "label"):
        return v
    if t == "option":
        return None if v == None else _coerce(a.inner, v, what)
    if t == "default_only":
        return _coerce(a.inner, v, what)
    if t == "list":
        return [_coerce(a.inner, x, what) for x in v]
    if t == "dict":
        return {_coerce(a.key, k, what): _coerce(a.value, x, what) for k, x in v.items()}
    if t in ("dep", "exec_dep", "toolchain_dep"):
        return _dep_collection(v, a.providers, what)
    if t == "source":
        if v.startswith(":") or "//" in v:
            c = _dep_collection(v, [], what)
            d = c[DefaultInfo]
            outs = d.default_outputs if d.default_outputs != None else ([d.default_output] if d.default_output != None else [])
            if len(outs) != 1:
                fail("%s: source `%s` must have exactly one default output, has %d" % (what, v, len(outs)))
            return outs[0]
        return __source(v)
    fail("internal: unknown attribute kind %s" % t)

def fake_analyze(kind, spec, label, given):
    label = _target_label(label.cell, label.package, label.name)
    what = "%s//%s:%s (%s)" % (label.cell, label.package, label.name, kind)
    resolved = {"name": label.name}
    for k, a in spec.attrs.items():
        if k in given:
            v = given[k]
        elif a.default != _NO_DEFAULT:
            v = a.default
        else:
            fail("%s: missing attribute `%s`" % (what, k))
        resolved[k] = _coerce(a, v, "%s attribute `%s`" % (what, k))
    actions, state = fake_make_actions(label)
    ctx = struct(attrs = struct(**resolved), label = label, actions = actions)
    providers = spec.impl(ctx)
    collection = fake_collection(providers, what)
    for p, a in state["declared"].items():
        if a.path not in state["bound"]:
            fail("%s: declared output `%s` is not bound by any action" % (what, p))
    return struct(providers = collection, actions = state["actions"])

# ---- BUCK / PACKAGE / bzl natives --------------------------------------------

def _glob(include, exclude = [], allow_empty = True):
    return __glob(include, exclude)

def _package_name():
    info = __ctx_info()
    if info["kind"] != "buck":
        fail("package_name() can only be called while a BUCK file is evaluated")
    return info["package"]

def _read_config(section, key, default = None):
    return __read_config(section, key, default)

read_config = _read_config
read_root_config = _read_config

def _set_cfg_constructor(stage0, stage1, key, aliases = None, extra_data = None):
    info = __ctx_info()
    if info["kind"] != "package":
        fail("set_cfg_constructor can only be called from a PACKAGE file")
    __record(struct(record = "set_cfg_constructor", stage0 = str(stage0), stage1 = str(stage1), key = key, aliases = aliases, extra_data = extra_data))

def _write_package_value(name, value, overwrite = False):
    __record(struct(record = "package_value", name = name, value = value))

def _read_parent_package_value(name):
    return None

def _get_cell_name():
    info = __ctx_info()
    if info["kind"] not in ("buck", "package"):
        fail("get_cell_name() can only be called while a BUCK or PACKAGE file is evaluated")
    return info["cell"]

def _host_info():
    return struct(os = struct(is_linux = True, is_macos = False, is_windows = False), arch = struct(is_x86_64 = True, is_aarch64 = False))

host_info = _host_info

def _simple_impl(ctx):
    return [DefaultInfo()]

constraint_setting = rule(impl = _simple_impl, attrs = {})
constraint_value = rule(impl = _simple_impl, attrs = {"constraint_setting": attrs.label()})
config_setting = rule(impl = _simple_impl, attrs = {
    "constraint_values": attrs.list(attrs.label(), default = []),
    "values": attrs.dict(attrs.string(), attrs.string(), default = {}),
})

def _alias_impl(ctx):
    return ctx.attrs.actual.values()

alias = rule(impl = _alias_impl, attrs = {"actual": attrs.dep()})

def _export_file_impl(ctx):
    return [DefaultInfo(default_output = ctx.attrs.src)]

export_file = rule(impl = _export_file_impl, attrs = {"mode": attrs.option(attrs.string(), default = None), "out": attrs.option(attrs.string(), default = None), "src": attrs.source()})

def _filegroup_impl(ctx):
    outs = []
    for d in ctx.attrs.srcs:
        i = d[DefaultInfo]
        outs += i.default_outputs if i.default_outputs != None else ([i.default_output] if i.default_output != None else [])
    return [DefaultInfo(default_outputs = outs)]

# Like buck2's, a filegroup takes every default output of a target in `srcs`
# (a kpack_wheel_split has several); only targets are modelled here.
filegroup = rule(impl = _filegroup_impl, attrs = {"srcs": attrs.list(attrs.dep(), default = [])})

def _http_file_impl(ctx):
    if len(ctx.attrs.urls) != 1:
        fail("http_file: multiple `urls` not supported: %s" % ctx.attrs.urls)
    out = ctx.actions.declare_output(ctx.attrs.out or ctx.label.name)
    ctx.actions.download_file(out.as_output(), ctx.attrs.urls[0], sha1 = ctx.attrs.sha1, sha256 = ctx.attrs.sha256, is_executable = ctx.attrs.executable)
    p = [DefaultInfo(default_output = out)]
    if ctx.attrs.executable:
        p.append(RunInfo(args = cmd_args(out)))
    return p

http_file = rule(impl = _http_file_impl, attrs = {
    "executable": attrs.bool(default = False),
    "out": attrs.option(attrs.string(), default = None),
    "sha1": attrs.option(attrs.string(), default = None),
    "sha256": attrs.option(attrs.string(), default = None),
    "urls": attrs.list(attrs.string()),
    "vpnless_url": attrs.option(attrs.string(), default = None),
})

CxxFakeInfo = provider(fields = ["libs", "headers"])

def _cxx_inputs(ctx):
    libs = []
    headers = []
    for d in ctx.attrs.deps + ctx.attrs.exported_deps:
        if CxxFakeInfo in d:
            libs.extend(d[CxxFakeInfo].libs)
            headers.extend(d[CxxFakeInfo].headers)
    return libs, headers

def _cxx_headers(h):
    return h.values() if type(h) == "dict" else h

def _cxx_library_impl(ctx):
    libs, headers = _cxx_inputs(ctx)
    outs = []
    if ctx.attrs.srcs:
        lib = ctx.actions.declare_output("lib%s.a" % ctx.label.name)
        ctx.actions.run(cmd_args("ar", "rcs", lib.as_output(), ctx.attrs.srcs), category = "cxx_archive")
        libs = [lib] + libs
        outs = [lib]
    return [
        DefaultInfo(default_outputs = outs),
        CxxFakeInfo(libs = libs, headers = headers + _cxx_headers(ctx.attrs.exported_headers) + _cxx_headers(ctx.attrs.headers)),
    ]

_CXX_COMMON = {
    "compiler_flags": attrs.list(attrs.string(), default = []),
    "deps": attrs.list(attrs.dep(), default = []),
    "exported_deps": attrs.list(attrs.dep(), default = []),
    "exported_headers": attrs.any(default = []),
    "exported_linker_flags": attrs.list(attrs.string(), default = []),
    "exported_preprocessor_flags": attrs.list(attrs.string(), default = []),
    "header_namespace": attrs.option(attrs.string(), default = None),
    "headers": attrs.any(default = []),
    "include_directories": attrs.list(attrs.string(), default = []),
    "labels": attrs.list(attrs.string(), default = []),
    "link_style": attrs.option(attrs.string(), default = None),
    "linker_flags": attrs.list(attrs.string(), default = []),
    "preferred_linkage": attrs.option(attrs.enum(["any", "static", "shared"]), default = None),
    "preprocessor_flags": attrs.list(attrs.string(), default = []),
    "public_include_directories": attrs.list(attrs.string(), default = []),
    "srcs": attrs.list(attrs.source(), default = []),
}

cxx_library = rule(impl = _cxx_library_impl, attrs = _CXX_COMMON)

def _cxx_binary_impl(ctx):
    libs, _headers = _cxx_inputs(ctx)
    exe = ctx.actions.declare_output(ctx.label.name)
    ctx.actions.run(cmd_args("g++", "-o", exe.as_output(), ctx.attrs.srcs, libs), category = "cxx_link_executable")
    return [DefaultInfo(default_output = exe), RunInfo(args = cmd_args(exe))]

cxx_binary = rule(impl = _cxx_binary_impl, attrs = _CXX_COMMON)

def _cxx_test_impl(ctx):
    providers = _cxx_binary_impl(ctx)
    cmd = cmd_args(providers[0].default_output, ctx.attrs.args)
    return [providers[0], RunInfo(args = cmd), ExternalRunnerTestInfo(type = "gtest", command = [cmd], env = ctx.attrs.env, labels = ctx.attrs.labels)]

# The real cxx_test has the hidden test toolchain deps of every prelude test rule.
cxx_test = rule(impl = _cxx_test_impl, attrs = dict(_CXX_COMMON, **{
    "_remote_test_execution_toolchain": attrs.toolchain_dep(default = "toolchains//:remote_test_execution"),
    "_test_toolchain": attrs.toolchain_dep(default = "toolchains//:test"),
    "args": attrs.list(attrs.arg(), default = []),
    "env": attrs.dict(attrs.string(), attrs.arg(), default = {}),
}))

def _prebuilt_cxx_library_impl(ctx):
    libs, headers = _cxx_inputs(ctx)
    if ctx.attrs.static_lib != None:
        libs = [ctx.attrs.static_lib] + libs
    return [
        DefaultInfo(default_outputs = [ctx.attrs.static_lib] if ctx.attrs.static_lib != None else []),
        CxxFakeInfo(libs = libs, headers = headers + _cxx_headers(ctx.attrs.exported_headers)),
    ]

prebuilt_cxx_library = rule(impl = _prebuilt_cxx_library_impl, attrs = {
    "deps": attrs.list(attrs.dep(), default = []),
    "exported_deps": attrs.list(attrs.dep(), default = []),
    "exported_headers": attrs.any(default = []),
    "exported_linker_flags": attrs.list(attrs.string(), default = []),
    "exported_preprocessor_flags": attrs.list(attrs.string(), default = []),
    "header_dirs": attrs.option(attrs.list(attrs.source()), default = None),
    "header_namespace": attrs.option(attrs.string(), default = None),
    "header_only": attrs.bool(default = False),
    "labels": attrs.list(attrs.string(), default = []),
    "link_whole": attrs.bool(default = False),
    "preferred_linkage": attrs.option(attrs.enum(["any", "static", "shared"]), default = None),
    "shared_lib": attrs.option(attrs.source(), default = None),
    "soname": attrs.option(attrs.string(), default = None),
    "static_lib": attrs.option(attrs.source(), default = None),
    "static_pic_lib": attrs.option(attrs.source(), default = None),
})

# Macros buck2 expands in genrule `cmd`; any other `$(...)` (e.g. shell
# command substitution) is a coercion error under buck2.
_GENRULE_MACROS = ["location", "exe", "exe_target", "query_outputs", "query_targets", "source", "classpath", "output", "maven_coords"]

def _genrule_impl(ctx):
    for part in ctx.attrs.cmd.split("$(")[1:]:
        name = part.split(" ")[0].split(")")[0]
        if name not in _GENRULE_MACROS:
            fail("genrule cmd: buck2 reads `$(%s` as a macro (use backticks for command substitution)" % part[:20])
    out = ctx.actions.declare_output(ctx.attrs.out)
    ctx.actions.run(cmd_args("/bin/bash", "-c", ctx.attrs.cmd, hidden = ctx.attrs.srcs + [out.as_output()]), category = "genrule")
    return [DefaultInfo(default_output = out)]

genrule = rule(impl = _genrule_impl, attrs = {
    "cmd": attrs.string(),
    "out": attrs.string(),
    "srcs": attrs.list(attrs.source(), default = []),
})

def _sh_test_impl(ctx):
    cmd = cmd_args(ctx.attrs.test, ctx.attrs.args)
    return [
        DefaultInfo(),
        RunInfo(args = cmd),
        ExternalRunnerTestInfo(type = "custom", command = [cmd], env = ctx.attrs.env, labels = ctx.attrs.labels),
    ]

# The real sh_test (like every prelude test rule) has these hidden toolchain
# deps: analysis fails unless the toolchains cell defines both.
sh_test = rule(impl = _sh_test_impl, attrs = {
    "_remote_test_execution_toolchain": attrs.toolchain_dep(default = "toolchains//:remote_test_execution"),
    "_test_toolchain": attrs.toolchain_dep(default = "toolchains//:test"),
    "args": attrs.list(attrs.arg(), default = []),
    "deps": attrs.list(attrs.dep(), default = []),
    "env": attrs.dict(attrs.string(), attrs.arg(), default = {}),
    "labels": attrs.list(attrs.string(), default = []),
    "resources": attrs.list(attrs.source(), default = []),
    "test": attrs.source(),
})

# Rule functions a BUCK file sees as globals; .bzl files reach them (and the
# functions above) through `native`.
FAKE_BUCK_ONLY = [
    "alias",
    "config_setting",
    "constraint_setting",
    "constraint_value",
    "cxx_binary",
    "cxx_library",
    "cxx_test",
    "export_file",
    "filegroup",
    "genrule",
    "glob",
    "http_file",
    "package_name",
    "prebuilt_cxx_library",
    "sh_test",
]

glob = _glob
package_name = _package_name

native = struct(
    alias = alias,
    config_setting = config_setting,
    constraint_setting = constraint_setting,
    constraint_value = constraint_value,
    cxx_binary = cxx_binary,
    cxx_library = cxx_library,
    cxx_test = cxx_test,
    export_file = export_file,
    filegroup = filegroup,
    genrule = genrule,
    glob = _glob,
    http_file = http_file,
    package_name = _package_name,
    prebuilt_cxx_library = prebuilt_cxx_library,
    sh_test = sh_test,
    read_config = _read_config,
    read_root_config = _read_config,
    select = select,
    set_cfg_constructor = _set_cfg_constructor,
    write_package_value = _write_package_value,
    read_parent_package_value = _read_parent_package_value,
    host_info = _host_info,
    get_cell_name = _get_cell_name,
)
