//! Node statements and edge chains: the endpoints an edge names, and the lookup or
//! creation of the node each mention stands for.
//!
//! A node is created at its first mention with the node defaults of the scope it is
//! mentioned in; edges get the edge defaults of theirs (SPEC 2.5).

use super::{
    concatenation_message, error, html_message, is_ident, is_keyword, undirected_edge_message,
    Endpoint, Literal, Parser, Scan,
};
use crate::id_hash::packed_id;
use crate::span::Span;
use crate::syntax::{Attributes, SyntaxEdge, SyntaxNode};

impl<'s> Parser<'s> {
    pub(super) fn node_or_edge(&mut self, first: Endpoint<'s>) -> Scan<()> {
        self.reject_port()?;
        self.cursor.skip_trivia()?;
        if !self.at_arrow()? {
            // The block is read before the node is created (it cannot change the
            // defaults), so that a new node's attributes are allocated once.
            let mut block = std::mem::take(&mut self.block);
            if self.cursor.peek() == Some(b'[') {
                if let Err(error) = self.attribute_block_into(&mut block) {
                    self.block = block;
                    return Err(error);
                }
            }
            let index = self.ensure_node_with_room(&first, block.len());
            self.graph.nodes[index]
                .attributes
                .merge_interned(&mut block);
            self.block = block;
            let in_subgraph = self.scopes.len() > 1;
            self.graph.nodes[index].declared = true;
            if in_subgraph && !self.scope_mut().members.contains(&index) {
                self.scope_mut().members.push(index);
            }
            return Ok(());
        }
        // Nodes are created as their mentions are read: the attribute block that may
        // follow does not change node defaults, so this equals creating them afterwards.
        let mut chain = std::mem::take(&mut self.chain);
        chain.clear();
        chain.push((self.ensure_node(&first), first.span));
        while self.at_arrow()? {
            self.cursor.bump();
            self.cursor.bump();
            self.cursor.skip_trivia()?;
            let endpoint = self.endpoint()?;
            chain.push((self.ensure_node(&endpoint), endpoint.span));
            self.reject_port()?;
            self.cursor.skip_trivia()?;
        }
        let mut edge_attributes = if self.cursor.peek() == Some(b'[') {
            let mut block = std::mem::take(&mut self.block);
            let parsed = self.attribute_block_into(&mut block);
            let defaults = &self.scope_mut().edge_defaults;
            let mut attributes = Attributes::with_capacity(defaults.len() + block.len());
            attributes.extend_cloned(defaults);
            attributes.merge_interned(&mut block);
            self.block = block;
            parsed?;
            attributes
        } else {
            self.scope_mut().edge_defaults.clone()
        };
        let last = chain.len() - 1;
        for (position, pair) in chain.windows(2).enumerate() {
            // Every edge of the chain carries the block; the last one takes it by move.
            let attributes = if position + 1 == last {
                std::mem::take(&mut edge_attributes)
            } else {
                edge_attributes.clone()
            };
            self.graph.edges.push(SyntaxEdge {
                from: pair[0].0,
                to: pair[1].0,
                from_span: pair[0].1,
                to_span: pair[1].1,
                attributes,
            });
        }
        self.chain = chain;
        Ok(())
    }

    /// True at `->`; an error at `--`.
    #[inline(always)]
    fn at_arrow(&self) -> Scan<bool> {
        if self.cursor.peek() != Some(b'-') {
            return Ok(false);
        }
        self.at_dash()
    }

    /// [`Parser::at_arrow`] at a `-`.
    #[inline]
    fn at_dash(&self) -> Scan<bool> {
        match self.cursor.peek_at(1) {
            Some(b'>') => Ok(true),
            Some(b'-') => {
                let start = self.cursor.pos();
                error(undirected_edge_message(), Span::new(start, start + 2))
            }
            _ => Ok(false),
        }
    }

    fn endpoint(&mut self) -> Scan<Endpoint<'s>> {
        match self.cursor.peek() {
            Some(b'"') => {
                let literal = self.cursor.quoted()?;
                self.quoted_endpoint(literal)
            }
            Some(b'{') => error(
                "subgraphs cannot be edge endpoints: write one edge per node",
                self.cursor.here(),
            ),
            Some(b'<') => error(html_message(), self.cursor.here()),
            Some(byte) if byte.is_ascii_alphabetic() || byte == b'_' => {
                let Some((word, span)) = self.cursor.ident() else {
                    return error("expected a node id after '->'", self.cursor.here());
                };
                if word.eq_ignore_ascii_case("subgraph") {
                    return error(
                        "subgraphs cannot be edge endpoints: write one edge per node",
                        span,
                    );
                }
                if is_keyword(word) {
                    return error(
                        format!("'{word}' is a keyword; quote it to use it as a node id"),
                        span,
                    );
                }
                Ok(Endpoint {
                    id: word,
                    span,
                    quoted: false,
                })
            }
            None | Some(_) => error("expected a node id after '->'", self.cursor.here()),
        }
    }

    pub(super) fn quoted_endpoint(&mut self, literal: Literal<'s>) -> Scan<Endpoint<'s>> {
        if !is_ident(&literal.value) {
            return error(
                format!(
                    "node id \"{}\" must be an identifier: letters, digits and '_', not starting with a digit",
                    literal.value.escape_debug()
                ),
                literal.span,
            );
        }
        self.cursor.skip_trivia()?;
        if self.cursor.peek() == Some(b'+') {
            return error(concatenation_message(), self.cursor.here());
        }
        // An identifier has no escapes, so the id is the source between the quotes.
        let id = &self.text[literal.span.start as usize + 1..literal.span.end as usize - 1];
        if id != literal.value {
            return error("a quoted node id must not contain escapes", literal.span);
        }
        Ok(Endpoint {
            id,
            span: literal.span,
            quoted: true,
        })
    }

    fn reject_port(&mut self) -> Scan<()> {
        if self.cursor.peek() == Some(b':') {
            return error(
                "node ports ('node:port') are not supported",
                self.cursor.here(),
            );
        }
        Ok(())
    }

    fn ensure_node(&mut self, endpoint: &Endpoint<'s>) -> usize {
        self.ensure_node_with_room(endpoint, 0)
    }

    /// The node's index, creating it with room for `room` more attributes than the
    /// defaults.
    fn ensure_node_with_room(&mut self, endpoint: &Endpoint<'s>, room: usize) -> usize {
        let packed = packed_id(endpoint.id);
        // Edges mostly name the node just looked up, the one after it, or the ones the
        // statement before named: try those in the small, sequential `packed` list before
        // the hash table, whose slots are scattered over memory in a large workflow.
        for &recent in &self.recent {
            for candidate in [recent, recent + 1] {
                if self.is_node_at(candidate, endpoint.id, packed) {
                    self.recent = [candidate, self.recent[0]];
                    return candidate;
                }
            }
        }
        let ids = &self.ids;
        let index = match self
            .node_index
            .find_or_insert(endpoint.id, ids.len(), |position| ids[position])
        {
            Ok(index) => index,
            Err(index) => {
                self.push_node(endpoint, room, packed);
                index
            }
        };
        self.recent = [index, self.recent[0]];
        index
    }

    /// Whether the node at `position` has `id` (whose [`packed_id`] is `packed`).
    fn is_node_at(&self, position: usize, id: &str, packed: u64) -> bool {
        match self.packed.get(position) {
            Some(&stored) if packed != 0 => stored == packed,
            Some(_) => self.ids[position] == id,
            None => false,
        }
    }

    /// Creates a node at the end of the list, with room for `room` more attributes than
    /// the defaults.
    fn push_node(&mut self, endpoint: &Endpoint<'s>, room: usize, packed: u64) {
        let index = self.ids.len();
        self.ids.push(endpoint.id);
        self.packed.push(packed);
        let defaults = &self.scope_mut().node_defaults;
        let mut attributes = Attributes::with_capacity(defaults.len() + room);
        attributes.extend_cloned(defaults);
        self.graph.nodes.push(SyntaxNode {
            id: endpoint.id.to_owned(),
            span: endpoint.span,
            declared: false,
            quoted: endpoint.quoted,
            attributes,
        });
        if self.scopes.len() > 1 {
            self.scope_mut().members.push(index);
        }
    }
}
