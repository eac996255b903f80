//! Enumerated attribute values and their spellings (SPEC 2.8–2.11).
//!
//! Each enum parses its accepted spellings and prints its canonical name; lowering and
//! the `*_valid` lint rules share these parsers so the two never disagree.

macro_rules! spelled_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $($(#[$variant_meta:meta])* $variant:ident => $canonical:literal $(| $alias:literal)*,)* }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$variant_meta])* $variant,)*
        }

        impl $name {
            /// Every variant.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// Parses the canonical name or an alias.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($canonical $(| $alias)* => Some($name::$variant),)*
                    _ => None,
                }
            }

            /// The canonical name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $canonical,)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str(self.as_str())
            }
        }
    };
}

spelled_enum! {
    /// What a node does when executed (SPEC 2.8).
    HandlerKind {
        /// Entry point.
        Start => "start",
        /// Terminal node; goal gates are checked here.
        Exit => "exit",
        /// Multi-turn tool-using agent.
        Agent => "agent" | "codergen" | "agent_loop",
        /// Single LLM call.
        Prompt => "prompt" | "one_shot",
        /// Shell or Python script.
        Command => "command" | "tool",
        /// Human gate.
        Human => "human" | "wait.human",
        /// Pass-through routing point.
        Conditional => "conditional",
        /// Fan-out.
        Parallel => "parallel",
        /// Fan-in and best-branch selection.
        FanIn => "fan_in" | "parallel.fan_in",
        /// Timed pause.
        Wait => "wait",
        /// Child workflow with a manager loop.
        SubWorkflow => "sub_workflow" | "stack.manager_loop" | "manager_loop",
    }
}

impl HandlerKind {
    /// The handler a shape maps to; any other shape is an agent (SPEC 2.8).
    pub fn from_shape(shape: &str) -> HandlerKind {
        match shape {
            "Mdiamond" => HandlerKind::Start,
            "Msquare" => HandlerKind::Exit,
            "tab" => HandlerKind::Prompt,
            "parallelogram" => HandlerKind::Command,
            "hexagon" => HandlerKind::Human,
            "diamond" => HandlerKind::Conditional,
            "component" => HandlerKind::Parallel,
            "tripleoctagon" => HandlerKind::FanIn,
            "insulator" => HandlerKind::Wait,
            "house" => HandlerKind::SubWorkflow,
            _ => HandlerKind::Agent,
        }
    }

    /// The shape that selects this handler.
    pub fn shape(self) -> &'static str {
        match self {
            HandlerKind::Start => "Mdiamond",
            HandlerKind::Exit => "Msquare",
            HandlerKind::Agent => "box",
            HandlerKind::Prompt => "tab",
            HandlerKind::Command => "parallelogram",
            HandlerKind::Human => "hexagon",
            HandlerKind::Conditional => "diamond",
            HandlerKind::Parallel => "component",
            HandlerKind::FanIn => "tripleoctagon",
            HandlerKind::Wait => "insulator",
            HandlerKind::SubWorkflow => "house",
        }
    }

    /// Agent and prompt nodes talk to an LLM.
    pub fn is_llm(self) -> bool {
        matches!(self, HandlerKind::Agent | HandlerKind::Prompt)
    }
}

spelled_enum! {
    /// How much prior context a stage sees (SPEC 6.4).
    Fidelity {
        /// Continue the node's thread.
        Full => "full",
        /// Goal, stage list, context.
        Compact => "compact",
        /// Per-stage sections with responses.
        SummaryHigh => "summary:high",
        /// Per-stage status, notes and failures.
        SummaryMedium => "summary:medium",
        /// One line per stage.
        SummaryLow => "summary:low",
        /// Goal and run id only.
        Truncate => "truncate",
    }
}

spelled_enum! {
    /// Named retry presets (SPEC 9.3).
    RetryPolicy {
        /// One attempt.
        None => "none",
        /// 5 attempts from 200 ms, doubling.
        Standard => "standard",
        /// 5 attempts from 500 ms, doubling.
        Aggressive => "aggressive",
        /// 3 attempts, 500 ms apart.
        Linear => "linear",
        /// 3 attempts from 2 s, tripling.
        Patient => "patient",
    }
}

spelled_enum! {
    /// Tie-break mode for outgoing edges (SPEC 4.5).
    Selection {
        /// Highest weight, then lexically smallest target.
        Deterministic => "deterministic",
        /// Weighted random.
        Random => "random",
    }
}

spelled_enum! {
    /// When a parallel node is done (SPEC 5.7).
    JoinPolicy {
        /// Wait for every branch.
        WaitAll => "wait_all",
        /// Stop at the first successful branch.
        FirstSuccess => "first_success",
    }
}

spelled_enum! {
    /// How an agent node runs (SPEC 5.2).
    Backend {
        /// The built-in agent loop.
        Api => "api",
        /// An external coding CLI.
        Cli => "cli",
        /// An Agent Client Protocol agent over stdio.
        Acp => "acp",
    }
}

spelled_enum! {
    /// What an `api` agent may do (SPEC 19.4, the `tools` attribute).
    ToolSet {
        /// Reading and searching files, and `use_skill`.
        ReadOnly => "read-only",
        /// Reading and writing files, no `shell`.
        ReadWrite => "read-write",
        /// Every tool: `shell`, web tools and MCP tools included (the default).
        Full => "full",
    }
}

spelled_enum! {
    /// Reasoning effort for models that support it (SPEC 10.1).
    ReasoningEffort {
        /// Low effort.
        Low => "low",
        /// Medium effort.
        Medium => "medium",
        /// High effort.
        High => "high",
    }
}

spelled_enum! {
    /// Rendering direction (graph `rankdir`).
    RankDir {
        /// Top to bottom.
        TopToBottom => "TB",
        /// Left to right.
        LeftToRight => "LR",
        /// Bottom to top.
        BottomToTop => "BT",
        /// Right to left.
        RightToLeft => "RL",
    }
}

spelled_enum! {
    /// Manager-loop actions (SPEC 5.10).
    ManagerAction {
        /// Copy child state into the context.
        Observe => "observe",
        /// Accepted and ignored in this release.
        Steer => "steer",
        /// Sleep until the next cycle.
        Wait => "wait",
    }
}

/// Interpreter of a command node (SPEC 5.4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ScriptLanguage {
    /// `/bin/sh -c` (the default).
    #[default]
    Shell,
    /// `python3 -c`.
    Python,
    /// Anything else; the command fails at run time with `Invalid language`.
    Other(String),
}

impl ScriptLanguage {
    /// Parses the `language` attribute.
    pub fn parse(text: &str) -> ScriptLanguage {
        match text {
            "shell" => ScriptLanguage::Shell,
            "python" => ScriptLanguage::Python,
            other => ScriptLanguage::Other(other.to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handler_aliases_and_shapes() {
        assert_eq!(HandlerKind::parse("codergen"), Some(HandlerKind::Agent));
        assert_eq!(HandlerKind::parse("wait.human"), Some(HandlerKind::Human));
        assert_eq!(
            HandlerKind::parse("stack.manager_loop"),
            Some(HandlerKind::SubWorkflow)
        );
        assert_eq!(HandlerKind::parse("bogus"), None);
        for &kind in HandlerKind::ALL {
            assert_eq!(HandlerKind::from_shape(kind.shape()), kind);
            assert_eq!(HandlerKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(HandlerKind::from_shape("ellipse"), HandlerKind::Agent);
    }

    #[test]
    fn fidelity_spellings_round_trip() {
        for &fidelity in Fidelity::ALL {
            assert_eq!(Fidelity::parse(fidelity.as_str()), Some(fidelity));
        }
        assert_eq!(Fidelity::parse("summary"), None);
    }
}
