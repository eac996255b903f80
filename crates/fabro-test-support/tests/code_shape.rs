//! Shape limits of the workspace's code (issue 15): no non-test function over 120 lines,
//! no non-test module over 800 lines, and no import circle between the top-level modules
//! of `fabro-engine`.
//!
//! The sources are parsed with `syn`, so braces in strings and comments do not count, and
//! `#[cfg(test)]` modules and `#[test]` functions are left out. Code written before the
//! limits existed is listed in `KNOWN_*` below: the lists may only shrink. A listed item
//! that now meets the limit fails the test too, so whoever fixes one removes it here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fabro_test_support::workspace_root;
use syn::spanned::Spanned;
use syn::visit::Visit;

/// Longest non-test function, in lines from `fn` to its closing brace.
const MAX_FUNCTION_LINES: usize = 120;
/// Longest non-test module (file), in lines outside `#[cfg(test)]` modules.
const MAX_MODULE_LINES: usize = 800;

/// Functions over the limit when it was introduced: `(file, function)`.
const KNOWN_LONG_FUNCTIONS: &[(&str, &str)] = &[];

/// Modules over the limit when it was introduced.
const KNOWN_LONG_MODULES: &[&str] = &[];

/// Import edges of `fabro-engine` that close circles, when the check was introduced:
/// `(from module, to module)`. Removing one of them must break its circle.
const KNOWN_CIRCULAR_IMPORTS: &[(&str, &str)] = &[];

fn rust_files(directory: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs_err::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            // Integration tests, snapshots and build output are not library code.
            if !matches!(name.as_ref(), "target" | "tests" | "snapshots") && !name.starts_with('.')
            {
                rust_files(&path, files);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            files.push(path);
        }
    }
}

/// Non-test sources: `crates/*/src` and `bench/src`, relative to the workspace root.
fn library_sources() -> Vec<(String, syn::File, usize)> {
    let root = workspace_root();
    let mut files = Vec::new();
    for top in ["crates", "bench"] {
        rust_files(&root.join(top), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .filter(|path| path.components().any(|part| part.as_os_str() == "src"))
        .map(|path| {
            let text = fs_err::read_to_string(&path).expect("sources are readable");
            let parsed = syn::parse_file(&text)
                .unwrap_or_else(|error| panic!("{} does not parse: {error}", path.display()));
            let relative = path
                .strip_prefix(&root)
                .expect("under the root")
                .to_string_lossy()
                .into_owned();
            (relative, parsed, text.lines().count())
        })
        .collect()
}

fn is_test_only(attributes: &[syn::Attribute]) -> bool {
    attributes.iter().any(|attribute| {
        let path = attribute.path();
        if path.is_ident("test") {
            return true;
        }
        if path.is_ident("cfg") {
            let tokens = attribute
                .meta
                .require_list()
                .map(|list| list.tokens.to_string())
                .unwrap_or_default();
            return tokens == "test";
        }
        false
    })
}

fn lines_of(span: proc_macro2::Span) -> usize {
    span.end().line - span.start().line + 1
}

/// Collects long functions and the lines of test-only modules.
#[derive(Default)]
struct Shape {
    long_functions: Vec<(String, usize)>,
    test_lines: usize,
}

impl<'ast> Visit<'ast> for Shape {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if is_test_only(&module.attrs) {
            if module.content.is_some() {
                self.test_lines += lines_of(module.span());
            }
            return;
        }
        syn::visit::visit_item_mod(self, module);
    }

    fn visit_item_fn(&mut self, function: &'ast syn::ItemFn) {
        if is_test_only(&function.attrs) {
            return;
        }
        let lines = lines_of(function.span());
        if lines > MAX_FUNCTION_LINES {
            self.long_functions
                .push((function.sig.ident.to_string(), lines));
        }
        syn::visit::visit_item_fn(self, function);
    }

    fn visit_impl_item_fn(&mut self, function: &'ast syn::ImplItemFn) {
        if is_test_only(&function.attrs) {
            return;
        }
        let lines = lines_of(function.span());
        if lines > MAX_FUNCTION_LINES {
            self.long_functions
                .push((function.sig.ident.to_string(), lines));
        }
        syn::visit::visit_impl_item_fn(self, function);
    }

    fn visit_trait_item_fn(&mut self, function: &'ast syn::TraitItemFn) {
        let lines = lines_of(function.span());
        if function.default.is_some() && lines > MAX_FUNCTION_LINES {
            self.long_functions
                .push((function.sig.ident.to_string(), lines));
        }
        syn::visit::visit_trait_item_fn(self, function);
    }
}

/// Compares what was found with a known list: new offenders and fixed ones both fail.
fn ratchet<T: Ord + Clone + std::fmt::Debug>(what: &str, found: &BTreeSet<T>, known: &BTreeSet<T>) {
    let new: Vec<_> = found.difference(known).collect();
    let fixed: Vec<_> = known.difference(found).collect();
    assert!(
        new.is_empty(),
        "{what} over the limit (split them; the limit is a design rule, not a suggestion): {new:#?}"
    );
    assert!(
        fixed.is_empty(),
        "{what} now within the limit: remove them from the known list in this file: {fixed:#?}"
    );
}

#[test]
fn functions_and_modules_stay_within_their_limits() {
    let mut long_functions = BTreeSet::new();
    let mut long_modules = BTreeSet::new();
    let mut report = Vec::new();
    for (path, file, total_lines) in library_sources() {
        let mut shape = Shape::default();
        shape.visit_file(&file);
        for (function, lines) in shape.long_functions {
            report.push(format!("{path}: fn {function}: {lines} lines"));
            long_functions.insert((path.clone(), function));
        }
        let module_lines = total_lines.saturating_sub(shape.test_lines);
        if module_lines > MAX_MODULE_LINES {
            report.push(format!("{path}: {module_lines} lines"));
            long_modules.insert(path);
        }
    }
    let known_functions: BTreeSet<(String, String)> = KNOWN_LONG_FUNCTIONS
        .iter()
        .map(|(path, function)| ((*path).to_owned(), (*function).to_owned()))
        .collect();
    let known_modules: BTreeSet<String> = KNOWN_LONG_MODULES
        .iter()
        .map(|path| (*path).to_owned())
        .collect();
    let context = report.join("\n");
    ratchet(
        &format!("functions ({context})"),
        &long_functions,
        &known_functions,
    );
    ratchet(
        &format!("modules ({context})"),
        &long_modules,
        &known_modules,
    );
}

/// The top-level module of `fabro-engine` a source file belongs to (`run` for
/// `src/run.rs` and `src/run/children.rs`), `None` for `lib.rs`.
fn engine_module(path: &str) -> Option<String> {
    let inside = path.strip_prefix("crates/fabro-engine/src/")?;
    let first = inside.split('/').next()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_owned())
}

/// Every `crate::{module}` a file names, in `use` items and in paths.
#[derive(Default)]
struct CratePaths {
    modules: BTreeSet<String>,
    in_test: usize,
}

impl<'ast> Visit<'ast> for CratePaths {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if is_test_only(&module.attrs) {
            return;
        }
        syn::visit::visit_item_mod(self, module);
    }

    fn visit_item_fn(&mut self, function: &'ast syn::ItemFn) {
        if is_test_only(&function.attrs) {
            self.in_test += 1;
            return;
        }
        syn::visit::visit_item_fn(self, function);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let mut segments = path.segments.iter();
        if let (Some(first), Some(second)) = (segments.next(), segments.next()) {
            if first.ident == "crate" {
                self.modules.insert(second.ident.to_string());
            }
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_use_tree(&mut self, tree: &'ast syn::UseTree) {
        if let syn::UseTree::Path(path) = tree {
            if path.ident == "crate" {
                collect_use_heads(&path.tree, &mut self.modules);
                return;
            }
        }
        syn::visit::visit_use_tree(self, tree);
    }
}

/// The first names below `crate::` in a use tree (`crate::{a::X, b}` → `a`, `b`).
fn collect_use_heads(tree: &syn::UseTree, modules: &mut BTreeSet<String>) {
    match tree {
        syn::UseTree::Path(path) => {
            modules.insert(path.ident.to_string());
        }
        syn::UseTree::Name(name) => {
            modules.insert(name.ident.to_string());
        }
        syn::UseTree::Rename(rename) => {
            modules.insert(rename.ident.to_string());
        }
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                collect_use_heads(tree, modules);
            }
        }
        syn::UseTree::Glob(_) => {}
    }
}

/// The edges that lie on a cycle: `from → to` where `from` is reachable again from `to`.
fn circular_edges(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<(String, String)> {
    let reaches = |from: &str, target: &str| -> bool {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(node) = stack.pop() {
            if node == target {
                return true;
            }
            if seen.insert(node.clone()) {
                if let Some(next) = graph.get(&node) {
                    stack.extend(next.iter().cloned());
                }
            }
        }
        false
    };
    graph
        .iter()
        .flat_map(|(from, targets)| targets.iter().map(move |to| (from.clone(), to.clone())))
        .filter(|(from, to)| reaches(to, from))
        .collect()
}

#[test]
fn engine_modules_import_each_other_without_circles() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut modules = BTreeSet::new();
    let sources = library_sources();
    for (path, _, _) in &sources {
        if let Some(module) = engine_module(path) {
            modules.insert(module);
        }
    }
    assert!(modules.len() > 10, "found only {modules:?}");
    for (path, file, _) in &sources {
        let Some(module) = engine_module(path) else {
            continue;
        };
        let mut paths = CratePaths::default();
        paths.visit_file(file);
        for target in paths.modules {
            if target != module && modules.contains(&target) {
                graph.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    let found = circular_edges(&graph);
    let known: BTreeSet<(String, String)> = KNOWN_CIRCULAR_IMPORTS
        .iter()
        .map(|(from, to)| ((*from).to_owned(), (*to).to_owned()))
        .collect();
    ratchet(
        "import edges on a circle between engine modules",
        &found,
        &known,
    );
}

#[test]
fn circles_are_found_and_chains_are_not() {
    let graph = |edges: &[(&str, &str)]| {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in edges {
            graph
                .entry((*from).to_owned())
                .or_default()
                .insert((*to).to_owned());
        }
        graph
    };
    assert!(circular_edges(&graph(&[("a", "b"), ("b", "c")])).is_empty());
    let circle = circular_edges(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]));
    assert_eq!(circle.len(), 3);
    assert!(!circle.contains(&("c".to_owned(), "d".to_owned())));
}
