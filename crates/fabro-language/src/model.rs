//! The typed workflow model: what the engine executes, produced once by lowering.
//!
//! Every attribute the engine reads has a typed field here (SPEC 2.9–2.11), so nothing
//! downstream parses attribute strings. The raw [`Attributes`] stay on each element for
//! rendering (`fabro graph --format dot` reproduces unknown attributes, SPEC 2.5).

mod extension;
mod setting;

pub use setting::{
    Backend, Fidelity, HandlerKind, JoinPolicy, ManagerAction, RankDir, ReasoningEffort,
    RetryPolicy, ScriptLanguage, Selection, ToolSet,
};

use std::sync::Arc;
use std::time::Duration;

use crate::condition::Condition;
use crate::id_hash::IdTable;
use crate::span::Span;
use crate::stylesheet::Stylesheet;
use crate::syntax::Attributes;
use crate::syntax::KeySet;

/// Index of a node in [`Workflow::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeIndex(pub u32);

/// Index of an edge in [`Workflow::edges`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EdgeIndex(pub u32);

impl NodeIndex {
    /// As a `usize` for indexing.
    pub fn get(self) -> usize {
        self.0 as usize
    }
}

impl EdgeIndex {
    /// As a `usize` for indexing.
    pub fn get(self) -> usize {
        self.0 as usize
    }
}

/// Graph-level settings (SPEC 2.9).
#[derive(Debug, Clone)]
pub struct GraphSettings {
    /// The `goal` attribute as written (variables not yet expanded).
    pub goal: String,
    /// Display name.
    pub label: String,
    /// The parsed `model_stylesheet` (empty when absent or invalid).
    pub stylesheet: Stylesheet,
    /// Retries for nodes without their own retry settings.
    pub default_max_retries: u32,
    /// Graph-level retry target.
    pub retry_target: Option<String>,
    /// Graph-level fallback retry target.
    pub fallback_retry_target: Option<String>,
    /// Run-wide fidelity default; `None` means `compact`.
    pub default_fidelity: Option<Fidelity>,
    /// Thread key for full-fidelity nodes without one.
    pub default_thread: Option<String>,
    /// Model default below config and CLI.
    pub default_model: Option<String>,
    /// Provider default below config and CLI.
    pub default_provider: Option<String>,
    /// Visit cap per node; 0 is off.
    pub max_node_visits: u32,
    /// Stall watchdog limit; zero disables it.
    pub stall_timeout: Duration,
    /// Circuit-breaker threshold.
    pub loop_restart_signature_limit: u32,
    /// Cap on loop restarts per run.
    pub max_restarts: u32,
    /// Layout direction for rendering.
    pub rankdir: RankDir,
    /// Graph default for `stack.child_workflow`.
    pub child_workflow: Option<String>,
}

impl Default for GraphSettings {
    fn default() -> GraphSettings {
        GraphSettings {
            goal: String::new(),
            label: String::new(),
            stylesheet: Stylesheet::default(),
            default_max_retries: 3,
            retry_target: None,
            fallback_retry_target: None,
            default_fidelity: None,
            default_thread: None,
            default_model: None,
            default_provider: None,
            max_node_visits: 0,
            stall_timeout: Duration::from_secs(1800),
            loop_restart_signature_limit: 3,
            max_restarts: 100,
            rankdir: RankDir::TopToBottom,
            child_workflow: None,
        }
    }
}

/// Structured-output requirement of an LLM node (SPEC 7.3, 7.4).
#[derive(Debug, Clone, PartialEq)]
pub enum OutputSchema {
    /// `output_schema="routing"`: validated routing directives.
    Routing,
    /// A JSON Schema, given inline or read from an `@path` file.
    Json(serde_json::Value),
}

/// Settings of agent, prompt and prompted fan-in nodes (SPEC 2.10, LLM table).
#[derive(Debug, Clone)]
pub struct LlmSettings {
    /// Task text after `@path` inlining, before variable expansion; empty when unset.
    pub prompt: Box<str>,
    /// Model from the stylesheet, when no explicit one is set; shared by every node the same rule styles.
    pub stylesheet_model: Option<Arc<str>>,
    /// Provider from the stylesheet, when no explicit one is set; shared like `stylesheet_model`.
    pub stylesheet_provider: Option<Arc<str>>,
    /// Reasoning effort (explicit, else stylesheet, else high).
    pub reasoning_effort: ReasoningEffort,
    /// Agent backend (explicit, else stylesheet, else api).
    pub backend: Backend,
    /// Node fidelity.
    pub fidelity: Option<Fidelity>,
    /// Load project instruction files.
    pub project_memory: bool,
    /// Agent turn cap; 0 is unlimited.
    pub max_turns: u32,
    /// Repair turns for `output_schema`.
    pub output_retries: u32,
    /// Settings most nodes leave unset; `None` when all are (see the accessors).
    pub(crate) rare: Option<Box<RareLlmSettings>>,
}

/// The [`LlmSettings`] most nodes leave unset, boxed so that a typical node does not
/// carry room for them (a large workflow holds one `LlmSettings` per node).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RareLlmSettings {
    /// Explicit model (node attribute or node defaults).
    pub(crate) model: Option<Box<str>>,
    /// Explicit provider.
    pub(crate) provider: Option<Box<str>>,
    /// Output cap per call; `None` means the catalog's maximum.
    pub(crate) max_tokens: Option<u32>,
    /// Conversation sharing key.
    pub(crate) thread_id: Option<Box<str>>,
    /// Structured output requirement.
    pub(crate) output_schema: Option<OutputSchema>,
    /// Globs the agent may modify; empty means the whole working directory.
    pub(crate) write_scope: Box<[String]>,
    /// Command line for the acp backend, split into words.
    pub(crate) acp_command: Option<Box<[String]>>,
    /// `mcp_servers`: the MCP servers the agent sees; `None` means all configured.
    pub(crate) mcp_servers: Option<Box<[String]>>,
    /// `skills`: the skills listed; `None` means all found, empty disables them.
    pub(crate) skills: Option<Box<[String]>>,
    /// `tools`: the tool set; `None` means `full`.
    pub(crate) tools: Option<ToolSet>,
    /// `web`: offer the web tools; `None` leaves it to `[agent] web`.
    pub(crate) web: Option<bool>,
}

impl RareLlmSettings {
    /// Boxed, or `None` when every setting is unset (the accessors read the same then).
    pub(crate) fn boxed(self) -> Option<Box<RareLlmSettings>> {
        (self != RareLlmSettings::default()).then(|| Box::new(self))
    }
}

impl LlmSettings {
    /// [`LlmSettings::reasoning_effort`] when neither an attribute nor the stylesheet
    /// sets it.
    pub(crate) const DEFAULT_REASONING_EFFORT: ReasoningEffort = ReasoningEffort::High;
    /// [`LlmSettings::backend`] when neither an attribute nor the stylesheet sets it.
    pub(crate) const DEFAULT_BACKEND: Backend = Backend::Api;
    /// [`LlmSettings::output_retries`] when unset.
    pub(crate) const DEFAULT_OUTPUT_RETRIES: u32 = 2;
}

impl Default for LlmSettings {
    fn default() -> LlmSettings {
        LlmSettings {
            prompt: Box::default(),
            stylesheet_model: None,
            stylesheet_provider: None,
            reasoning_effort: LlmSettings::DEFAULT_REASONING_EFFORT,
            backend: LlmSettings::DEFAULT_BACKEND,
            fidelity: None,
            project_memory: true,
            max_turns: 0,
            output_retries: LlmSettings::DEFAULT_OUTPUT_RETRIES,
            rare: None,
        }
    }
}

impl LlmSettings {
    /// Explicit model (node attribute or node defaults).
    pub fn model(&self) -> Option<&str> {
        self.rare.as_ref().and_then(|rare| rare.model.as_deref())
    }

    /// Explicit provider.
    pub fn provider(&self) -> Option<&str> {
        self.rare.as_ref().and_then(|rare| rare.provider.as_deref())
    }

    /// Output cap per call; `None` means the catalog's maximum.
    pub fn max_tokens(&self) -> Option<u32> {
        self.rare.as_ref().and_then(|rare| rare.max_tokens)
    }

    /// Conversation sharing key.
    pub fn thread_id(&self) -> Option<&str> {
        self.rare
            .as_ref()
            .and_then(|rare| rare.thread_id.as_deref())
    }

    /// Structured output requirement.
    pub fn output_schema(&self) -> Option<&OutputSchema> {
        self.rare
            .as_ref()
            .and_then(|rare| rare.output_schema.as_ref())
    }

    /// Globs the agent may modify; empty means the whole working directory.
    pub fn write_scope(&self) -> &[String] {
        self.rare.as_ref().map_or(&[], |rare| &rare.write_scope)
    }

    /// Command line for the acp backend, split into words.
    pub fn acp_command(&self) -> Option<&[String]> {
        self.rare
            .as_ref()
            .and_then(|rare| rare.acp_command.as_deref())
    }

    /// Replaces the structured output requirement.
    pub(crate) fn set_output_schema(&mut self, schema: Option<OutputSchema>) {
        let mut rare = self
            .rare
            .take()
            .map_or_else(RareLlmSettings::default, |rare| *rare);
        rare.output_schema = schema;
        self.rare = rare.boxed();
    }
}

/// Settings of sub_workflow (manager loop) nodes (SPEC 5.10).
#[derive(Debug, Clone)]
pub struct SubWorkflowSettings {
    /// Child workflow path as written (node, else graph `stack.child_dotfile`).
    pub child_workflow: Option<String>,
    /// Working directory of the child; `None` means the parent's.
    pub child_workdir: Option<String>,
    /// Whether the manager starts the child.
    pub autostart: bool,
    /// Time between manager cycles.
    pub poll_interval: Duration,
    /// Cycle cap.
    pub max_cycles: u32,
    /// Stops the child when true at a cycle.
    pub stop_condition: Option<Condition>,
    /// Actions run every cycle.
    pub actions: Vec<ManagerAction>,
}

impl Default for SubWorkflowSettings {
    fn default() -> SubWorkflowSettings {
        SubWorkflowSettings {
            child_workflow: None,
            child_workdir: None,
            autostart: true,
            poll_interval: Duration::from_secs(45),
            max_cycles: 1000,
            stop_condition: None,
            actions: vec![ManagerAction::Observe, ManagerAction::Wait],
        }
    }
}

/// The [`Node`] settings most nodes leave unset, boxed so that a typical node does not
/// carry room for them (a large workflow holds one `Node` per stage).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RareNodeSettings {
    /// Node retry count.
    pub(crate) max_retries: Option<u32>,
    /// Per-node visit cap.
    pub(crate) max_visits: Option<u32>,
    /// Limit for one attempt.
    pub(crate) timeout: Option<Duration>,
    /// Failure and goal-gate jump target.
    pub(crate) retry_target: Option<Box<str>>,
    /// Second jump target.
    pub(crate) fallback_retry_target: Option<Box<str>>,
    /// Command script (`script`, alias `tool_command`), before variable expansion.
    pub(crate) script: Box<str>,
    /// Command language.
    pub(crate) language: ScriptLanguage,
    /// Human gate default (`human.default_choice`).
    pub(crate) default_choice: Option<Box<str>>,
    /// Wait duration.
    pub(crate) duration: Option<Duration>,
}

impl RareNodeSettings {
    /// Boxed, or `None` when every setting is unset (the accessors read the same then).
    pub(crate) fn boxed(self) -> Option<Box<RareNodeSettings>> {
        (self != RareNodeSettings::default()).then(|| Box::new(self))
    }
}

/// A stage of the workflow (SPEC 2.10).
#[derive(Debug, Clone)]
pub struct Node {
    /// The node id.
    pub id: String,
    /// Resolved handler (SPEC 2.8).
    pub handler: HandlerKind,
    /// `class` list plus derived classes, deduplicated.
    pub classes: Box<[String]>,
    /// Named retry preset.
    pub retry_policy: Option<RetryPolicy>,
    /// Must have succeeded when the run reaches exit.
    pub goal_gate: bool,
    /// Convert non-success outcomes to success after retries.
    pub auto_status: bool,
    /// Exhausted retries yield partial success.
    pub allow_partial: bool,
    /// Tie-break mode for outgoing edges.
    pub selection: Selection,
    /// LLM settings (meaningful for agent, prompt and fan_in nodes).
    pub llm: LlmSettings,
    /// Parallel join policy.
    pub join_policy: JoinPolicy,
    /// Parallel concurrency cap.
    pub max_parallel: u32,
    /// Sub-workflow settings; present exactly for sub_workflow nodes.
    pub sub_workflow: Option<Box<SubWorkflowSettings>>,
    /// Settings most nodes leave unset; `None` when all are (see the accessors).
    pub(crate) rare: Option<Box<RareNodeSettings>>,
    /// Every attribute as written, defaults included.
    pub attributes: Attributes,
    /// Span of the first mention.
    pub span: Span,
    /// Whether a node statement declares it.
    pub declared: bool,
    /// Whether the id was quoted at its first mention.
    pub quoted: bool,
}

impl Node {
    /// Display text: the `label` attribute, else the id.
    pub fn label(&self) -> &str {
        self.attributes.value("label").unwrap_or(&self.id)
    }

    /// Whether `label` was set explicitly.
    pub fn has_label(&self) -> bool {
        self.attributes.get("label").is_some()
    }

    /// The shape as written (`box` when unset).
    pub fn shape(&self) -> &str {
        self.attributes.value("shape").unwrap_or("box")
    }

    /// Node retry count.
    pub fn max_retries(&self) -> Option<u32> {
        self.rare.as_ref().and_then(|rare| rare.max_retries)
    }

    /// Per-node visit cap.
    pub fn max_visits(&self) -> Option<u32> {
        self.rare.as_ref().and_then(|rare| rare.max_visits)
    }

    /// Limit for one attempt.
    pub fn timeout(&self) -> Option<Duration> {
        self.rare.as_ref().and_then(|rare| rare.timeout)
    }

    /// Failure and goal-gate jump target.
    pub fn retry_target(&self) -> Option<&str> {
        self.rare
            .as_ref()
            .and_then(|rare| rare.retry_target.as_deref())
    }

    /// Second jump target.
    pub fn fallback_retry_target(&self) -> Option<&str> {
        self.rare
            .as_ref()
            .and_then(|rare| rare.fallback_retry_target.as_deref())
    }

    /// Command script (`script`, alias `tool_command`), before variable expansion; empty
    /// when unset.
    pub fn script(&self) -> &str {
        self.rare.as_ref().map_or("", |rare| &rare.script)
    }

    /// Command language.
    pub fn language(&self) -> &ScriptLanguage {
        static SHELL: ScriptLanguage = ScriptLanguage::Shell;
        self.rare.as_ref().map_or(&SHELL, |rare| &rare.language)
    }

    /// Human gate default (`human.default_choice`).
    pub fn default_choice(&self) -> Option<&str> {
        self.rare
            .as_ref()
            .and_then(|rare| rare.default_choice.as_deref())
    }

    /// Wait duration.
    pub fn duration(&self) -> Option<Duration> {
        self.rare.as_ref().and_then(|rare| rare.duration)
    }
}

/// A transition (SPEC 2.11).
#[derive(Debug, Clone)]
pub struct Edge {
    /// Source node.
    pub from: NodeIndex,
    /// Target node.
    pub to: NodeIndex,
    /// Guard; `None` when empty (unconditional).
    pub condition: Option<Condition>,
    /// Tie-break priority.
    pub weight: f64,
    /// Fidelity for the target when entered through this edge.
    pub fidelity: Option<Fidelity>,
    /// Crossing restarts the traversal (SPEC 9.9).
    pub loop_restart: bool,
    /// Routes free-text human answers.
    pub freeform: bool,
    /// Every attribute as written, defaults included.
    pub attributes: Attributes,
}

impl Edge {
    /// Display text and human-gate option: the `label` attribute, empty when unset.
    pub fn label(&self) -> &str {
        self.attributes.value("label").unwrap_or("")
    }

    /// Thread key for the target when entered through this edge (a non-empty
    /// `thread_id` attribute).
    pub fn thread_id(&self) -> Option<&str> {
        self.attributes
            .value("thread_id")
            .filter(|thread| !thread.is_empty())
    }

    /// True when the edge has no condition.
    pub fn is_unconditional(&self) -> bool {
        self.condition.is_none()
    }
}

/// A subgraph named `cluster…` (Graphviz draws these as labelled boxes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// The subgraph name, `cluster` included.
    pub name: String,
    /// The subgraph's `label`; empty when unset.
    pub label: String,
    /// The nodes declared or first created in it or in clusters nested in it, ascending.
    pub nodes: Vec<NodeIndex>,
    /// Position in [`Workflow::clusters`] of the innermost cluster enclosing it.
    pub parent: Option<usize>,
}

/// A lowered workflow: typed nodes and edges plus adjacency.
#[derive(Debug, Clone)]
pub struct Workflow {
    /// Graph id, if written.
    pub id: Option<String>,
    /// Graph settings.
    pub settings: GraphSettings,
    /// Graph attributes as written.
    pub attributes: Attributes,
    /// Subgraphs named `cluster…`, each before the clusters nested in it; drawn as
    /// labelled boxes and kept in normalised DOT.
    pub clusters: Vec<Cluster>,
    nodes: Vec<Node>,
    edges: Vec<Edge>,
    /// Per edge: the spans of its source and target endpoints. Kept beside the edges so
    /// that an [`Edge`] is no larger than the syntax edge it is lowered from, which lets
    /// lowering write the edges into the syntax edges' buffer.
    edge_spans: Vec<[Span; 2]>,
    /// Node positions by id, built by the parser over the same node order.
    index: IdTable,
    /// Every attribute key the file assigns.
    keys: KeySet,
    /// One [`handler_bit`] per handler kind some node has.
    handlers: u32,
    outgoing: Adjacency,
    incoming: Adjacency,
    starts: Vec<NodeIndex>,
    exits: Vec<NodeIndex>,
}

/// Compressed adjacency: edge indices grouped per node, in declaration order.
#[derive(Debug, Clone, Default)]
struct Adjacency {
    offsets: Vec<u32>,
    edges: Vec<EdgeIndex>,
}

impl Adjacency {
    fn build(node_count: usize, edges: &[Edge], key: impl Fn(&Edge) -> NodeIndex) -> Adjacency {
        let mut offsets = vec![0u32; node_count + 1];
        for edge in edges {
            offsets[key(edge).get() + 1] += 1;
        }
        for index in 0..node_count {
            offsets[index + 1] += offsets[index];
        }
        let mut cursor = offsets.clone();
        let mut grouped = vec![EdgeIndex(0); edges.len()];
        for (position, edge) in edges.iter().enumerate() {
            let slot = &mut cursor[key(edge).get()];
            grouped[*slot as usize] = EdgeIndex(position as u32);
            *slot += 1;
        }
        Adjacency {
            offsets,
            edges: grouped,
        }
    }

    fn of(&self, node: NodeIndex) -> &[EdgeIndex] {
        let start = self.offsets[node.get()] as usize;
        let end = self.offsets[node.get() + 1] as usize;
        &self.edges[start..end]
    }
}

impl Workflow {
    /// Assembles a workflow from lowered parts and builds its indexes; `edges` come with
    /// their endpoint spans.
    pub(crate) fn new(
        id: Option<String>,
        settings: GraphSettings,
        attributes: Attributes,
        mut nodes: Vec<Node>,
        (edges, edge_spans): (Vec<Edge>, Vec<[Span; 2]>),
        index: IdTable,
        keys: KeySet,
    ) -> Workflow {
        debug_assert_eq!(edges.len(), edge_spans.len());
        let starts = recognise(&mut nodes, HandlerKind::Start, &["start", "Start"]);
        let exits = recognise(
            &mut nodes,
            HandlerKind::Exit,
            &["exit", "Exit", "end", "End"],
        );
        let handlers = nodes
            .iter()
            .fold(0, |kinds, node| kinds | handler_bit(node.handler));
        let outgoing = Adjacency::build(nodes.len(), &edges, |edge| edge.from);
        let incoming = Adjacency::build(nodes.len(), &edges, |edge| edge.to);
        Workflow {
            id,
            settings,
            attributes,
            clusters: Vec::new(),
            nodes,
            edges,
            edge_spans,
            index,
            keys,
            handlers,
            outgoing,
            incoming,
            starts,
            exits,
        }
    }

    /// The workflow name: the graph id, else `fallback` (the file stem).
    pub fn name<'a>(&'a self, fallback: &'a str) -> &'a str {
        self.id.as_deref().unwrap_or(fallback)
    }

    /// Whether some attribute anywhere in the file may have `key`; false means no node,
    /// edge or graph attribute has it.
    pub(crate) fn may_have_key(&self, key: &str) -> bool {
        self.keys.contains(key)
    }

    /// Whether some node has handler `kind`, so that rules about one kind can skip
    /// workflows without it.
    pub(crate) fn has_handler(&self, kind: HandlerKind) -> bool {
        self.handlers & handler_bit(kind) != 0
    }

    /// [`Workflow::may_have_key`] for any of `keys`.
    pub(crate) fn may_have_any_key(&self, keys: &[&str]) -> bool {
        self.keys.contains_any(keys)
    }

    /// Every attribute key the file assigns anywhere (graph, nodes, edges, defaults,
    /// subgraphs), sorted and without duplicates: a superset of the keys the elements
    /// hold.
    pub(crate) fn attribute_keys(&self) -> &[Arc<str>] {
        self.keys.keys()
    }

    /// All nodes in order of first mention.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Mutable access for transformation passes within the crate.
    pub(crate) fn nodes_mut(&mut self) -> &mut [Node] {
        &mut self.nodes
    }

    /// All edges in declaration order.
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    /// The node at `index`.
    pub fn node(&self, index: NodeIndex) -> &Node {
        &self.nodes[index.get()]
    }

    /// The edge at `index`.
    pub fn edge(&self, index: EdgeIndex) -> &Edge {
        &self.edges[index.get()]
    }

    /// Span of the source endpoint of the edge at `index`.
    pub fn edge_from_span(&self, index: EdgeIndex) -> Span {
        self.edge_spans[index.get()][0]
    }

    /// Span of the target endpoint of the edge at `index`.
    pub fn edge_to_span(&self, index: EdgeIndex) -> Span {
        self.edge_spans[index.get()][1]
    }

    /// Index of the node with `id`.
    pub fn find(&self, id: &str) -> Option<NodeIndex> {
        self.index
            .find(id, |position| &self.nodes[position].id)
            .map(|position| NodeIndex(position as u32))
    }

    /// Outgoing edges of `node`, in declaration order.
    pub fn outgoing(&self, node: NodeIndex) -> impl Iterator<Item = (EdgeIndex, &Edge)> + '_ {
        self.outgoing
            .of(node)
            .iter()
            .map(move |&index| (index, self.edge(index)))
    }

    /// Incoming edges of `node`, in declaration order.
    pub fn incoming(&self, node: NodeIndex) -> impl Iterator<Item = (EdgeIndex, &Edge)> + '_ {
        self.incoming
            .of(node)
            .iter()
            .map(move |&index| (index, self.edge(index)))
    }

    /// Node indices in order.
    pub fn node_indices(&self) -> impl Iterator<Item = NodeIndex> {
        (0..self.nodes.len() as u32).map(NodeIndex)
    }

    /// Nodes that act as start node: handler `start` (shape `Mdiamond`, or id `start` /
    /// `Start` when no node has that handler, SPEC 2.8). Valid workflows have one.
    pub fn start_candidates(&self) -> &[NodeIndex] {
        &self.starts
    }

    /// Nodes that act as exit node (SPEC 2.8). Valid workflows have one.
    pub fn exit_candidates(&self) -> &[NodeIndex] {
        &self.exits
    }

    /// The unique start node, if exactly one exists.
    pub fn start(&self) -> Option<NodeIndex> {
        single(&self.starts)
    }

    /// The unique exit node, if exactly one exists.
    pub fn exit(&self) -> Option<NodeIndex> {
        single(&self.exits)
    }
}

fn single(candidates: &[NodeIndex]) -> Option<NodeIndex> {
    match candidates {
        [only] => Some(*only),
        _ => None,
    }
}

/// Finds the nodes acting as `kind`: those with that handler, or, when there are none,
/// those whose id is one of `ids`, which then get the handler (SPEC 2.8: a node
/// recognised by id behaves exactly like the shaped one).
/// A bit per handler kind, for [`Workflow::has_handler`].
fn handler_bit(kind: HandlerKind) -> u32 {
    1 << (kind as u32)
}

fn recognise(nodes: &mut [Node], kind: HandlerKind, ids: &[&str]) -> Vec<NodeIndex> {
    let typed: Vec<_> = (0..nodes.len())
        .filter(|&position| nodes[position].handler == kind)
        .map(|position| NodeIndex(position as u32))
        .collect();
    if !typed.is_empty() {
        return typed;
    }
    let mut by_id = Vec::new();
    for (position, node) in nodes.iter_mut().enumerate() {
        if ids.contains(&node.id.as_str()) {
            node.handler = kind;
            by_id.push(NodeIndex(position as u32));
        }
    }
    by_id
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::*;

    /// Large workflows hold one `Node` per stage and one `Edge` per transition, so their
    /// sizes bound the memory `fabro validate` touches; rarely set fields are boxed.
    #[test]
    fn nodes_and_edges_stay_small() {
        let sizes = [
            ("Node", std::mem::size_of::<Node>()),
            ("LlmSettings", std::mem::size_of::<LlmSettings>()),
            ("Edge", std::mem::size_of::<Edge>()),
            ("Condition", std::mem::size_of::<Condition>()),
            (
                "Option<Condition>",
                std::mem::size_of::<Option<Condition>>(),
            ),
            ("Attribute", std::mem::size_of::<crate::syntax::Attribute>()),
            (
                "SyntaxNode",
                std::mem::size_of::<crate::syntax::SyntaxNode>(),
            ),
        ];
        for ((name, size), limit) in sizes.into_iter().zip([176, 72, 56, 8, 8, 48, 64]) {
            assert!(size <= limit, "{name} is {size} bytes, over {limit}");
        }
    }

    /// Lowering collects edges from the syntax edges' own buffer, which the standard
    /// library does in place only when an `Edge` fits where a `SyntaxEdge` was.
    #[test]
    fn edges_fit_in_syntax_edges() {
        use crate::syntax::SyntaxEdge;
        assert!(std::mem::size_of::<Edge>() <= std::mem::size_of::<SyntaxEdge>());
        assert_eq!(
            std::mem::align_of::<Edge>(),
            std::mem::align_of::<SyntaxEdge>()
        );
    }

    #[test]
    fn rare_settings_are_boxed_only_when_some_is_set() {
        assert!(RareNodeSettings::default().boxed().is_none());
        assert!(RareLlmSettings::default().boxed().is_none());
        let rare = RareNodeSettings {
            script: "make".into(),
            ..RareNodeSettings::default()
        };
        assert!(rare.boxed().is_some());
        let mut llm = LlmSettings::default();
        assert_eq!(llm.output_schema(), None);
        assert!(llm.write_scope().is_empty());
        llm.set_output_schema(Some(OutputSchema::Routing));
        assert_eq!(llm.output_schema(), Some(&OutputSchema::Routing));
        assert!(llm.rare.is_some());
        llm.set_output_schema(None);
        assert!(llm.rare.is_none());
    }
}
