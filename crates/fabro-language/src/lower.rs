//! Lowering: converts the flattened syntax into the typed [`Workflow`] (SPEC 2.4–2.12).
//!
//! Every known attribute is converted once, here; a literal that does not fit its type
//! becomes an `attribute_type` error at the attribute's key, conditions that do not parse
//! become `condition_syntax` errors and a broken stylesheet a `stylesheet_syntax` error,
//! with spans inside the attribute value. Unknown enum spellings fall back to the default
//! silently: the `*_valid` lint rules report them.

mod node_key;

pub(crate) use node_key::NODE_KEYS;

use std::sync::Arc;
use std::time::Duration;

use crate::condition::Condition;
use crate::diagnostic::{Diagnostic, Rule};
use crate::id_hash::{IdHashMap, IdTable};
use crate::model::{
    Backend, Cluster, Edge, Fidelity, GraphSettings, HandlerKind, JoinPolicy, LlmSettings,
    ManagerAction, Node, NodeIndex, OutputSchema, RankDir, RareLlmSettings, RareNodeSettings,
    ReasoningEffort, RetryPolicy, ScriptLanguage, Selection, SubWorkflowSettings, ToolSet,
    Workflow,
};
use crate::span::Span;
use crate::stylesheet::Stylesheet;
use crate::syntax::{
    Attribute, Attributes, KeySet, SyntaxCluster, SyntaxEdge, SyntaxGraph, SyntaxNode,
};
use crate::value;
use node_key::{Key, Slots};

/// Lowers a parsed graph; returns the workflow and the conversion diagnostics.
#[cfg(test)]
pub(crate) fn lower(syntax: SyntaxGraph, source: &str) -> (Workflow, Vec<Diagnostic>) {
    let mut index = IdTable::default();
    for (position, node) in syntax.nodes.iter().enumerate() {
        let _ = index.find_or_insert(&node.id, position, |earlier| &syntax.nodes[earlier].id);
    }
    let keys = KeySet::of(&syntax);
    lower_indexed(syntax, index, keys, source)
}

/// Lowers a parsed graph whose node ids `index` maps to their positions.
pub(crate) fn lower_indexed(
    syntax: SyntaxGraph,
    index: IdTable,
    keys: KeySet,
    source: &str,
) -> (Workflow, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    let settings = {
        let mut reader = Reader {
            source,
            diagnostics: &mut diagnostics,
            node: None,
        };
        reader.graph_settings(&syntax.attributes)
    };
    let clusters = lower_clusters(syntax.clusters);
    let mut nodes = lower_nodes(
        syntax.nodes,
        syntax.derived_classes,
        &settings,
        source,
        &mut diagnostics,
    );
    apply_stylesheet(&settings.stylesheet, &mut nodes);
    let edges = lower_edges(syntax.edges, &nodes, source, &mut diagnostics);
    let mut workflow = Workflow::new(
        syntax.id,
        settings,
        syntax.attributes,
        nodes,
        edges,
        index,
        keys,
    );
    workflow.clusters = clusters;
    (workflow, diagnostics)
}

/// The cluster subgraphs, with member positions as [`NodeIndex`]es.
fn lower_clusters(clusters: Vec<SyntaxCluster>) -> Vec<Cluster> {
    clusters
        .into_iter()
        .map(|cluster| Cluster {
            name: cluster.name,
            label: cluster.label.unwrap_or_default(),
            nodes: cluster
                .members
                .into_iter()
                .filter_map(|member| u32::try_from(member).ok().map(NodeIndex))
                .collect(),
            parent: cluster.parent,
        })
        .collect()
}

/// The typed nodes, in syntax order, each with its own classes followed by those its
/// subgraphs derived (`derived` is ascending by node position).
fn lower_nodes(
    syntax_nodes: Vec<SyntaxNode>,
    derived: Vec<(usize, String)>,
    settings: &GraphSettings,
    source: &str,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<Node> {
    let mut nodes = Vec::with_capacity(syntax_nodes.len());
    // Ascending by node: each node's derived classes are the next run of entries.
    let mut derived = derived.into_iter().peekable();
    for (position, syntax_node) in syntax_nodes.into_iter().enumerate() {
        let mut reader = Reader {
            source,
            diagnostics,
            node: Some(&syntax_node.id),
        };
        let slots = Slots::new(&syntax_node.attributes);
        let mut classes = node_classes(slots.value(Key::Class));
        while let Some((_, class)) = derived.next_if(|(node, _)| *node == position) {
            if !classes.contains(&class) {
                classes.push(class);
            }
        }
        // The node is built once, then the id and attributes (borrowed while reading)
        // are moved into it in place: copying a whole `Node` again costs more than that.
        let place = Place {
            span: syntax_node.span,
            declared: syntax_node.declared,
            quoted: syntax_node.quoted,
        };
        nodes.push(reader.node(&slots, settings, classes.into_boxed_slice(), place));
        if let Some(pushed) = nodes.last_mut() {
            pushed.id = syntax_node.id;
            pushed.attributes = syntax_node.attributes;
        }
    }
    nodes
}

/// The typed edges and, beside them, each edge's `[from, to]` endpoint spans.
fn lower_edges(
    syntax_edges: Vec<SyntaxEdge>,
    nodes: &[Node],
    source: &str,
    diagnostics: &mut Vec<Diagnostic>,
) -> (Vec<Edge>, Vec<[Span; 2]>) {
    // Edges of one workflow repeat a few condition texts many times; a parsed condition
    // is shared, so each distinct text is parsed once.
    let mut conditions: IdHashMap<Arc<str>, Condition> = IdHashMap::default();
    let mut edge_spans = Vec::with_capacity(syntax_edges.len());
    // Collected rather than pushed: each edge is then written straight into the vector
    // instead of being built aside and copied in. An `Edge` is no larger than a
    // `SyntaxEdge` (the spans go to `edge_spans`), so the collection reuses the syntax
    // edges' buffer rather than allocating a second one.
    let edges: Vec<Edge> = syntax_edges
        .into_iter()
        .map(|syntax_edge| {
            edge_spans.push([syntax_edge.from_span, syntax_edge.to_span]);
            let mut reader = Reader {
                source,
                diagnostics: &mut *diagnostics,
                node: None,
            };
            let condition = reader.edge_condition(&syntax_edge, nodes, &mut conditions);
            let attributes = &syntax_edge.attributes;
            let weight = reader
                .parsed(attributes.get("weight"), "a number", value::parse_float)
                .unwrap_or(0.0);
            let loop_restart = reader.boolean(attributes.get("loop_restart"), false);
            let freeform = reader.boolean(attributes.get("freeform"), false);
            Edge {
                from: NodeIndex(syntax_edge.from as u32),
                to: NodeIndex(syntax_edge.to as u32),
                condition,
                weight,
                fidelity: attributes.value("fidelity").and_then(Fidelity::parse),
                loop_restart,
                freeform,
                attributes: syntax_edge.attributes,
            }
        })
        .collect();
    (edges, edge_spans)
}

fn node_classes(class: Option<&str>) -> Vec<String> {
    // Deduplicated in place, keeping first occurrences in order.
    let mut classes = value::parse_list(class.unwrap_or(""));
    let mut kept = 0;
    for position in 0..classes.len() {
        if !classes[..kept].contains(&classes[position]) {
            classes.swap(kept, position);
            kept += 1;
        }
    }
    classes.truncate(kept);
    classes
}

/// Fills model settings from the stylesheet where no explicit attribute set them
/// (SPEC 2.12: explicit attributes, node defaults included, beat the stylesheet).
fn apply_stylesheet(stylesheet: &Stylesheet, nodes: &mut [Node]) {
    if stylesheet.is_empty() {
        return;
    }
    for node in nodes {
        let styled = stylesheet.winners(&node.id, node.shape(), &node.classes);
        let attributes = &node.attributes;
        if attributes.get_any(&["model", "llm_model"]).is_none() {
            node.llm.stylesheet_model = styled.model().cloned();
        }
        if attributes.get_any(&["provider", "llm_provider"]).is_none() {
            node.llm.stylesheet_provider = styled.provider().cloned();
        }
        if attributes.get("reasoning_effort").is_none() {
            if let Some(effort) = styled.reasoning_effort().and_then(ReasoningEffort::parse) {
                node.llm.reasoning_effort = effort;
            }
        }
        if attributes.get("backend").is_none() {
            if let Some(backend) = styled.backend().and_then(Backend::parse) {
                node.llm.backend = backend;
            }
        }
    }
}

fn non_empty<T: for<'a> From<&'a str>>(text: Option<&str>) -> Option<T> {
    text.filter(|text| !text.is_empty()).map(T::from)
}

/// Where and how a node is mentioned first.
struct Place {
    span: Span,
    declared: bool,
    quoted: bool,
}

/// Converts attributes of one element, collecting diagnostics.
struct Reader<'a, 'd> {
    source: &'a str,
    diagnostics: &'d mut Vec<Diagnostic>,
    node: Option<&'a str>,
}

impl Reader<'_, '_> {
    fn graph_settings(&mut self, attributes: &Attributes) -> GraphSettings {
        let defaults = GraphSettings::default();
        let stylesheet = match attributes.get("model_stylesheet") {
            Some(attribute) => self.stylesheet(attribute),
            None => Stylesheet::default(),
        };
        GraphSettings {
            goal: attributes
                .value("goal")
                .map_or_else(String::new, str::to_owned),
            // An empty label allocates nothing and is not copied.
            label: attributes
                .value("label")
                .map_or_else(String::new, str::to_owned),
            stylesheet,
            default_max_retries: self
                .count(
                    attributes.get_any(&["default_max_retries", "default_max_retry"]),
                    0,
                )
                .unwrap_or(defaults.default_max_retries),
            retry_target: non_empty(attributes.value("retry_target")),
            fallback_retry_target: non_empty(attributes.value("fallback_retry_target")),
            default_fidelity: attributes
                .get_any(&["default_fidelity", "context_fidelity_default"])
                .and_then(|attribute| Fidelity::parse(&attribute.value)),
            default_thread: non_empty(
                attributes
                    .get_any(&["default_thread", "context_thread_default"])
                    .map(|attribute| attribute.value.as_ref()),
            ),
            default_model: non_empty(attributes.value("default_model")),
            default_provider: non_empty(attributes.value("default_provider")),
            max_node_visits: self
                .count(attributes.get("max_node_visits"), 0)
                .unwrap_or(defaults.max_node_visits),
            stall_timeout: self
                .duration(attributes.get("stall_timeout"))
                .unwrap_or(defaults.stall_timeout),
            loop_restart_signature_limit: self
                .count(attributes.get("loop_restart_signature_limit"), 1)
                .unwrap_or(defaults.loop_restart_signature_limit),
            max_restarts: self
                .count(attributes.get("max_restarts"), 1)
                .unwrap_or(defaults.max_restarts),
            rankdir: attributes
                .value("rankdir")
                .and_then(RankDir::parse)
                .unwrap_or(RankDir::TopToBottom),
            child_workflow: non_empty(
                attributes
                    .get_any(&["stack.child_workflow", "stack.child_dotfile"])
                    .map(|attribute| attribute.value.as_ref()),
            ),
        }
    }

    /// A node without id and attributes (moved in by the caller).
    fn node(
        &mut self,
        slots: &Slots<'_>,
        graph: &GraphSettings,
        classes: Box<[String]>,
        place: Place,
    ) -> Node {
        let shape = slots.value(Key::Shape).unwrap_or("box");
        let handler = slots
            .any(&[Key::Type, Key::NodeType, Key::CodergenMode])
            .and_then(|attribute| HandlerKind::parse(&attribute.value))
            .unwrap_or_else(|| HandlerKind::from_shape(shape));
        let rare = RareNodeSettings {
            max_retries: self.count(slots.get(Key::MaxRetries), 0),
            max_visits: self.count(slots.get(Key::MaxVisits), 1),
            timeout: self.duration(slots.get(Key::Timeout)),
            retry_target: non_empty(slots.value(Key::RetryTarget)),
            fallback_retry_target: non_empty(slots.value(Key::FallbackRetryTarget)),
            script: slots
                .any(&[Key::Script, Key::ToolCommand])
                .map_or_else(Box::default, |attribute| Box::from(&*attribute.value)),
            default_choice: non_empty(slots.value(Key::HumanDefaultChoice)),
            language: ScriptLanguage::parse(slots.value(Key::Language).unwrap_or("shell")),
            duration: None,
        };
        let sub_workflow = (handler == HandlerKind::SubWorkflow)
            .then(|| Box::new(self.sub_workflow(slots, graph)));
        Node {
            id: String::new(),
            handler,
            classes,
            retry_policy: slots.value(Key::RetryPolicy).and_then(RetryPolicy::parse),
            goal_gate: self.boolean(slots.get(Key::GoalGate), false),
            auto_status: self.boolean(slots.get(Key::AutoStatus), false),
            allow_partial: self.boolean(slots.get(Key::AllowPartial), false),
            selection: slots
                .value(Key::Selection)
                .and_then(Selection::parse)
                .unwrap_or(Selection::Deterministic),
            llm: self.llm_settings(slots),
            join_policy: slots
                .value(Key::JoinPolicy)
                .and_then(JoinPolicy::parse)
                .unwrap_or(JoinPolicy::WaitAll),
            max_parallel: self.count(slots.get(Key::MaxParallel), 1).unwrap_or(4),
            rare: RareNodeSettings {
                duration: self.duration(slots.get(Key::Duration)),
                ..rare
            }
            .boxed(),
            sub_workflow,
            attributes: Attributes::default(),
            span: place.span,
            declared: place.declared,
            quoted: place.quoted,
        }
    }

    fn llm_settings(&mut self, slots: &Slots<'_>) -> LlmSettings {
        let output_schema = slots
            .get(Key::OutputSchema)
            .and_then(|attribute| self.inline_output_schema(attribute));
        let output_retries = match slots.get(Key::OutputRetries) {
            Some(attribute) => match value::parse_integer(&attribute.value) {
                Some(retries) => u32::try_from(retries.max(0)).unwrap_or(u32::MAX),
                None => {
                    self.type_error(attribute, "an integer");
                    LlmSettings::DEFAULT_OUTPUT_RETRIES
                }
            },
            None => LlmSettings::DEFAULT_OUTPUT_RETRIES,
        };
        let acp_command =
            slots
                .get(Key::AcpCommand)
                .and_then(|attribute| match split_words(&attribute.value) {
                    Some(words) => Some(words.into_boxed_slice()),
                    None => {
                        self.type_error(attribute, "a command line with balanced quotes");
                        None
                    }
                });
        let rare = RareLlmSettings {
            model: non_empty(
                slots
                    .any(&[Key::Model, Key::LlmModel])
                    .map(|attribute| attribute.value.as_ref()),
            ),
            provider: non_empty(
                slots
                    .any(&[Key::Provider, Key::LlmProvider])
                    .map(|attribute| attribute.value.as_ref()),
            ),
            max_tokens: self.count(slots.get(Key::MaxTokens), 1),
            thread_id: non_empty(slots.value(Key::ThreadId)),
            output_schema,
            write_scope: value::parse_list(slots.value(Key::WriteScope).unwrap_or(""))
                .into_boxed_slice(),
            acp_command,
            mcp_servers: slots
                .value(Key::McpServers)
                .map(|text| value::parse_list(text).into_boxed_slice()),
            skills: slots
                .value(Key::Skills)
                .map(|text| value::parse_list(text).into_boxed_slice()),
            tools: self.parsed(
                slots.get(Key::Tools),
                "read-only, read-write or full",
                ToolSet::parse,
            ),
            web: self.parsed(slots.get(Key::Web), "true or false", value::parse_bool),
        }
        .boxed();
        LlmSettings {
            prompt: slots
                .any(&[Key::Prompt, Key::LlmPrompt])
                .map_or_else(Box::default, |attribute| Box::from(&*attribute.value)),
            stylesheet_model: None,
            stylesheet_provider: None,
            reasoning_effort: slots
                .value(Key::ReasoningEffort)
                .and_then(ReasoningEffort::parse)
                .unwrap_or(LlmSettings::DEFAULT_REASONING_EFFORT),
            backend: slots
                .value(Key::Backend)
                .and_then(Backend::parse)
                .unwrap_or(LlmSettings::DEFAULT_BACKEND),
            fidelity: slots.value(Key::Fidelity).and_then(Fidelity::parse),
            project_memory: self.boolean(slots.get(Key::ProjectMemory), true),
            max_turns: self
                .count(slots.any(&[Key::MaxTurns, Key::MaxAgentTurns]), 0)
                .unwrap_or(0),
            output_retries,
            rare,
        }
    }

    /// `routing` and inline schemas; `@path` references are resolved later
    /// ([`crate::transform`]) because they need file access.
    fn inline_output_schema(&mut self, attribute: &Attribute) -> Option<OutputSchema> {
        let text = attribute.value.trim();
        if text == "routing" {
            return Some(OutputSchema::Routing);
        }
        if !text.starts_with('{') {
            return None;
        }
        match crate::schema::parse_schema(text) {
            Ok(schema) => Some(OutputSchema::Json(schema)),
            Err(message) => {
                self.push(
                    Diagnostic::new(
                        Rule::OutputSchemaInvalid,
                        format!("output_schema is not a valid JSON Schema: {message}"),
                    )
                    .at(attribute.key_span),
                );
                None
            }
        }
    }

    fn sub_workflow(&mut self, slots: &Slots<'_>, graph: &GraphSettings) -> SubWorkflowSettings {
        let defaults = SubWorkflowSettings::default();
        let node = self.node;
        SubWorkflowSettings {
            child_workflow: non_empty(
                slots
                    .any(&[Key::StackChildWorkflow, Key::StackChildDotfile])
                    .map(|attribute| attribute.value.as_ref()),
            )
            .or_else(|| graph.child_workflow.clone()),
            child_workdir: non_empty(slots.value(Key::StackChildWorkdir)),
            autostart: self.boolean(slots.get(Key::StackChildAutostart), true),
            poll_interval: self
                .duration(slots.get(Key::ManagerPollInterval))
                .unwrap_or(defaults.poll_interval),
            max_cycles: self
                .count(slots.get(Key::ManagerMaxCycles), 1)
                .unwrap_or(defaults.max_cycles),
            stop_condition: self.condition(slots.get(Key::ManagerStopCondition), |diagnostic| {
                match node {
                    Some(node) => diagnostic.node(node),
                    None => diagnostic,
                }
            }),
            actions: match slots.value(Key::ManagerActions) {
                Some(text) => value::parse_list(text)
                    .iter()
                    .filter_map(|action| ManagerAction::parse(action))
                    .collect(),
                None => defaults.actions,
            },
        }
    }

    fn stylesheet(&mut self, attribute: &Attribute) -> Stylesheet {
        match Stylesheet::parse(&attribute.value) {
            Ok(stylesheet) => stylesheet,
            Err(errors) => {
                for error in errors {
                    let span = attribute.value_subspan(self.source, error.range.clone());
                    self.push(
                        Diagnostic::new(
                            Rule::StylesheetSyntax,
                            format!("model_stylesheet: {}", error.message),
                        )
                        .at(span),
                    );
                }
                Stylesheet::default()
            }
        }
    }

    /// The edge's parsed `condition`, shared through `conditions` with earlier edges of the
    /// same text; a condition that does not parse is reported at this edge each time.
    fn edge_condition(
        &mut self,
        edge: &SyntaxEdge,
        nodes: &[Node],
        conditions: &mut IdHashMap<Arc<str>, Condition>,
    ) -> Option<Condition> {
        let attribute = edge.attributes.get("condition")?;
        if let Some(parsed) = conditions.get(&attribute.value) {
            return Some(parsed.clone());
        }
        let (from_id, to_id) = (&nodes[edge.from].id, &nodes[edge.to].id);
        let parsed = self.condition(Some(attribute), |diagnostic| {
            diagnostic.edge(from_id, to_id)
        });
        // Only parsed conditions are shared: each failing edge reports its own error.
        if let Some(condition) = &parsed {
            conditions.insert(attribute.value.clone(), condition.clone());
        }
        parsed
    }

    fn condition(
        &mut self,
        attribute: Option<&Attribute>,
        locate: impl FnOnce(Diagnostic) -> Diagnostic,
    ) -> Option<Condition> {
        let attribute = attribute?;
        match Condition::parse(&attribute.value) {
            Ok(condition) if condition.is_empty() => None,
            Ok(condition) => Some(condition),
            Err(error) => {
                let span = attribute.value_subspan(self.source, error.range.clone());
                let diagnostic = Diagnostic::new(
                    Rule::ConditionSyntax,
                    format!(
                        "invalid {} \"{}\": {}",
                        attribute.key,
                        attribute.value.escape_debug(),
                        error.message
                    ),
                )
                .at(span);
                self.diagnostics.push(locate(diagnostic));
                None
            }
        }
    }

    // The helpers below are inlined so that an absent attribute, the common case, costs
    // one test; parsing a present one stays out of line.
    #[inline]
    fn boolean(&mut self, attribute: Option<&Attribute>, default: bool) -> bool {
        self.parsed(attribute, "true or false", value::parse_bool)
            .unwrap_or(default)
    }

    #[inline]
    fn duration(&mut self, attribute: Option<&Attribute>) -> Option<Duration> {
        self.parsed(
            attribute,
            "a duration such as 250ms, 90s, 10m, 2h or 1d (or whole seconds)",
            value::parse_duration,
        )
    }

    /// A non-negative integer of at least `minimum` that fits in `u32`.
    #[inline]
    fn count(&mut self, attribute: Option<&Attribute>, minimum: u32) -> Option<u32> {
        self.count_of(attribute?, minimum)
    }

    #[inline(never)]
    fn count_of(&mut self, attribute: &Attribute, minimum: u32) -> Option<u32> {
        let parsed = value::parse_integer(attribute.value.trim())
            .and_then(|number| u32::try_from(number).ok())
            .filter(|&number| number >= minimum);
        if parsed.is_none() {
            self.type_error(attribute, &format!("an integer ≥ {minimum}"));
        }
        parsed
    }

    #[inline]
    fn parsed<T>(
        &mut self,
        attribute: Option<&Attribute>,
        expected: &str,
        parse: fn(&str) -> Option<T>,
    ) -> Option<T> {
        self.parsed_of(attribute?, expected, parse)
    }

    #[inline(never)]
    fn parsed_of<T>(
        &mut self,
        attribute: &Attribute,
        expected: &str,
        parse: fn(&str) -> Option<T>,
    ) -> Option<T> {
        let parsed = parse(attribute.value.trim());
        if parsed.is_none() {
            self.type_error(attribute, expected);
        }
        parsed
    }

    #[cold]
    #[inline(never)]
    fn type_error(&mut self, attribute: &Attribute, expected: &str) {
        let message = format!(
            "attribute '{}' expects {expected}, found \"{}\"",
            attribute.key,
            attribute.value.escape_debug()
        );
        self.push(Diagnostic::new(Rule::AttributeType, message).at(attribute.key_span));
    }

    fn push(&mut self, diagnostic: Diagnostic) {
        let diagnostic = match self.node {
            Some(node) => diagnostic.node(node),
            None => diagnostic,
        };
        self.diagnostics.push(diagnostic);
    }
}

/// Splits a command line into words by POSIX shell rules without expansion (SPEC 2.10
/// `acp_command`): single quotes, double quotes with `\"`, `\\`, `\$` and `` \` ``
/// escapes, and backslash escapes outside quotes. `None` for unbalanced quotes.
pub(crate) fn split_words(text: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        other => word.push(other),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            escaped @ ('"' | '\\' | '$' | '`') => word.push(escaped),
                            '\n' => {}
                            other => {
                                word.push('\\');
                                word.push(other);
                            }
                        },
                        other => word.push(other),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(other) => word.push(other),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

#[cfg(test)]
mod tests;
