//! Tools the agent loop offers the model (SPEC 10.5): the [`Tool`] trait, the
//! per-provider [`ToolProfile`]s and the [`ToolRegistry`] that validates arguments,
//! runs a tool and truncates what the model sees.

mod apply_patch;
mod edit_file;
mod glob;
mod grep;
mod list_dir;
mod read_file;
mod read_many_files;
mod set;
mod shell;
mod write_file;

use std::sync::Arc;
use std::time::Duration;

use fabro_llm::{BoxFuture, Provider, ToolCall, ToolDefinition};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::environment::ProcessEnv;
use crate::scope::WorkTree;
use crate::truncate::OutputLimit;

pub use apply_patch::ApplyPatch;
pub use edit_file::EditFile;
pub use glob::GlobTool;
pub use grep::Grep;
pub use list_dir::ListDir;
pub use read_file::ReadFile;
pub use read_many_files::ReadManyFiles;
pub use set::ToolSet;
pub use shell::Shell;
pub use write_file::WriteFile;

/// Maximum `timeout_ms` of one `shell` call.
pub const MAX_SHELL_TIMEOUT: Duration = Duration::from_millis(600_000);

/// What a tool needs from its session.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The working tree; every path goes through it.
    pub tree: WorkTree,
    /// Environment for child processes.
    pub env: ProcessEnv,
    /// `shell` timeout when the call gives none.
    pub shell_timeout: Duration,
    /// Cancels running tools (the shell kills its process group).
    pub cancel: CancellationToken,
}

/// Why a tool call failed; the text goes back to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the tool.
    #[error("{0}")]
    InvalidArguments(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
}

/// One tool. Implementations never panic on model-supplied arguments.
pub trait Tool: Send + Sync {
    /// Name the model calls.
    fn name(&self) -> &str;
    /// Description for the model.
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;
    /// Output limits of SPEC 10.5.
    fn limit(&self) -> OutputLimit;
    /// The MCP server the tool belongs to (SPEC 19.1), `None` for fabro's own tools.
    fn server(&self) -> Option<&str> {
        None
    }
    /// Paths (relative to the working tree) this call would write, for file tracking;
    /// empty for tools that do not write.
    fn written_paths(&self, _arguments: &Value, _tree: &WorkTree) -> Vec<String> {
        Vec::new()
    }
    /// Runs the call with arguments already checked against [`Tool::parameters`].
    fn execute<'a>(
        &'a self,
        arguments: Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>>;
}

/// Deserialises validated arguments into a tool's typed form.
pub(crate) fn parse_arguments<T: DeserializeOwned>(arguments: Value) -> Result<T, ToolError> {
    serde_json::from_value(arguments)
        .map_err(|error| ToolError::InvalidArguments(error.to_string()))
}

/// Which tools a provider's models get and how they behave (SPEC 10.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolProfile {
    /// anthropic and simulated: `edit_file`, 120 s shell timeout.
    Anthropic,
    /// openai and openai_compatible: `apply_patch`, 10 s shell timeout.
    OpenAi,
    /// gemini: `edit_file`, `list_dir`, `read_many_files`, 10 s shell timeout.
    Gemini,
}

impl ToolProfile {
    /// The profile of `provider`.
    pub fn for_provider(provider: Provider) -> ToolProfile {
        match provider {
            Provider::Anthropic | Provider::Simulated => ToolProfile::Anthropic,
            Provider::OpenAi | Provider::OpenAiCompatible => ToolProfile::OpenAi,
            Provider::Gemini => ToolProfile::Gemini,
        }
    }

    /// Default `shell` timeout (decision 28).
    pub fn shell_timeout(self) -> Duration {
        match self {
            ToolProfile::Anthropic => Duration::from_millis(120_000),
            ToolProfile::OpenAi | ToolProfile::Gemini => Duration::from_millis(10_000),
        }
    }

    /// The profile's tools, in the order the model sees them.
    pub fn tools(self) -> Vec<Arc<dyn Tool>> {
        let mut tools: Vec<Arc<dyn Tool>> = vec![Arc::new(ReadFile), Arc::new(WriteFile)];
        match self {
            ToolProfile::Anthropic | ToolProfile::Gemini => tools.push(Arc::new(EditFile)),
            ToolProfile::OpenAi => tools.push(Arc::new(ApplyPatch)),
        }
        tools.push(Arc::new(Shell));
        tools.push(Arc::new(Grep));
        tools.push(Arc::new(GlobTool));
        if self == ToolProfile::Gemini {
            tools.push(Arc::new(ListDir));
            tools.push(Arc::new(ReadManyFiles));
        }
        tools
    }
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// Full output or error text (for events).
    pub output: String,
    /// What the model receives: `output` truncated per the tool's limit.
    pub model_output: String,
    /// Whether the call failed.
    pub is_error: bool,
}

/// A set of tools with their compiled argument schemas.
#[derive(Clone)]
pub struct ToolRegistry {
    tools: Vec<(Arc<dyn Tool>, Arc<jsonschema::Validator>)>,
    parallel_calls: bool,
    /// The tool set that removed tools, and their names (calls to them are refused).
    restricted: Option<(ToolSet, Vec<String>)>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ToolRegistry")
            .field(
                "tools",
                &self
                    .tools
                    .iter()
                    .map(|(tool, _)| tool.name())
                    .collect::<Vec<_>>(),
            )
            .field("parallel_calls", &self.parallel_calls)
            .finish()
    }
}

/// A tool whose parameter schema does not compile (a programming error in a custom tool).
#[derive(Debug, thiserror::Error)]
#[error("tool {name} has an invalid parameter schema: {message}")]
pub struct ToolSchemaError {
    /// Tool name.
    pub name: String,
    /// Why the schema was rejected.
    pub message: String,
}

impl ToolRegistry {
    /// An empty registry (a prompt-like session without tools).
    pub fn empty() -> ToolRegistry {
        ToolRegistry {
            tools: Vec::new(),
            parallel_calls: true,
            restricted: None,
        }
    }

    /// The tools of `profile`.
    pub fn for_profile(profile: ToolProfile) -> ToolRegistry {
        let mut registry = ToolRegistry::empty();
        for tool in profile.tools() {
            // The built-in schemas are constant and covered by `profiles_compile`.
            if let Err(error) = registry.register(tool) {
                tracing::error!(%error, "built-in tool schema rejected");
            }
        }
        registry
    }

    /// Adds (or replaces, by name) a tool.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolSchemaError> {
        let validator =
            jsonschema::validator_for(&tool.parameters()).map_err(|error| ToolSchemaError {
                name: tool.name().to_owned(),
                message: error.to_string(),
            })?;
        self.tools.retain(|(known, _)| known.name() != tool.name());
        self.tools.push((tool, Arc::new(validator)));
        Ok(())
    }

    /// Removes the tools outside `set` (SPEC 19.4); a later call to one of them is a
    /// tool error naming the set.
    pub fn restrict(&mut self, set: ToolSet) {
        let mut removed = Vec::new();
        self.tools.retain(|(tool, _)| {
            let allowed = set.allows(tool.name());
            if !allowed {
                removed.push(tool.name().to_owned());
            }
            allowed
        });
        if set != ToolSet::Full {
            self.restricted = Some((set, removed));
        }
    }

    /// Whether several calls of one turn run concurrently.
    pub fn set_parallel_calls(&mut self, parallel: bool) {
        self.parallel_calls = parallel;
    }

    /// Whether several calls of one turn run concurrently.
    pub fn parallel_calls(&self) -> bool {
        self.parallel_calls
    }

    /// Tool names, in order.
    pub fn names(&self) -> Vec<String> {
        self.tools
            .iter()
            .map(|(tool, _)| tool.name().to_owned())
            .collect()
    }

    /// The MCP server of the tool called `name`, if it is an MCP tool.
    pub fn server_of(&self, name: &str) -> Option<String> {
        self.find(name)
            .and_then(|(tool, _)| tool.server().map(str::to_owned))
    }

    /// Definitions for the request.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools
            .iter()
            .map(|(tool, _)| ToolDefinition {
                name: tool.name().to_owned(),
                description: tool.description().to_owned(),
                parameters: tool.parameters(),
            })
            .collect()
    }

    /// Paths `call` would write, relative to the tree (empty for unknown tools).
    pub fn written_paths(&self, call: &ToolCall, tree: &WorkTree) -> Vec<String> {
        let arguments = normalise_arguments(&call.arguments);
        self.find(&call.name)
            .map(|(tool, _)| tool.written_paths(&arguments, tree))
            .unwrap_or_default()
    }

    /// Runs one call: unknown tools, invalid arguments and executor errors become error
    /// results with the texts of SPEC 10.4; nothing here fails the stage. Secret values
    /// are redacted from the output before it is cut for the model (SPEC 13.1), so
    /// neither the provider nor the events see them.
    pub async fn execute(&self, call: &ToolCall, context: &ToolContext) -> ToolResult {
        let redactor = fabro_llm::redact::redactor();
        let Some((tool, validator)) = self.find(&call.name) else {
            if let Some((set, _)) = &self.restricted {
                if !set.allows(&call.name) {
                    return error_result(format!(
                        "Tool error ({}): not available with tools=\"{set}\"",
                        call.name
                    ));
                }
            }
            return error_result(format!("Unknown tool: {}", call.name));
        };
        let arguments = normalise_arguments(&call.arguments);
        if let Some(error) = validator.iter_errors(&arguments).next() {
            return error_result(format!(
                "Invalid arguments for tool: {}: {error}",
                call.name
            ));
        }
        match tool.execute(arguments, context).await {
            Ok(mut output) => {
                redactor.redact_string(&mut output);
                ToolResult {
                    model_output: tool.limit().apply(&output),
                    output,
                    is_error: false,
                }
            }
            Err(ToolError::InvalidArguments(error)) => error_result(format!(
                "Invalid arguments for tool: {}: {error}",
                call.name
            )),
            Err(ToolError::Failed(error)) => {
                let mut output = format!("Tool error ({}): {error}", call.name);
                redactor.redact_string(&mut output);
                ToolResult {
                    model_output: tool.limit().apply(&output),
                    output,
                    is_error: true,
                }
            }
        }
    }

    fn find(&self, name: &str) -> Option<&(Arc<dyn Tool>, Arc<jsonschema::Validator>)> {
        self.tools.iter().find(|(tool, _)| tool.name() == name)
    }
}

/// Arguments sent as a JSON string are parsed; `null` becomes `{}`.
fn normalise_arguments(arguments: &Value) -> Value {
    match arguments {
        Value::String(text) => serde_json::from_str(text).unwrap_or_else(|_| arguments.clone()),
        Value::Null => Value::Object(serde_json::Map::new()),
        other => other.clone(),
    }
}

fn error_result(output: String) -> ToolResult {
    ToolResult {
        model_output: output.clone(),
        output,
        is_error: true,
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// A context over a fresh temporary working tree.
    pub(crate) fn context() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let tree = WorkTree::new(dir.path(), &[]).unwrap();
        let context = ToolContext {
            tree,
            env: ProcessEnv::inherit(),
            shell_timeout: Duration::from_secs(10),
            cancel: CancellationToken::new(),
        };
        (dir, context)
    }

    /// Runs `tool` through a registry holding only it.
    pub(crate) async fn run(
        tool: Arc<dyn Tool>,
        arguments: Value,
        context: &ToolContext,
    ) -> ToolResult {
        let mut registry = ToolRegistry::empty();
        let name = tool.name().to_owned();
        registry.register(tool).unwrap();
        registry
            .execute(
                &ToolCall {
                    id: "call_1".to_owned(),
                    name,
                    arguments,
                },
                context,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::context;
    use super::*;
    use serde_json::json;

    #[test]
    fn profiles_compile_and_differ_per_provider() {
        let names =
            |provider| ToolRegistry::for_profile(ToolProfile::for_provider(provider)).names();
        assert_eq!(
            names(Provider::Anthropic),
            [
                "read_file",
                "write_file",
                "edit_file",
                "shell",
                "grep",
                "glob"
            ]
        );
        assert_eq!(names(Provider::Simulated), names(Provider::Anthropic));
        assert_eq!(
            names(Provider::OpenAi),
            [
                "read_file",
                "write_file",
                "apply_patch",
                "shell",
                "grep",
                "glob"
            ]
        );
        assert_eq!(names(Provider::OpenAiCompatible), names(Provider::OpenAi));
        assert_eq!(
            names(Provider::Gemini),
            [
                "read_file",
                "write_file",
                "edit_file",
                "shell",
                "grep",
                "glob",
                "list_dir",
                "read_many_files"
            ]
        );
        assert_eq!(
            ToolProfile::Anthropic.shell_timeout(),
            Duration::from_secs(120)
        );
        assert_eq!(ToolProfile::OpenAi.shell_timeout(), Duration::from_secs(10));
    }

    #[tokio::test]
    async fn unknown_tools_and_bad_arguments_are_error_results() {
        let (_dir, context) = context();
        let registry = ToolRegistry::for_profile(ToolProfile::Anthropic);
        let call = |name: &str, arguments: Value| ToolCall {
            id: "c".to_owned(),
            name: name.to_owned(),
            arguments,
        };
        let result = registry.execute(&call("fly", json!({})), &context).await;
        assert_eq!(result.output, "Unknown tool: fly");
        assert!(result.is_error);
        let result = registry
            .execute(&call("read_file", json!({"file_path": 7})), &context)
            .await;
        assert!(result.is_error);
        assert!(
            result
                .output
                .starts_with("Invalid arguments for tool: read_file: "),
            "{}",
            result.output
        );
        let result = registry
            .execute(&call("write_file", json!("not json")), &context)
            .await;
        assert!(result
            .output
            .starts_with("Invalid arguments for tool: write_file: "));
        // Arguments sent as a JSON string are accepted.
        let result = registry
            .execute(
                &call(
                    "write_file",
                    json!("{\"file_path\":\"a.txt\",\"content\":\"x\"}"),
                ),
                &context,
            )
            .await;
        assert!(!result.is_error, "{}", result.output);
        assert_eq!(
            fs_err::read_to_string(context.tree.root().join("a.txt")).unwrap(),
            "x"
        );
    }
}
