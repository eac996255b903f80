//! `fabro dump RUN -o DIR` (SPEC 12.1): a self-contained copy of a run's records, with
//! every blob the run refers to materialised as `blobs/{hex}.json`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::blob::{BlobError, BlobStore, BLOB_PREFIX};
use crate::id::BlobRef;

/// Why a dump failed.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The output directory exists and is not empty (exit 2).
    #[error("output directory {} is not empty", .0.display())]
    NotEmpty(PathBuf),
    /// A file could not be read or written (exit 2).
    #[error("cannot {action} {}", .path.display())]
    Io {
        /// What was attempted.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A blob the run refers to is not in the store (exit 1, SPEC 11.2).
    #[error("engine error: missing blob {reference} of run {run_id}")]
    MissingBlob {
        /// The ref.
        reference: String,
        /// The run.
        run_id: String,
    },
    /// The blob store failed otherwise.
    #[error(transparent)]
    Blob(#[from] BlobError),
}

/// What a dump wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpSummary {
    /// Files copied from the run directory.
    pub files: usize,
    /// Blobs materialised.
    pub blobs: usize,
}

/// Files and directories of the run directory that a dump copies (SPEC 12.1).
const RECORDS: &[&str] = &[
    crate::run_dir::MANIFEST_FILE,
    "graph.fabro",
    "config.json",
    crate::run_dir::CHECKPOINT_FILE,
    crate::run_dir::EVENTS_FILE,
    "children",
    "stages",
    "artifacts",
];

/// Copies the records of the run in `run_dir` into `out` and materialises the blobs they
/// refer to from `blobs`.
pub fn dump_run(
    run_id: &str,
    run_dir: &Path,
    blobs: &dyn BlobStore,
    out: &Path,
) -> Result<DumpSummary, DumpError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| DumpError::Io {
            action,
            path,
            source,
        }
    };
    match fs_err::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(DumpError::NotEmpty(out.to_path_buf()));
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(io("read", out)(error)),
    }
    fs_err::create_dir_all(out).map_err(io("create", out))?;
    let mut summary = DumpSummary::default();
    let mut references = BTreeSet::new();
    for name in RECORDS {
        let source = run_dir.join(name);
        if source.exists() {
            copy_tree(&source, &out.join(name), &mut summary, &mut references)?;
        }
    }
    if !references.is_empty() {
        let directory = out.join("blobs");
        fs_err::create_dir_all(&directory).map_err(io("create", &directory))?;
        for reference in references {
            let bytes = match blobs.read(&reference) {
                Ok(bytes) => bytes,
                Err(BlobError::Missing(reference)) => {
                    return Err(DumpError::MissingBlob {
                        reference,
                        run_id: run_id.to_owned(),
                    })
                }
                Err(error) => return Err(error.into()),
            };
            let path = directory.join(format!("{}.json", reference.hex()));
            fs_err::write(&path, bytes).map_err(io("write", &path))?;
            summary.blobs += 1;
        }
    }
    Ok(summary)
}

/// Copies `source` (a file or a directory tree) to `target`, collecting the blob refs
/// mentioned in text files.
fn copy_tree(
    source: &Path,
    target: &Path,
    summary: &mut DumpSummary,
    references: &mut BTreeSet<BlobRef>,
) -> Result<(), DumpError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| DumpError::Io {
            action,
            path,
            source,
        }
    };
    let metadata = fs_err::symlink_metadata(source).map_err(io("read", source))?;
    if metadata.is_dir() {
        fs_err::create_dir_all(target).map_err(io("create", target))?;
        let mut entries: Vec<_> = fs_err::read_dir(source)
            .map_err(io("read", source))?
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .collect();
        entries.sort();
        for name in entries {
            copy_tree(
                &source.join(&name),
                &target.join(&name),
                summary,
                references,
            )?;
        }
        return Ok(());
    }
    if !metadata.is_file() {
        return Ok(());
    }
    fs_err::copy(source, target).map_err(io("copy", source))?;
    summary.files += 1;
    let is_record = source
        .extension()
        .is_some_and(|extension| extension == "json" || extension == "jsonl");
    if is_record {
        let bytes = fs_err::read(source).map_err(io("read", source))?;
        collect_references(&bytes, references);
    }
    Ok(())
}

/// Every `blob://sha256/{64 hex}` in `bytes`.
pub(crate) fn collect_references(bytes: &[u8], references: &mut BTreeSet<BlobRef>) {
    let prefix = BLOB_PREFIX.as_bytes();
    let mut offset = 0;
    while let Some(position) = bytes[offset..]
        .windows(prefix.len())
        .position(|window| window == prefix)
    {
        let start = offset + position;
        let hex_start = start + prefix.len();
        let hex = bytes.get(hex_start..hex_start + 64);
        if let Some(hex) = hex.filter(|hex| hex.iter().all(u8::is_ascii_hexdigit)) {
            references.insert(BlobRef::of_hex(
                &String::from_utf8_lossy(hex).to_ascii_lowercase(),
            ));
        }
        offset = hex_start;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_found_wherever_they_appear() {
        let hex = "ab".repeat(32);
        let text = format!(
            "{{\"a\":\"blob://sha256/{hex}\",\"b\":[\"x blob://sha256/{hex}\"],\"c\":\"blob://sha256/short\"}}"
        );
        let mut references = BTreeSet::new();
        collect_references(text.as_bytes(), &mut references);
        assert_eq!(
            references.into_iter().collect::<Vec<_>>(),
            vec![BlobRef::of_hex(&hex)]
        );
    }

    #[test]
    fn dumps_copy_records_and_materialise_blobs() {
        let root = tempfile::tempdir().expect("tempdir");
        let store = crate::blob::FsBlobStore::new(root.path());
        let (reference, _) = store
            .put_value(&serde_json::json!("payload"))
            .expect("stored");
        let run_dir = root.path().join("run");
        fs_err::create_dir_all(run_dir.join("stages/001-start@1")).expect("mkdir");
        fs_err::write(run_dir.join("manifest.json"), "{}").expect("write");
        fs_err::write(
            run_dir.join("checkpoint.json"),
            format!("{{\"context_values\":{{\"command.output\":\"{reference}\"}}}}"),
        )
        .expect("write");
        fs_err::write(run_dir.join("stages/001-start@1/status.json"), "{}").expect("write");
        let out = root.path().join("out");
        let summary = dump_run("R", &run_dir, &store, &out).expect("dumps");
        assert_eq!(summary, DumpSummary { files: 3, blobs: 1 });
        let hex = reference.hex();
        assert_eq!(
            fs_err::read_to_string(out.join(format!("blobs/{hex}.json"))).expect("blob"),
            "\"payload\""
        );
        assert!(out.join("stages/001-start@1/status.json").is_file());
        assert!(matches!(
            dump_run("R", &run_dir, &store, &out),
            Err(DumpError::NotEmpty(_))
        ));
        fs_err::remove_file(store.path_of_ref(&reference)).expect("rm");
        assert!(matches!(
            dump_run("R", &run_dir, &store, &root.path().join("out2")),
            Err(DumpError::MissingBlob { .. })
        ));
    }
}
