//! An MCP server's tool as a fabro [`Tool`]: named `mcp__{server}__{tool}`, with the
//! server's JSON schema; text content is the output, other content is described by its
//! type and decoded size, and `isError` results are tool errors (SPEC 19.1).

use std::sync::Arc;

use base64::Engine as _;
use fabro_llm::BoxFuture;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents, Tool as RemoteTool};
use serde_json::Value;
use sha2::Digest as _;

use super::McpConnection;
use crate::tool::{Tool, ToolContext, ToolError};
use crate::truncate::{OutputLimit, TruncationMode};

/// What the model sees of an MCP tool's output (SPEC 19.1 gives no limit of its own; the
/// sub-agent tools' limit of SPEC 10.5).
const LIMIT: OutputLimit = OutputLimit::new(20_000, TruncationMode::HeadTail);

/// The longest tool name the providers accept (OpenAI's function names: 64).
const MAX_NAME_CHARS: usize = 64;

/// `mcp__{server}__{tool}`, with every character other than an ASCII letter, digit or
/// `_` replaced by `_` (SPEC 19.1). A name longer than the providers accept keeps its
/// first 55 characters and ends with `_` and 8 hex digits of the full name's SHA-256,
/// so that it stays unique.
pub fn mcp_tool_name(server: &str, tool: &str) -> String {
    let clean = |text: &str| -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let name = format!("mcp__{}__{}", clean(server), clean(tool));
    if name.len() <= MAX_NAME_CHARS {
        return name;
    }
    let digest = sha2::Sha256::digest(name.as_bytes());
    let suffix: String = digest[..4]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("{}_{suffix}", &name[..MAX_NAME_CHARS - 9])
}

/// One tool of a connected server.
pub struct McpTool {
    connection: Arc<McpConnection>,
    name: String,
    remote: String,
    description: String,
    parameters: Value,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("McpTool")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl McpTool {
    pub(super) fn new(connection: Arc<McpConnection>, remote: &RemoteTool) -> McpTool {
        let mut parameters = Value::Object((*remote.input_schema).clone());
        // Providers want an object schema; a server may leave `properties` out.
        if let Value::Object(schema) = &mut parameters {
            schema
                .entry("type")
                .or_insert_with(|| Value::String("object".to_owned()));
        }
        McpTool {
            name: mcp_tool_name(connection.server(), &remote.name),
            remote: remote.name.to_string(),
            description: remote
                .description
                .as_deref()
                .or(remote.title.as_deref())
                .unwrap_or_default()
                .to_owned(),
            parameters,
            connection,
        }
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn limit(&self) -> OutputLimit {
        LIMIT
    }

    fn server(&self) -> Option<&str> {
        Some(self.connection.server())
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let result = self
                .connection
                .call(&self.remote, arguments)
                .await
                .map_err(ToolError::Failed)?;
            let text = render(&result);
            if result.is_error == Some(true) {
                Err(ToolError::Failed(text))
            } else {
                Ok(text)
            }
        })
    }
}

/// The text of a result: text blocks as they are, others as `[{type} content, {n}
/// bytes]` with `n` the decoded size, one block per line.
pub(super) fn render(result: &CallToolResult) -> String {
    let blocks: Vec<String> = result.content.iter().map(block_text).collect();
    if blocks.is_empty() {
        if let Some(structured) = &result.structured_content {
            return structured.to_string();
        }
    }
    blocks.join("\n")
}

fn block_text(block: &ContentBlock) -> String {
    let described = |kind: &str, bytes: usize| format!("[{kind} content, {bytes} bytes]");
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => described("image", decoded_size(&image.data)),
        ContentBlock::Audio(audio) => described("audio", decoded_size(&audio.data)),
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { text, .. } => {
                described("resource", text.len())
            }
            ResourceContents::BlobResourceContents { blob, .. } => {
                described("resource", decoded_size(blob))
            }
            other => described("resource", json_size(other)),
        },
        ContentBlock::ResourceLink(link) => described(
            "resource_link",
            link.size
                .and_then(|size| usize::try_from(size).ok())
                .unwrap_or(0),
        ),
        // Content types newer than this build: named by their `type`, sized as JSON.
        other => {
            let kind = serde_json::to_value(other)
                .ok()
                .and_then(|value| value.get("type")?.as_str().map(str::to_owned))
                .unwrap_or_else(|| "unknown".to_owned());
            described(&kind, json_size(other))
        }
    }
}

/// The length of `value` as JSON.
fn json_size(value: &impl serde::Serialize) -> usize {
    serde_json::to_string(value).map_or(0, |text| text.len())
}

/// The size of base64 `data` once decoded (its length when it is not base64).
fn decoded_size(data: &str) -> usize {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_or(data.len(), |bytes| bytes.len())
}
