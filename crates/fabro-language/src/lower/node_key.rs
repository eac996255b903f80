//! The node attribute keys lowering reads, and [`Slots`]: one element's attributes
//! sorted into those keys in a single pass.
//!
//! Lowering a node reads about fifty keys and aliases; looking each up in the attribute
//! list would scan the list fifty times per node. Attribute lists hold each key once
//! (later assignments replace earlier ones), so one pass that files every attribute under
//! its key gives the same answers.

use crate::syntax::{Attribute, Attributes};

macro_rules! node_keys {
    ($($variant:ident => $text:literal,)*) => {
        /// A node attribute key that lowering reads.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(super) enum Key {
            $($variant,)*
        }

        const KEY_COUNT: usize = [$($text,)*].len();

        /// Every node attribute key lowering reads (SPEC 2.8, 2.10, aliases included).
        pub(crate) const NODE_KEYS: [&str; KEY_COUNT] = [$($text,)*];

        impl Key {
            /// The key spelled `text`, if lowering reads it.
            fn of(text: &str) -> Option<Key> {
                match text {
                    $($text => Some(Key::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

node_keys! {
    AcpCommand => "acp_command",
    AllowPartial => "allow_partial",
    AutoStatus => "auto_status",
    Backend => "backend",
    Class => "class",
    CodergenMode => "codergen_mode",
    Duration => "duration",
    FallbackRetryTarget => "fallback_retry_target",
    Fidelity => "fidelity",
    GoalGate => "goal_gate",
    HumanDefaultChoice => "human.default_choice",
    JoinPolicy => "join_policy",
    Label => "label",
    Language => "language",
    LlmModel => "llm_model",
    LlmPrompt => "llm_prompt",
    LlmProvider => "llm_provider",
    ManagerActions => "manager.actions",
    ManagerMaxCycles => "manager.max_cycles",
    ManagerPollInterval => "manager.poll_interval",
    ManagerStopCondition => "manager.stop_condition",
    MaxAgentTurns => "max_agent_turns",
    MaxParallel => "max_parallel",
    MaxRetries => "max_retries",
    MaxTokens => "max_tokens",
    MaxTurns => "max_turns",
    MaxVisits => "max_visits",
    McpServers => "mcp_servers",
    Model => "model",
    NodeType => "node_type",
    OutputRetries => "output_retries",
    OutputSchema => "output_schema",
    ProjectMemory => "project_memory",
    Prompt => "prompt",
    Provider => "provider",
    ReasoningEffort => "reasoning_effort",
    RetryPolicy => "retry_policy",
    RetryTarget => "retry_target",
    Script => "script",
    Selection => "selection",
    Shape => "shape",
    Skills => "skills",
    StackChildAutostart => "stack.child_autostart",
    StackChildDotfile => "stack.child_dotfile",
    StackChildWorkdir => "stack.child_workdir",
    StackChildWorkflow => "stack.child_workflow",
    ThreadId => "thread_id",
    Timeout => "timeout",
    ToolCommand => "tool_command",
    Tools => "tools",
    Type => "type",
    Web => "web",
    WriteScope => "write_scope",
}
/// One element's attributes by key.
pub(super) struct Slots<'a> {
    slots: [Option<&'a Attribute>; KEY_COUNT],
}

impl<'a> Slots<'a> {
    /// Files every attribute of `attributes` under its key, in one pass.
    pub(super) fn new(attributes: &'a Attributes) -> Slots<'a> {
        // Filled in place: building the array first and then the struct copies it.
        let mut filled = Slots {
            slots: [None; KEY_COUNT],
        };
        for attribute in attributes {
            if let Some(key) = Key::of(&attribute.key) {
                filled.slots[key as usize] = Some(attribute);
            }
        }
        filled
    }

    /// The attribute with `key`, if set.
    pub(super) fn get(&self, key: Key) -> Option<&'a Attribute> {
        self.slots[key as usize]
    }

    /// The value of `key`, if set.
    pub(super) fn value(&self, key: Key) -> Option<&'a str> {
        self.get(key).map(|attribute| &*attribute.value)
    }

    /// The first attribute set among `keys` (a canonical key and its aliases), in the
    /// order given.
    pub(super) fn any(&self, keys: &[Key]) -> Option<&'a Attribute> {
        keys.iter().find_map(|&key| self.get(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_agree_with_attribute_lookups() {
        let graph = crate::syntax::parse(
            r#"digraph { n [label="L", shape=box, "human.default_choice"=yes, other=1] }"#,
        )
        .expect("parses");
        let attributes = &graph.nodes[0].attributes;
        let slots = Slots::new(attributes);
        assert_eq!(slots.value(Key::Label), attributes.value("label"));
        assert_eq!(slots.value(Key::Shape), Some("box"));
        assert_eq!(slots.value(Key::HumanDefaultChoice), Some("yes"));
        assert_eq!(slots.get(Key::Prompt), None);
        assert_eq!(Key::of("other"), None);
    }
}
