//! Start-up custody of credentials (SPEC 13.1, 13.5; issue 14 item 5).
//!
//! [`take_from_environment`] runs first thing in `main`, while the process has a single
//! thread: every variable whose name marks a credential (the key variables of SPEC 12.4
//! all end in `_API_KEY`) moves out of the process environment into the process's
//! [`SecretStore`]. Commands, tools and agent CLIs are started with filtered
//! environments anyway; this also keeps them from reading fabro's own environment:
//!
//! - the variables are unset, so nothing inherits them by accident;
//! - their `NAME=value` strings are zeroed in the environment block the kernel shows as
//!   `/proc/{pid}/environ` (unsetting a variable only drops libc's pointer to it), by
//!   writing through `/proc/self/mem`, which needs no privilege for one's own memory;
//! - the process is marked non-dumpable, so processes of the same user without
//!   `CAP_SYS_PTRACE` cannot open its `/proc` files (memory, environment) at all.
//!
//! Each step that the platform refuses is skipped: the store and the redactor built
//! from it still keep the values out of everything fabro writes.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;

use fabro_engine::is_secret_name;
use fabro_llm::redact::{self, SecretStore};

/// Moves the credential variables into the process's secret store, scrubs them from the
/// initial environment block and marks the process non-dumpable. Must run before any
/// other thread exists: changing the environment is not thread-safe.
pub(crate) fn take_from_environment() {
    let secrets: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(name, _)| is_secret_name(&name.to_string_lossy()))
        .collect();
    for (name, _) in &secrets {
        // Single-threaded here (the first statement of `main`, before the tokio
        // runtime), which is what makes changing the environment sound.
        std::env::remove_var(name);
    }
    // Hardening steps the platform refuses (no `/proc`, a kernel without the fields) are
    // skipped, as the module documentation says; there is no logger yet to tell.
    if !secrets.is_empty() {
        let _ = scrub_environment_block(&secrets);
    }
    // The only installation, so it cannot be refused.
    let _ = redact::install(SecretStore::new(secrets));
    let _ = nix::sys::prctl::set_dumpable(false);
}

/// Zeroes the `NAME=value` entries of `secrets` in the initial environment block (the
/// bytes between `env_start` and `env_end` of `/proc/self/stat`), which is what
/// `/proc/{pid}/environ` shows for the life of the process. libc no longer points at
/// these entries once the variables are unset, so nothing reads the zeroed bytes.
fn scrub_environment_block(secrets: &[(OsString, OsString)]) -> std::io::Result<()> {
    let (start, end) = environment_block()?;
    let memory = fs_err::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")?
        .into_parts()
        .0;
    let length = usize::try_from(end.saturating_sub(start))
        .map_err(|_| std::io::Error::other("environment block too large"))?;
    let mut block = vec![0; length];
    memory.read_exact_at(&mut block, start)?;
    let mut offset = 0;
    for entry in block.split(|&byte| byte == 0) {
        let is_secret = secrets.iter().any(|(name, value)| {
            let name = name.as_bytes();
            entry.len() == name.len() + 1 + value.len()
                && entry.starts_with(name)
                && entry[name.len()] == b'='
                && entry.ends_with(value.as_bytes())
        });
        if is_secret {
            memory.write_all_at(&vec![0; entry.len()], start + offset as u64)?;
        }
        offset += entry.len() + 1;
    }
    Ok(())
}

/// `env_start` and `env_end` (fields 50 and 51) of `/proc/self/stat`.
fn environment_block() -> std::io::Result<(u64, u64)> {
    let stat = fs_err::read_to_string("/proc/self/stat")?;
    let invalid = || std::io::Error::other("unexpected /proc/self/stat format");
    // Field 2 (the command name) may hold spaces and parentheses; fields from 3 on
    // follow its last ')'.
    let (_, rest) = stat.rsplit_once(')').ok_or_else(invalid)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |number: usize| -> std::io::Result<u64> {
        fields
            .get(number - 3)
            .and_then(|text| text.parse().ok())
            .ok_or_else(invalid)
    };
    let (start, end) = (field(50)?, field(51)?);
    if start == 0 || end <= start {
        return Err(invalid());
    }
    Ok((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_block_is_found() {
        let (start, end) = environment_block().expect("/proc/self/stat has the fields");
        let environ = fs_err::read("/proc/self/environ").expect("own environ");
        assert_eq!(usize::try_from(end - start).expect("fits"), environ.len());
    }
}
