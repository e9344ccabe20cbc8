//! Test-only harness that evaluates rocpack's Buck2 files with the `starlark`
//! crate, in Buck2's dialects, against a small fake of the Buck2 globals.
//!
//! No buck2 binary can be installed on the CI machines, so this crate plays
//! the parts of Buck2 the rules depend on:
//!
//! * loading: `.bzl` (types, f-strings, keyword-only args), `BUCK` and
//!   `PACKAGE` (no `def`, no top-level `if`/`for`) dialects, `load()` paths
//!   with cells from `.buckconfig`, `glob()` stopping at sub-packages;
//! * rules: `rule()` with `attrs.*`, unknown / missing / hidden attributes
//!   rejected when a BUCK file calls the rule (as Buck2 does);
//! * configuration: `constraint_setting` / `constraint_value` /
//!   `config_setting`, `select()` with Buck2's "most specific key wins",
//!   `set_cfg_modifiers` defaults from PACKAGE files and `-m` modifiers
//!   resolved through the aliases given to `set_cfg_constructor` in the root
//!   PACKAGE — and, like Buck2, `-m` silently ignored without that call;
//! * analysis: `ctx.attrs`, `ctx.label`, `ctx.actions` (declare_output,
//!   run, write, copied_dir, ...), providers, `DefaultInfo.sub_targets`,
//!   `target_compatible_with`. Every action is recorded as JSON.
//!
//! The Starlark half of the fake is `fake/builtins.bzl` and `fake/prelude/`.

// The starlark crate's derives (ProvidesStaticType, StarlarkPagable) expand
// to `unsafe impl`s; this crate itself has no unsafe block.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use allocative::Allocative;
use anyhow::{anyhow, bail, Context as _};
use serde_json::{json, Value as Json};
use starlark::any::ProvidesStaticType;
use starlark::environment::{FrozenModule, Globals, GlobalsBuilder, LibraryExtension, Module};
use starlark::eval::{Arguments, Evaluator, ReturnFileLoader};
use starlark::syntax::{AstModule, Dialect, DialectTypes};
use starlark::typing::Ty;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::list::{AllocList, ListRef};
use starlark::values::none::NoneType;
use starlark::values::structs::{AllocStruct, StructRef};
use starlark::values::tuple::TupleRef;
use starlark::values::{
    starlark_value, FrozenHeap, FrozenValue, Heap, NoSerialize, OwnedFrozenValue, StarlarkPagable,
    StarlarkValue, Value, ValueLike,
};
use starlark::{starlark_module, starlark_simple_value};

static NEXT_ID: AtomicI32 = AtomicI32::new(1);

/// A frozen value owned elsewhere, made usable in the module whose frozen
/// heap is `keep_alive` (which then keeps the owner alive).
fn attach<'v>(v: &OwnedFrozenValue, keep_alive: &FrozenHeap) -> Value<'v> {
    keep_alive.add_reference(v.owner());
    let mut out = None;
    let _ = v.map(|fv| {
        out = Some(fv);
        fv
    });
    out.map(FrozenValue::to_value)
        .unwrap_or_else(Value::new_none)
}

/// Which kind of Starlark file is being evaluated (decides dialect and globals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Bzl,
    Buck,
    Package,
    Analysis,
}

impl FileKind {
    fn name(self) -> &'static str {
        match self {
            FileKind::Bzl => "bzl",
            FileKind::Buck => "buck",
            FileKind::Package => "package",
            FileKind::Analysis => "analysis",
        }
    }

    /// Buck2's dialects: BUCK and PACKAGE files cannot `def` or use
    /// top-level `if`/`for`; `.bzl` files have types and f-strings.
    fn dialect(self) -> Dialect {
        match self {
            FileKind::Bzl | FileKind::Analysis => Dialect {
                enable_def: true,
                enable_lambda: true,
                enable_load: true,
                enable_keyword_only_arguments: true,
                enable_positional_only_arguments: false,
                enable_types: DialectTypes::Enable,
                enable_load_reexport: false,
                enable_top_level_stmt: true,
                enable_f_strings: true,
                ..Dialect::Standard
            },
            FileKind::Buck | FileKind::Package => Dialect {
                enable_def: false,
                enable_lambda: true,
                enable_load: true,
                enable_keyword_only_arguments: false,
                enable_positional_only_arguments: false,
                enable_types: DialectTypes::Disable,
                enable_load_reexport: false,
                enable_top_level_stmt: false,
                enable_f_strings: false,
                ..Dialect::Standard
            },
        }
    }
}

// ---- Rust-side Starlark values ------------------------------------------------

/// The value `rule()` returns; calling it from a BUCK file records a target.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagable)]
pub struct RuleCallable {
    id: i32,
    #[allocative(skip)]
    #[starlark_pagable(skip)]
    name: OnceLock<String>,
}
starlark_simple_value!(RuleCallable);

impl fmt::Display for RuleCallable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "<rule {}>",
            self.name.get().map(String::as_str).unwrap_or("?")
        )
    }
}

#[starlark_value(type = "rule")]
impl<'v> StarlarkValue<'v> for RuleCallable {
    fn export_as(
        &self,
        variable_name: &str,
        _eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<()> {
        let _ = self.name.set(variable_name.to_owned());
        Ok(())
    }

    fn invoke(
        &self,
        _me: Value<'v>,
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        args.no_positional_args(eval.heap())?;
        let kind =
            self.name.get().cloned().ok_or_else(|| {
                anyhow!("a rule must be assigned to a global before it is called")
            })?;
        let kwargs = args.names_map()?;
        let ctx = eval_ctx(eval)?;
        let engine = ctx.engine.clone();
        let spec = engine
            .rules
            .borrow()
            .get(&self.id)
            .cloned()
            .ok_or_else(|| {
                anyhow!("rule `{kind}` is used before the file defining it was loaded")
            })?;
        let heap = eval.heap();
        let spec = attach(&spec, eval.frozen_heap());
        let dict = heap.alloc(AllocDict(kwargs.iter().map(|(k, v)| (k.to_value(), *v))));
        let f = engine.builtin("fake_instantiate", eval)?;
        let kind_v = heap.alloc(kind.as_str());
        eval.eval_function(f, &[kind_v, heap.alloc(self.id), spec, dict], &[])
    }
}

/// A provider type made by `provider()`; calling it makes an instance (a
/// struct with a `__provider__` field pointing back at the provider).
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagable)]
pub struct ProviderCallable {
    id: i32,
    fields: Vec<String>,
    #[allocative(skip)]
    #[starlark_pagable(skip)]
    name: OnceLock<String>,
}
starlark_simple_value!(ProviderCallable);

impl ProviderCallable {
    fn display_name(&self) -> &str {
        self.name.get().map(String::as_str).unwrap_or("provider")
    }
}

impl fmt::Display for ProviderCallable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.display_name())
    }
}

#[starlark_value(type = "provider_callable")]
impl<'v> StarlarkValue<'v> for ProviderCallable {
    fn export_as(
        &self,
        variable_name: &str,
        _eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<()> {
        let _ = self.name.set(variable_name.to_owned());
        Ok(())
    }

    fn eval_type(&self) -> Option<Ty> {
        Some(Ty::any())
    }

    fn write_hash(
        &self,
        hasher: &mut starlark::collections::StarlarkHasher,
    ) -> starlark::Result<()> {
        use std::hash::Hash;
        self.id.hash(hasher);
        Ok(())
    }

    fn equals(&self, other: Value<'v>) -> starlark::Result<bool> {
        Ok(other
            .downcast_ref::<ProviderCallable>()
            .is_some_and(|o| o.id == self.id))
    }

    fn invoke(
        &self,
        me: Value<'v>,
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        args.no_positional_args(eval.heap())?;
        let kwargs = args.names_map()?;
        let mut given: BTreeMap<String, Value<'v>> = BTreeMap::new();
        for (k, v) in kwargs.iter() {
            let k = k.as_str().to_owned();
            if !self.fields.contains(&k) {
                return Err(anyhow!(
                    "provider `{}` has no field `{k}` (fields: {})",
                    self.display_name(),
                    self.fields.join(", ")
                )
                .into());
            }
            given.insert(k, *v);
        }
        let mut fields: Vec<(String, Value<'v>)> = vec![("__provider__".to_owned(), me)];
        for f in &self.fields {
            fields.push((
                f.clone(),
                given.get(f).copied().unwrap_or_else(Value::new_none),
            ));
        }
        Ok(eval.heap().alloc(AllocStruct(fields)))
    }
}

// ---- evaluation context ---------------------------------------------------------

/// What a native function needs to know about the file or target being evaluated.
#[derive(ProvidesStaticType)]
struct EvalCtx {
    engine: Rc<Engine>,
    kind: FileKind,
    cell: String,
    package: Option<String>,
    cfg: Option<Config>,
    records: RefCell<Vec<Json>>,
}

impl EvalCtx {
    fn new(
        engine: &Rc<Engine>,
        kind: FileKind,
        cell: &str,
        package: Option<&str>,
        cfg: Option<Config>,
    ) -> EvalCtx {
        EvalCtx {
            engine: engine.clone(),
            kind,
            cell: cell.to_owned(),
            package: package.map(str::to_owned),
            cfg,
            records: RefCell::new(Vec::new()),
        }
    }
}

fn eval_ctx<'a, 'e: 'a>(eval: &Evaluator<'_, 'a, 'e>) -> anyhow::Result<&'a EvalCtx> {
    let extra = eval.extra;
    extra
        .ok_or_else(|| anyhow!("internal: no evaluation context"))?
        .downcast_ref::<EvalCtx>()
        .ok_or_else(|| anyhow!("internal: wrong evaluation context"))
}

#[starlark_module]
fn fake_natives(builder: &mut GlobalsBuilder) {
    fn __next_id() -> anyhow::Result<i32> {
        Ok(NEXT_ID.fetch_add(1, Ordering::SeqCst))
    }

    fn __new_rule(id: i32) -> anyhow::Result<RuleCallable> {
        Ok(RuleCallable {
            id,
            name: OnceLock::new(),
        })
    }

    fn __new_provider(
        id: i32,
        fields: starlark::values::list_or_tuple::UnpackListOrTuple<String>,
    ) -> anyhow::Result<ProviderCallable> {
        Ok(ProviderCallable {
            id,
            fields: fields.items,
            name: OnceLock::new(),
        })
    }

    fn __stash<'v>(
        name: &str,
        value: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        eval.module().set(name, value);
        Ok(NoneType)
    }

    fn __record<'v>(
        value: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let ctx = eval_ctx(eval)?;
        ctx.records.borrow_mut().push(to_json(value)?);
        Ok(NoneType)
    }

    fn __ctx_info<'v>(eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        let ctx = eval_ctx(eval)?;
        let heap = eval.heap();
        let pkg = match &ctx.package {
            Some(p) => heap.alloc(p.as_str()),
            None => Value::new_none(),
        };
        Ok(heap.alloc(AllocDict([
            ("kind", heap.alloc(ctx.kind.name())),
            ("cell", heap.alloc(ctx.cell.as_str())),
            ("package", pkg),
        ])))
    }

    fn __glob<'v>(
        include: starlark::values::list_or_tuple::UnpackListOrTuple<String>,
        exclude: starlark::values::list_or_tuple::UnpackListOrTuple<String>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Vec<String>> {
        let ctx = eval_ctx(eval)?;
        if ctx.kind != FileKind::Buck {
            bail!("glob() can only be called while a BUCK file is evaluated");
        }
        let pkg = ctx.package.clone().unwrap_or_default();
        ctx.engine
            .glob(&ctx.cell, &pkg, &include.items, &exclude.items)
    }

    fn __read_config<'v>(
        section: &str,
        key: &str,
        default: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let ctx = eval_ctx(eval)?;
        Ok(match ctx.engine.read_config(section, key) {
            Some(v) => eval.heap().alloc(v.as_str()),
            None => default,
        })
    }

    fn __resolve_select<'v>(
        d: Value<'v>,
        what: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let ctx = eval_ctx(eval)?;
        let cfg = ctx
            .cfg
            .as_ref()
            .ok_or_else(|| anyhow!("{what}: select() resolved outside of analysis"))?;
        let dict =
            DictRef::from_value(d).ok_or_else(|| anyhow!("{what}: select() needs a dict"))?;
        let mut keys = Vec::new();
        for (k, v) in dict.iter() {
            let k = k
                .unpack_str()
                .ok_or_else(|| anyhow!("{what}: select keys must be strings"))?;
            keys.push((k.to_owned(), v));
        }
        let pkg = ctx.package.clone().unwrap_or_default();
        let chosen = ctx.engine.resolve_select(
            &ctx.cell,
            &pkg,
            cfg,
            &keys.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            what,
        )?;
        Ok(keys[chosen].1)
    }

    fn __analyze_dep<'v>(
        label: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let ctx = eval_ctx(eval)?;
        let cfg = ctx
            .cfg
            .clone()
            .ok_or_else(|| anyhow!("dependency `{label}` resolved outside of analysis"))?;
        let pkg = ctx.package.clone().unwrap_or_default();
        let target = Label::parse(label, &ctx.cell, &pkg, &ctx.engine)?;
        let analysis = ctx.engine.analyze(&target, &cfg)?;
        Ok(attach(&analysis.providers, eval.frozen_heap()))
    }

    fn __source<'v>(path: &str, eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        let ctx = eval_ctx(eval)?;
        let pkg = ctx.package.clone().unwrap_or_default();
        if path.is_empty()
            || path.starts_with('/')
            || path.split('/').any(|s| s == ".." || s == ".")
        {
            bail!("source path `{path}` must be relative to the package `{pkg}`");
        }
        let rel = join_rel(&pkg, path);
        let abs = ctx.engine.cell_dir(&ctx.cell)?.join(&rel);
        if !ctx.engine.exists(&abs) {
            bail!(
                "source file `{path}` of package `{}//{pkg}` does not exist ({})",
                ctx.cell,
                abs.display()
            );
        }
        let cell_rel = ctx.engine.repo_relative(&ctx.cell, &rel)?;
        let engine = ctx.engine.clone();
        let f = engine.builtin("fake_source_artifact", eval)?;
        let heap = eval.heap();
        eval.eval_function(f, &[heap.alloc(cell_rel.as_str()), heap.alloc(path)], &[])
            .map_err(|e| anyhow!("{e}"))
    }
}

fn join_rel(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_owned(),
        (_, true) => a.to_owned(),
        _ => format!("{a}/{b}"),
    }
}

/// Converts a Starlark value to JSON (structs become objects; functions and
/// other opaque values become `{"__repr__": ...}`).
pub fn to_json(v: Value<'_>) -> anyhow::Result<Json> {
    if v.is_none() {
        return Ok(Json::Null);
    }
    if let Some(b) = v.unpack_bool() {
        return Ok(Json::Bool(b));
    }
    if let Some(i) = v.unpack_i32() {
        return Ok(json!(i));
    }
    if let Some(s) = v.unpack_str() {
        return Ok(Json::String(s.to_owned()));
    }
    if let Some(l) = ListRef::from_value(v) {
        return l
            .iter()
            .map(to_json)
            .collect::<anyhow::Result<Vec<_>>>()
            .map(Json::Array);
    }
    if let Some(t) = TupleRef::from_value(v) {
        return t
            .iter()
            .map(to_json)
            .collect::<anyhow::Result<Vec<_>>>()
            .map(Json::Array);
    }
    if let Some(d) = DictRef::from_value(v) {
        let mut m = serde_json::Map::new();
        for (k, x) in d.iter() {
            let key = match k.unpack_str() {
                Some(s) => s.to_owned(),
                None => k.to_repr(),
            };
            m.insert(key, to_json(x)?);
        }
        return Ok(Json::Object(m));
    }
    if let Some(s) = StructRef::from_value(v) {
        let mut m = serde_json::Map::new();
        for (k, x) in s.iter() {
            m.insert(k.as_str().to_owned(), to_json(x)?);
        }
        return Ok(Json::Object(m));
    }
    if let Some(p) = v.downcast_ref::<ProviderCallable>() {
        return Ok(json!({ "__provider__": p.display_name() }));
    }
    if let Some(r) = v.downcast_ref::<RuleCallable>() {
        return Ok(json!({ "__rule__": r.name.get() }));
    }
    Ok(json!({ "__repr__": v.to_repr() }))
}

/// JSON (a recorded attribute value) back to Starlark; `{"__select__": ..}`
/// objects become select structs again.
fn from_json<'v>(heap: Heap<'v>, j: &Json) -> Value<'v> {
    match j {
        Json::Null => Value::new_none(),
        Json::Bool(b) => Value::new_bool(*b),
        Json::Number(n) => heap.alloc(n.as_i64().and_then(|x| i32::try_from(x).ok()).unwrap_or(0)),
        Json::String(s) => heap.alloc(s.as_str()),
        Json::Array(a) => heap.alloc(AllocList(a.iter().map(|x| from_json(heap, x)))),
        Json::Object(m) => {
            if let (Some(sel), 1) = (m.get("__select__"), m.len()) {
                let d = from_json(heap, sel);
                return heap.alloc(AllocStruct([("__select__", d)]));
            }
            heap.alloc(AllocDict(
                m.iter()
                    .map(|(k, x)| (heap.alloc(k.as_str()), from_json(heap, x))),
            ))
        }
    }
}

// ---- labels and configurations --------------------------------------------------

/// `cell//package:name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label {
    pub cell: String,
    pub package: String,
    pub name: String,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}//{}:{}", self.cell, self.package, self.name)
    }
}

impl Label {
    /// Parses `cell//pkg:name`, `//pkg:name` or `:name` relative to a package.
    pub fn parse(s: &str, cell: &str, package: &str, engine: &Engine) -> anyhow::Result<Label> {
        let s = s.strip_prefix('@').unwrap_or(s);
        if let Some(name) = s.strip_prefix(':') {
            return Ok(Label {
                cell: cell.to_owned(),
                package: package.to_owned(),
                name: name.to_owned(),
            });
        }
        let (c, rest) = s
            .split_once("//")
            .ok_or_else(|| anyhow!("`{s}` is not a target label"))?;
        let c = if c.is_empty() {
            cell.to_owned()
        } else {
            engine.canonical_cell(c)?
        };
        let (pkg, name) = rest
            .split_once(':')
            .ok_or_else(|| anyhow!("`{s}` is not a target label (no `:name`)"))?;
        Ok(Label {
            cell: c,
            package: pkg.trim_end_matches('/').to_owned(),
            name: name.to_owned(),
        })
    }
}

/// Constraint setting label -> constraint value label.
pub type Config = BTreeMap<String, String>;

fn cfg_key(cfg: &Config) -> String {
    cfg.values().cloned().collect::<Vec<_>>().join(",")
}

/// A target as a BUCK file declared it.
#[derive(Debug, Clone)]
pub struct Target {
    pub kind: String,
    pub rule_id: i32,
    pub attrs: serde_json::Map<String, Json>,
}

/// One analysed target.
pub struct Analysis {
    pub label: Label,
    pub kind: String,
    pub providers: OwnedFrozenValue,
    /// Every action the rule registered, as recorded by `fake/builtins.bzl`.
    pub actions: Vec<Json>,
    /// The providers as JSON (DefaultInfo, RunInfo, ...), for assertions.
    pub providers_json: Json,
}

/// Error raised when a target is not compatible with the configuration.
#[derive(Debug)]
pub struct Incompatible(pub String);

impl fmt::Display for Incompatible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for Incompatible {}

// ---- the engine -----------------------------------------------------------------

/// Loads and analyses the Buck2 side of one repository.
pub struct Engine {
    pub repo: PathBuf,
    fake_dir: PathBuf,
    cells: BTreeMap<String, PathBuf>,
    cell_aliases: BTreeMap<String, String>,
    buckconfig: RefCell<BTreeMap<(String, String), String>>,
    overlay: RefCell<HashMap<PathBuf, String>>,
    globals: Globals,
    builtins: RefCell<Option<FrozenModule>>,
    bzl_cache: RefCell<HashMap<PathBuf, FrozenModule>>,
    loading: RefCell<HashSet<PathBuf>>,
    rules: RefCell<HashMap<i32, OwnedFrozenValue>>,
    rule_names: RefCell<HashMap<i32, (String, PathBuf)>>,
    packages: RefCell<HashMap<String, Rc<BTreeMap<String, Target>>>>,
    package_records: RefCell<HashMap<String, Rc<Vec<Json>>>>,
    analyses: RefCell<HashMap<(Label, String), Rc<Analysis>>>,
    in_progress: RefCell<HashSet<(Label, String)>>,
}

/// Parses a `.buckconfig` (INI with `\` continuations) into (section, key) -> value.
pub fn parse_buckconfig(text: &str) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    let mut section = String::new();
    let mut logical: Vec<String> = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.starts_with('#') || t.starts_with(';')) {
            continue;
        }
        if let Some(stripped) = t.strip_suffix('\\') {
            cur.push_str(stripped);
            cur.push(' ');
            continue;
        }
        cur.push_str(t);
        logical.push(std::mem::take(&mut cur));
    }
    for l in logical {
        let l = l.trim();
        if l.is_empty() {
            continue;
        }
        if l.starts_with('[') && l.ends_with(']') {
            section = l[1..l.len() - 1].trim().to_owned();
        } else if let Some((k, v)) = l.split_once('=') {
            out.insert(
                (section.clone(), k.trim().to_owned()),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            );
        }
    }
    out
}

/// Matches a `/`-separated path against a glob (`*`, `?`, `**`).
pub fn glob_match(pattern: &str, path: &str) -> bool {
    fn seg(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => seg(&p[1..], s) || (!s.is_empty() && seg(p, &s[1..])),
            (Some(b'?'), Some(_)) => seg(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => seg(&p[1..], &s[1..]),
            _ => false,
        }
    }
    fn segs(p: &[&str], s: &[&str]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some(&"**") => segs(&p[1..], s) || (!s.is_empty() && segs(p, &s[1..])),
            Some(x) => {
                !s.is_empty() && seg(x.as_bytes(), s[0].as_bytes()) && segs(&p[1..], &s[1..])
            }
        }
    }
    let p: Vec<&str> = pattern.split('/').collect();
    let s: Vec<&str> = path.split('/').collect();
    segs(&p, &s)
}

impl Engine {
    /// An engine for the repository at `repo` (its `.buckconfig` decides the cells).
    pub fn new(repo: &Path) -> anyhow::Result<Rc<Engine>> {
        let fake_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fake");
        let cfg_text = std::fs::read_to_string(repo.join(".buckconfig"))
            .with_context(|| format!("reading {}", repo.join(".buckconfig").display()))?;
        let buckconfig = parse_buckconfig(&cfg_text);
        let mut cells = BTreeMap::new();
        let mut cell_aliases = BTreeMap::new();
        for ((section, key), value) in &buckconfig {
            match section.as_str() {
                "cells" | "repositories" => {
                    let dir = if key == "prelude" {
                        fake_dir.join("prelude")
                    } else {
                        repo.join(value)
                    };
                    cells.insert(key.clone(), dir);
                }
                "cell_aliases" | "repository_aliases" => {
                    cell_aliases.insert(key.clone(), value.clone());
                }
                _ => {}
            }
        }
        if !cells.contains_key("root") {
            bail!(".buckconfig has no `root` cell");
        }
        let globals = GlobalsBuilder::extended_by(&[
            LibraryExtension::StructType,
            LibraryExtension::RecordType,
            LibraryExtension::EnumType,
            LibraryExtension::Typing,
            LibraryExtension::Json,
            LibraryExtension::Print,
            LibraryExtension::Filter,
            LibraryExtension::Map,
            LibraryExtension::SetType,
        ])
        .with(fake_natives)
        .build();
        let engine = Rc::new(Engine {
            repo: repo.to_owned(),
            fake_dir,
            cells,
            cell_aliases,
            buckconfig: RefCell::new(buckconfig),
            overlay: RefCell::new(HashMap::new()),
            globals,
            builtins: RefCell::new(None),
            bzl_cache: RefCell::new(HashMap::new()),
            loading: RefCell::new(HashSet::new()),
            rules: RefCell::new(HashMap::new()),
            rule_names: RefCell::new(HashMap::new()),
            packages: RefCell::new(HashMap::new()),
            package_records: RefCell::new(HashMap::new()),
            analyses: RefCell::new(HashMap::new()),
            in_progress: RefCell::new(HashSet::new()),
        });
        let builtins_path = engine.fake_dir.join("builtins.bzl");
        let builtins = engine
            .eval_file(&builtins_path, "root", FileKind::Bzl, None, None, false)?
            .0;
        engine.register_rules(&builtins, &builtins_path);
        *engine.builtins.borrow_mut() = Some(builtins);
        Ok(engine)
    }

    /// Overrides `[section] key` as `-c section.key=value` would.
    pub fn set_config(&self, section: &str, key: &str, value: &str) {
        self.buckconfig
            .borrow_mut()
            .insert((section.to_owned(), key.to_owned()), value.to_owned());
    }

    fn read_config(&self, section: &str, key: &str) -> Option<String> {
        self.buckconfig
            .borrow()
            .get(&(section.to_owned(), key.to_owned()))
            .cloned()
    }

    /// Replaces (or adds) a file for this engine only: negative tests use it
    /// to evaluate deliberately broken snippets next to the real files.
    pub fn overlay(&self, repo_relative: &str, content: &str) {
        self.overlay
            .borrow_mut()
            .insert(self.repo.join(repo_relative), content.to_owned());
    }

    fn exists(&self, p: &Path) -> bool {
        self.overlay.borrow().contains_key(p) || p.exists()
    }

    fn read(&self, p: &Path) -> anyhow::Result<String> {
        if let Some(s) = self.overlay.borrow().get(p) {
            return Ok(s.clone());
        }
        std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
    }

    fn canonical_cell(&self, c: &str) -> anyhow::Result<String> {
        if let Some(dir) = self.cells.get(c) {
            // Two names of one directory are one cell (rocpack's .buckconfig
            // has `root = .` and `rocpack = .`): buck2 resolves both to the
            // same targets, so labels written with either must compare equal.
            if let Some((name, _)) = self
                .cells
                .iter()
                .find(|(n, d)| *d == dir && n.as_str() == "root")
            {
                return Ok(name.clone());
            }
            return Ok(c.to_owned());
        }
        match self.cell_aliases.get(c) {
            Some(a) if self.cells.contains_key(a) => Ok(a.clone()),
            _ => bail!(
                "unknown cell `{c}` (cells: {:?})",
                self.cells.keys().collect::<Vec<_>>()
            ),
        }
    }

    /// Directory of a cell.
    pub fn cell_dir(&self, cell: &str) -> anyhow::Result<PathBuf> {
        self.cells
            .get(cell)
            .cloned()
            .ok_or_else(|| anyhow!("unknown cell `{cell}`"))
    }

    fn repo_relative(&self, cell: &str, rel: &str) -> anyhow::Result<String> {
        let dir = self.cell_dir(cell)?;
        let abs = dir.join(rel);
        Ok(match abs.strip_prefix(&self.repo) {
            Ok(p) => p.to_string_lossy().into_owned(),
            Err(_) => format!("{cell}/{rel}"),
        })
    }

    fn builtin<'v>(&self, name: &str, eval: &Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        let b = self.builtins.borrow();
        let m = b.as_ref().ok_or_else(|| anyhow!("builtins not loaded"))?;
        let v = m.get(name).map_err(|e| anyhow!("builtin `{name}`: {e}"))?;
        Ok(attach(&v, eval.frozen_heap()))
    }

    fn register_rules(&self, m: &FrozenModule, path: &Path) {
        for name in m.names() {
            let name = name.as_str();
            if let Some(id) = name
                .strip_prefix("__rule_spec_")
                .and_then(|s| s.parse::<i32>().ok())
            {
                if let Ok(v) = m.get(name) {
                    self.rules.borrow_mut().insert(id, v);
                }
            }
        }
        for name in m.names() {
            if let Ok(v) = m.get(name.as_str()) {
                if let Some(r) = v.value().downcast_ref::<RuleCallable>() {
                    if let Some(n) = r.name.get() {
                        self.rule_names
                            .borrow_mut()
                            .entry(r.id)
                            .or_insert((n.clone(), path.to_owned()));
                    }
                }
            }
        }
    }

    /// The rules defined by `.bzl` files under `dir` (repo-relative): kind ->
    /// (attribute name -> doc).
    pub fn rule_attr_docs(&self, dir: &str) -> BTreeMap<String, BTreeMap<String, String>> {
        let root = self.repo.join(dir);
        let mut out = BTreeMap::new();
        for (id, (name, path)) in self.rule_names.borrow().iter() {
            if !path.starts_with(&root) {
                continue;
            }
            if let Some(spec) = self.rules.borrow().get(id) {
                let mut docs = BTreeMap::new();
                if let Ok(Json::Object(s)) = to_json(spec.value().to_value()) {
                    if let Some(Json::Object(attrs)) = s.get("attrs") {
                        for (k, a) in attrs {
                            docs.insert(
                                k.clone(),
                                a.get("doc").and_then(Json::as_str).unwrap_or("").to_owned(),
                            );
                        }
                    }
                }
                out.insert(name.clone(), docs);
            }
        }
        out
    }

    fn import_builtins(&self, module: &Module<'_>, kind: FileKind) -> anyhow::Result<()> {
        let b = self.builtins.borrow();
        let Some(b) = b.as_ref() else { return Ok(()) };
        let buck_only: Vec<String> = match b.get("FAKE_BUCK_ONLY") {
            Ok(v) => match to_json(v.value().to_value())? {
                Json::Array(a) => a
                    .iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect(),
                _ => vec![],
            },
            Err(_) => vec![],
        };
        for name in b.names() {
            let name = name.as_str();
            if name.starts_with('_') || name.starts_with("fake_") || name.starts_with("FAKE_") {
                continue;
            }
            if kind != FileKind::Buck && buck_only.iter().any(|x| x == name) {
                continue;
            }
            let v = b.get(name).map_err(|e| anyhow!("{e}"))?;
            module.set(name, attach(&v, module.frozen_heap()));
        }
        Ok(())
    }

    fn resolve_load(&self, cell: &str, dir: &str, s: &str) -> anyhow::Result<(String, String)> {
        let t = s.strip_prefix('@').unwrap_or(s);
        if let Some(file) = t.strip_prefix(':') {
            return Ok((cell.to_owned(), join_rel(dir, file)));
        }
        let (c, rest) = t
            .split_once("//")
            .ok_or_else(|| anyhow!("bad load path `{s}`"))?;
        let c = if c.is_empty() {
            cell.to_owned()
        } else {
            self.canonical_cell(c)?
        };
        let rel = match rest.split_once(':') {
            Some((pkg, file)) => join_rel(pkg, file),
            None => rest.to_owned(),
        };
        if !rel.ends_with(".bzl") {
            bail!("load path `{s}` must name a .bzl file");
        }
        Ok((c, rel))
    }

    /// Evaluates one file; returns the frozen module and the records made.
    fn eval_file(
        self: &Rc<Self>,
        path: &Path,
        cell: &str,
        kind: FileKind,
        package: Option<&str>,
        cfg: Option<Config>,
        builtins: bool,
    ) -> anyhow::Result<(FrozenModule, Vec<Json>)> {
        let src = self.read(path)?;
        let shown = path
            .strip_prefix(&self.repo)
            .unwrap_or(path)
            .display()
            .to_string();
        let ast = AstModule::parse(&shown, src, &kind.dialect()).map_err(|e| anyhow!("{e}"))?;
        let cell_dir = self.cell_dir(cell)?;
        let dir = path
            .parent()
            .and_then(|p| p.strip_prefix(&cell_dir).ok())
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut loaded: Vec<(String, FrozenModule)> = Vec::new();
        for l in ast.loads() {
            let (c, rel) = self
                .resolve_load(cell, &dir, l.module_id)
                .with_context(|| format!("in {shown}"))?;
            let m = self
                .eval_bzl(&c, &rel)
                .with_context(|| format!("loading `{}` from {shown}", l.module_id))?;
            loaded.push((l.module_id.to_owned(), m));
        }
        let modules = loaded.iter().map(|(a, b)| (a.as_str(), b)).collect();
        let loader = ReturnFileLoader { modules: &modules };
        let ctx = EvalCtx::new(self, kind, cell, package, cfg);
        let frozen = Module::with_temp_heap(|module| -> anyhow::Result<FrozenModule> {
            if builtins {
                self.import_builtins(&module, kind)?;
            }
            {
                let mut eval = Evaluator::new(&module);
                eval.set_loader(&loader);
                eval.extra = Some(&ctx);
                eval.eval_module(ast, &self.globals)
                    .map_err(|e| anyhow!("{e}"))?;
            }
            module
                .freeze()
                .map_err(|e| anyhow!("freezing {shown}: {e:?}"))
        })?;
        Ok((frozen, ctx.records.into_inner()))
    }

    /// Loads a `.bzl` file of a cell (cached).
    pub fn eval_bzl(self: &Rc<Self>, cell: &str, rel: &str) -> anyhow::Result<FrozenModule> {
        let path = self.cell_dir(cell)?.join(rel);
        if let Some(m) = self.bzl_cache.borrow().get(&path) {
            return Ok(m.clone());
        }
        if !self.exists(&path) {
            if path.starts_with(&self.fake_dir) {
                bail!("the fake prelude (tests/buck2/fake/prelude) has no `{rel}`: add it there if the real prelude has it");
            }
            bail!("`{}` does not exist", path.display());
        }
        if !self.loading.borrow_mut().insert(path.clone()) {
            bail!("load cycle through {}", path.display());
        }
        let r = self.eval_file(&path, cell, FileKind::Bzl, None, None, true);
        self.loading.borrow_mut().remove(&path);
        let (m, _) = r?;
        self.register_rules(&m, &path);
        self.bzl_cache.borrow_mut().insert(path, m.clone());
        Ok(m)
    }

    /// Records of the PACKAGE file of `cell//dir` (empty when there is none).
    pub fn package_records(
        self: &Rc<Self>,
        cell: &str,
        dir: &str,
    ) -> anyhow::Result<Rc<Vec<Json>>> {
        let key = format!("{cell}//{dir}");
        if let Some(r) = self.package_records.borrow().get(&key) {
            return Ok(r.clone());
        }
        let path = self.cell_dir(cell)?.join(dir).join("PACKAGE");
        let records = if self.exists(&path) {
            self.eval_file(&path, cell, FileKind::Package, Some(dir), None, true)?
                .1
        } else {
            Vec::new()
        };
        let r = Rc::new(records);
        self.package_records.borrow_mut().insert(key, r.clone());
        Ok(r)
    }

    fn package_chain(dir: &str) -> Vec<String> {
        let mut out = vec![String::new()];
        let mut cur = String::new();
        for part in dir.split('/').filter(|s| !s.is_empty()) {
            cur = join_rel(&cur, part);
            out.push(cur.clone());
        }
        out
    }

    /// Targets of the BUCK file of `cell//dir` (its PACKAGE files are evaluated first).
    pub fn package(
        self: &Rc<Self>,
        cell: &str,
        dir: &str,
    ) -> anyhow::Result<Rc<BTreeMap<String, Target>>> {
        let key = format!("{cell}//{dir}");
        if let Some(p) = self.packages.borrow().get(&key) {
            return Ok(p.clone());
        }
        for d in Self::package_chain(dir) {
            self.package_records(cell, &d)?;
        }
        let path = self.cell_dir(cell)?.join(dir).join("BUCK");
        if !self.exists(&path) {
            bail!("no BUCK file in `{key}` ({})", path.display());
        }
        let (_, records) = self.eval_file(&path, cell, FileKind::Buck, Some(dir), None, true)?;
        let mut targets = BTreeMap::new();
        for r in records {
            if r.get("record").and_then(Json::as_str) != Some("target") {
                continue;
            }
            let name = r["name"].as_str().unwrap_or_default().to_owned();
            let t = Target {
                kind: r["kind"].as_str().unwrap_or_default().to_owned(),
                rule_id: r["rule_id"]
                    .as_i64()
                    .and_then(|x| i32::try_from(x).ok())
                    .unwrap_or(0),
                attrs: r["attrs"].as_object().cloned().unwrap_or_default(),
            };
            if targets.insert(name.clone(), t).is_some() {
                bail!("{key}: target `{name}` is declared twice");
            }
        }
        let p = Rc::new(targets);
        self.packages.borrow_mut().insert(key, p.clone());
        Ok(p)
    }

    fn target(self: &Rc<Self>, l: &Label) -> anyhow::Result<Target> {
        let p = self.package(&l.cell, &l.package)?;
        p.get(&l.name).cloned().ok_or_else(|| {
            anyhow!(
                "unknown target `{l}` (package has: {})",
                p.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// Every directory of a cell holding a BUCK file, honouring `[project] ignore`.
    pub fn buck_dirs(&self, cell: &str) -> anyhow::Result<Vec<String>> {
        let root = self.cell_dir(cell)?;
        let mut out = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            let rel = d
                .strip_prefix(&root)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !rel.is_empty() && self.ignored(&root, &d) {
                continue;
            }
            if d.join("BUCK").exists() {
                out.push(rel.clone());
            }
            let mut entries: Vec<PathBuf> = std::fs::read_dir(&d)?
                .filter_map(Result::ok)
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .map(|e| e.path())
                .collect();
            entries.sort();
            for e in entries.into_iter().rev() {
                // Other cells are walked on their own.
                if self.cells.values().any(|c| c == &e && c != &root) {
                    continue;
                }
                stack.push(e);
            }
        }
        out.sort();
        Ok(out)
    }

    fn ignored(&self, cell_root: &Path, p: &Path) -> bool {
        let Ok(rel) = p.strip_prefix(&self.repo) else {
            return false;
        };
        let rel = rel.to_string_lossy();
        if rel == "buck-out" || rel.starts_with("buck-out/") {
            return true;
        }
        let _ = cell_root;
        let ignore = self.read_config("project", "ignore").unwrap_or_default();
        ignore
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .any(|pat| glob_match(pat, &rel) || rel.starts_with(&format!("{pat}/")))
    }

    fn glob(
        &self,
        cell: &str,
        pkg: &str,
        include: &[String],
        exclude: &[String],
    ) -> anyhow::Result<Vec<String>> {
        let cell_root = self.cell_dir(cell)?;
        let base = cell_root.join(pkg);
        let mut out = Vec::new();
        let mut stack = vec![base.clone()];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.filter_map(Result::ok) {
                let p = e.path();
                let rel = p
                    .strip_prefix(&base)
                    .map(|x| x.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let ft = e.file_type()?;
                if ft.is_dir() {
                    if self.ignored(&cell_root, &p) || p.join("BUCK").exists() {
                        continue;
                    }
                    stack.push(p);
                } else if include.iter().any(|g| glob_match(g, &rel))
                    && !exclude.iter().any(|g| glob_match(g, &rel))
                {
                    out.push(rel);
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn constraint_setting_of(self: &Rc<Self>, value: &Label) -> anyhow::Result<String> {
        let t = self.target(value)?;
        if t.kind != "constraint_value" {
            bail!("`{value}` is a {}, not a constraint_value", t.kind);
        }
        let s = t
            .attrs
            .get("constraint_setting")
            .and_then(Json::as_str)
            .unwrap_or_default();
        Ok(Label::parse(s, &value.cell, &value.package, self)?.to_string())
    }

    /// The constraints a select key or modifier stands for.
    fn constraints_of(self: &Rc<Self>, key: &Label) -> anyhow::Result<Config> {
        let t = self.target(key)?;
        let mut out = Config::new();
        match t.kind.as_str() {
            "constraint_value" => {
                out.insert(self.constraint_setting_of(key)?, key.to_string());
            }
            "config_setting" => {
                for l in self.label_list(&t, "constraint_values", key)? {
                    out.insert(self.constraint_setting_of(&l)?, l.to_string());
                }
            }
            k => bail!("`{key}` ({k}) cannot be used as a configuration condition"),
        }
        Ok(out)
    }

    /// Index of the select key Buck2 would take: all matching keys, the one
    /// refining every other wins; DEFAULT when none matches.
    pub fn resolve_select(
        self: &Rc<Self>,
        cell: &str,
        pkg: &str,
        cfg: &Config,
        keys: &[String],
        what: &str,
    ) -> anyhow::Result<usize> {
        let mut matching: Vec<(usize, Config)> = Vec::new();
        let mut default = None;
        for (i, k) in keys.iter().enumerate() {
            if k == "DEFAULT" {
                default = Some(i);
                continue;
            }
            let l = Label::parse(k, cell, pkg, self)?;
            let c = self.constraints_of(&l)?;
            if c.iter().all(|(s, v)| cfg.get(s) == Some(v)) {
                matching.push((i, c));
            }
        }
        match matching.len() {
            0 => default.ok_or_else(|| {
                anyhow!(
                    "{what}: None of {} conditions matched configuration `{}` and no default was set:\n  {}",
                    keys.len(),
                    cfg_key(cfg),
                    keys.join("\n  ")
                )
            }),
            1 => Ok(matching[0].0),
            _ => {
                for (i, c) in &matching {
                    if matching.iter().all(|(_, o)| o.iter().all(|(s, v)| c.get(s) == Some(v))) {
                        return Ok(*i);
                    }
                }
                bail!("{what}: ambiguous select, several keys match: {:?}", matching.iter().map(|(i, _)| &keys[*i]).collect::<Vec<_>>())
            }
        }
    }

    /// The root PACKAGE's `set_cfg_constructor` record, if any.
    pub fn cfg_constructor(self: &Rc<Self>) -> anyhow::Result<Option<Json>> {
        Ok(self
            .package_records("root", "")?
            .iter()
            .find(|r| r.get("record").and_then(Json::as_str) == Some("set_cfg_constructor"))
            .cloned())
    }

    /// The configuration of a top-level target: PACKAGE modifiers from the
    /// root down, then the command line's `-m` (aliases from the root
    /// PACKAGE; ignored, as by Buck2, when no cfg constructor is set).
    pub fn config_for(
        self: &Rc<Self>,
        target: &Label,
        modifiers: &[&str],
    ) -> anyhow::Result<Config> {
        let mut cfg = Config::new();
        for d in Self::package_chain(&target.package) {
            for r in self.package_records(&target.cell, &d)?.iter() {
                if r.get("record").and_then(Json::as_str) != Some("set_cfg_modifiers") {
                    continue;
                }
                for m in r["modifiers"].as_array().cloned().unwrap_or_default() {
                    let l = Label::parse(m.as_str().unwrap_or_default(), &target.cell, &d, self)?;
                    cfg.insert(self.constraint_setting_of(&l)?, l.to_string());
                }
            }
        }
        let Some(ctor) = self.cfg_constructor()? else {
            return Ok(cfg);
        };
        for m in modifiers {
            let resolved: Vec<String> = if m.contains(':') {
                vec![(*m).to_owned()]
            } else {
                match ctor.get("aliases").and_then(|a| a.get(*m)) {
                    Some(Json::String(s)) => vec![s.clone()],
                    Some(Json::Array(a)) => a
                        .iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect(),
                    _ => bail!("Found invalid modifier alias `{m}`"),
                }
            };
            for r in resolved {
                if r.starts_with(':') {
                    bail!("modifier `{r}` must be a full target (`cell//pkg:name`)");
                }
                let l = Label::parse(&r, "root", "", self)?;
                cfg.insert(self.constraint_setting_of(&l)?, l.to_string());
            }
        }
        Ok(cfg)
    }

    /// Analyses a target in a configuration (cached); dependencies are
    /// analysed in the same configuration.
    pub fn analyze(self: &Rc<Self>, label: &Label, cfg: &Config) -> anyhow::Result<Rc<Analysis>> {
        let key = (label.clone(), cfg_key(cfg));
        if let Some(a) = self.analyses.borrow().get(&key) {
            return Ok(a.clone());
        }
        if !self.in_progress.borrow_mut().insert(key.clone()) {
            bail!("dependency cycle through `{label}`");
        }
        let r = self.analyze_uncached(label, cfg);
        self.in_progress.borrow_mut().remove(&key);
        let a = Rc::new(r?);
        self.analyses.borrow_mut().insert(key, a.clone());
        Ok(a)
    }

    /// A list-of-labels attribute of a target, parsed relative to its package.
    fn label_list(
        self: &Rc<Self>,
        t: &Target,
        attr: &str,
        at: &Label,
    ) -> anyhow::Result<Vec<Label>> {
        let items = t
            .attrs
            .get(attr)
            .and_then(Json::as_array)
            .cloned()
            .unwrap_or_default();
        items
            .iter()
            .map(|v| Label::parse(v.as_str().unwrap_or_default(), &at.cell, &at.package, self))
            .collect()
    }

    /// A recorded attribute value with its selects (nested ones too)
    /// resolved in `cfg`, as Buck2 configures it.
    pub fn resolve_value(
        self: &Rc<Self>,
        at: &Label,
        cfg: &Config,
        value: &Json,
        what: &str,
    ) -> anyhow::Result<Json> {
        let mut v = value.clone();
        for _ in 0..16 {
            let branches = match v.as_object() {
                Some(m) if m.len() == 1 => match m.get("__select__").and_then(Json::as_object) {
                    Some(b) => b.clone(),
                    None => return Ok(v),
                },
                _ => return Ok(v),
            };
            let keys: Vec<String> = branches.keys().cloned().collect();
            let i = self.resolve_select(&at.cell, &at.package, cfg, &keys, what)?;
            v = branches[&keys[i]].clone();
        }
        bail!("{what}: selects nested more than 16 deep")
    }

    /// Whether `target_compatible_with` of a target (a list, or a select of
    /// lists, resolved in `cfg`) holds in `cfg`.
    pub fn compatible(self: &Rc<Self>, label: &Label, cfg: &Config) -> anyhow::Result<bool> {
        let t = self.target(label)?;
        let raw = t
            .attrs
            .get("target_compatible_with")
            .cloned()
            .unwrap_or(Json::Null);
        let list =
            self.resolve_value(label, cfg, &raw, &format!("{label}.target_compatible_with"))?;
        let items = match list {
            Json::Null => Vec::new(),
            Json::Array(a) => a,
            other => bail!("{label}: target_compatible_with is not a list: {other}"),
        };
        for item in items {
            let s = item
                .as_str()
                .ok_or_else(|| anyhow!("{label}: target_compatible_with holds {item}"))?;
            let l = Label::parse(s, &label.cell, &label.package, self)?;
            let c = self.constraints_of(&l)?;
            if !c.iter().all(|(s, v)| cfg.get(s) == Some(v)) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn analyze_uncached(self: &Rc<Self>, label: &Label, cfg: &Config) -> anyhow::Result<Analysis> {
        let t = self.target(label)?;
        if !self.compatible(label, cfg)? {
            return Err(Incompatible(format!(
                "`{label}` is incompatible with configuration `{}`",
                cfg_key(cfg)
            ))
            .into());
        }
        let spec = self
            .rules
            .borrow()
            .get(&t.rule_id)
            .cloned()
            .ok_or_else(|| anyhow!("`{label}`: rule `{}` was never loaded", t.kind))?;
        let ctx = EvalCtx::new(
            self,
            FileKind::Analysis,
            &label.cell,
            Some(&label.package),
            Some(cfg.clone()),
        );
        let (frozen, actions, providers_json) = Module::with_temp_heap(
            |module| -> anyhow::Result<(FrozenModule, Vec<Json>, Json)> {
                let (result, actions, providers_json) = {
                    let mut eval = Evaluator::new(&module);
                    eval.extra = Some(&ctx);
                    let heap = eval.heap();
                    let f = self.builtin("fake_analyze", &eval)?;
                    let label_v = heap.alloc(AllocStruct([
                        ("cell", heap.alloc(label.cell.as_str())),
                        ("package", heap.alloc(label.package.as_str())),
                        ("name", heap.alloc(label.name.as_str())),
                    ]));
                    let given = from_json(heap, &Json::Object(t.attrs.clone()));
                    let spec_v = attach(&spec, eval.frozen_heap());
                    let kind_v = heap.alloc(t.kind.as_str());
                    let result = eval
                        .eval_function(f, &[kind_v, spec_v, label_v, given], &[])
                        .map_err(|e| anyhow!("analysing `{label}` ({}): {e}", t.kind))?;
                    let actions = result
                        .get_attr("actions", heap)
                        .map_err(|e| anyhow!("{e}"))?
                        .ok_or_else(|| anyhow!("internal: no actions"))?;
                    let actions = match to_json(actions)? {
                        Json::Array(a) => a,
                        _ => Vec::new(),
                    };
                    let providers = result
                        .get_attr("providers", heap)
                        .map_err(|e| anyhow!("{e}"))?
                        .ok_or_else(|| anyhow!("internal: no providers"))?;
                    let providers_json = to_json(providers)?;
                    module.set("__providers__", providers);
                    (result, actions, providers_json)
                };
                let _ = result;
                Ok((
                    module.freeze().map_err(|e| anyhow!("{e:?}"))?,
                    actions,
                    providers_json,
                ))
            },
        )?;
        let providers = frozen.get("__providers__").map_err(|e| anyhow!("{e}"))?;
        Ok(Analysis {
            label: label.clone(),
            kind: t.kind,
            providers,
            actions,
            providers_json,
        })
    }

    /// Every analysis made so far (label, configuration key) -> result.
    pub fn all_analyses(&self) -> Vec<((Label, String), Rc<Analysis>)> {
        let mut v: Vec<_> = self
            .analyses
            .borrow()
            .iter()
            .map(|(k, a)| (k.clone(), a.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Calls a function exported by a `.bzl` file with string arguments and
    /// returns its result as JSON (used to compute expected messages with
    /// rules/common itself instead of copying its text).
    pub fn call_bzl(
        self: &Rc<Self>,
        cell: &str,
        rel: &str,
        func: &str,
        args: &[Json],
    ) -> anyhow::Result<Json> {
        let m = self.eval_bzl(cell, rel)?;
        let f = m.get(func).map_err(|e| anyhow!("{e}"))?;
        let ctx = EvalCtx::new(self, FileKind::Bzl, cell, None, None);
        Module::with_temp_heap(|module| {
            let mut eval = Evaluator::new(&module);
            eval.extra = Some(&ctx);
            let heap = eval.heap();
            let fv = attach(&f, eval.frozen_heap());
            let argv: Vec<Value<'_>> = args.iter().map(|a| from_json(heap, a)).collect();
            let r = eval
                .eval_function(fv, &argv, &[])
                .map_err(|e| anyhow!("{e}"))?;
            to_json(r)
        })
    }
}

// ---- the helper binaries and their command lines -----------------------------------

/// Paths of the real `kpack` and `snapctl` binaries.
#[derive(Debug, Clone)]
pub struct HelperBins {
    pub kpack: PathBuf,
    pub snapctl: PathBuf,
}

/// `$ROCPACK_KPACK` / `$ROCPACK_SNAPCTL`, else `cargo build -p kpack -p snapctl`
/// into the workspace's target directory.
pub fn helper_bins(repo: &Path) -> anyhow::Result<HelperBins> {
    if let (Ok(k), Ok(s)) = (
        std::env::var("ROCPACK_KPACK"),
        std::env::var("ROCPACK_SNAPCTL"),
    ) {
        return Ok(HelperBins {
            kpack: k.into(),
            snapctl: s.into(),
        });
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo.join("target"));
    let st = Command::new(cargo)
        .args(["build", "--quiet", "-p", "kpack", "-p", "snapctl"])
        .current_dir(repo)
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .context("running cargo build -p kpack -p snapctl")?;
    if !st.success() {
        bail!("cargo build -p kpack -p snapctl failed");
    }
    Ok(HelperBins {
        kpack: target.join("debug/kpack"),
        snapctl: target.join("debug/snapctl"),
    })
}

/// The helper (`kpack` / `snapctl`) an action runs, if it runs one.
pub fn helper_of(action: &Json) -> Option<&'static str> {
    helper_at(action).map(|(tool, _)| tool)
}

/// The helper an action runs and its index in `argv`: the first item, or
/// the first after `--` of a `/bin/sh -c SCRIPT NAME ... -- HELPER ...`
/// wrapper (kpack_recombine checks the helper's output that way).
pub fn helper_at(action: &Json) -> Option<(&'static str, usize)> {
    if action.get("kind").and_then(Json::as_str) != Some("run") {
        return None;
    }
    let argv = action.get("argv")?.as_array()?;
    let wrapped = argv.first()?.as_str() == Some("/bin/sh")
        && argv.get(1).and_then(Json::as_str) == Some("-c");
    let i = if wrapped {
        argv.iter().skip(3).position(|x| x.as_str() == Some("--"))? + 4
    } else {
        0
    };
    match argv.get(i)?.get("basename").and_then(Json::as_str)? {
        "kpack" => Some(("kpack", i)),
        "snapctl" => Some(("snapctl", i)),
        _ => None,
    }
}

/// An artifact's command-line text: its path, or its `cmd_args(format = ...)`
/// with `{}` replaced by the path.
fn render_artifact(artifact: &serde_json::Map<String, Json>, path: String) -> String {
    match artifact.get("format").and_then(Json::as_str) {
        Some(f) => f.replace("{}", &path),
        None => path,
    }
}

/// Runs the real helper on an action's command line, with every artifact
/// replaced by a path in a scratch directory (sources by a copy), and
/// fails when the helper's argument parser rejects it (clap's usage error:
/// exit 2 with a `Usage:` line). Errors the helper reports about the
/// placeholder inputs themselves are fine: only the command line is checked.
///
/// Returns `Ok(None)` for actions that do not run a helper.
pub fn check_helper_command(
    bins: &HelperBins,
    repo: &Path,
    action: &Json,
) -> anyhow::Result<Option<String>> {
    let Some((tool, at)) = helper_at(action) else {
        return Ok(None);
    };
    let bin = if tool == "kpack" {
        &bins.kpack
    } else {
        &bins.snapctl
    };
    let scratch = tempfile::tempdir()?;
    let argv = action["argv"].as_array().cloned().unwrap_or_default();
    let mut args: Vec<String> = Vec::new();
    for a in argv.iter().skip(at + 1) {
        match a {
            Json::String(s) => args.push(s.clone()),
            Json::Object(o) if o.contains_key("__output__") => {
                let p = scratch
                    .path()
                    .join("out")
                    .join(o["path"].as_str().unwrap_or("x"));
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                args.push(p.to_string_lossy().into_owned());
            }
            Json::Object(o) if o.contains_key("__artifact__") => {
                let path = o["path"].as_str().unwrap_or("x");
                let real = repo.join(path);
                if o["is_source"].as_bool() == Some(true) && real.is_file() {
                    // A copy: a command (e.g. an `.update` target) may write
                    // to it, and the checkout must never change.
                    let p = scratch.path().join("src").join(path);
                    if let Some(parent) = p.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::copy(&real, &p)?;
                    args.push(render_artifact(o, p.to_string_lossy().into_owned()));
                    continue;
                }
                let p = scratch.path().join("in").join(path);
                if o["is_dir"].as_bool() == Some(true) {
                    std::fs::create_dir_all(&p)?;
                } else {
                    if let Some(parent) = p.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::write(&p, b"")?;
                }
                args.push(render_artifact(o, p.to_string_lossy().into_owned()));
            }
            other => bail!("unexpected command line item {other}"),
        }
    }
    let out = Command::new(bin)
        .args(&args)
        .current_dir(scratch.path())
        .env("TZ", "UTC")
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let usage =
        out.status.code() == Some(2) && (stderr.contains("Usage:") || stderr.starts_with("error:"));
    if usage {
        bail!(
            "`{tool} {}` is rejected by {tool}'s argument parser:\n{stderr}",
            args.join(" ")
        );
    }
    Ok(Some(format!("{tool} {}", args.join(" "))))
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Channel x ROCm version combinations from rules/common, as `-m` aliases.
/// Prefix of the global channel's `-m` aliases (rules/buck2/private/config.bzl).
pub fn global_channel_prefix(engine: &Rc<Engine>) -> anyhow::Result<String> {
    let m = engine.eval_bzl("root", "rules/buck2/private/config.bzl")?;
    let v = m
        .get("GLOBAL_CHANNEL_ALIAS_PREFIX")
        .map_err(|e| anyhow!("{e}"))?;
    Ok(to_json(v.value().to_value())?
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

pub fn modifier_matrix(
    engine: &Rc<Engine>,
    library: &str,
) -> anyhow::Result<Vec<(String, String, Vec<String>)>> {
    let common = engine.eval_bzl("root", "rules/common/snapshot.bzl")?;
    let get = |n: &str| -> anyhow::Result<Vec<String>> {
        let v = common.get(n).map_err(|e| anyhow!("{e}"))?;
        Ok(match to_json(v.value().to_value())? {
            Json::Array(a) => a
                .iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect(),
            _ => vec![],
        })
    };
    let mut out = Vec::new();
    for c in get("SNAPSHOT_CHANNELS")? {
        for v in get("ROCM_VERSIONS")? {
            let ch = engine.call_bzl(
                "root",
                "rules/common/snapshot.bzl",
                "channel_config_name",
                &[json!(library), json!(c)],
            )?;
            let ro = engine.call_bzl(
                "root",
                "rules/common/snapshot.bzl",
                "rocm_config_name",
                &[json!(v)],
            )?;
            let ro = ro.as_str().unwrap_or_default().to_owned();
            out.push((
                c.clone(),
                v.clone(),
                vec![ch.as_str().unwrap_or_default().to_owned(), ro.clone()],
            ));
            // The same through the global channel (`-m snapshot_<channel>`).
            let gl = engine.call_bzl(
                "root",
                "rules/common/snapshot.bzl",
                "channel_config_name",
                &[json!(global_channel_prefix(engine)?), json!(c)],
            )?;
            out.push((
                c.clone(),
                v.clone(),
                vec![gl.as_str().unwrap_or_default().to_owned(), ro],
            ));
        }
    }
    Ok(out)
}

// ---- checks shared by the positive and the negative tests -------------------------

/// Labels of every target of the given repo-relative directories (root cell).
pub fn targets_under(engine: &Rc<Engine>, prefix: &str) -> anyhow::Result<Vec<Label>> {
    let mut out = Vec::new();
    for d in engine.buck_dirs("root")? {
        if d == prefix || d.starts_with(&format!("{prefix}/")) || prefix.is_empty() {
            for name in engine.package("root", &d)?.keys() {
                out.push(Label {
                    cell: "root".into(),
                    package: d.clone(),
                    name: name.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// The `-m` combinations to check: none (PACKAGE defaults) plus every
/// channel x ROCm version of rules/common.
pub fn configurations(engine: &Rc<Engine>, library: &str) -> anyhow::Result<Vec<Vec<String>>> {
    let mut out = vec![Vec::new()];
    for (_, _, mods) in modifier_matrix(engine, library)? {
        out.push(mods);
    }
    Ok(out)
}

/// Command lines a target hands to a runner: `RunInfo.args` and
/// `ExternalRunnerTestInfo.command`, as pseudo `run` actions.
pub fn runnable_commands(a: &Analysis) -> Vec<Json> {
    let mut out = Vec::new();
    let Json::Object(p) = &a.providers_json else {
        return out;
    };
    for (_, inst) in p {
        let name = inst
            .get("__provider__")
            .and_then(|x| x.get("__provider__"))
            .and_then(Json::as_str)
            .unwrap_or("");
        let mut cmds = Vec::new();
        match name {
            "RunInfo" => cmds.push(inst.get("args").cloned().unwrap_or(Json::Null)),
            "ExternalRunnerTestInfo" => cmds.extend(
                inst.get("command")
                    .and_then(Json::as_array)
                    .cloned()
                    .unwrap_or_default(),
            ),
            _ => {}
        }
        for c in cmds {
            if let Some(items) = c.get("items") {
                out.push(json!({ "kind": "run", "category": name, "argv": items }));
            }
        }
    }
    out
}

/// Analyses every target under `prefix` in every configuration; returns the
/// helper command lines met (action or runnable), the errors that are the
/// expected missing-snapshot failures, and fails on any other error.
pub struct SweepResult {
    pub helper_actions: Vec<(Label, Json)>,
    pub missing_snapshot_errors: Vec<(Label, Vec<String>, String)>,
    pub analysed: usize,
}

pub fn sweep(engine: &Rc<Engine>, prefix: &str, library: &str) -> anyhow::Result<SweepResult> {
    let mut res = SweepResult {
        helper_actions: Vec::new(),
        missing_snapshot_errors: Vec::new(),
        analysed: 0,
    };
    let targets = targets_under(engine, prefix)?;
    for mods in configurations(engine, library)? {
        let m: Vec<&str> = mods.iter().map(String::as_str).collect();
        for t in &targets {
            let cfg = engine.config_for(t, &m)?;
            if !engine.compatible(t, &cfg)? {
                continue;
            }
            match engine.analyze(t, &cfg) {
                Ok(a) => {
                    res.analysed += 1;
                    for act in a.actions.iter().cloned().chain(runnable_commands(&a)) {
                        if helper_of(&act).is_some() {
                            res.helper_actions.push((t.clone(), act));
                        }
                    }
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    if msg.contains("snapshot of") && msg.contains("snapctl create") {
                        res.missing_snapshot_errors
                            .push((t.clone(), mods.clone(), msg));
                    } else {
                        bail!("{t} with -m {:?}: {msg}", mods);
                    }
                }
            }
        }
    }
    Ok(res)
}

/// Runs every distinct helper command line through the real helper's parser.
pub fn check_helper_commands(
    bins: &HelperBins,
    repo: &Path,
    actions: &[(Label, Json)],
) -> anyhow::Result<Vec<String>> {
    let mut seen = HashSet::new();
    let mut checked = Vec::new();
    for (label, act) in actions {
        let key = act["argv"].to_string();
        if !seen.insert(key) {
            continue;
        }
        if let Some(cmd) =
            check_helper_command(bins, repo, act).with_context(|| format!("action of {label}"))?
        {
            checked.push(cmd);
        }
    }
    Ok(checked)
}

/// The root PACKAGE enables modifiers (set_cfg_constructor with the prelude's
/// two stages) and every required alias maps onto a constraint value of the
/// right setting; `-m` really changes the configuration.
pub fn check_modifier_aliases(
    engine: &Rc<Engine>,
    library: &str,
    required: &[&str],
) -> anyhow::Result<()> {
    let ctor = engine
        .cfg_constructor()?
        .ok_or_else(|| anyhow!("the root PACKAGE does not call native.set_cfg_constructor: buck2 would silently ignore every -m"))?;
    for (field, want) in [
        ("stage0", "cfg_constructor_pre_constraint_analysis"),
        ("stage1", "cfg_constructor_post_constraint_analysis"),
    ] {
        let got = ctor.get(field).map(Json::to_string).unwrap_or_default();
        if !got.contains(want) {
            bail!("set_cfg_constructor({field} = ...) is {got}, expected the prelude's {want}");
        }
    }
    if ctor.get("key").and_then(Json::as_str) != Some("buck.cfg_modifiers") {
        bail!("set_cfg_constructor(key = ...) must be MODIFIER_METADATA_KEY");
    }
    let aliases = ctor
        .get("aliases")
        .and_then(Json::as_object)
        .cloned()
        .unwrap_or_default();
    for a in required {
        if !aliases.contains_key(*a) {
            bail!("modifier alias `{a}` is missing from set_cfg_constructor(aliases = ...) (has {:?})", aliases.keys().collect::<Vec<_>>());
        }
    }
    let probe = Label {
        cell: "root".into(),
        package: String::new(),
        name: "probe".into(),
    };
    let default = engine.config_for(&probe, &[])?;
    for (channel, version, mods) in modifier_matrix(engine, library)? {
        let m: Vec<&str> = mods.iter().map(String::as_str).collect();
        let cfg = engine.config_for(&probe, &m)?;
        // `-m <library>_<channel>`: the library's own setting
        // (<library>_channel_<channel> in its package); `-m snapshot_<channel>`:
        // the global one (rules/buck2/config:<channel>).
        let want_c = if mods[0].starts_with(&format!("{library}_")) {
            format!(":{library}_channel_{channel}")
        } else {
            format!("/rules/buck2/config:{channel}")
        };
        let want_v = engine.call_bzl(
            "root",
            "rules/common/snapshot.bzl",
            "rocm_config_name",
            &[json!(version)],
        )?;
        let want_v = format!(":{}", want_v.as_str().unwrap_or_default());
        if !cfg.values().any(|v| v.ends_with(&want_c))
            || !cfg.values().any(|v| v.ends_with(&want_v))
        {
            bail!("-m {} gives configuration {cfg:?} (default {default:?}): the aliases do not select channel {channel} and ROCm {version}", mods.join(" -m "));
        }
    }
    Ok(())
}

/// The (nested) select of a rcclx_snapshot alias picks, for every channel x
/// ROCm version, through the library's own channel or the global one,
/// `<name>_dev` or `<name>_<channel>_rocm<key>`; the library's own channel
/// wins over any global channel. Returns the number of configurations checked.
pub fn check_select_coverage(
    engine: &Rc<Engine>,
    alias: &Label,
    library: &str,
) -> anyhow::Result<usize> {
    let t = engine
        .package(&alias.cell, &alias.package)?
        .get(&alias.name)
        .cloned()
        .ok_or_else(|| anyhow!("no target {alias}"))?;
    let actual = t
        .attrs
        .get("actual")
        .cloned()
        .ok_or_else(|| anyhow!("{alias}: no `actual`"))?;
    if actual.get("__select__").is_none() {
        bail!("{alias}: `actual` is not a select()");
    }
    let want_for = |channel: &str, version: &str| -> anyhow::Result<String> {
        if channel == "dev" {
            return Ok(format!(":{}_dev", alias.name));
        }
        let n = engine.call_bzl(
            "root",
            "rules/common/snapshot.bzl",
            "snapshot_target_name",
            &[json!(alias.name), json!(channel), json!(version)],
        )?;
        Ok(format!(":{}", n.as_str().unwrap_or_default()))
    };
    let pick = |mods: &[String]| -> anyhow::Result<String> {
        let m: Vec<&str> = mods.iter().map(String::as_str).collect();
        let cfg = engine.config_for(alias, &m)?;
        let got = engine.resolve_value(alias, &cfg, &actual, &alias.to_string())?;
        Ok(got.as_str().unwrap_or_default().to_owned())
    };
    let matrix = modifier_matrix(engine, library)?;
    let mut covered = 0;
    for (channel, version, mods) in &matrix {
        let got = pick(mods)?;
        let want = want_for(channel, version)?;
        if got != want {
            bail!(
                "{alias} with -m {}: select picks `{got}`, expected `{want}`",
                mods.join(" -m ")
            );
        }
        covered += 1;
    }
    // The library's own channel wins whatever the global channel says.
    let prefix = global_channel_prefix(engine)?;
    for (own, version, own_mods) in &matrix {
        if !own_mods[0].starts_with(&format!("{library}_")) {
            continue;
        }
        for (global, global_version, global_mods) in &matrix {
            if global_version != version || !global_mods[0].starts_with(&format!("{prefix}_")) {
                continue;
            }
            let mods = vec![
                global_mods[0].clone(),
                own_mods[0].clone(),
                own_mods[1].clone(),
            ];
            let got = pick(&mods)?;
            let want = want_for(own, version)?;
            if got != want {
                bail!(
                    "{alias} with -m {} (global {global}, own {own}): select picks `{got}`, expected `{want}`",
                    mods.join(" -m ")
                );
            }
            covered += 1;
        }
    }
    Ok(covered)
}

// ---- executing actions as Buck2 stages them ------------------------------------

/// Runs recorded actions the way Buck2 materializes them, with the real
/// helpers, in a scratch output tree: `symlinked_dir` makes real directories
/// holding one symlink per input; `copied_dir` copies regular files but, as
/// Buck2 does, stages a source that is a symlink as a symlink to the file it
/// resolves to (outside the staged directory); `run` runs the command (a
/// `kpack` / `snapctl` argv[0] is the real helper, `cargo_build` is skipped
/// since the helpers are given). Sources are read in place from the
/// repository. What the starlark analysis cannot show — that a helper
/// accepts the inputs as staged — is checked by running it.
pub struct Executor {
    bins: HelperBins,
    repo: PathBuf,
    out: PathBuf,
    /// Output path (as the fake declares it) -> the action binding it.
    by_output: BTreeMap<String, Json>,
    done: HashSet<String>,
}

impl Executor {
    /// An executor over every action analysed by `engine` so far, writing
    /// outputs below `out`.
    pub fn new(engine: &Rc<Engine>, bins: &HelperBins, out: &Path) -> Self {
        let mut by_output = BTreeMap::new();
        for (_, a) in engine.all_analyses() {
            for act in &a.actions {
                for o in action_outputs(act) {
                    by_output.insert(o, act.clone());
                }
            }
        }
        Executor {
            bins: bins.clone(),
            repo: engine.repo.clone(),
            out: out.to_path_buf(),
            by_output,
            done: HashSet::new(),
        }
    }

    /// Where an artifact (the JSON of a fake artifact or output) lives.
    pub fn path_of(&self, a: &Json) -> PathBuf {
        let p = a["path"].as_str().unwrap_or("");
        if a["is_source"].as_bool() == Some(true) {
            self.repo.join(p)
        } else {
            self.out.join(p)
        }
    }

    /// Materializes an artifact (running what produces it) and returns its path.
    pub fn build(&mut self, a: &Json) -> anyhow::Result<PathBuf> {
        if a["is_source"].as_bool() != Some(true) {
            let p = a["path"].as_str().unwrap_or("");
            let (key, act) = self
                .by_output
                .iter()
                .find(|(o, _)| p == o.as_str() || p.starts_with(&format!("{o}/")))
                .map(|(o, act)| (o.clone(), act.clone()))
                .ok_or_else(|| anyhow!("no analysed action produces `{p}`"))?;
            if self.done.insert(key) {
                self.run(&act)?;
            }
        }
        Ok(self.path_of(a))
    }

    fn run(&mut self, act: &Json) -> anyhow::Result<()> {
        for input in action_inputs(act) {
            self.build(&input)?;
        }
        match act["kind"].as_str().unwrap_or("") {
            "symlinked_dir" | "copied_dir" => self.stage(act),
            "run" => self.run_command(act),
            other => bail!("the executor cannot run `{other}` actions"),
        }
    }

    fn stage(&mut self, act: &Json) -> anyhow::Result<()> {
        let copy = act["kind"] == json!("copied_dir");
        let dir = self.path_of(&act["output"]);
        std::fs::create_dir_all(&dir)?;
        let srcs = act["srcs"].as_object().cloned().unwrap_or_default();
        for (rel, a) in &srcs {
            let dst = dir.join(rel);
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let src = self.path_of(a);
            if !copy {
                std::os::unix::fs::symlink(&src, &dst)
                    .with_context(|| format!("symlink {}", dst.display()))?;
                continue;
            }
            let meta = std::fs::symlink_metadata(&src)
                .with_context(|| format!("stat {}", src.display()))?;
            if meta.file_type().is_symlink() {
                // Buck2 stages a symlinked source as a link to its target.
                let target = std::fs::canonicalize(&src)?;
                std::os::unix::fs::symlink(&target, &dst)?;
            } else {
                copy_tree(&src, &dst)?;
            }
        }
        Ok(())
    }

    fn run_command(&mut self, act: &Json) -> anyhow::Result<()> {
        if act["category"] == json!("cargo_build") {
            return Ok(());
        }
        let argv = act["argv"].as_array().cloned().unwrap_or_default();
        let helper = helper_at(act).map(|(_, i)| i);
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        for (i, a) in argv.iter().enumerate() {
            match a {
                Json::String(s) => args.push(s.into()),
                Json::Object(o) if Some(i) == helper && o.contains_key("__artifact__") => {
                    let bin = match o["basename"].as_str() {
                        Some("kpack") => &self.bins.kpack,
                        Some("snapctl") => &self.bins.snapctl,
                        _ => bail!("the executor cannot run {a}"),
                    };
                    args.push(bin.into());
                }
                Json::Object(o) if o.contains_key("__output__") => {
                    let p = self.path_of(a);
                    if let Some(parent) = p.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    args.push(p.into());
                }
                Json::Object(o) => args.push(
                    render_artifact(o, self.path_of(a).to_string_lossy().into_owned()).into(),
                ),
                other => bail!("unexpected command line item {other}"),
            }
        }
        let Some((prog, rest)) = args.split_first() else {
            bail!("empty command line");
        };
        let mut cmd = Command::new(prog);
        cmd.args(rest).current_dir(&self.out);
        if let Some(env) = act["env"].as_object() {
            for (k, v) in env {
                if let Some(v) = v.as_str() {
                    cmd.env(k, v);
                }
            }
        }
        let out = cmd
            .output()
            .with_context(|| format!("running {}", prog.to_string_lossy()))?;
        if !out.status.success() {
            bail!(
                "action {} failed ({}):\n{}",
                act["category"],
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }
}

/// Output paths an action binds.
fn action_outputs(act: &Json) -> Vec<String> {
    let mut v = Vec::new();
    let mut push = |x: &Json| {
        if x.get("__output__").is_some() {
            if let Some(p) = x["path"].as_str() {
                v.push(p.to_owned());
            }
        }
    };
    push(&act["output"]);
    for key in ["argv", "hidden"] {
        for x in act[key].as_array().into_iter().flatten() {
            push(x);
        }
    }
    v
}

/// Artifacts an action reads.
fn action_inputs(act: &Json) -> Vec<Json> {
    let mut v = Vec::new();
    for key in ["argv", "hidden"] {
        for x in act[key].as_array().into_iter().flatten() {
            if x.get("__artifact__").is_some() {
                v.push(x.clone());
            }
        }
    }
    for x in act["srcs"].as_object().into_iter().flat_map(|m| m.values()) {
        v.push(x.clone());
    }
    if act["category"] == json!("cargo_build") {
        v.clear();
    }
    v
}

/// Copies a file, or a directory recursively keeping its symlinks as they are.
fn copy_tree(src: &Path, dst: &Path) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(src)?;
    if meta.file_type().is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(src)?, dst)?;
    } else if meta.is_dir() {
        std::fs::create_dir_all(dst)?;
        for e in std::fs::read_dir(src)? {
            let e = e?;
            copy_tree(&e.path(), &dst.join(e.file_name()))?;
        }
    } else {
        std::fs::copy(src, dst).with_context(|| format!("copy {}", src.display()))?;
    }
    Ok(())
}

/// A tree as sorted lines `path kind detail`: file contents by a hash,
/// symlinks by their target text. Two trees are byte-identical when their
/// listings are equal.
pub fn tree_listing(root: &Path) -> anyhow::Result<Vec<String>> {
    use std::hash::{Hash, Hasher};
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> anyhow::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let p = e?.path();
            let rel = p.strip_prefix(root)?.to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(&p)?;
            if meta.file_type().is_symlink() {
                out.push(format!("{rel} -> {}", std::fs::read_link(&p)?.display()));
            } else if meta.is_dir() {
                out.push(format!("{rel}/"));
                walk(root, &p, out)?;
            } else {
                let bytes = std::fs::read(&p)?;
                let mut h = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut h);
                out.push(format!("{rel} {} {:016x}", bytes.len(), h.finish()));
            }
        }
        Ok(())
    }
    let mut v = Vec::new();
    walk(root, root, &mut v)?;
    v.sort();
    Ok(v)
}
