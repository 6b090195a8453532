//! The module graph of a crate, read from its source with `syn`: which module refers to which.
//!
//! A module is a file (`foo.rs` or `foo/mod.rs`); inline modules fold into their file and
//! `#[cfg(test)]` items are left out, because test code may look anywhere. Module `a` refers to
//! module `b` when a path in `a` (a `use` tree, an expression or type path, or a path inside a macro
//! call) names `b` or an item in it: `crate::b::X`, `super::X`, `self::child::f` or `child::f`.
//! Re-exports are followed, so `crate::ServerConfig` refers to `config` when the crate root says
//! `pub use config::ServerConfig`. Paths that start with any other name are external crates; they
//! are collected separately so a layer can be checked for what it links.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// A module's path from the crate root, e.g. `["engine", "step"]`; empty for the root.
pub(crate) type ModPath = Vec<String>;

/// One reference from a module, as written, and the module it resolves to.
#[derive(Debug, Clone)]
pub(crate) struct Reference {
    pub(crate) written: String,
    pub(crate) target: ModPath,
}

#[derive(Debug)]
struct Written {
    text: String,
    inline: Vec<String>,
    segments: Vec<String>,
}

#[derive(Debug, Default)]
struct Module {
    file: PathBuf,
    children: BTreeSet<String>,
    /// Names brought in by `use` (or `pub use`), resolved to absolute paths.
    imports: BTreeMap<String, Vec<String>>,
    /// Every path this module writes that may be crate-relative: as written, the inline modules it
    /// sits in (`super` starts from there), and its segments.
    paths: Vec<Written>,
    externs: BTreeSet<String>,
}

/// The modules of one crate and the references between them.
#[derive(Debug)]
pub(crate) struct Graph {
    pub(crate) name: String,
    modules: BTreeMap<ModPath, Module>,
}

/// Renders a module path the way Rust writes it (`crate` for the root).
pub(crate) fn show(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_owned()
    } else {
        path.join("::")
    }
}

impl Graph {
    /// Reads the crate whose root file is `root` (`src/lib.rs`).
    pub(crate) fn load(name: &str, root: &Path) -> Self {
        let mut graph = Graph {
            name: name.to_owned(),
            modules: BTreeMap::new(),
        };
        graph.read(
            Vec::new(),
            root,
            root.parent().expect("a crate root has a folder").to_owned(),
        );
        graph
    }

    fn read(&mut self, path: ModPath, file: &Path, dir: PathBuf) {
        let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut collector = Collector::new(file, &ast);
        for item in &ast.items {
            collector.item(item);
        }
        let Collector {
            module,
            child_files,
            ..
        } = collector;
        self.modules.insert(path.clone(), module);
        for child in child_files {
            let flat = dir.join(format!("{child}.rs"));
            let (child_file, child_dir) = if flat.exists() {
                (flat, dir.join(&child))
            } else {
                (dir.join(&child).join("mod.rs"), dir.join(&child))
            };
            let mut child_path = path.clone();
            child_path.push(child);
            self.read(child_path, &child_file, child_dir);
        }
    }

    /// Every module path, root first.
    pub(crate) fn modules(&self) -> impl Iterator<Item = &ModPath> {
        self.modules.keys()
    }

    /// The file a module lives in.
    pub(crate) fn file(&self, module: &ModPath) -> &Path {
        &self.modules[module].file
    }

    /// External crates a module names (`axum`, `serde_json`, ...): first segments of paths that are
    /// neither crate-relative nor names the module imported.
    pub(crate) fn externs(&self, module: &ModPath) -> BTreeSet<&str> {
        let m = &self.modules[module];
        m.externs
            .iter()
            .filter(|name| !m.imports.contains_key(*name) && !m.children.contains(*name))
            .map(String::as_str)
            .collect()
    }

    /// The references from `module` to other modules of the crate.
    pub(crate) fn references(&self, module: &ModPath) -> Vec<Reference> {
        let m = &self.modules[module];
        let mut out = Vec::new();
        for written in &m.paths {
            let Some(absolute) = self.absolute(module, &written.inline, &written.segments) else {
                continue;
            };
            let target = self.resolve(&absolute, 0);
            if &target != module {
                out.push(Reference {
                    written: written.text.clone(),
                    target,
                });
            }
        }
        out
    }

    /// Makes a written path absolute: `crate::`, `super::`, `self::` or a child module's name.
    fn absolute(
        &self,
        module: &ModPath,
        inline: &[String],
        written: &[String],
    ) -> Option<Vec<String>> {
        let mut base = module.clone();
        base.extend(inline.iter().cloned());
        let mut rest = written;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            Some(first) if inline.is_empty() && self.modules[module].children.contains(first) => {}
            _ => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module an absolute path lands in, following re-exports (`pub use a::B` in the root).
    fn resolve(&self, absolute: &[String], depth: usize) -> ModPath {
        let mut len = absolute.len();
        while !self.modules.contains_key(&absolute[..len]) {
            len -= 1;
        }
        let module = absolute[..len].to_vec();
        if depth < 8
            && let Some(name) = absolute.get(len)
            && let Some(import) = self.modules[&module].imports.get(name)
            && let Some(mut next) = self.absolute(&module, &[], import)
        {
            next.extend(absolute[len + 1..].iter().cloned());
            return self.resolve(&next, depth + 1);
        }
        module
    }

    /// Module-level edges: `from -> {to: an example of how it is written}`.
    pub(crate) fn edges(&self) -> BTreeMap<ModPath, BTreeMap<ModPath, String>> {
        let mut edges: BTreeMap<ModPath, BTreeMap<ModPath, String>> = BTreeMap::new();
        for module in self.modules.keys() {
            let out = edges.entry(module.clone()).or_default();
            for reference in self.references(module) {
                out.entry(reference.target).or_insert(reference.written);
            }
        }
        edges
    }

    /// The strongly connected components with more than one module: every import cycle.
    pub(crate) fn cycles(&self) -> Vec<Cycle> {
        let edges = self.edges();
        strongly_connected(&edges)
            .into_iter()
            .filter(|component| component.len() > 1)
            .map(|component| {
                let members: BTreeSet<_> = component.iter().cloned().collect();
                let mut within = Vec::new();
                for from in &component {
                    for (to, written) in &edges[from] {
                        if members.contains(to) {
                            within.push((from.clone(), to.clone(), written.clone()));
                        }
                    }
                }
                Cycle {
                    crate_name: self.name.clone(),
                    edges: within,
                }
            })
            .collect()
    }
}

/// One import cycle and the edges that close it.
#[derive(Debug)]
pub(crate) struct Cycle {
    crate_name: String,
    edges: Vec<(ModPath, ModPath, String)>,
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "import cycle in {}:", self.crate_name)?;
        for (from, to, written) in &self.edges {
            writeln!(f, "  {} -> {} (writes `{written}`)", show(from), show(to))?;
        }
        Ok(())
    }
}

/// Tarjan's algorithm, iterative over the sorted module list so the order of the report is stable.
fn strongly_connected(edges: &BTreeMap<ModPath, BTreeMap<ModPath, String>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        edges: &'a BTreeMap<ModPath, BTreeMap<ModPath, String>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a ModPath) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges[v].keys() {
            let w = s
                .edges
                .get_key_value(w)
                .expect("every target is a module")
                .0;
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            component.sort();
            s.out.push(component);
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.out
}

struct Collector {
    module: Module,
    child_files: Vec<String>,
    /// The inline modules (`mod x { ... }`) around the item being read.
    inline: Vec<String>,
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr.meta.require_list().is_ok_and(|list| {
                let tokens = list.tokens.to_string();
                tokens == "test" || tokens.starts_with("test,") || tokens.starts_with("all(test")
            })
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

impl Collector {
    /// Child modules are known before any path is read, so `child::f` resolves wherever it is written.
    fn new(file: &Path, ast: &syn::File) -> Self {
        let child_files: Vec<String> = ast
            .items
            .iter()
            .filter_map(|item| match item {
                syn::Item::Mod(m) if m.content.is_none() && !is_cfg_test(&m.attrs) => {
                    Some(m.ident.to_string())
                }
                _ => None,
            })
            .collect();
        let module = Module {
            file: file.to_owned(),
            children: child_files.iter().cloned().collect(),
            ..Module::default()
        };
        Collector {
            module,
            child_files,
            inline: Vec::new(),
        }
    }

    fn item(&mut self, item: &syn::Item) {
        if is_cfg_test(item_attrs(item)) {
            return;
        }
        match item {
            syn::Item::Mod(m) if m.content.is_none() => {}
            syn::Item::Mod(m) => {
                self.inline.push(m.ident.to_string());
                for inner in &m.content.as_ref().expect("inline module").1 {
                    self.item(inner);
                }
                self.inline.pop();
            }
            syn::Item::Use(u) => self.use_tree(&u.tree, Vec::new()),
            other => self.visit_item(other),
        }
    }

    fn use_tree(&mut self, tree: &syn::UseTree, mut prefix: Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                if name == "self" {
                    let alias = prefix.last().cloned().unwrap_or_default();
                    self.record_use(alias, prefix);
                } else {
                    prefix.push(name.clone());
                    self.record_use(name, prefix);
                }
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.record_use(r.rename.to_string(), prefix);
            }
            syn::UseTree::Glob(_) => self.record_path(prefix),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(tree, prefix.clone());
                }
            }
        }
    }

    fn record_use(&mut self, alias: String, path: Vec<String>) {
        // Re-exports are followed from the file's own scope only; an inline module's names are its own.
        if self.inline.is_empty() {
            self.module.imports.insert(alias, path.clone());
        }
        self.record_path(path);
    }

    fn record_path(&mut self, segments: Vec<String>) {
        let Some(first) = segments.first() else {
            return;
        };
        if !matches!(first.as_str(), "crate" | "self" | "super") {
            self.module.externs.insert(first.clone());
        }
        let written = Written {
            text: segments.join("::"),
            inline: self.inline.clone(),
            segments,
        };
        self.module.paths.push(written);
    }

    /// Paths inside macro calls are tokens to `syn`; this finds `a::b::c` runs among them.
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let mut run: Vec<String> = Vec::new();
        let mut colons = 0;
        for tree in tokens {
            match tree {
                TokenTree::Ident(ident) if run.is_empty() || colons == 2 => {
                    run.push(ident.to_string());
                    colons = 0;
                }
                TokenTree::Punct(p) if p.as_char() == ':' && !run.is_empty() && colons < 2 => {
                    colons += 1;
                }
                TokenTree::Group(group) => {
                    self.finish_run(&mut run);
                    colons = 0;
                    self.macro_tokens(group.stream());
                }
                other => {
                    self.finish_run(&mut run);
                    colons = 0;
                    if let TokenTree::Ident(ident) = other {
                        run.push(ident.to_string());
                    }
                }
            }
        }
        self.finish_run(&mut run);
    }

    fn finish_run(&mut self, run: &mut Vec<String>) {
        let path = std::mem::take(run);
        if path.len() > 1 && matches!(path[0].as_str(), "crate" | "self" | "super") {
            self.record_path(path);
        }
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_cfg_test(item_attrs(item)) {
            return;
        }
        match item {
            syn::Item::Use(_) | syn::Item::Mod(_) => self.item(item),
            other => syn::visit::visit_item(self, other),
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            let first = segments[0].as_str();
            let local =
                matches!(first, "crate" | "self" | "super") || self.module.children.contains(first);
            if local {
                self.record_path(segments);
            } else if first.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                self.module.externs.insert(first.to_owned());
            }
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.macro_tokens(mac.tokens.clone());
    }
}
