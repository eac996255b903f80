//! The flattened syntax of one workflow file: nodes, edges and attributes with spans.
//!
//! [`parse`] turns DOT text into a [`SyntaxGraph`] in one pass. Subgraphs are already
//! flattened, defaults already applied and classes already derived (SPEC 2.5), but every
//! attribute is still the literal the user wrote, with its span, so that lowering
//! ([`crate::lower`]) can report type errors at the exact place.

mod cursor;
mod parser;

pub(crate) use parser::parse_indexed;
pub use parser::{is_ident, is_keyword, parse, MAX_SOURCE_BYTES};

use std::sync::Arc;

use crate::id_hash::same_text;
use crate::span::Span;

/// One `key=value` attribute as written.
///
/// Keys and values are shared strings: keys are interned per file and defaults are
/// copied onto every node and edge they apply to, so sharing keeps large workflows cheap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    /// The (possibly qualified) key, e.g. `human.default_choice`.
    pub key: Arc<str>,
    /// Span of the key.
    pub key_span: Span,
    /// The value with escapes resolved (SPEC 2.3).
    pub value: Arc<str>,
    /// Span of the value token, quotes included (see [`Attribute::is_quoted`]).
    pub value_span: Span,
}

/// An attribute list where a later assignment of a key replaces the earlier one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    entries: Vec<Attribute>,
}

impl Attributes {
    /// Sets an attribute, replacing an earlier one with the same key in place.
    pub fn set(&mut self, attribute: Attribute) {
        match self
            .entries
            .iter_mut()
            .find(|existing| existing.key == attribute.key)
        {
            Some(existing) => *existing = attribute,
            None => self.entries.push(attribute),
        }
    }

    /// An empty list with room for `capacity` attributes.
    pub(crate) fn with_capacity(capacity: usize) -> Attributes {
        Attributes {
            entries: Vec::with_capacity(capacity),
        }
    }

    /// [`Attributes::set`] for keys interned by one parser: two such keys are equal
    /// exactly when they share an allocation, so keys are compared by address.
    pub(crate) fn set_interned(&mut self, attribute: Attribute) {
        debug_assert!(self
            .entries
            .iter()
            .all(|existing| Arc::ptr_eq(&existing.key, &attribute.key)
                || existing.key != attribute.key));
        match self
            .entries
            .iter_mut()
            .find(|existing| Arc::ptr_eq(&existing.key, &attribute.key))
        {
            Some(existing) => *existing = attribute,
            None => self.entries.push(attribute),
        }
    }

    /// Sets every attribute of `other` (later wins), leaving `other` empty but keeping its
    /// buffer. Grows by exactly what may be needed: most lists stay this size. Keys of
    /// both lists must be interned by the same parser (see [`Attributes::set_interned`]).
    pub(crate) fn merge_interned(&mut self, other: &mut Attributes) {
        self.entries.reserve_exact(other.len());
        if self.entries.is_empty() {
            // The keys of `other` are distinct already: setting them one by one appends.
            self.entries.append(&mut other.entries);
            return;
        }
        for attribute in other.entries.drain(..) {
            self.set_interned(attribute);
        }
    }

    /// Appends clones of `other`'s attributes; `self` must not have any of their keys.
    pub(crate) fn extend_cloned(&mut self, other: &Attributes) {
        self.entries.extend_from_slice(&other.entries);
    }

    /// The attribute with this key, if set.
    pub fn get(&self, key: &str) -> Option<&Attribute> {
        self.entries
            .iter()
            .find(|attribute| same_text(&attribute.key, key))
    }

    /// The first attribute set among `keys` (a canonical key and its aliases), in the
    /// order given.
    pub fn get_any(&self, keys: &[&str]) -> Option<&Attribute> {
        keys.iter().find_map(|key| self.get(key))
    }

    /// The value of `key`, if set.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.get(key).map(|attribute| &*attribute.value)
    }

    /// All attributes in first-assignment order.
    pub fn iter(&self) -> std::slice::Iter<'_, Attribute> {
        self.entries.iter()
    }

    /// Number of attributes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no attribute is set.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl IntoIterator for Attributes {
    type Item = Attribute;
    type IntoIter = std::vec::IntoIter<Attribute>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a> IntoIterator for &'a Attributes {
    type Item = &'a Attribute;
    type IntoIter = std::slice::Iter<'a, Attribute>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}

/// A node as the source declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxNode {
    /// The node id.
    pub id: String,
    /// Span of the first mention (node statement or edge endpoint).
    pub span: Span,
    /// Whether some node statement declares it (rather than only edge endpoints).
    pub declared: bool,
    /// Whether the id was written quoted at its first mention.
    pub quoted: bool,
    /// Attributes: defaults at creation, then every node statement's, later wins.
    pub attributes: Attributes,
}

/// An edge as the source declares it (chains already expanded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxEdge {
    /// Index of the source node in [`SyntaxGraph::nodes`].
    pub from: usize,
    /// Index of the target node.
    pub to: usize,
    /// Span of the source endpoint in this statement.
    pub from_span: Span,
    /// Span of the target endpoint in this statement.
    pub to_span: Span,
    /// Edge defaults in effect, then the statement's attributes.
    pub attributes: Attributes,
}

/// A parsed, flattened workflow file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyntaxGraph {
    /// The graph id, if written.
    pub id: Option<String>,
    /// Graph attributes (`graph [...]` and top-level `key=value`), later wins.
    pub attributes: Attributes,
    /// Nodes in order of first mention.
    pub nodes: Vec<SyntaxNode>,
    /// Edges in declaration order.
    pub edges: Vec<SyntaxEdge>,
    /// Classes derived from enclosing subgraph labels as (index into
    /// [`SyntaxGraph::nodes`], class): ascending by node, and per node outermost first and
    /// deduplicated. Only nodes inside labelled subgraphs have entries, so a large flat
    /// workflow carries nothing for them (see [`SyntaxGraph::derived_classes_of`]).
    pub derived_classes: Vec<(usize, String)>,
    /// Subgraphs whose name starts with `cluster`, in order of first opening (so a
    /// cluster comes before the clusters nested in it).
    pub clusters: Vec<SyntaxCluster>,
}

/// A subgraph named `cluster…`, which Graphviz draws as a labelled box around its nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyntaxCluster {
    /// The subgraph name, `cluster` included.
    pub name: String,
    /// The subgraph's `label`, if set.
    pub label: Option<String>,
    /// Indices into [`SyntaxGraph::nodes`] of the nodes declared or first created in it
    /// or in subgraphs nested in it, ascending.
    pub members: Vec<usize>,
    /// Position in [`SyntaxGraph::clusters`] of the innermost cluster enclosing it.
    pub parent: Option<usize>,
}

/// Every attribute key a file assigns anywhere (graph, nodes, edges, defaults,
/// subgraphs), so that passes looking for a rarely used key on every node can skip
/// files that never mention it.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeySet {
    keys: Vec<Arc<str>>,
}

impl KeySet {
    /// The set of these keys.
    pub(crate) fn new(keys: impl IntoIterator<Item = Arc<str>>) -> KeySet {
        let mut keys: Vec<Arc<str>> = keys.into_iter().collect();
        keys.sort();
        keys.dedup();
        KeySet { keys }
    }

    /// The keys of every attribute of `graph`.
    #[cfg(test)]
    pub(crate) fn of(graph: &SyntaxGraph) -> KeySet {
        let nodes = graph.nodes.iter().flat_map(|node| node.attributes.iter());
        let edges = graph.edges.iter().flat_map(|edge| edge.attributes.iter());
        KeySet::new(
            graph
                .attributes
                .iter()
                .chain(nodes)
                .chain(edges)
                .map(|attribute| attribute.key.clone()),
        )
    }

    /// Whether some attribute of the file has this key.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.keys
            .binary_search_by(|probe| (**probe).cmp(key))
            .is_ok()
    }

    /// Whether some attribute of the file has one of these keys.
    pub(crate) fn contains_any(&self, keys: &[&str]) -> bool {
        keys.iter().any(|key| self.contains(key))
    }

    /// Every key, sorted and without duplicates.
    pub(crate) fn keys(&self) -> &[Arc<str>] {
        &self.keys
    }
}

impl SyntaxGraph {
    /// The classes derived from subgraph labels for the node at `index`, outermost first.
    pub fn derived_classes_of(&self, index: usize) -> impl Iterator<Item = &str> {
        let start = self
            .derived_classes
            .partition_point(|(node, _)| *node < index);
        self.derived_classes[start..]
            .iter()
            .take_while(move |(node, _)| *node == index)
            .map(|(_, class)| class.as_str())
    }

    /// Index of the node with `id`, by linear search (use [`crate::Workflow`] for lookups
    /// on hot paths).
    pub fn node_index(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|node| node.id == id)
    }
}

impl Attribute {
    /// Whether the value was written as a quoted string in `source`, the text the
    /// attribute was parsed from: its value token then starts with the opening quote.
    /// (Read from the source rather than stored: a large workflow holds a few attributes
    /// per node, and a flag would make each one 8 bytes larger.)
    pub fn is_quoted(&self, source: &str) -> bool {
        source.as_bytes().get(self.value_span.start as usize) == Some(&b'"')
    }

    /// The source span of `range`, a byte range into the decoded [`Attribute::value`].
    ///
    /// Quoted values may contain escapes and line continuations, so decoded offsets are
    /// mapped back by re-scanning the literal; this runs only when reporting an error.
    pub fn value_subspan(&self, source: &str, range: std::ops::Range<usize>) -> Span {
        if !self.is_quoted(source) {
            return Span::new(
                self.value_span.start as usize + range.start,
                self.value_span.start as usize + range.end,
            );
        }
        let literal_start = self.value_span.start as usize + 1;
        let literal_end = (self.value_span.end as usize).saturating_sub(1);
        let Some(raw) = source.get(literal_start..literal_end) else {
            return self.value_span;
        };
        let map = |target: usize| -> usize {
            let mut decoded = 0;
            let mut bytes = raw.char_indices().peekable();
            while let Some((position, c)) = bytes.next() {
                let next = bytes.peek().map(|&(_, next)| next);
                if c == '\\' && matches!(next, Some('\n' | '\r')) {
                    // A line continuation decodes to nothing.
                    bytes.next();
                    if next == Some('\r') && bytes.peek().map(|&(_, after)| after) == Some('\n') {
                        bytes.next();
                    }
                    continue;
                }
                if decoded >= target {
                    return literal_start + position;
                }
                if c == '\\' && matches!(next, Some('"' | '\\' | 'n' | 't')) {
                    bytes.next();
                    decoded += 1;
                } else {
                    decoded += c.len_utf8();
                }
            }
            literal_end
        };
        let start = map(range.start);
        let end = map(range.end).max(start);
        Span::new(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sets_hold_every_key_the_parser_saw() {
        let source =
            "digraph { graph [goal=g] node [shape=box] a [fidelity=full] a -> b [weight=2] }";
        let (graph, _, keys) = parse_indexed(source).expect("parses");
        for key in ["goal", "shape", "fidelity", "weight"] {
            assert!(keys.contains(key), "{key}");
        }
        assert!(!keys.contains("thread_id"));
        assert!(keys.contains_any(&["thread_id", "weight"]));
        let of = KeySet::of(&graph);
        assert!(of.contains("fidelity") && of.contains("goal") && !of.contains("label"));
    }

    #[test]
    fn keys_share_one_allocation_however_they_alternate() {
        let source =
            "digraph { a [x=1, y=2, z=3] b [z=4, x=5] c [y=6, z=7, x=8, w=9] a -> b [x=0] }";
        let graph = parse(source).expect("parses");
        let mut seen: Vec<&Attribute> = Vec::new();
        for attribute in graph
            .nodes
            .iter()
            .flat_map(|node| node.attributes.iter())
            .chain(graph.edges.iter().flat_map(|edge| edge.attributes.iter()))
        {
            assert_eq!(&source[attribute.key_span.range()], &*attribute.key);
            assert_eq!(&source[attribute.value_span.range()], &*attribute.value);
            for earlier in &seen {
                assert_eq!(
                    Arc::ptr_eq(&earlier.key, &attribute.key),
                    earlier.key == attribute.key,
                    "{} / {}",
                    earlier.key,
                    attribute.key
                );
            }
            seen.push(attribute);
        }
        assert_eq!(seen.len(), 10);
        let c = &graph.nodes[2].attributes;
        let keys: Vec<&str> = c.iter().map(|attribute| &*attribute.key).collect();
        assert_eq!(keys, ["y", "z", "x", "w"]);
        assert_eq!(c.value("x"), Some("8"));
    }

    #[test]
    fn value_subspans_map_through_escapes() {
        let source = "digraph { a [s=\"x\\\"y\\\nzw\"] }";
        let graph = parse(source).expect("parses");
        let attribute = graph.nodes[0].attributes.get("s").expect("set");
        assert_eq!(&*attribute.value, "x\"yzw");
        let span = attribute.value_subspan(source, 3..4);
        assert_eq!(&source[span.range()], "z");
        let span = attribute.value_subspan(source, 1..2);
        assert_eq!(&source[span.range()], "\\\"");
    }
}
