//! The file-system implementations of the language crate's seams: reading referenced
//! files ([`FsLoader`]) and knowing models ([`CatalogModels`], over the LLM catalog).
//! The CLI and child workflow runs use the same ones.

use std::io::{self, Read as _};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use fabro_language::syntax::MAX_SOURCE_BYTES;
use fabro_language::{ModelCatalog, SourceLoader};

/// A file's bytes, read up to a limit by [`read_regular_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundedRead {
    /// The whole file, or the first `limit + 1` bytes of a larger one.
    pub bytes: Vec<u8>,
    /// The size of a file over the limit; `None` when `bytes` is the whole file.
    pub oversized: Option<u64>,
}

/// Reads the regular file at `path` (symbolic links followed), at most `limit + 1`
/// bytes of it, so that an oversized file is recognised without being read whole.
///
/// Anything else (a FIFO, a device such as `/dev/zero`, a directory, a socket) is
/// refused with an error saying it is not a regular file, before it is opened: opening a
/// FIFO would wait for a writer, and a device may never end. The error does not name the
/// path; callers add it.
pub fn read_regular_file(path: &Path, limit: usize) -> io::Result<BoundedRead> {
    let metadata = std::fs::metadata(path)?;
    require_regular(&metadata)?;
    // Non-blocking, so that a file swapped for a FIFO after the check cannot block the
    // open; the type is checked again on what was opened.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)?;
    let metadata = file.metadata()?;
    require_regular(&metadata)?;
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let expected = usize::try_from(metadata.len().min(cap)).unwrap_or(limit);
    let mut bytes = Vec::with_capacity(expected);
    file.by_ref().take(cap).read_to_end(&mut bytes)?;
    let oversized = (bytes.len() > limit).then(|| {
        metadata
            .len()
            .max(u64::try_from(bytes.len()).unwrap_or(u64::MAX))
    });
    Ok(BoundedRead { bytes, oversized })
}

fn require_regular(metadata: &std::fs::Metadata) -> io::Result<()> {
    let kind = metadata.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a named pipe"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not a regular file ({what})"),
    ))
}

/// Reads referenced files from the file system: regular files of at most
/// [`MAX_SOURCE_BYTES`] (a referenced file is inlined into the stored workflow, which
/// has that limit too).
#[derive(Debug, Clone, Copy, Default)]
pub struct FsLoader;

impl SourceLoader for FsLoader {
    fn read(&self, path: &Path) -> io::Result<String> {
        let read = read_regular_file(path, MAX_SOURCE_BYTES)?;
        if let Some(size) = read.oversized {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("file is {size} bytes; the limit is {MAX_SOURCE_BYTES} bytes (10 MB)"),
            ));
        }
        String::from_utf8(read.bytes).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            )
        })
    }

    fn home_dir(&self) -> Option<PathBuf> {
        std::env::var_os("HOME")
            .filter(|home| !home.is_empty())
            .map(PathBuf::from)
    }
}

/// The model catalog of the LLM layer, for model lint rules.
#[derive(Debug, Clone, Copy, Default)]
pub struct CatalogModels;

impl ModelCatalog for CatalogModels {
    fn is_known(&self, model: &str) -> bool {
        fabro_llm::catalog::is_known(model)
    }

    /// The providers of SPEC 10.1, their aliases and the presets of 10.7.
    fn is_provider_known(&self, provider: &str) -> bool {
        fabro_language::PROVIDERS.contains(&provider)
            || fabro_language::PROVIDER_ALIASES
                .iter()
                .any(|(alias, _)| *alias == provider)
            || crate::config::preset_named(provider).is_some()
    }
}

/// The LLM catalog with the providers a configuration names in `[llm.providers]`
/// (SPEC 10.7), or every provider name when `any_provider` (dry runs and the simulated
/// override of SPEC 17.3).
#[derive(Debug, Clone, Default)]
pub struct ConfiguredModels {
    /// Accept every provider name.
    pub any_provider: bool,
    /// The configured provider names.
    pub providers: std::collections::BTreeSet<String>,
    /// The models of the configured providers' model tables.
    pub models: std::collections::BTreeSet<String>,
    /// The configured MCP servers (SPEC 19.1); every name is accepted when `None`.
    pub mcp_servers: Option<std::collections::BTreeSet<String>>,
    /// The skills found (SPEC 19.2); every name is accepted when `None`.
    pub skills: Option<std::collections::BTreeSet<String>>,
}

impl ConfiguredModels {
    /// The catalog with the providers configured in `config`.
    pub fn of(config: &crate::config::LlmConfig) -> ConfiguredModels {
        ConfiguredModels {
            any_provider: false,
            providers: config.providers.keys().cloned().collect(),
            models: config
                .providers
                .values()
                .flat_map(|provider| provider.models.keys().cloned())
                .collect(),
            mcp_servers: None,
            skills: None,
        }
    }

    /// The same catalog knowing the MCP servers of `config` and the skills a run of a
    /// workflow in `work_dir` would find (SPEC 19), for `mcp_server_known` and
    /// `skill_known`.
    pub fn with_extensions(
        mut self,
        config: &crate::config::RunConfig,
        fabro_home: &Path,
        work_dir: &Path,
    ) -> ConfiguredModels {
        self.mcp_servers = Some(config.mcp_servers.keys().cloned().collect());
        let (skills, _) =
            fabro_agent::discover_skills(&fabro_agent::skill_dirs(fabro_home, work_dir));
        self.skills = Some(skills.into_iter().map(|skill| skill.name).collect());
        self
    }
}

impl ModelCatalog for ConfiguredModels {
    fn is_known(&self, model: &str) -> bool {
        CatalogModels.is_known(model) || self.models.contains(model)
    }

    fn is_provider_known(&self, provider: &str) -> bool {
        self.any_provider
            || CatalogModels.is_provider_known(provider)
            || self.providers.contains(provider)
    }

    fn is_mcp_server_known(&self, server: &str) -> bool {
        self.mcp_servers
            .as_ref()
            .is_none_or(|servers| servers.contains(server))
    }

    fn is_skill_known(&self, name: &str) -> bool {
        self.skills
            .as_ref()
            .is_none_or(|skills| skills.contains(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_small_regular_file_whole() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path().join("prompt.md");
        fs_err::write(&path, "hello").expect("written");
        let read = read_regular_file(&path, 5).expect("read");
        assert_eq!(
            (read.bytes.as_slice(), read.oversized),
            (&b"hello"[..], None)
        );
    }

    #[test]
    fn reads_one_byte_past_the_limit_of_a_larger_file() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path().join("big");
        fs_err::write(&path, "0123456789").expect("written");
        let read = read_regular_file(&path, 4).expect("read");
        assert_eq!(read.bytes, b"01234");
        assert_eq!(read.oversized, Some(10));
    }

    #[test]
    fn refuses_devices_fifos_and_directories() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let fifo = directory.path().join("pipe");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("FIFO made");
        for (path, what) in [
            (Path::new("/dev/zero"), "a character device"),
            (fifo.as_path(), "a named pipe"),
            (directory.path(), "a directory"),
        ] {
            let error = read_regular_file(path, 10).expect_err("refused");
            assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
            assert_eq!(error.to_string(), format!("not a regular file ({what})"));
            let error = FsLoader.read(path).expect_err("refused");
            assert!(error.to_string().starts_with("not a regular file"));
        }
    }
}
