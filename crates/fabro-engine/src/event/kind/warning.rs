//! `Warning`: degraded but continuing (SPEC 11.3), with the extra properties some codes
//! carry.

use serde::{Deserialize, Serialize};

/// `Warning {code, message}`; `mcp_unavailable` adds `server` and `reason` (SPEC
/// 19.1), `skill_invalid` adds `path` (19.2), `hook_failed` adds `event` and `reason`
/// (20.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Warning {
    /// Stable code, e.g. `custom_outcome`.
    pub code: String,
    /// The hook event of `hook_failed`, e.g. `stage_complete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The message.
    pub message: String,
    /// The MCP server of `mcp_unavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Why the server of `mcp_unavailable` is unavailable, or the hook of `hook_failed`
    /// failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The file of `skill_invalid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl Warning {
    /// A warning with `code` and `message`.
    pub fn new(code: &str, message: impl Into<String>) -> Warning {
        Warning {
            code: code.to_owned(),
            event: None,
            message: message.into(),
            server: None,
            reason: None,
            path: None,
        }
    }
}
