//! The environment commands, tools and agent CLIs run with (SPEC 13.5): the parent's
//! environment minus secret-looking names (unless passed through), plus configured
//! extras. One implementation serves the engine's commands and the agent's tools, so it
//! lives in `fabro-agent`; the engine names it `SandboxEnv`, the seam a remote sandbox
//! will implement later.

pub use fabro_agent::{is_secret_name, ProcessEnv as SandboxEnv};
