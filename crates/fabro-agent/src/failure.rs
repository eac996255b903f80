//! Failed agent runs, classed with [`FailureClass`] (SPEC 9.1), and the errors of this
//! crate.

use fabro_llm::{FailureClass, LlmError};

/// Why an agent run did not succeed. The run's other results (text so far, usage,
/// files touched) stay valid in the [`crate::AgentOutcome`] carrying it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentFailure {
    /// Failure class.
    pub class: FailureClass,
    /// Reason text for `status.json` and events; never contains credentials.
    pub reason: String,
    /// The LLM error that ended the run, for failover decisions.
    pub llm_error: Option<LlmError>,
}

impl AgentFailure {
    /// A failure of `class` with `reason`.
    pub fn new(class: FailureClass, reason: impl Into<String>) -> AgentFailure {
        AgentFailure {
            class,
            reason: reason.into(),
            llm_error: None,
        }
    }

    /// The failure an LLM error causes.
    pub fn from_llm(error: LlmError) -> AgentFailure {
        AgentFailure {
            class: error.kind.failure_class(),
            reason: error.to_string(),
            llm_error: Some(error),
        }
    }

    /// The cancellation failure.
    pub fn canceled() -> AgentFailure {
        AgentFailure::new(FailureClass::Canceled, "canceled")
    }
}

/// An agent run that could not happen at all: the backend could not be started or
/// broke its protocol. Failures of a run that did happen are [`AgentFailure`]s.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The program of the `cli` or `acp` backend is not installed (the `cli` text is
    /// SPEC 5.2.2's).
    #[error("{backend} backend requires '{program}' on PATH")]
    MissingProgram {
        /// `cli` or `acp`.
        backend: &'static str,
        /// Program name.
        program: String,
    },
    /// A child process could not be started.
    #[error("cannot start {program}")]
    Spawn {
        /// Program name.
        program: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Talking to a child process failed.
    #[error("i/o with {program} failed")]
    ChildIo {
        /// Program name.
        program: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The ACP agent broke the protocol or answered a request with an error.
    #[error("acp agent protocol error: {message}")]
    Protocol {
        /// What went wrong.
        message: String,
    },
    /// The working directory cannot be used.
    #[error("working directory {path} is unusable")]
    WorkingDir {
        /// The directory.
        path: std::path::PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The backend configuration is incomplete.
    #[error("agent configuration error: {message}")]
    Configuration {
        /// What is missing or wrong.
        message: String,
    },
}

impl AgentError {
    /// The failure class the engine records for this error.
    pub fn class(&self) -> FailureClass {
        match self {
            AgentError::ChildIo { .. } => FailureClass::TransientInfra,
            AgentError::MissingProgram { .. }
            | AgentError::Spawn { .. }
            | AgentError::Protocol { .. }
            | AgentError::WorkingDir { .. }
            | AgentError::Configuration { .. } => FailureClass::Deterministic,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_program_message_is_spec_text() {
        let error = AgentError::MissingProgram {
            backend: "cli",
            program: "claude".to_owned(),
        };
        assert_eq!(error.to_string(), "cli backend requires 'claude' on PATH");
        assert_eq!(error.class(), FailureClass::Deterministic);
    }
}
