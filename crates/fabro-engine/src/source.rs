//! The file-system implementations of the language crate's seams: reading referenced
//! files ([`FsLoader`]) and knowing models ([`CatalogModels`], over the LLM catalog).
//! The CLI and child workflow runs use the same ones.

use std::path::{Path, PathBuf};

use fabro_language::{ModelCatalog, SourceLoader};

/// Reads referenced files from the file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsLoader;

impl SourceLoader for FsLoader {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        #[expect(
            clippy::disallowed_methods,
            reason = "the diagnostic built from this error already names the path"
        )]
        std::fs::read_to_string(path)
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
}
