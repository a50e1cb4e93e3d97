//! The module dependency rules ARCHITECTURE.md states, checked against the
//! code: every `crate::<module>` path in a module's files must be one its
//! row of the "Dependency rules" table allows, and every module must have a
//! row (a new module is placed in the architecture, not added beside it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
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

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to.
fn module_of(file: &Path) -> String {
    let relative = file.strip_prefix(root().join("src")).unwrap();
    let first = relative.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_owned()
}

/// The crate modules a file names: `crate::x` and `crate::{x, y::z}`, with
/// comments left out.
fn modules_used(source: &str) -> BTreeSet<String> {
    let code: String = source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut used = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    used.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                used.insert(name);
            }
        }
    }
    used
}

#[test]
fn every_module_uses_only_what_architecture_md_allows() {
    let rules = rules();
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut broken = Vec::new();
    let mut unplaced = BTreeSet::new();
    for file in &files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let module = module_of(file);
        let Some(allowed) = rules.get(&module) else {
            unplaced.insert(module);
            continue;
        };
        let source = std::fs::read_to_string(file).unwrap();
        for used in modules_used(&source) {
            if used != module && !allowed.permits(&used) {
                broken.push(format!(
                    "{} ({module}) uses crate::{used}",
                    file.strip_prefix(root()).unwrap().display()
                ));
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules without a row in ARCHITECTURE.md's dependency rules: {unplaced:?}"
    );
    assert!(
        broken.is_empty(),
        "uses ARCHITECTURE.md's dependency rules do not allow:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_checker_sees_grouped_and_plain_paths_but_not_comments() {
    let used = modules_used(
        "use crate::{model::ServerId, router};\n// crate::store is not used\nlet x = crate::jsonrpc::line(&v);",
    );
    let expected: BTreeSet<String> = ["model", "router", "jsonrpc"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(used, expected);
    let rules = rules();
    assert!(!rules["store"].permits("router"));
    assert!(rules["daemon"].permits("store"));
    assert!(!rules["cli"].permits("store"));
}
