//! The module rules ARCHITECTURE.md states, checked against the
//! code. `src/` is read as Rust (with `syn`), not as text: a path in a
//! nested `use` group, after a `"http://…"` literal or inside a macro is
//! seen, and one in a comment, doc comment or string literal is not.
//!
//! - rule 0: every `crate::<module>` path in a module's files is one its
//!   row of the "Dependency rules" table allows, and every module has a
//!   row (a new module is placed in the architecture, not added beside it);
//!   unit-test files named `tests.rs` are exempt.
//! - rule 1: no module re-exports another top-level module's names
//!   (`pub use crate::other::…`, at any `pub` visibility, or a `pub use
//!   super::…` that climbs out of the module); `src/lib.rs` may.
//! - rule 2: another top-level module's insides are reached only through
//!   submodules it declares plain `pub mod` (its interface), at every
//!   level of the path; its root items are always fine.
//! - rule 3: no `super::super::` (a path that climbs two levels reads
//!   better from `crate::`).
//! - rule 4: no import cycle among the sibling files of one folder (`x.rs`
//!   and `x/` are one sibling, `mod.rs` is none): what two need goes in a
//!   third, lower file.
//!
//! The crate is read into [`Crate`] (every module, every path named, where,
//! resolved to a path from the crate root), and each rule is a function
//! over it, so each is tested both on `src/` and on a planted violation.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::Visit;

// ---------------------------------------------------------------------------
// The dependency table.

/// What a module may use: any module, any but some, or a list.
#[derive(Debug)]
enum Allowed {
    Any { except: BTreeSet<String> },
    Only(BTreeSet<String>),
}

impl Allowed {
    fn permits(&self, module: &str) -> bool {
        match self {
            Allowed::Any { except } => !except.contains(module),
            Allowed::Only(list) => list.contains(module),
        }
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The "Dependency rules" table of ARCHITECTURE.md.
fn rules() -> BTreeMap<String, Allowed> {
    parse_rules(&std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap())
}

/// The "Dependency rules" table of a markdown text.
fn parse_rules(text: &str) -> BTreeMap<String, Allowed> {
    let section = text
        .split("## Dependency rules")
        .nth(1)
        .expect("ARCHITECTURE.md has a \"Dependency rules\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut rules = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let [module, allowed] = cells[..] else {
            panic!("a rule row has two cells: {row}");
        };
        if module == "module" || module.starts_with("---") {
            continue;
        }
        let allowed = if let Some(rest) = allowed.strip_prefix('*') {
            let except = rest
                .trim()
                .strip_prefix("but")
                .map(|list| list.split(',').map(|m| m.trim().to_owned()).collect())
                .unwrap_or_default();
            Allowed::Any { except }
        } else if allowed == "—" {
            Allowed::Only(BTreeSet::new())
        } else {
            Allowed::Only(allowed.split(',').map(|m| m.trim().to_owned()).collect())
        };
        rules.insert(module.to_owned(), allowed);
    }
    rules
}

// ---------------------------------------------------------------------------
// The crate, read.

/// How visible a declaration is: `pub`, `pub(crate)`/`pub(super)`/`pub(in
/// …)`, or private.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Vis {
    Public,
    Restricted,
    Private,
}

impl Vis {
    fn of(vis: &syn::Visibility) -> Vis {
        match vis {
            syn::Visibility::Public(_) => Vis::Public,
            syn::Visibility::Restricted(_) => Vis::Restricted,
            syn::Visibility::Inherited => Vis::Private,
        }
    }

    fn written(self) -> &'static str {
        match self {
            Vis::Public => "pub mod",
            Vis::Restricted => "pub(…) mod",
            Vis::Private => "mod",
        }
    }
}

/// A `mod` declaration.
#[derive(Debug)]
struct ModuleDecl {
    vis: Vis,
    file: String,
    line: usize,
    /// Under `#[cfg(test)]` (or an ancestor is).
    test: bool,
}

/// One file of `src/`.
#[derive(Debug)]
struct SourceFile {
    /// From the crate root, with `/`: `src/index/mod.rs`.
    path: String,
    /// The module it is the root of: `["index"]`; `[]` for lib.rs and main.rs.
    module: Vec<String>,
    /// The top-level module for the dependency table: `index`, `lib`, `main`.
    top: String,
    /// `src/main.rs`: a crate of its own, naming the library as `mcp_aggregator`.
    bin: bool,
    /// A unit-test file (`tests.rs`, or declared under `#[cfg(test)]`).
    test: bool,
}

/// One flattened leaf of a `use` tree.
#[derive(Clone, Debug)]
struct UseLeaf {
    /// As written, `self` inside a group already folded into its prefix.
    segments: Vec<String>,
    /// The name it brings into scope (none for `*` and `as _`).
    bound: Option<String>,
    glob: bool,
    line: usize,
}

/// A path the code names.
#[derive(Debug)]
struct Mention {
    file: String,
    line: usize,
    /// The module the path is written in (inline modules included).
    scope: Vec<String>,
    /// As written.
    segments: Vec<String>,
    /// From the library's root, when the path is the crate's own.
    target: Option<Vec<String>>,
    /// A `use`: its visibility.
    use_vis: Option<Vis>,
    /// In unit-test code.
    test: bool,
}

impl Mention {
    fn written(&self) -> String {
        self.segments.join("::")
    }

    fn place(&self) -> String {
        let test = if self.test { " [test code]" } else { "" };
        format!("{}:{}{test}", self.file, self.line)
    }
}

/// The crate: its files, its modules and every path it names.
#[derive(Debug, Default)]
struct Crate {
    files: Vec<SourceFile>,
    modules: BTreeMap<Vec<String>, ModuleDecl>,
    /// Module-level `use`s, by the module they are in.
    uses: BTreeMap<Vec<String>, Vec<UseLeaf>>,
    mentions: Vec<Mention>,
}

fn line_of(span: proc_macro2::Span) -> usize {
    span.start().line
}

/// `#[test]`, `#[tokio::test]`, `#[cfg(test)]` and the like.
fn is_test_attr(attr: &syn::Attribute) -> bool {
    let path = attr.path();
    if path.segments.last().is_some_and(|s| s.ident == "test") {
        return true;
    }
    if !path.is_ident("cfg") {
        return false;
    }
    match &attr.meta {
        syn::Meta::List(list) => idents(list.tokens.clone()).iter().any(|i| i == "test"),
        _ => false,
    }
}

fn idents(tokens: TokenStream) -> Vec<String> {
    let mut out = Vec::new();
    for tree in tokens {
        match tree {
            TokenTree::Ident(ident) => out.push(ident.to_string()),
            TokenTree::Group(group) => out.extend(idents(group.stream())),
            _ => {}
        }
    }
    out
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The leaves of a `use` tree: `crate::{a::{b, c}, d as e, f::*}` is
/// `crate::a::b`, `crate::a::c`, `crate::d` (bound as `e`) and `crate::f::*`.
fn flatten_use(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<UseLeaf>) {
    let leaf = |prefix: &Vec<String>, ident: &syn::Ident, bound: Option<String>| {
        let mut segments = prefix.clone();
        let name = ident.to_string();
        if name != "self" || segments.is_empty() {
            segments.push(name.clone());
        }
        let bound = bound.or_else(|| segments.last().cloned());
        UseLeaf {
            segments,
            bound,
            glob: false,
            line: line_of(ident.span()),
        }
    };
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            flatten_use(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) => out.push(leaf(prefix, &name.ident, None)),
        syn::UseTree::Rename(rename) => {
            let bound = rename.rename.to_string();
            let mut found = leaf(prefix, &rename.ident, Some(bound.clone()));
            if bound == "_" {
                found.bound = None;
            }
            out.push(found);
        }
        syn::UseTree::Glob(glob) => out.push(UseLeaf {
            segments: prefix.clone(),
            bound: None,
            glob: true,
            line: line_of(glob.star_token.spans[0]),
        }),
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                flatten_use(tree, prefix, out);
            }
        }
    }
}

/// Where `src/<relative>` sits in the crate: (module, top-level module, bin).
fn place_of(relative: &str) -> (Vec<String>, String, bool) {
    let stem = relative.strip_suffix(".rs").unwrap_or(relative);
    let mut parts: Vec<String> = stem.split('/').map(str::to_owned).collect();
    let top = parts[0].clone();
    match stem {
        "lib" => return (Vec::new(), top, false),
        "main" => return (Vec::new(), top, true),
        _ => {}
    }
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    (parts, top, false)
}

impl Crate {
    /// Every `.rs` file under `src/`.
    fn from_disk() -> Crate {
        let mut sources = Vec::new();
        read_tree(&root().join("src"), &mut sources);
        sources.sort();
        Crate::read(&sources)
    }

    /// The crate from `(path, text)` pairs, paths like `src/a/mod.rs`.
    fn read<P: AsRef<str>, T: AsRef<str>>(sources: &[(P, T)]) -> Crate {
        let mut krate = Crate::default();
        let mut parsed = Vec::new();
        for (path, text) in sources {
            let path = path.as_ref();
            let relative = path
                .strip_prefix("src/")
                .unwrap_or_else(|| panic!("{path} is not under src/"));
            let (module, top, bin) = place_of(relative);
            let syntax = syn::parse_file(text.as_ref())
                .unwrap_or_else(|e| panic!("{path}:{}: not Rust: {e}", line_of(e.span())));
            if !bin {
                krate.declare(&syntax.items, &module, path, false);
            }
            krate.files.push(SourceFile {
                path: path.to_owned(),
                module,
                top,
                bin,
                test: path.ends_with("/tests.rs"),
            });
            parsed.push(syntax);
        }
        for index in 0..krate.files.len() {
            let file = &krate.files[index];
            let declared_test = (1..=file.module.len())
                .any(|n| krate.modules.get(&file.module[..n]).is_some_and(|d| d.test));
            krate.files[index].test |= declared_test;
        }
        let mut mentions = Vec::new();
        for (file, syntax) in krate.files.iter().zip(&parsed) {
            let mut walker = Walker {
                krate: &krate,
                file,
                scope: file.module.clone(),
                frames: Vec::new(),
                test: file.test,
                out: &mut mentions,
            };
            let frame = walker.module_frame(&file.module);
            walker.frames.push(frame);
            walker.visit_file(syntax);
        }
        krate.mentions = mentions;
        krate
    }

    /// Records the `mod`s and module-level `use`s of `items`, in `scope`.
    fn declare(&mut self, items: &[syn::Item], scope: &[String], file: &str, test: bool) {
        for item in items {
            match item {
                syn::Item::Mod(module) => {
                    let mut path = scope.to_vec();
                    path.push(module.ident.to_string());
                    let test = test || module.attrs.iter().any(is_test_attr);
                    self.modules.insert(
                        path.clone(),
                        ModuleDecl {
                            vis: Vis::of(&module.vis),
                            file: file.to_owned(),
                            line: line_of(module.ident.span()),
                            test,
                        },
                    );
                    if let Some((_, items)) = &module.content {
                        self.declare(items, &path, file, test);
                    }
                }
                syn::Item::Use(item) if item.leading_colon.is_none() => {
                    let mut leaves = Vec::new();
                    flatten_use(&item.tree, &mut Vec::new(), &mut leaves);
                    self.uses.entry(scope.to_vec()).or_default().extend(leaves);
                }
                _ => {}
            }
        }
    }

    fn is_module(&self, path: &[String]) -> bool {
        path.is_empty() || self.modules.contains_key(path)
    }

    /// The modules declared directly in `parent`.
    fn children<'a>(&'a self, parent: &'a [String]) -> impl Iterator<Item = &'a String> + 'a {
        self.modules
            .keys()
            .filter(move |k| k.len() == parent.len() + 1 && k.starts_with(parent))
            .map(|k| &k[parent.len()])
    }

    /// `segments`, written in module `scope`, from the library's root; `None`
    /// when it is not the crate's own (an extern crate, a local name).
    fn resolve(
        &self,
        scope: &[String],
        bin: bool,
        segments: &[String],
        alias: &dyn Fn(&str) -> Option<Vec<String>>,
    ) -> Option<Vec<String>> {
        let (first, rest) = segments.split_first()?;
        let mut base: Vec<String> = match first.as_str() {
            "mcp_aggregator" if bin => Vec::new(),
            _ if bin => return None,
            "crate" | "$crate" => Vec::new(),
            "self" => scope.to_vec(),
            "super" => {
                let mut base = scope.to_vec();
                base.pop()?;
                let climbs = rest.iter().take_while(|s| *s == "super").count();
                for _ in 0..climbs {
                    base.pop()?;
                }
                base.extend(rest[climbs..].iter().cloned());
                return Some(base);
            }
            name => {
                if let Some(target) = alias(name) {
                    target
                } else {
                    let mut child = scope.to_vec();
                    child.push(name.to_owned());
                    if !self.modules.contains_key(&child) {
                        return None;
                    }
                    child
                }
            }
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The names `use` binds in module `scope` (from `use x::*` too: the
    /// modules and `use` names of `x`), each to its path from the root.
    fn bound_in(&self, scope: &[String], follow_globs: bool) -> BTreeMap<String, Vec<String>> {
        let mut names = BTreeMap::new();
        let none = |_: &str| None;
        for leaf in self.uses.get(scope).into_iter().flatten() {
            let Some(target) = self.resolve(scope, false, &leaf.segments, &none) else {
                continue;
            };
            if leaf.glob {
                if follow_globs && self.is_module(&target) {
                    for child in self.children(&target) {
                        let mut path = target.clone();
                        path.push(child.clone());
                        names.entry(child.clone()).or_insert(path);
                    }
                    for (name, path) in self.bound_in(&target, false) {
                        names.entry(name).or_insert(path);
                    }
                }
            } else if let Some(bound) = &leaf.bound {
                names.insert(bound.clone(), target);
            }
        }
        names
    }
}

fn read_tree(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            read_tree(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root()).unwrap();
            let relative = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push((relative, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// Names in scope: a module's (`boundary`) or a block's `use`s.
struct Frame {
    names: BTreeMap<String, Vec<String>>,
    boundary: bool,
}

/// Walks one file, recording every path it names.
struct Walker<'a> {
    krate: &'a Crate,
    file: &'a SourceFile,
    scope: Vec<String>,
    frames: Vec<Frame>,
    test: bool,
    out: &'a mut Vec<Mention>,
}

impl Walker<'_> {
    fn module_frame(&self, scope: &[String]) -> Frame {
        let names = if self.file.bin {
            BTreeMap::new()
        } else {
            self.krate.bound_in(scope, true)
        };
        Frame {
            names,
            boundary: true,
        }
    }

    fn alias(&self, name: &str) -> Option<Vec<String>> {
        for frame in self.frames.iter().rev() {
            if let Some(path) = frame.names.get(name) {
                return Some(path.clone());
            }
            if frame.boundary {
                break;
            }
        }
        None
    }

    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        self.krate
            .resolve(&self.scope, self.file.bin, segments, &|name| {
                self.alias(name)
            })
    }

    fn record(&mut self, segments: Vec<String>, line: usize, use_vis: Option<Vis>) {
        let target = self.resolve(&segments);
        if target.is_none() && !segments.iter().any(|s| s == "super") {
            return;
        }
        self.out.push(Mention {
            file: self.file.path.clone(),
            line,
            scope: self.scope.clone(),
            segments,
            target,
            use_vis,
            test: self.test,
        });
    }

    /// The paths in tokens syn leaves unparsed (macro bodies and arguments,
    /// attribute arguments): every `a::b…` run of two or more identifiers.
    fn scan(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let colon = |tree: Option<&TokenTree>, spacing: Option<Spacing>| match tree {
            Some(TokenTree::Punct(p)) => {
                p.as_char() == ':' && spacing.is_none_or(|s| p.spacing() == s)
            }
            _ => false,
        };
        let mut at = 0;
        while at < trees.len() {
            match &trees[at] {
                TokenTree::Group(group) => {
                    self.scan(group.stream());
                    at += 1;
                }
                TokenTree::Ident(first) => {
                    let continues = at >= 2
                        && colon(trees.get(at - 2), Some(Spacing::Joint))
                        && colon(trees.get(at - 1), None);
                    let dollar = at > 0
                        && matches!(&trees[at - 1], TokenTree::Punct(p) if p.as_char() == '$');
                    let mut segments = vec![first.to_string()];
                    if dollar {
                        segments[0] = format!("${}", segments[0]);
                    }
                    let mut next = at + 1;
                    while colon(trees.get(next), Some(Spacing::Joint))
                        && colon(trees.get(next + 1), None)
                    {
                        match trees.get(next + 2) {
                            Some(TokenTree::Ident(ident)) => {
                                segments.push(ident.to_string());
                                next += 3;
                            }
                            _ => break,
                        }
                    }
                    if segments.len() >= 2 && !continues && (!dollar || segments[0] == "$crate") {
                        self.record(segments, line_of(first.span()), None);
                    }
                    at = next;
                }
                _ => at += 1,
            }
        }
    }
}

impl<'ast> Visit<'ast> for Walker<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let was_test = self.test;
        self.test |= item_attrs(item).iter().any(is_test_attr);
        match item {
            syn::Item::Mod(module) if module.content.is_some() => {
                self.scope.push(module.ident.to_string());
                let frame = self.module_frame(&self.scope.clone());
                self.frames.push(frame);
                syn::visit::visit_item(self, item);
                self.frames.pop();
                self.scope.pop();
            }
            _ => syn::visit::visit_item(self, item),
        }
        self.test = was_test;
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if item.leading_colon.is_some() {
            return;
        }
        let mut leaves = Vec::new();
        flatten_use(&item.tree, &mut Vec::new(), &mut leaves);
        for leaf in leaves {
            self.record(leaf.segments, leaf.line, Some(Vis::of(&item.vis)));
        }
    }

    fn visit_block(&mut self, block: &'ast syn::Block) {
        let mut names = BTreeMap::new();
        for stmt in &block.stmts {
            if let syn::Stmt::Item(syn::Item::Use(item)) = stmt {
                let mut leaves = Vec::new();
                flatten_use(&item.tree, &mut Vec::new(), &mut leaves);
                for leaf in leaves {
                    if let (Some(bound), Some(target)) = (&leaf.bound, self.resolve(&leaf.segments))
                    {
                        names.insert(bound.clone(), target);
                    }
                }
            }
        }
        self.frames.push(Frame {
            names,
            boundary: false,
        });
        syn::visit::visit_block(self, block);
        self.frames.pop();
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() >= 2 {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.record(segments, line_of(path.segments[0].ident.span()), None);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.scan(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }

    fn visit_meta_list(&mut self, list: &'ast syn::MetaList) {
        self.scan(list.tokens.clone());
        syn::visit::visit_meta_list(self, list);
    }
}

// ---------------------------------------------------------------------------
// The rules: each returns its violations, one line each.

/// Rule 0: the dependency table.
fn dependency_table(krate: &Crate, rules: &BTreeMap<String, Allowed>) -> Vec<String> {
    let mut broken = Vec::new();
    let mut unplaced = BTreeSet::new();
    for file in &krate.files {
        if file.path.ends_with("/tests.rs") {
            continue;
        }
        let Some(allowed) = rules.get(&file.top) else {
            unplaced.insert(file.top.clone());
            continue;
        };
        for mention in krate.mentions.iter().filter(|m| m.file == file.path) {
            let Some(used) = mention.target.as_ref().and_then(|t| t.first()) else {
                continue;
            };
            if *used != file.top && !allowed.permits(used) {
                broken.push(format!(
                    "{}: rule 0 (dependency table): `{}`: {} may not use {used}",
                    mention.place(),
                    mention.written(),
                    file.top
                ));
            }
        }
    }
    for module in unplaced {
        broken.push(format!(
            "rule 0 (dependency table): module {module} has no row in ARCHITECTURE.md"
        ));
    }
    broken
}

/// The top-level module a mention's file belongs to.
fn top_of<'a>(krate: &'a Crate, mention: &Mention) -> &'a SourceFile {
    krate.files.iter().find(|f| f.path == mention.file).unwrap()
}

/// Rule 1: no re-export of another top-level module's names.
fn re_exports(krate: &Crate) -> Vec<String> {
    let mut broken = Vec::new();
    for mention in &krate.mentions {
        let (Some(vis), Some(target)) = (mention.use_vis, &mention.target) else {
            continue;
        };
        let file = top_of(krate, mention);
        if vis == Vis::Private || file.path == "src/lib.rs" {
            continue;
        }
        if target.first() != Some(&file.top) {
            broken.push(format!(
                "{}: rule 1 (re-export): `{}` re-exports {} from {}",
                mention.place(),
                mention.written(),
                target.join("::"),
                target.first().map_or("the crate root", String::as_str),
            ));
        }
    }
    broken
}

/// Rule 2: another top-level module's insides only through `pub mod`s.
fn reaches_inside(krate: &Crate) -> Vec<String> {
    let mut broken = Vec::new();
    for mention in &krate.mentions {
        let Some(target) = &mention.target else {
            continue;
        };
        let Some(module) = target.first() else {
            continue;
        };
        if top_of(krate, mention).top == *module || !krate.is_module(&target[..1]) {
            continue;
        }
        for depth in 2..=target.len() {
            let Some(decl) = krate.modules.get(&target[..depth]) else {
                break;
            };
            if decl.vis != Vis::Public {
                broken.push(format!(
                    "{}: rule 2 (reaching inside): `{}` goes through {}, declared `{}` at {}:{}",
                    mention.place(),
                    mention.written(),
                    target[..depth].join("::"),
                    decl.vis.written(),
                    decl.file,
                    decl.line
                ));
                break;
            }
        }
    }
    broken
}

/// Rule 3: no `super::super::`.
fn climbs_twice(krate: &Crate) -> Vec<String> {
    krate
        .mentions
        .iter()
        .filter(|m| {
            m.segments
                .windows(2)
                .any(|w| w[0] == "super" && w[1] == "super")
        })
        .map(|m| format!("{}: rule 3 (super::super): `{}`", m.place(), m.written()))
        .collect()
}

/// Rule 4: no cycle among the siblings of a folder. Each folder (a module
/// with files under it; `src/` itself included) is a graph of its
/// siblings, with an edge a -> b when something under a names something
/// under b.
fn sibling_cycles(krate: &Crate) -> Vec<String> {
    // The modules that are files (or folders), of the library.
    let filed: BTreeSet<&[String]> = krate
        .files
        .iter()
        .filter(|f| !f.bin && !f.module.is_empty())
        .map(|f| f.module.as_slice())
        .collect();
    // folder -> (from, to) -> the first mention making the edge.
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<(String, String), &Mention>> = BTreeMap::new();
    for mention in &krate.mentions {
        let Some(target) = &mention.target else {
            continue;
        };
        if top_of(krate, mention).bin {
            continue;
        }
        let common = mention
            .scope
            .iter()
            .zip(target)
            .take_while(|(a, b)| a == b)
            .count();
        if common >= mention.scope.len() || common >= target.len() {
            continue;
        }
        let from = &mention.scope[..=common];
        let to = &target[..=common];
        if filed.contains(from) && filed.contains(to) {
            graphs
                .entry(mention.scope[..common].to_vec())
                .or_default()
                .entry((from[common].clone(), to[common].clone()))
                .or_insert(mention);
        }
    }
    let mut broken = Vec::new();
    for (folder, edges) in graphs {
        let folder_name = if folder.is_empty() {
            "src/".to_owned()
        } else {
            format!("src/{}/", folder.join("/"))
        };
        let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (from, to) in edges.keys() {
            next.entry(from).or_default().insert(to);
        }
        let mut reported: BTreeSet<&str> = BTreeSet::new();
        for start in next.keys().copied() {
            if reported.contains(start) {
                continue;
            }
            let Some(cycle) = shortest_cycle(&next, start) else {
                continue;
            };
            // All the siblings on some loop through `start`, reported once.
            let from_start = reachable(&next, start);
            let knot: Vec<&str> = from_start
                .iter()
                .copied()
                .filter(|node| reachable(&next, node).contains(start))
                .collect();
            reported.extend(knot.iter().copied());
            let mut header = format!(
                "rule 4 (sibling cycle) in {folder_name}: {}",
                cycle
                    .iter()
                    .chain(cycle.first())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(" -> ")
            );
            if knot.len() > cycle.len() {
                header.push_str(&format!(" (one knot of {})", knot.join(", ")));
            }
            let mut lines = vec![header];
            for (index, from) in cycle.iter().enumerate() {
                let to = cycle[(index + 1) % cycle.len()];
                let mention = edges[&(from.to_string(), to.to_string())];
                lines.push(format!(
                    "    {from} -> {to}: {}: `{}`",
                    mention.place(),
                    mention.written()
                ));
            }
            broken.push(lines.join("\n"));
        }
    }
    broken
}

/// Every node a path leads to from `start` (itself only if on a loop).
fn reachable<'a>(next: &BTreeMap<&'a str, BTreeSet<&'a str>>, start: &'a str) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &to in next.get(node).into_iter().flatten() {
            if seen.insert(to) {
                queue.push_back(to);
            }
        }
    }
    seen
}

/// The shortest path from `start` back to it, if any.
fn shortest_cycle<'a>(
    next: &BTreeMap<&'a str, BTreeSet<&'a str>>,
    start: &'a str,
) -> Option<Vec<&'a str>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &to in next.get(node).into_iter().flatten() {
            if to == start {
                let mut cycle = vec![node];
                while let Some(&before) = came_from.get(cycle.last().unwrap()) {
                    cycle.push(before);
                }
                cycle.reverse();
                return Some(cycle);
            }
            if to != start && !came_from.contains_key(to) {
                came_from.insert(to, node);
                queue.push_back(to);
            }
        }
    }
    None
}

fn assert_none(rule: &str, broken: Vec<String>) {
    assert!(
        broken.is_empty(),
        "{rule}: {} violation(s):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

// ---------------------------------------------------------------------------
// The rules over src/.

#[test]
fn every_module_uses_only_what_architecture_md_allows() {
    assert_none("rule 0", dependency_table(&Crate::from_disk(), &rules()));
}

#[test]
fn no_module_re_exports_another_top_level_modules_names() {
    assert_none("rule 1", re_exports(&Crate::from_disk()));
}

#[test]
fn other_modules_are_reached_only_through_their_pub_mods() {
    assert_none("rule 2", reaches_inside(&Crate::from_disk()));
}

#[test]
fn no_path_climbs_with_super_super() {
    assert_none("rule 3", climbs_twice(&Crate::from_disk()));
}

#[test]
fn no_import_cycle_among_the_siblings_of_a_folder() {
    assert_none("rule 4", sibling_cycles(&Crate::from_disk()));
}

// ---------------------------------------------------------------------------
// Each rule catching a planted violation.

/// The modules the (one-file) crate `src/lib.rs` names from its root.
fn named(source: &str) -> BTreeSet<String> {
    let krate = Crate::read(&[("src/a/mod.rs", source)]);
    krate
        .mentions
        .iter()
        .filter_map(|m| m.target.as_ref()?.first().cloned())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[test]
fn the_reader_sees_nested_groups() {
    assert_eq!(
        named("use crate::{model::{ServerId, Tool}, router, jsonrpc::{line, self}};"),
        set(&["jsonrpc", "model", "router"])
    );
}

#[test]
fn the_reader_is_not_fooled_by_strings_or_comments() {
    let source = r####"
        //! See crate::api for the other half.
        /// Calls crate::cli.
        fn f() {
            let url = "http://x"; let s = crate::store::open();
            /* crate::daemon
               crate::eval */
            let raw = r#"crate::bridge "# ; let raw2 = r##"// "#"##; crate::paths::home();
            let text = "crate::logging"; // crate::limits
        }
    "####;
    assert_eq!(named(source), set(&["paths", "store"]));
}

#[test]
fn the_reader_sees_paths_in_macros_attributes_types_and_patterns() {
    let source = r#"
        macro_rules! into_error { ($e:expr) => { $crate::jsonrpc::wrap($e) }; }
        fn f(x: crate::model::Tool) -> Vec<crate::catalog::Entry> {
            println!("{} crate::http_error", crate::metrics::count());
            tracing::info!(target: "x", value = ?crate::limits::MAX);
            match x { crate::model::Tool { .. } => {} }
            let _: <crate::index::Index as crate::skills::Skill>::Out = todo!();
            Vec::new()
        }
        #[derive(serde::Serialize)]
        #[serde(remote = "x")]
        struct S { #[schema(value_type = crate::registry::Kind)] k: u8 }
    "#;
    assert_eq!(
        named(source),
        set(&[
            "catalog", "index", "jsonrpc", "limits", "metrics", "model", "registry", "skills"
        ])
    );
}

#[test]
fn the_reader_follows_use_aliases_and_globs() {
    let krate = Crate::read(&[
        ("src/lib.rs", "pub mod a; pub mod m;"),
        ("src/m/mod.rs", "mod inner;"),
        ("src/m/inner.rs", ""),
        (
            "src/a/mod.rs",
            "use crate::m; fn f() { m::inner::go(); { use crate::m as n; n::inner::stop(); } }
             #[cfg(test)] mod tests { use super::*; fn t() { m::inner::x(); } }",
        ),
    ]);
    let targets: Vec<String> = krate
        .mentions
        .iter()
        .filter_map(|m| Some(m.target.as_ref()?.join("::")))
        .collect();
    assert!(targets.contains(&"m::inner::go".to_owned()), "{targets:?}");
    assert!(
        targets.contains(&"m::inner::stop".to_owned()),
        "{targets:?}"
    );
    assert!(targets.contains(&"m::inner::x".to_owned()), "{targets:?}");
    assert!(
        krate.mentions.iter().any(|m| m.test),
        "the tests module is test code"
    );
}

#[test]
fn the_table_is_read() {
    let rules = rules();
    assert!(!rules["store"].permits("router"));
    assert!(rules["daemon"].permits("store"));
    assert!(!rules["cli"].permits("store"));
}

const TABLE: &str = "## Dependency rules\n\n| module | may use |\n| --- | --- |\n\
                     | low | — |\n| high | low |\n| lib | * |\n";

#[test]
fn rule_0_catches_a_use_the_table_does_not_allow() {
    let krate = Crate::read(&[
        ("src/lib.rs", "pub mod low; pub mod high; pub mod stray;"),
        ("src/high.rs", "use crate::low::Thing;"),
        (
            "src/low/mod.rs",
            "mod deep; #[cfg(test)] mod tests; fn f() { let _ = \"http://x\"; }",
        ),
        ("src/low/deep.rs", "use super::super::high::Up;"),
        ("src/low/tests.rs", "use crate::high::Up;"),
        ("src/stray.rs", ""),
    ]);
    let broken = dependency_table(&krate, &parse_rules(TABLE));
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(
        broken[0].starts_with("src/low/deep.rs:1: rule 0"),
        "{broken:#?}"
    );
    assert!(broken[0].contains("low may not use high"), "{broken:#?}");
    assert!(broken[1].contains("module stray has no row"), "{broken:#?}");

    let krate = Crate::read(&[
        ("src/lib.rs", "pub mod low; pub mod high;"),
        ("src/low/mod.rs", "use crate::{low::{y, z}, high::Up};"),
    ]);
    let broken = dependency_table(&krate, &parse_rules(TABLE));
    assert_eq!(broken.len(), 1, "{broken:#?}");
    assert!(broken[0].contains("`crate::high::Up`"), "{broken:#?}");
}

#[test]
fn rule_1_catches_a_re_export_of_another_module() {
    let krate = Crate::read(&[
        (
            "src/lib.rs",
            "pub mod a; pub mod b; pub use crate::a::Fine;",
        ),
        (
            "src/a/mod.rs",
            "mod x; pub use self::x::Own; pub use crate::a::x::AlsoOwn;\n\
             pub(crate) use crate::{b::Other};\n\
             use crate::b::Private;\n\
             pub use super::b::Climbed;",
        ),
        ("src/a/x.rs", "pub(super) use crate::b::*;"),
        ("src/b.rs", ""),
    ]);
    let broken = re_exports(&krate);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(
        broken[0].starts_with("src/a/mod.rs:2: rule 1"),
        "{broken:#?}"
    );
    assert!(broken[0].contains("`crate::b::Other`"), "{broken:#?}");
    assert!(
        broken[1].starts_with("src/a/mod.rs:4: rule 1"),
        "{broken:#?}"
    );
    assert!(broken[1].contains("`super::b::Climbed`"), "{broken:#?}");
    assert!(broken[2].starts_with("src/a/x.rs:1: rule 1"), "{broken:#?}");
}

#[test]
fn rule_2_catches_a_path_through_a_module_that_is_not_pub() {
    let krate = Crate::read(&[
        ("src/lib.rs", "pub mod a; pub mod m;"),
        (
            "src/m/mod.rs",
            "pub mod open; pub(crate) mod shut; mod hidden; pub use hidden::Item;\n\
             fn own() { hidden::Item::new(); crate::m::shut::f(); }",
        ),
        ("src/m/open.rs", "pub mod deeper; pub(crate) mod closed;"),
        ("src/m/open/deeper.rs", ""),
        ("src/m/open/closed.rs", ""),
        ("src/m/shut.rs", ""),
        ("src/m/hidden.rs", ""),
        (
            "src/a/mod.rs",
            "use crate::m::{Item, open::deeper::Thing};\n\
             use crate::m::shut::Nope;\n\
             fn f() {\n    let _ = crate::m::open::closed::g();\n    crate::m::hidden::h!();\n}\n\
             type T = Vec<crate::m::open::closed::T>;",
        ),
    ]);
    let broken = reaches_inside(&krate);
    assert_eq!(broken.len(), 4, "{broken:#?}");
    assert!(
        broken[0].starts_with("src/a/mod.rs:2: rule 2"),
        "{broken:#?}"
    );
    assert!(
        broken[0].contains("goes through m::shut, declared `pub(…) mod` at src/m/mod.rs:1"),
        "{broken:#?}"
    );
    assert!(
        broken[1].starts_with("src/a/mod.rs:4: rule 2"),
        "{broken:#?}"
    );
    assert!(
        broken[1].contains("m::open::closed, declared `pub(…) mod` at src/m/open.rs:1"),
        "{broken:#?}"
    );
    assert!(
        broken[2].starts_with("src/a/mod.rs:5: rule 2"),
        "{broken:#?}"
    );
    assert!(broken[2].contains("declared `mod`"), "{broken:#?}");
    assert!(
        broken[3].starts_with("src/a/mod.rs:7: rule 2"),
        "{broken:#?}"
    );
}

#[test]
fn rule_3_catches_super_super() {
    let krate = Crate::read(&[
        ("src/lib.rs", "pub mod a;"),
        ("src/a/mod.rs", "mod b;"),
        (
            "src/a/b.rs",
            "use super::Fine;\nfn f() {\n    super::super::other::g();\n}\n\
             #[cfg(test)]\nmod tests {\n    use super::{super::Up};\n    fn t() { assert!(super::super::x::y()); }\n}",
        ),
    ]);
    let broken = climbs_twice(&krate);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert_eq!(
        broken[0],
        "src/a/b.rs:3: rule 3 (super::super): `super::super::other::g`"
    );
    assert!(
        broken[1].starts_with("src/a/b.rs:7 [test code]: rule 3"),
        "{broken:#?}"
    );
    assert!(
        broken[2].starts_with("src/a/b.rs:8 [test code]: rule 3"),
        "{broken:#?}"
    );
}

#[test]
fn rule_4_catches_a_cycle_among_siblings() {
    let krate = Crate::read(&[
        ("src/lib.rs", "pub mod m; pub mod n;"),
        (
            "src/m/mod.rs",
            "mod a; mod b; mod c; mod d; use a::A; use b::B; use c::C;",
        ),
        ("src/m/a.rs", "use super::{b::B, d::D};"),
        ("src/m/b/mod.rs", "mod inner;"),
        ("src/m/b/inner.rs", "fn f() { crate::m::c::g(); }"),
        (
            "src/m/c.rs",
            "#[cfg(test)]\nmod tests {\n    use super::super::a::A;\n}",
        ),
        ("src/m/d.rs", "use super::A; use super::c::C;"),
        ("src/n.rs", "fn f() { crate::m::a::x(); }"),
    ]);
    let broken = sibling_cycles(&krate);
    assert_eq!(broken.len(), 1, "{broken:#?}");
    let expected = "rule 4 (sibling cycle) in src/m/: a -> b -> c -> a (one knot of a, b, c, d)\n    \
                    a -> b: src/m/a.rs:1: `super::b::B`\n    \
                    b -> c: src/m/b/inner.rs:1: `crate::m::c::g`\n    \
                    c -> a: src/m/c.rs:3 [test code]: `super::super::a::A`";
    assert_eq!(broken[0], expected);
}

#[test]
fn rule_4_sees_top_level_modules_as_siblings_of_src() {
    let krate = Crate::read(&[
        ("src/lib.rs", "pub mod x; pub mod y;"),
        ("src/x.rs", "use crate::y;"),
        ("src/y/mod.rs", "mod z;"),
        ("src/y/z.rs", "fn f() { crate::x::g(); }"),
    ]);
    let broken = sibling_cycles(&krate);
    assert_eq!(broken.len(), 1, "{broken:#?}");
    assert!(
        broken[0].starts_with("rule 4 (sibling cycle) in src/: x -> y -> x"),
        "{broken:#?}"
    );
}
