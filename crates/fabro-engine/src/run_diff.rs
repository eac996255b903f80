//! The changes of a stage or of a whole run, as `fabro diff` shows them (SPEC 17.4): a
//! stage's run-branch commit against its parent, or the base SHA against the run branch,
//! as a unified diff in git's patch format. Renames are detected as `git diff` does by
//! default: libgit2 pairs the files (50% threshold of its own metric, which can disagree
//! with git's near the threshold) and the printed `similarity index` is git's estimate
//! ([`git_similarity`]).
//!
//! A node's latest stage is found by its commit subject, `fabro({run_id}): {node_id}
//! ({status})` (SPEC 8.3): first on the run branch, walking back from its tip (the chosen
//! parallel branch's stages are part of that history, SPEC 5.8), then on the run's
//! parallel branches `fabro/parallel/{run_id}/…` for stages of branches not chosen.
//!
//! A run on a repository named by URL (SPEC 18.3) is read from the refs its workers
//! pushed, fetched into the caller's mirror of the repository, so that any server shows
//! it.

use std::path::PathBuf;

use git2::{Commit, DiffFindOptions, DiffFormat, Oid, Repository};

use crate::git::Mirrors;
use crate::run_stages::{check_node_of, StageLookupError};
use crate::store::{RunStore, StoreError};
use crate::RunId;

/// Why a diff could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// The run made no git checkpoints (no repository, a dirty tree, a dry run).
    #[error("run {run_id} has no git checkpoints")]
    NoCheckpoints {
        /// The run.
        run_id: String,
    },
    /// The run's manifest, workflow or stages could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The node is unknown to the run.
    #[error(transparent)]
    Lookup(#[from] StageLookupError),
    /// The node has no commit on the run's branches.
    #[error("node '{node_id}' has no commit on the branches of run {run_id}")]
    NoCommit {
        /// The node.
        node_id: String,
        /// The run.
        run_id: String,
    },
    /// The pushed refs of a run on a repository named by URL could not be fetched.
    #[error(transparent)]
    Fetch(#[from] crate::git::GitError),
    /// A git operation failed.
    #[error("git: cannot {action}")]
    Git {
        /// What was attempted.
        action: String,
        /// The libgit2 error.
        #[source]
        source: git2::Error,
    },
}

fn git_error(action: impl Into<String>) -> impl FnOnce(git2::Error) -> DiffError {
    let action = action.into();
    move |source| DiffError::Git { action, source }
}

/// What a line of a patch is, for colouring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffLineKind {
    /// `diff --git`, mode, `index`, `---` and `+++` lines of a file.
    FileHeader,
    /// `@@ … @@`.
    HunkHeader,
    /// An unchanged line.
    Context,
    /// An added line.
    Addition,
    /// A removed line.
    Deletion,
    /// `Binary files … differ`, `\ No newline at end of file` and other notes.
    Note,
}

/// One or more lines of a patch of the same kind (file headers come as one block), with
/// their final newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffLine {
    /// The kind.
    pub kind: DiffLineKind,
    /// The bytes, as `git diff` prints them.
    pub text: Vec<u8>,
}

/// The repository, base and branch tip of a run with git checkpoints.
struct RunRepository {
    repo: Repository,
    base: Oid,
    tip: Oid,
}

fn open_run_repository(
    store: &dyn RunStore,
    run_id: &RunId,
    mirrors: Option<&Mirrors>,
) -> Result<RunRepository, DiffError> {
    let manifest = store.read_manifest(run_id)?;
    let no_checkpoints = || DiffError::NoCheckpoints {
        run_id: run_id.as_str().to_owned(),
    };
    if let (Some(url), Some(mirrors), Some(base_sha)) = (
        manifest.repository_url.as_deref(),
        mirrors,
        manifest.base_sha.as_deref(),
    ) {
        let fetched = mirrors.fetch_run(url, run_id.as_str(), Some(base_sha))?;
        let tip = fetched
            .pushed
            .branch
            .as_deref()
            .ok_or_else(no_checkpoints)?;
        let repo = Repository::open(&fetched.mirror)
            .map_err(git_error(format!("open the mirror of {}", run_id.as_str())))?;
        let base =
            Oid::from_str(base_sha).map_err(git_error(format!("read base SHA {base_sha}")))?;
        let tip = Oid::from_str(tip).map_err(git_error(format!("read the pushed tip {tip}")))?;
        return Ok(RunRepository { repo, base, tip });
    }
    let (Some(base_sha), Some(branch), Some(repo_root)) = (
        manifest.base_sha.as_deref(),
        manifest.run_branch.as_deref(),
        manifest.repo_root.as_deref(),
    ) else {
        return Err(no_checkpoints());
    };
    let repo = Repository::open(PathBuf::from(repo_root))
        .map_err(git_error(format!("open repository {repo_root}")))?;
    let base = Oid::from_str(base_sha).map_err(git_error(format!("read base SHA {base_sha}")))?;
    let tip = repo
        .refname_to_id(&format!("refs/heads/{branch}"))
        .map_err(git_error(format!("find run branch {branch}")))?;
    Ok(RunRepository { repo, base, tip })
}

/// The changes of the whole run: its base SHA against the tip of its run branch. The
/// run's records are read from `store`, its commits from the repository it names (for
/// a repository named by URL, the refs pushed to it, fetched into `mirrors`).
pub fn run_diff(
    store: &dyn RunStore,
    run_id: &RunId,
    mirrors: Option<&Mirrors>,
) -> Result<Vec<DiffLine>, DiffError> {
    let run = open_run_repository(store, run_id, mirrors)?;
    patch(&run.repo, run.base, run.tip)
}

/// The changes of the latest stage of `node_id` that has a commit: that commit against
/// its parent.
pub fn stage_diff(
    store: &dyn RunStore,
    run_id: &RunId,
    node_id: &str,
    mirrors: Option<&Mirrors>,
) -> Result<Vec<DiffLine>, DiffError> {
    let run = open_run_repository(store, run_id, mirrors)?;
    check_node(store, run_id, node_id)?;
    let run_id = run_id.as_str();
    let subject = format!("fabro({run_id}): {node_id} (");
    let matches = |commit: &Commit<'_>| {
        commit.summary_bytes().is_some_and(|summary| {
            summary.starts_with(subject.as_bytes()) && summary.ends_with(b")")
        })
    };
    let mut found = find_on_first_parents(
        &run.repo,
        run.tip,
        |commit| commit.id() != run.base,
        &matches,
    )?;
    if found.is_none() {
        for tip in parallel_branch_tips(&run.repo, run_id)? {
            found = find_on_first_parents(
                &run.repo,
                tip,
                |commit| {
                    commit
                        .message_bytes()
                        .windows(b"\nFabro-Parallel: ".len())
                        .any(|window| window == b"\nFabro-Parallel: ")
                },
                &matches,
            )?;
            if found.is_some() {
                break;
            }
        }
    }
    let commit = found.ok_or_else(|| DiffError::NoCommit {
        node_id: node_id.to_owned(),
        run_id: run_id.to_owned(),
    })?;
    let commit = run
        .repo
        .find_commit(commit)
        .map_err(git_error(format!("read commit {commit}")))?;
    let parent = commit
        .parent_id(0)
        .map_err(git_error(format!("read the parent of {}", commit.id())))?;
    patch(&run.repo, parent, commit.id())
}

/// Checks that `node_id` names a node of the run, as `fabro logs` does, from what
/// `store` keeps of it.
fn check_node(store: &dyn RunStore, run_id: &RunId, node_id: &str) -> Result<(), DiffError> {
    let workflow = store.read_workflow(run_id).ok();
    check_node_of(
        run_id.as_str(),
        node_id,
        workflow.as_ref().map(|workflow| workflow.graph.as_str()),
        || {
            Ok(store
                .stages(run_id)?
                .into_iter()
                .map(|stage| stage.node_id)
                .collect())
        },
    )
}

/// Walks first parents from `tip` while `within` holds, returning the first commit that
/// `matches`.
fn find_on_first_parents(
    repo: &Repository,
    tip: Oid,
    within: impl Fn(&Commit<'_>) -> bool,
    matches: &dyn Fn(&Commit<'_>) -> bool,
) -> Result<Option<Oid>, DiffError> {
    let mut current = Some(tip);
    while let Some(oid) = current {
        let commit = repo
            .find_commit(oid)
            .map_err(git_error(format!("read commit {oid}")))?;
        if !within(&commit) {
            return Ok(None);
        }
        if matches(&commit) {
            return Ok(Some(oid));
        }
        current = commit.parent_ids().next();
    }
    Ok(None)
}

/// The tips of `refs/heads/fabro/parallel/{run_id}/…`, sorted by name.
fn parallel_branch_tips(repo: &Repository, run_id: &str) -> Result<Vec<Oid>, DiffError> {
    let prefix = format!("refs/heads/fabro/parallel/{run_id}/");
    let mut tips = Vec::new();
    let references = repo.references().map_err(git_error("list references"))?;
    for reference in references.flatten() {
        let Some(name) = reference.name() else {
            continue;
        };
        if name.starts_with(&prefix) {
            if let Some(target) = reference.target() {
                tips.push((name.to_owned(), target));
            }
        }
    }
    tips.sort();
    Ok(tips.into_iter().map(|(_, target)| target).collect())
}

/// The patch from commit `old` to commit `new`, as `git diff old new` prints it.
fn patch(repo: &Repository, old: Oid, new: Oid) -> Result<Vec<DiffLine>, DiffError> {
    let tree = |oid: Oid| {
        repo.find_commit(oid)
            .and_then(|commit| commit.tree())
            .map_err(git_error(format!("read the tree of {oid}")))
    };
    let old_tree = tree(old)?;
    let new_tree = tree(new)?;
    let mut diff = repo
        .diff_tree_to_tree(Some(&old_tree), Some(&new_tree), None)
        .map_err(git_error(format!("diff {old} and {new}")))?;
    diff.find_similar(Some(DiffFindOptions::new().renames(true)))
        .map_err(git_error("detect renames"))?;
    let mut lines: Vec<DiffLine> = Vec::new();
    diff.print(DiffFormat::Patch, |delta, _, line| {
        if line.origin() == 'F'
            && matches!(delta.status(), git2::Delta::Renamed | git2::Delta::Copied)
        {
            let text = with_git_similarity(repo, &delta, line.content());
            lines.push(DiffLine {
                kind: DiffLineKind::FileHeader,
                text,
            });
            return true;
        }
        let (kind, prefix) = match line.origin() {
            '+' => (DiffLineKind::Addition, Some(b'+')),
            '-' => (DiffLineKind::Deletion, Some(b'-')),
            ' ' => (DiffLineKind::Context, Some(b' ')),
            'F' => (DiffLineKind::FileHeader, None),
            'H' => (DiffLineKind::HunkHeader, None),
            _ => (DiffLineKind::Note, None),
        };
        let mut text = Vec::with_capacity(line.content().len() + 1);
        text.extend(prefix);
        text.extend_from_slice(line.content());
        lines.push(DiffLine { kind, text });
        true
    })
    .map_err(git_error(format!("print the diff of {old} and {new}")))?;
    Ok(lines)
}

/// The file header of a rename or copy with `similarity index N%` as git computes it:
/// libgit2 pairs the files, but scores similarity with its own metric.
fn with_git_similarity(repo: &Repository, delta: &git2::DiffDelta<'_>, header: &[u8]) -> Vec<u8> {
    let content = |oid: Oid| repo.find_blob(oid).map(|blob| blob.content().to_vec());
    let (Ok(old), Ok(new)) = (
        content(delta.old_file().id()),
        content(delta.new_file().id()),
    ) else {
        return header.to_vec();
    };
    let prefix = b"similarity index ";
    let mut text = Vec::with_capacity(header.len());
    for line in header.split_inclusive(|&byte| byte == b'\n') {
        if line.starts_with(prefix) {
            text.extend_from_slice(prefix);
            text.extend_from_slice(format!("{}%\n", git_similarity(&old, &new)).as_bytes());
        } else {
            text.extend_from_slice(line);
        }
    }
    text
}

/// Git's similarity estimate of two file contents in percent (`diffcore-delta.c` and
/// `estimate_similarity`): both are cut into spans ending at a newline or after 64
/// bytes, spans are hashed, and the bytes of spans the new content shares with the old
/// are set against the larger size. Carriage returns before a newline do not count in
/// text (no NUL byte among the first 8000).
pub(crate) fn git_similarity(old: &[u8], new: &[u8]) -> u64 {
    const MAX_SCORE: u64 = 60_000;
    if old == new {
        return 100;
    }
    let max_size = old.len().max(new.len()) as u64;
    if new.is_empty() || max_size == 0 {
        return 0;
    }
    let old_spans = spans(old);
    let new_spans = spans(new);
    let copied: u64 = old_spans
        .iter()
        .map(|(hash, count)| (*count).min(new_spans.get(hash).copied().unwrap_or(0)))
        .sum();
    let score = copied * MAX_SCORE / max_size;
    score * 100 / MAX_SCORE
}

/// Span hash → bytes in spans with that hash (git's `hash_chars`).
fn spans(bytes: &[u8]) -> std::collections::HashMap<u32, u64> {
    const HASHBASE: u32 = 107_927;
    let is_text = !bytes.iter().take(8000).any(|&byte| byte == 0);
    let mut spans = std::collections::HashMap::new();
    let (mut accum1, mut accum2, mut length) = (0u32, 0u32, 0u64);
    let hash = |accum1: u32, accum2: u32| accum1.wrapping_add(accum2.wrapping_mul(0x61)) % HASHBASE;
    for (index, &byte) in bytes.iter().enumerate() {
        if is_text && byte == b'\r' && bytes.get(index + 1) == Some(&b'\n') {
            continue;
        }
        let old_1 = accum1;
        accum1 = (accum1 << 7) ^ (accum2 >> 25);
        accum2 = (accum2 << 7) ^ (old_1 >> 25);
        accum1 = accum1.wrapping_add(u32::from(byte));
        length += 1;
        if length < 64 && byte != b'\n' {
            continue;
        }
        *spans.entry(hash(accum1, accum2)).or_insert(0) += length;
        (accum1, accum2, length) = (0, 0, 0);
    }
    if length > 0 {
        *spans.entry(hash(accum1, accum2)).or_insert(0) += length;
    }
    spans
}

#[cfg(test)]
mod tests {
    #[test]
    fn similarity_is_estimated_as_git_does() {
        let long: String = (1..=30).map(|line| format!("{line}\n")).collect();
        let edited = long.replace("\n15\n", "\nfifteen\n");
        // `git diff` prints 90% for this rename.
        assert_eq!(git_similarity(long.as_bytes(), edited.as_bytes()), 90);
        assert_eq!(git_similarity(b"same", b"same"), 100);
        assert_eq!(git_similarity(b"a\n", b""), 0);
        assert_eq!(git_similarity(b"a\r\nb\r\n", b"a\nb\n"), 66);
    }

    use super::*;

    fn commit(
        repo: &Repository,
        parent: Option<Oid>,
        files: &[(&str, &str)],
        message: &str,
    ) -> Oid {
        let mut builder = repo.treebuilder(None).expect("treebuilder");
        for (name, content) in files {
            let blob = repo.blob(content.as_bytes()).expect("blob");
            builder.insert(name, blob, 0o100_644).expect("insert");
        }
        let tree = repo
            .find_tree(builder.write().expect("tree"))
            .expect("tree");
        let signature = git2::Signature::now("t", "t@t").expect("signature");
        let parents: Vec<Commit<'_>> = parent
            .map(|oid| repo.find_commit(oid).expect("parent"))
            .into_iter()
            .collect();
        let parents: Vec<&Commit<'_>> = parents.iter().collect();
        repo.commit(None, &signature, &signature, message, &tree, &parents)
            .expect("commit")
    }

    fn text(lines: &[DiffLine]) -> String {
        lines
            .iter()
            .map(|line| String::from_utf8_lossy(&line.text).into_owned())
            .collect()
    }

    #[test]
    fn stages_are_found_by_subject_and_diffed_against_their_parent() {
        let root = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init(root.path().join("repo")).expect("init");
        let base = commit(&repo, None, &[("a.txt", "one\n")], "init");
        let a = commit(
            &repo,
            Some(base),
            &[("a.txt", "one\ntwo\n")],
            "fabro(R): a (success)\n\nFabro-Run: R\n",
        );
        let b = commit(
            &repo,
            Some(a),
            &[("a.txt", "one\ntwo\n"), ("b.txt", "b\n")],
            "fabro(R): b (success)\n\nFabro-Run: R\n",
        );
        let a2 = commit(
            &repo,
            Some(b),
            &[("a.txt", "zero\n"), ("b.txt", "b\n")],
            "fabro(R): a (fail)\n\nFabro-Run: R\n",
        );
        repo.reference("refs/heads/fabro/run/R", a2, true, "test")
            .expect("branch");
        let side = commit(
            &repo,
            Some(b),
            &[("c.txt", "c\n")],
            "fabro(R): p (success)\n\nFabro-Run: R\nFabro-Parallel: fan@1/p\n",
        );
        repo.reference("refs/heads/fabro/parallel/R/fan/1/p", side, true, "test")
            .expect("branch");

        let store = crate::FsRunStore::new(&root.path().join("home"));
        let run = RunId::from("R");
        let run_dir = store.paths(&run).run_dir().to_path_buf();
        fs_err::create_dir_all(&run_dir).expect("mkdir");
        let manifest = serde_json::json!({
            "run_id": "R", "workflow_name": "w", "workflow_path": "w.fabro", "goal": "",
            "node_count": 4, "edge_count": 3, "base_sha": base.to_string(),
            "run_branch": "fabro/run/R", "started_at": "2026-01-01T00:00:00.000Z",
            "fabro_version": "0", "dry_run": false, "parent_run_id": null, "vars": {},
            "simulated_llm": false, "repo_root": root.path().join("repo").display().to_string()
        });
        fs_err::write(run_dir.join("manifest.json"), manifest.to_string()).expect("write");
        fs_err::write(
            run_dir.join("graph.fabro"),
            "digraph w { a -> b -> p -> q }",
        )
        .expect("write");

        let latest_a = text(&stage_diff(&store, &run, "a", None).expect("a diffs"));
        assert!(latest_a.contains("-one\n-two\n+zero\n"), "{latest_a}");
        assert!(
            latest_a.starts_with("diff --git a/a.txt b/a.txt\n"),
            "{latest_a}"
        );
        let b_diff = stage_diff(&store, &run, "b", None).expect("b diffs");
        assert!(text(&b_diff).contains("new file mode 100644"));
        assert!(b_diff
            .iter()
            .any(|line| line.kind == DiffLineKind::Addition && line.text == b"+b\n"));
        let p = text(&stage_diff(&store, &run, "p", None).expect("p diffs"));
        assert!(p.contains("+c\n") && p.contains("deleted file mode"), "{p}");
        assert!(matches!(
            stage_diff(&store, &run, "q", None),
            Err(DiffError::NoCommit { .. })
        ));
        assert!(matches!(
            stage_diff(&store, &run, "zz", None),
            Err(DiffError::Lookup(StageLookupError::UnknownNode { .. }))
        ));
        let whole = text(&run_diff(&store, &run, None).expect("run diffs"));
        assert!(
            whole.contains("-one\n+zero\n") && whole.contains("+b\n"),
            "{whole}"
        );

        let mut manifest = manifest;
        manifest["base_sha"] = serde_json::Value::Null;
        fs_err::write(run_dir.join("manifest.json"), manifest.to_string()).expect("write");
        assert!(matches!(
            run_diff(&store, &run, None),
            Err(DiffError::NoCheckpoints { .. })
        ));
    }
}
