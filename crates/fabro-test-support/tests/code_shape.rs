//! Shape limits of the workspace's code (issue 15): no non-test function over 120 lines,
//! no non-test module over 800 lines, and no import circle between sibling modules
//! of any crate.
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

/// Import edges between sibling modules that close circles, as `crate:parent: from -> to`
/// (issue 30 extended the check from `fabro-engine`'s top-level modules to every level
/// of every crate). Removing one of them must break its circle.
const KNOWN_CIRCULAR_IMPORTS: &[&str] = &[];

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

/// A source file's crate and module path: `crates/fabro-cli/src/command/run.rs` is
/// `("fabro-cli", ["command", "run"])`; `lib.rs`, `main.rs` and `mod.rs` name their
/// directory's module. Binaries under `src/bin/` are crates of their own: `None`.
fn module_of(path: &str) -> Option<(String, Vec<String>)> {
    let rest = path.strip_prefix("crates/").unwrap_or(path);
    let (krate, inside) = rest.split_once('/')?;
    let inside = inside.strip_prefix("src/")?;
    let mut parts: Vec<String> = inside.split('/').map(str::to_owned).collect();
    let file = parts.pop()?;
    let stem = file.strip_suffix(".rs")?;
    if parts.first().is_some_and(|first| first == "bin") {
        return None;
    }
    let is_root = parts.is_empty() && matches!(stem, "lib" | "main");
    if !is_root && stem != "mod" {
        parts.push(stem.to_owned());
    }
    Some((krate.to_owned(), parts))
}

/// Every module path a file names (in private `use` items and in paths), resolved
/// against the file's own module: `crate::a::b`, `super::x`, `self::x` and a child
/// module's name.
struct ModulePaths<'a> {
    here: &'a [String],
    children: BTreeSet<String>,
    found: BTreeSet<Vec<String>>,
}

impl ModulePaths<'_> {
    fn resolve(&mut self, segments: &[String]) {
        let Some(first) = segments.first() else {
            return;
        };
        let (mut base, rest) = match first.as_str() {
            "crate" => (Vec::new(), &segments[1..]),
            "self" => (self.here.to_vec(), &segments[1..]),
            "super" => {
                let mut base = self.here.to_vec();
                let mut rest = segments;
                while rest.first().is_some_and(|segment| segment == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
                (base, rest)
            }
            name if self.children.contains(name) => (self.here.to_vec(), segments),
            _ => return,
        };
        base.extend(rest.iter().cloned());
        self.found.insert(base);
    }
}

impl<'ast> Visit<'ast> for ModulePaths<'_> {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if is_test_only(&module.attrs) {
            return;
        }
        syn::visit::visit_item_mod(self, module);
    }

    fn visit_item_fn(&mut self, function: &'ast syn::ItemFn) {
        if is_test_only(&function.attrs) {
            return;
        }
        syn::visit::visit_item_fn(self, function);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        // A re-export (`pub use child::X`) is the module's facade, not a use of it.
        if matches!(item.vis, syn::Visibility::Inherited) {
            let mut leaves = Vec::new();
            use_paths(&item.tree, &mut Vec::new(), &mut leaves);
            for segments in leaves {
                self.resolve(&segments);
            }
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path
            .segments
            .iter()
            .map(|segment| segment.ident.to_string())
            .collect();
        if segments.len() > 1 {
            self.resolve(&segments);
        }
        syn::visit::visit_path(self, path);
    }
}

/// The paths of a use tree, one per leaf (`a::{b, c::D}` → `a::b`, `a::c::D`).
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, leaves: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_paths(&path.tree, prefix, leaves);
            prefix.pop();
        }
        syn::UseTree::Name(syn::UseName { ident })
        | syn::UseTree::Rename(syn::UseRename { ident, .. }) => {
            // `a::{self, b}`: `self` names `a` itself.
            let mut leaf = prefix.clone();
            if ident != "self" {
                leaf.push(ident.to_string());
            }
            leaves.push(leaf);
        }
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                use_paths(tree, prefix, leaves);
            }
        }
        syn::UseTree::Glob(_) => leaves.push(prefix.clone()),
    }
}

/// The import edges between sibling modules, per crate and parent module: a file in
/// `a/x/…` naming something in `a/y/…` is the edge `x → y` among the children of `a`,
/// keyed `crate:a`. A module and its own ancestors or descendants are not siblings.
fn sibling_import_graphs() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let sources = library_sources();
    let mut modules: BTreeMap<String, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (path, _, _) in &sources {
        if let Some((krate, module)) = module_of(path) {
            modules.entry(krate).or_default().insert(module);
        }
    }
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (path, file, _) in &sources {
        let Some((krate, here)) = module_of(path) else {
            continue;
        };
        let known = &modules[&krate];
        let children = known
            .iter()
            .filter(|module| module.len() == here.len() + 1 && module.starts_with(&here))
            .map(|module| module[here.len()].clone())
            .collect();
        let mut paths = ModulePaths {
            here: &here,
            children,
            found: BTreeSet::new(),
        };
        paths.visit_file(file);
        for named in paths.found {
            // The module is the longest prefix of the path that is a module of the crate.
            let Some(target) = (0..=named.len())
                .rev()
                .map(|length| &named[..length])
                .find(|prefix| known.contains(*prefix))
            else {
                continue;
            };
            let common = here
                .iter()
                .zip(target)
                .take_while(|(left, right)| left == right)
                .count();
            if common < here.len() && common < target.len() {
                graphs
                    .entry(format!("{krate}:{}", here[..common].join("::")))
                    .or_default()
                    .entry(here[common].clone())
                    .or_default()
                    .insert(target[common].clone());
            }
        }
    }
    graphs
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
fn sibling_modules_import_each_other_without_circles() {
    let graphs = sibling_import_graphs();
    assert!(
        graphs
            .get("fabro-engine:")
            .is_some_and(|graph| graph.len() > 10),
        "found only {:?}",
        graphs.keys().collect::<Vec<_>>()
    );
    let mut found = BTreeSet::new();
    for (level, graph) in &graphs {
        for (from, to) in circular_edges(graph) {
            found.insert(format!("{level}: {from} -> {to}"));
        }
    }
    let known: BTreeSet<String> = KNOWN_CIRCULAR_IMPORTS
        .iter()
        .map(|edge| (*edge).to_owned())
        .collect();
    ratchet(
        "import edges on a circle between sibling modules",
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

#[test]
fn files_are_modules_and_paths_resolve_against_them() {
    let module = |path: &str| module_of(path).map(|(krate, parts)| (krate, parts.join("::")));
    let owned = |krate: &str, path: &str| Some((krate.to_owned(), path.to_owned()));
    assert_eq!(
        module("crates/fabro-cli/src/main.rs"),
        owned("fabro-cli", "")
    );
    assert_eq!(
        module("crates/fabro-cli/src/command/run.rs"),
        owned("fabro-cli", "command::run")
    );
    assert_eq!(module("crates/x/src/a/mod.rs"), owned("x", "a"));
    assert_eq!(module("bench/src/llm.rs"), owned("bench", "llm"));
    assert_eq!(module("crates/x/src/bin/tool.rs"), None);

    let here = ["command".to_owned(), "run".to_owned()];
    let mut paths = ModulePaths {
        here: &here,
        children: BTreeSet::from(["detach".to_owned()]),
        found: BTreeSet::new(),
    };
    let file: syn::File = syn::parse_quote! {
        use super::remote::Remote;
        use crate::{output::Output, command::events::{self, format_event}};
        pub use super::reexported::Facade;
        fn f() { detach::start(); super::super::args::parse(); std::mem::drop(1); }
        #[cfg(test)]
        mod tests { use crate::only_in_tests::X; }
    };
    paths.visit_file(&file);
    let found: Vec<String> = paths.found.iter().map(|path| path.join("::")).collect();
    assert_eq!(
        found,
        [
            "args::parse",
            "command::events",
            "command::events::format_event",
            "command::remote::Remote",
            "command::run::detach::start",
            "output::Output",
        ]
    );
}
