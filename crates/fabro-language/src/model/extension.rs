//! The agent extension settings of LLM nodes (SPEC 19): MCP servers, skills, tool set
//! and web tools.

use super::{LlmSettings, ToolSet};

impl LlmSettings {
    /// The MCP servers the agent sees (SPEC 19.1); `None` means every configured one,
    /// an empty list none.
    pub fn mcp_servers(&self) -> Option<&[String]> {
        self.rare
            .as_ref()
            .and_then(|rare| rare.mcp_servers.as_deref())
    }

    /// The skills listed to the agent (SPEC 19.2); `None` means every skill found, an
    /// empty list disables skills.
    pub fn skills(&self) -> Option<&[String]> {
        self.rare.as_ref().and_then(|rare| rare.skills.as_deref())
    }

    /// What the agent may do (SPEC 19.4); `full` when unset.
    pub fn tools(&self) -> ToolSet {
        self.rare
            .as_ref()
            .and_then(|rare| rare.tools)
            .unwrap_or(ToolSet::Full)
    }

    /// The node's `web` attribute (SPEC 19.3); `None` leaves it to `[agent] web`.
    pub fn web(&self) -> Option<bool> {
        self.rare.as_ref().and_then(|rare| rare.web)
    }
}
