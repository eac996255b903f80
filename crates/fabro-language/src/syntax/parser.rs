//! Recursive-descent parser for the DOT dialect of SPEC 2.3, building a [`SyntaxGraph`].
//!
//! Scoping of `node [...]` / `edge [...]` defaults, subgraph flattening and class
//! derivation (SPEC 2.5) happen here, while the scopes are still known.
//!
//! This module holds the file and statement structure (graph header, statements,
//! subgraphs and their scopes); `nodes` parses node statements and edge chains,
//! `attributes` attribute lists, values and the interning of keys.

mod attributes;
mod nodes;

use std::sync::Arc;

use self::attributes::quoted_key;
use super::cursor::{error, Cursor, Literal, Scan, SyntaxError};
use super::{Attributes, KeySet, SyntaxCluster, SyntaxGraph};
use crate::diagnostic::{Diagnostic, Rule};
use crate::id_hash::{IdHashMap, IdTable};
use crate::span::Span;

/// Largest accepted workflow file (SPEC 2.1).
pub const MAX_SOURCE_BYTES: usize = 10 * 1024 * 1024;

/// Deepest accepted subgraph nesting; deeper input is rejected rather than risking the
/// stack.
const MAX_NESTING: usize = 64;

/// Parses one workflow file. The first syntax error ends parsing and is returned as a
/// `parse_error` diagnostic (SPEC 3.1).
///
/// ```
/// let graph = fabro_language::syntax::parse("digraph { a -> b -> c [label=x] }").unwrap();
/// assert_eq!(graph.nodes.len(), 3);
/// assert_eq!(graph.edges.len(), 2);
/// assert_eq!(graph.edges[1].attributes.value("label"), Some("x"));
/// ```
pub fn parse(text: &str) -> Result<SyntaxGraph, Diagnostic> {
    parse_indexed(text).map(|(graph, _, _)| graph)
}

/// [`parse`], also returning the index of node ids by position in
/// [`SyntaxGraph::nodes`], which lowering hands on to the workflow.
pub(crate) fn parse_indexed(text: &str) -> Result<(SyntaxGraph, IdTable, KeySet), Diagnostic> {
    if text.len() > MAX_SOURCE_BYTES {
        return Err(Diagnostic::new(
            Rule::ParseError,
            format!(
                "workflow file is {} bytes; the limit is {MAX_SOURCE_BYTES} bytes (10 MB)",
                text.len()
            ),
        ));
    }
    let mut parser = Parser::new(text);
    parser.reserve();
    match parser.file() {
        Ok(()) => Ok(parser.finish()),
        Err(SyntaxError { message, span }) => {
            Err(Diagnostic::new(Rule::ParseError, message).at(span))
        }
    }
}

struct Scope {
    node_defaults: Attributes,
    edge_defaults: Attributes,
    label: Option<String>,
    /// Nodes declared or first created inside this subgraph (not tracked at the top).
    members: Vec<usize>,
    /// Position in [`SyntaxGraph::clusters`] when this subgraph is a cluster.
    cluster: Option<usize>,
}

/// A node mention; ids are always slices of the source (quoted ids must be identifiers,
/// so they contain no escapes).
struct Endpoint<'s> {
    id: &'s str,
    span: Span,
    quoted: bool,
}

struct Parser<'s> {
    text: &'s str,
    cursor: Cursor<'s>,
    graph: SyntaxGraph,
    /// Node ids by position, as slices of the source, for [`Parser::node_index`].
    ids: Vec<&'s str>,
    node_index: IdTable,
    /// Interned attribute keys: every `label` key shares one allocation. Beside each key,
    /// the value it was last assigned, shared when the next assignment repeats it (as
    /// defaults and repeated conditions do).
    keys: IdHashMap<&'s str, usize>,
    /// The interned keys, by the position `keys` maps to, each beside the value it was last
    /// assigned.
    interned: Vec<(Arc<str>, Arc<str>)>,
    /// The key text and position in `interned` of the last two keys looked up, most recent
    /// first: attribute blocks mostly repeat the keys of the blocks before them.
    recent_keys: [(&'s str, usize); 2],
    /// Reused buffer for the attribute block being parsed.
    block: Attributes,
    /// [`packed_id`] of every id in `ids`, for [`Parser::is_node_at`].
    packed: Vec<u64>,
    /// The positions of the last two nodes looked up, most recent first.
    recent: [usize; 2],
    /// Reused buffer of the current edge chain: (node index, span).
    chain: Vec<(usize, Span)>,
    /// Derived classes as (node index, depth of the contributing subgraph, class), in the
    /// order subgraphs close; only nodes inside labelled subgraphs have entries.
    derived: Vec<(usize, usize, String)>,
    scopes: Vec<Scope>,
}

impl<'s> Parser<'s> {
    fn new(text: &'s str) -> Parser<'s> {
        Parser {
            text,
            cursor: Cursor::new(text),
            graph: SyntaxGraph::default(),
            ids: Vec::new(),
            packed: Vec::new(),
            recent: [0; 2],
            node_index: IdTable::default(),
            keys: IdHashMap::default(),
            interned: Vec::new(),
            recent_keys: [("", usize::MAX); 2],
            block: Attributes::default(),
            chain: Vec::new(),
            derived: Vec::new(),
            scopes: vec![Scope {
                node_defaults: Attributes::default(),
                edge_defaults: Attributes::default(),
                label: None,
                members: Vec::new(),
                cluster: None,
            }],
        }
    }

    /// Reserves room for the nodes and edges the text can hold at most (one edge per
    /// `>`, roughly one node per line), so the large vectors are never copied while they
    /// grow; untouched reserved memory costs nothing.
    fn reserve(&mut self) {
        let (arrows, lines) = count_arrows_and_lines(self.text.as_bytes());
        self.graph.edges.reserve(arrows);
        self.graph.nodes.reserve(lines / 2 + 16);
        self.ids.reserve(lines / 2 + 16);
        self.packed.reserve(lines / 2 + 16);
        // Sized for a third of the lines (a node statement and two edges per node is
        // typical); a larger table would only touch more memory, and it still grows.
        self.node_index = IdTable::with_capacity(lines / 3 + 16);
    }

    fn finish(mut self) -> (SyntaxGraph, IdTable, KeySet) {
        // Stable: a node's classes from subgraphs of equal depth keep their order.
        self.derived.sort_by_key(|&(node, depth, _)| (node, depth));
        let derived = &mut self.graph.derived_classes;
        for (index, _, class) in self.derived {
            // This node's classes so far are the tail of the list.
            let start = derived.partition_point(|(node, _)| *node < index);
            if !derived[start..].iter().any(|(_, seen)| *seen == class) {
                derived.push((index, class));
            }
        }
        for cluster in &mut self.graph.clusters {
            cluster.members.sort_unstable();
            cluster.members.dedup();
        }
        let keys = KeySet::new(self.interned.into_iter().map(|(key, _)| key));
        (self.graph, self.node_index, keys)
    }

    fn file(&mut self) -> Scan<()> {
        self.cursor.skip_trivia()?;
        if self.cursor.at_end() {
            return error("empty workflow: expected 'digraph'", Span::new(0, 0));
        }
        self.graph_header()?;
        self.cursor.skip_trivia()?;
        if self.cursor.at_end() {
            return Ok(());
        }
        let span = self.cursor.here();
        match self.cursor.ident() {
            Some((word, span)) if is_graph_keyword(word) => {
                error("a workflow file must contain exactly one graph", span)
            }
            _ => error("unexpected text after the end of the graph", span),
        }
    }

    fn graph_header(&mut self) -> Scan<()> {
        let here = self.cursor.here();
        let Some((word, span)) = self.cursor.ident() else {
            return error("expected 'digraph'", here);
        };
        if word.eq_ignore_ascii_case("strict") {
            return error("strict graphs are not supported: remove 'strict'", span);
        }
        if word.eq_ignore_ascii_case("graph") {
            return error(
                "undirected graphs are not supported: a workflow is a 'digraph'",
                span,
            );
        }
        if !word.eq_ignore_ascii_case("digraph") {
            return error(format!("expected 'digraph', found '{word}'"), span);
        }
        self.cursor.skip_trivia()?;
        match self.cursor.peek() {
            Some(b'"') => {
                let literal = self.cursor.quoted()?;
                self.graph.id = Some(literal.value.into_owned());
            }
            Some(byte) if byte.is_ascii_alphabetic() || byte == b'_' => {
                if let Some((id, _)) = self.cursor.ident() {
                    self.graph.id = Some(id.to_owned());
                }
            }
            _ => {}
        }
        self.cursor.skip_trivia()?;
        let open = self.cursor.here();
        if !self.cursor.eat(b'{') {
            return error("expected '{' to open the graph body", open);
        }
        self.statements(open)
    }

    /// Parses statements up to and including the `}` that matches `open`.
    fn statements(&mut self, open: Span) -> Scan<()> {
        loop {
            self.cursor.skip_trivia()?;
            // The span of the character here is only needed for errors and subgraphs:
            // computed there, the cursor not having moved.
            match self.cursor.peek() {
                None => return error("missing '}' to close this block", open),
                Some(b'}') => {
                    self.cursor.bump();
                    return Ok(());
                }
                Some(b';') => self.cursor.bump(),
                Some(b'{') => {
                    let here = self.cursor.here();
                    self.cursor.bump();
                    self.subgraph(here, None)?;
                }
                Some(b'"') => {
                    let literal = self.cursor.quoted()?;
                    self.cursor.skip_trivia()?;
                    if self.cursor.peek() == Some(b'=') {
                        // A quoted key, as normalised output writes qualified keys.
                        self.cursor.bump();
                        let key_span = literal.span;
                        let key = quoted_key(self.text, &literal)?;
                        let value = self.value(key)?;
                        let attribute = self.attribute(key, key_span, value);
                        self.assign(attribute);
                        continue;
                    }
                    let endpoint = self.quoted_endpoint(literal)?;
                    self.node_or_edge(endpoint)?;
                }
                Some(b'<') => return error(html_message(), self.cursor.here()),
                Some(byte) if byte.is_ascii_alphabetic() || byte == b'_' => {
                    self.word_statement()?
                }
                Some(byte) if byte.is_ascii_digit() || byte == b'-' || byte == b'.' => {
                    let here = self.cursor.here();
                    if self.text[self.cursor.pos()..].starts_with("--") {
                        return error(
                            undirected_edge_message(),
                            Span::new(here.start as usize, here.start as usize + 2),
                        );
                    }
                    return error(
                        "node ids must start with a letter or '_'; quote other ids",
                        here,
                    );
                }
                Some(_) => {
                    let here = self.cursor.here();
                    return error(format!("unexpected '{}'", &self.text[here.range()]), here);
                }
            }
        }
    }

    fn word_statement(&mut self) -> Scan<()> {
        let Some((word, span)) = self.cursor.ident() else {
            return error("expected a statement", self.cursor.here());
        };
        // Keywords are case-insensitive; most statements start with a node id, which is
        // not one, so no lowercase copy is made.
        let keyword = KEYWORDS
            .iter()
            .copied()
            .find(|keyword| word.eq_ignore_ascii_case(keyword))
            .unwrap_or("");
        match keyword {
            "graph" | "node" | "edge" => {
                self.cursor.skip_trivia()?;
                if self.cursor.peek() != Some(b'[') {
                    return error(
                        format!("expected '[' after '{word}'; quote the id to use '{word}' as a node name"),
                        self.cursor.here(),
                    );
                }
                let mut attributes = Attributes::default();
                self.attribute_block_into(&mut attributes)?;
                let scope = self.scope_mut();
                match keyword {
                    "node" => attributes
                        .into_iter()
                        .for_each(|a| scope.node_defaults.set(a)),
                    "edge" => attributes
                        .into_iter()
                        .for_each(|a| scope.edge_defaults.set(a)),
                    _ => attributes.into_iter().for_each(|a| self.assign(a)),
                }
                Ok(())
            }
            "subgraph" => {
                self.cursor.skip_trivia()?;
                let name = match self.cursor.peek() {
                    Some(b'"') => Some(self.cursor.quoted()?.value.into_owned()),
                    Some(byte) if byte.is_ascii_alphabetic() || byte == b'_' => {
                        self.cursor.ident().map(|(name, _)| name.to_owned())
                    }
                    _ => None,
                };
                self.cursor.skip_trivia()?;
                let open = self.cursor.here();
                if !self.cursor.eat(b'{') {
                    return error("expected '{' to open the subgraph", open);
                }
                self.subgraph(open, name)
            }
            "digraph" => error("a workflow file must contain exactly one graph", span),
            "strict" => error("strict graphs are not supported: remove 'strict'", span),
            _ => {
                let key_end = self.qualified_tail()?;
                let key = &self.text[span.start as usize..key_end];
                let key_span = Span::new(span.start as usize, key_end);
                self.cursor.skip_trivia()?;
                if self.cursor.peek() == Some(b'=') {
                    self.cursor.bump();
                    let literal = self.value(key)?;
                    let attribute = self.attribute(key, key_span, literal);
                    self.assign(attribute);
                    return Ok(());
                }
                // The key is the word plus any `.name` continuations.
                if key_end != span.end as usize {
                    return error(format!("expected '=' after '{key}'"), self.cursor.here());
                }
                let endpoint = Endpoint {
                    id: word,
                    span,
                    quoted: false,
                };
                self.node_or_edge(endpoint)
            }
        }
    }

    fn subgraph(&mut self, open: Span, name: Option<String>) -> Scan<()> {
        if self.scopes.len() > MAX_NESTING {
            return error(
                format!("subgraphs are nested more than {MAX_NESTING} levels deep"),
                open,
            );
        }
        let cluster = name
            .filter(|name| name.starts_with("cluster"))
            .map(|name| self.open_cluster(name));
        let parent = self.scope_mut();
        let scope = Scope {
            node_defaults: parent.node_defaults.clone(),
            edge_defaults: parent.edge_defaults.clone(),
            label: None,
            members: Vec::new(),
            cluster,
        };
        self.scopes.push(scope);
        self.statements(open)?;
        let depth = self.scopes.len() - 1;
        let Some(scope) = self.scopes.pop() else {
            return Ok(());
        };
        if let Some(cluster) = scope.cluster.and_then(|at| self.graph.clusters.get_mut(at)) {
            if scope.label.is_some() {
                cluster.label.clone_from(&scope.label);
            }
            // Sorted and deduplicated in `finish`.
            cluster.members.extend_from_slice(&scope.members);
        }
        if let Some(class) = scope.label.as_deref().and_then(derive_class) {
            for &member in &scope.members {
                self.derived.push((member, depth, class.clone()));
            }
        }
        if self.scopes.len() > 1 {
            self.scope_mut().members.extend(scope.members);
        }
        self.cursor.skip_trivia()?;
        if self.text[self.cursor.pos()..].starts_with("->") {
            return error(
                "subgraphs cannot be edge endpoints: write one edge per node",
                self.cursor.here(),
            );
        }
        Ok(())
    }

    /// The position in [`SyntaxGraph::clusters`] of the cluster subgraph `name` inside the
    /// innermost enclosing cluster, added on its first opening (a name opened again
    /// adds to the same cluster, as in Graphviz).
    fn open_cluster(&mut self, name: String) -> usize {
        let parent = self.scopes.iter().rev().find_map(|scope| scope.cluster);
        let clusters = &mut self.graph.clusters;
        if let Some(at) = clusters
            .iter()
            .position(|cluster| cluster.name == name && cluster.parent == parent)
        {
            return at;
        }
        clusters.push(SyntaxCluster {
            name,
            label: None,
            members: Vec::new(),
            parent,
        });
        clusters.len() - 1
    }

    fn scope_mut(&mut self) -> &mut Scope {
        let last = self.scopes.len() - 1;
        &mut self.scopes[last]
    }
}

/// The class a subgraph label contributes (SPEC 2.5 rule 6): lowercase, spaces to `-`,
/// everything outside `[a-z0-9-]` removed.
pub(crate) fn derive_class(label: &str) -> Option<String> {
    let class: String = label
        .to_lowercase()
        .chars()
        .map(|c| if c == ' ' { '-' } else { c })
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
        .collect();
    (!class.is_empty()).then_some(class)
}

/// Whether `text` matches `Ident` of SPEC 2.3.
pub fn is_ident(text: &str) -> bool {
    let mut bytes = text.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// DOT keywords, matched case-insensitively.
pub fn is_keyword(word: &str) -> bool {
    // Every keyword is 4 to 8 bytes long.
    (4..=8).contains(&word.len())
        && KEYWORDS
            .iter()
            .any(|keyword| word.eq_ignore_ascii_case(keyword))
}

/// The DOT keywords in lowercase.
const KEYWORDS: [&str; 6] = ["digraph", "graph", "node", "edge", "subgraph", "strict"];

/// Counts `>` and newline bytes, in chunks that the compiler can vectorise.
fn count_arrows_and_lines(bytes: &[u8]) -> (usize, usize) {
    let (mut arrows, mut lines) = (0, 0);
    let mut chunks = bytes.chunks_exact(64);
    for chunk in &mut chunks {
        let (mut chunk_arrows, mut chunk_lines) = (0u8, 0u8);
        for &byte in chunk {
            chunk_arrows += u8::from(byte == b'>');
            chunk_lines += u8::from(byte == b'\n');
        }
        arrows += usize::from(chunk_arrows);
        lines += usize::from(chunk_lines);
    }
    for &byte in chunks.remainder() {
        arrows += usize::from(byte == b'>');
        lines += usize::from(byte == b'\n');
    }
    (arrows, lines)
}

fn is_graph_keyword(word: &str) -> bool {
    ["digraph", "graph", "strict"]
        .iter()
        .any(|keyword| word.eq_ignore_ascii_case(keyword))
}

fn html_message() -> &'static str {
    "HTML strings ('<...>') are not supported: use a quoted string"
}

fn undirected_edge_message() -> &'static str {
    "the undirected edge operator '--' is not supported: use '->'"
}

fn concatenation_message() -> &'static str {
    "string concatenation with '+' is not supported: write one quoted string"
}

#[cfg(test)]
mod tests;
