//! Keys whose values are checked beyond their TOML type: the `[run]` budgets (SPEC
//! 17.1), `[run] dirty_worktree` (SPEC 17.2), `[sandbox] provider` and the isolation
//! modes (SPEC 16).

use serde::{Deserialize, Serialize};
use toml::de::DeValue;

use super::{ConfigError, IsolationMode, SandboxProvider, Section};

/// The default of `[run] max_stages` (SPEC 17.1).
pub(crate) const DEFAULT_MAX_STAGES: u64 = 1000;

/// A cost limit in USD: finite and not negative, which makes it totally ordered.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct CostLimit(f64);

impl CostLimit {
    /// The limit, when `usd` is finite and not negative.
    pub fn new(usd: f64) -> Option<CostLimit> {
        (usd.is_finite() && usd >= 0.0).then_some(CostLimit(usd))
    }

    /// The limit in USD.
    pub fn usd(self) -> f64 {
        self.0
    }
}

// Only finite values are ever constructed, so equality is an equivalence.
impl Eq for CostLimit {}

impl TryFrom<f64> for CostLimit {
    type Error = String;

    fn try_from(usd: f64) -> Result<CostLimit, String> {
        CostLimit::new(usd).ok_or_else(|| format!("{usd} is not a cost in USD"))
    }
}

impl From<CostLimit> for f64 {
    fn from(limit: CostLimit) -> f64 {
        limit.0
    }
}

impl Section<'_, '_> {
    /// A whole number ≥ 0.
    pub(super) fn count(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.get(key) {
            Some(value) => match value.get_ref() {
                DeValue::Integer(number) => number
                    .as_str()
                    .parse::<u64>()
                    .ok()
                    .filter(|_| number.radix() == 10)
                    .map(Some)
                    .ok_or_else(|| {
                        self.type_error(key, value, "a whole number ≥ 0", value.get_ref())
                    }),
                other => Err(self.type_error(key, value, "a whole number ≥ 0", other)),
            },
            None => Ok(None),
        }
    }

    /// An amount in USD ≥ 0 (an integer or a float).
    pub(super) fn cost(&self, key: &str) -> Result<Option<CostLimit>, ConfigError> {
        let expected = "an amount in USD ≥ 0";
        match self.get(key) {
            Some(value) => match value.get_ref() {
                found @ (DeValue::Integer(_) | DeValue::Float(_)) => match found {
                    DeValue::Integer(number) => number.as_str(),
                    DeValue::Float(number) => number.as_str(),
                    _ => "",
                }
                .replace('_', "")
                .parse::<f64>()
                .ok()
                .and_then(CostLimit::new)
                .map(Some)
                .ok_or_else(|| self.type_error(key, value, expected, value.get_ref())),
                other => Err(self.type_error(key, value, expected, other)),
            },
            None => Ok(None),
        }
    }

    /// A duration string (`90s`, `30m`, `2h`), checked here and kept as written.
    pub(super) fn duration(&self, key: &str) -> Result<Option<String>, ConfigError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let text = self.string(key)?;
        match text {
            Some(text) if fabro_language::value::parse_duration(&text).is_none() => Err(self
                .type_error(
                    key,
                    value,
                    "a duration such as 90s, 30m or 2h",
                    value.get_ref(),
                )),
            text => Ok(text),
        }
    }
}

pub(super) const RUN_KEYS: &[&str] = &[
    "goal",
    "vars",
    "dirty_worktree",
    "max_stages",
    "max_tokens",
    "max_cost_usd",
    "max_duration",
];

/// `[run] dirty_worktree` (SPEC 17.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DirtyWorktree {
    /// Run in place after saving the working tree under `refs/fabro-before/{run_id}`
    /// (the default).
    InPlace,
    /// Refuse to start: a configuration error.
    Refuse,
}

pub(super) fn dirty_worktree(run: &Section<'_, '_>) -> Result<Option<DirtyWorktree>, ConfigError> {
    let Some(value) = run.get("dirty_worktree") else {
        return Ok(None);
    };
    let line = run.context.line(value.span().start);
    match run.string("dirty_worktree")?.as_deref() {
        Some("in_place") => Ok(Some(DirtyWorktree::InPlace)),
        Some("refuse") => Ok(Some(DirtyWorktree::Refuse)),
        None => Ok(None),
        Some(other) => Err(ConfigError::DirtyWorktree {
            value: other.to_owned(),
            file: run.context.file.to_path_buf(),
            line,
        }),
    }
}

pub(super) fn sandbox_provider(
    sandbox: &Section<'_, '_>,
) -> Result<Option<SandboxProvider>, ConfigError> {
    let Some(value) = sandbox.get("provider") else {
        return Ok(None);
    };
    let line = sandbox.context.line(value.span().start);
    let file = sandbox.context.file.to_path_buf();
    match sandbox.string("provider")?.as_deref() {
        Some("local") | None => Ok(Some(SandboxProvider::Local)),
        Some("docker") => Err(ConfigError::DockerSandbox { file, line }),
        Some(other) => Err(ConfigError::SandboxProvider {
            value: other.to_owned(),
            file,
            line,
        }),
    }
}

/// `[sandbox] agent_isolation` or `command_isolation` (SPEC 16).
pub(super) fn isolation_mode(
    sandbox: &Section<'_, '_>,
    key: &'static str,
) -> Result<Option<IsolationMode>, ConfigError> {
    let Some(value) = sandbox.get(key) else {
        return Ok(None);
    };
    let line = sandbox.context.line(value.span().start);
    match sandbox.string(key)? {
        None => Ok(None),
        Some(text) => {
            IsolationMode::parse(&text)
                .map(Some)
                .ok_or_else(|| ConfigError::IsolationMode {
                    key,
                    value: text,
                    file: sandbox.context.file.to_path_buf(),
                    line,
                })
        }
    }
}
