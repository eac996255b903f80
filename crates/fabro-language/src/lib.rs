//! The fabro workflow language: parse, lower, transform and validate workflow files.
//!
//! A workflow is a Graphviz `digraph` (SPEC section 2). This crate turns its text into a
//! typed [`Workflow`] that the engine executes without re-reading attribute strings, and
//! reports every problem as a [`Diagnostic`] with a rule id and a span (SPEC section 3).
//!
//! The pipeline is [`syntax::parse`] (text → [`syntax::SyntaxGraph`], defaults and
//! subgraphs resolved) → lowering (→ [`Workflow`], typed attributes, parsed
//! [`Condition`]s and [`Stylesheet`]) → file references (`@path` inlining and child
//! workflows, read through a [`SourceLoader`]) → lint rules. [`check`] runs all of it.
//!
//! The crate is pure: it does no I/O of its own, spawns nothing and has no async. Files
//! are read through the caller's [`SourceLoader`]; rendering diagnostics with line and
//! column is left to the caller ([`LineIndex`] helps).
//!
//! ```
//! use fabro_language::{check, CheckOptions, NoFiles, Variables, AnyModel};
//!
//! let text = r#"digraph hello {
//!     start [shape=Mdiamond]
//!     greet [prompt="Say hello"]
//!     exit  [shape=Msquare]
//!     start -> greet -> exit
//! }"#;
//! let options = CheckOptions { loader: &NoFiles, variables: &Variables::default(), models: &AnyModel };
//! let checked = check("hello.fabro".as_ref(), text, &options);
//! assert!(checked.diagnostics.is_empty());
//! let workflow = checked.workflow.expect("parsed");
//! assert_eq!(workflow.nodes().len(), 3);
//! ```

pub mod condition;
pub mod diagnostic;
mod id_hash;
pub mod label;
mod lint;
mod lower;
pub mod model;
pub mod render;
pub mod schema;
pub mod span;
pub mod status;
pub mod stylesheet;
pub mod syntax;
mod transform;
pub mod value;
pub mod variable;

use std::path::{Path, PathBuf};

pub use condition::{Condition, ConditionContext};
pub use diagnostic::{Diagnostic, Rule, Severity};
pub use lint::provider_known::{PROVIDERS, PROVIDER_ALIASES};
pub use model::{Cluster, Edge, EdgeIndex, HandlerKind, Node, NodeIndex, Workflow};
pub use span::{LineColumn, LineIndex, Span};
pub use status::StageStatus;
pub use stylesheet::Stylesheet;
pub use transform::{resolve_path, ChildWorkflow, SourceLoader};
pub use variable::Variables;

/// Tells lint rules which model ids and aliases exist (the catalog lives in the LLM
/// layer, which this crate does not depend on), and which provider names a workflow may
/// use.
pub trait ModelCatalog {
    /// Whether `model` is a catalog id or alias.
    fn is_known(&self, model: &str) -> bool;

    /// Whether a workflow may name `provider` (for `provider_known`): by default exactly
    /// the providers of SPEC 10.1 ([`PROVIDERS`]) and their aliases
    /// ([`PROVIDER_ALIASES`]: `google` names `gemini`, decision 62). Callers whose runs
    /// never call the providers a workflow names (dry runs, the simulated override of
    /// SPEC 17.3) may accept every name.
    fn is_provider_known(&self, provider: &str) -> bool {
        PROVIDERS.contains(&provider)
            || PROVIDER_ALIASES.iter().any(|(alias, _)| *alias == provider)
    }

    /// Whether `server` is an MCP server of the run's configuration (SPEC 19.1, for
    /// `mcp_server_known`); every name by default, for callers without a configuration.
    fn is_mcp_server_known(&self, _server: &str) -> bool {
        true
    }

    /// Whether a skill called `name` exists (SPEC 19.2, for `skill_known`); every name
    /// by default, for callers that do not look for skills.
    fn is_skill_known(&self, _name: &str) -> bool {
        true
    }
}

/// A catalog that knows every model and provider, for callers that do not check them.
#[derive(Debug, Clone, Copy, Default)]
pub struct AnyModel;

impl ModelCatalog for AnyModel {
    fn is_known(&self, _model: &str) -> bool {
        true
    }

    fn is_provider_known(&self, _provider: &str) -> bool {
        true
    }
}

/// A loader with no files, for workflows without references.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFiles;

impl SourceLoader for NoFiles {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no file {} in this context", path.display()),
        ))
    }

    fn home_dir(&self) -> Option<PathBuf> {
        None
    }
}

/// What [`check`] needs besides the text.
#[derive(Clone, Copy)]
pub struct CheckOptions<'a> {
    /// Reads referenced files.
    pub loader: &'a dyn SourceLoader,
    /// Variables known at validation time (for `undefined_variable`).
    pub variables: &'a Variables,
    /// Known models (for `node_model_known` and `stylesheet_model_known`).
    pub models: &'a dyn ModelCatalog,
}

/// The result of checking one workflow file.
#[derive(Debug)]
pub struct Checked {
    /// The lowered workflow; `None` after a `parse_error`.
    pub workflow: Option<Workflow>,
    /// Every diagnostic, sorted by position then rule (SPEC 3.1).
    pub diagnostics: Vec<Diagnostic>,
    /// Child workflows of sub_workflow nodes, checked too.
    pub children: Vec<ChildWorkflow>,
}

impl Checked {
    /// True when some diagnostic is an error (the workflow must not run).
    pub fn has_errors(&self) -> bool {
        diagnostic::has_errors(&self.diagnostics)
    }

    /// The workflow, when it has no errors.
    pub fn valid_workflow(&self) -> Option<&Workflow> {
        if self.has_errors() {
            None
        } else {
            self.workflow.as_ref()
        }
    }
}

/// The `parse_error` of a workflow file of `size` bytes, over the 10 MB limit (SPEC 2.1);
/// for readers that stop after the limit rather than read a large file whole.
pub fn oversized_source(size: u64) -> Diagnostic {
    Diagnostic::new(
        Rule::ParseError,
        format!(
            "workflow file is {size} bytes; the limit is {} bytes (10 MB)",
            syntax::MAX_SOURCE_BYTES
        ),
    )
}

/// Decodes a workflow file's bytes (SPEC 2.1): invalid UTF-8, an empty file and files over
/// 10 MB are `parse_error` diagnostics; a byte-order mark is dropped.
pub fn decode_source(bytes: &[u8]) -> Result<&str, Diagnostic> {
    if bytes.len() > syntax::MAX_SOURCE_BYTES {
        return Err(oversized_source(bytes.len() as u64));
    }
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).map_err(|error| {
        let offset = error.valid_up_to();
        Diagnostic::new(
            Rule::ParseError,
            format!("workflow file is not valid UTF-8 (invalid byte at offset {offset})"),
        )
        .at(Span::new(offset, offset))
    })?;
    if text.trim().is_empty() {
        return Err(Diagnostic::new(Rule::ParseError, "workflow file is empty"));
    }
    Ok(text)
}

/// Parses, lowers, resolves references of and lints the workflow at `path` with source
/// `text` (already decoded by [`decode_source`]).
pub fn check(path: &Path, text: &str, options: &CheckOptions<'_>) -> Checked {
    let mut stack = vec![path.to_path_buf()];
    check_source(path, text, options, &mut stack)
}

pub(crate) fn check_source(
    path: &Path,
    text: &str,
    options: &CheckOptions<'_>,
    stack: &mut Vec<PathBuf>,
) -> Checked {
    let (syntax, index, keys) = match syntax::parse_indexed(text) {
        Ok(parsed) => parsed,
        Err(diagnostic) => {
            return Checked {
                workflow: None,
                diagnostics: vec![diagnostic],
                children: Vec::new(),
            }
        }
    };
    let (mut workflow, mut diagnostics) = lower::lower_indexed(syntax, index, keys, text);
    let children =
        transform::resolve_references(&mut workflow, path, options, stack, &mut diagnostics);
    lint::run(&workflow, text, options, &mut diagnostics);
    diagnostic::sort_diagnostics(&mut diagnostics);
    Checked {
        workflow: Some(workflow),
        diagnostics,
        children,
    }
}
