//! The environment commands, tools and agent CLIs run with (SPEC 13.5).

use std::collections::BTreeMap;
use std::ffi::OsString;

/// Variables passed to child processes: the parent's environment minus secret-looking
/// names (unless passed through), plus configured extras.
#[derive(Debug, Clone, Default)]
pub struct SandboxEnv {
    variables: BTreeMap<OsString, OsString>,
}

/// Suffixes that mark a variable as a secret (case-insensitive).
const SECRET_SUFFIXES: &[&str] = &["_API_KEY", "_SECRET", "_TOKEN", "_PASSWORD", "_CREDENTIAL"];

/// Whether a variable name looks like it holds a credential.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_SUFFIXES.iter().any(|suffix| upper.ends_with(suffix))
}

impl SandboxEnv {
    /// Builds the environment from `parent` (normally `std::env::vars_os()`).
    pub fn new(
        parent: impl IntoIterator<Item = (OsString, OsString)>,
        passthrough: &[String],
        extra: &BTreeMap<String, String>,
    ) -> SandboxEnv {
        let mut variables: BTreeMap<OsString, OsString> = parent
            .into_iter()
            .filter(|(name, _)| {
                let name = name.to_string_lossy();
                !is_secret_name(&name) || passthrough.iter().any(|allowed| *allowed == name)
            })
            .collect();
        for (name, value) in extra {
            variables.insert(name.into(), value.into());
        }
        SandboxEnv { variables }
    }

    /// The variables, for `Command::envs` after `env_clear`.
    pub fn iter(&self) -> impl Iterator<Item = (&OsString, &OsString)> {
        self.variables.iter()
    }

    /// Sets one variable.
    pub fn set(&mut self, name: &str, value: &str) {
        self.variables.insert(name.into(), value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_filtered_unless_passed_through() {
        let parent = [
            ("PATH", "/bin"),
            ("ANTHROPIC_API_KEY", "sk-1"),
            ("github_token", "t"),
            ("DB_PASSWORD", "p"),
            ("ALLOWED_TOKEN", "ok"),
        ]
        .map(|(name, value)| (OsString::from(name), OsString::from(value)));
        let extra = BTreeMap::from([("EXTRA".to_owned(), "1".to_owned())]);
        let env = SandboxEnv::new(parent, &["ALLOWED_TOKEN".to_owned()], &extra);
        let names: Vec<_> = env
            .iter()
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["ALLOWED_TOKEN", "EXTRA", "PATH"]);
    }
}
