//! Tool sets (SPEC 19.4): what an `api` agent may do.

/// The `tools` node attribute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolSet {
    /// `read_file`, `read_many_files`, `grep`, `glob`, `list_dir`, `use_skill`.
    ReadOnly,
    /// Those plus `write_file`, `edit_file`, `apply_patch`.
    ReadWrite,
    /// Everything, `shell`, web tools and MCP tools included (the default).
    #[default]
    Full,
}

const READ_TOOLS: [&str; 6] = [
    "read_file",
    "read_many_files",
    "grep",
    "glob",
    "list_dir",
    "use_skill",
];
const WRITE_TOOLS: [&str; 3] = ["write_file", "edit_file", "apply_patch"];

impl ToolSet {
    /// Whether the tool called `name` belongs to the set.
    pub fn allows(self, name: &str) -> bool {
        match self {
            ToolSet::Full => true,
            ToolSet::ReadWrite => READ_TOOLS.contains(&name) || WRITE_TOOLS.contains(&name),
            ToolSet::ReadOnly => READ_TOOLS.contains(&name),
        }
    }

    /// The attribute's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolSet::ReadOnly => "read-only",
            ToolSet::ReadWrite => "read-write",
            ToolSet::Full => "full",
        }
    }
}

impl std::fmt::Display for ToolSet {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{test_support::context, ToolProfile, ToolRegistry};
    use fabro_llm::ToolCall;

    #[tokio::test]
    async fn a_restricted_registry_offers_and_runs_only_its_set() {
        let mut registry = ToolRegistry::for_profile(ToolProfile::Gemini);
        registry.restrict(ToolSet::ReadOnly);
        assert_eq!(
            registry.names(),
            ["read_file", "grep", "glob", "list_dir", "read_many_files"]
        );
        let mut writes = ToolRegistry::for_profile(ToolProfile::OpenAi);
        writes.restrict(ToolSet::ReadWrite);
        assert_eq!(
            writes.names(),
            ["read_file", "write_file", "apply_patch", "grep", "glob"]
        );
        let (_dir, context) = context();
        let call = ToolCall {
            id: "c".to_owned(),
            name: "write_file".to_owned(),
            arguments: serde_json::json!({"file_path": "a.txt", "content": "x"}),
        };
        let result = registry.execute(&call, &context).await;
        assert!(result.is_error);
        assert_eq!(
            result.output,
            "Tool error (write_file): not available with tools=\"read-only\""
        );
        assert!(!context.tree.root().join("a.txt").exists());
    }
}
