//! Tests of [`WorktreeIndex`]: what it writes must read back in `git` as the index libgit2
//! holds, split or plain.

use std::path::Path;

use git2::Repository;

use super::WorktreeIndex;
use crate::git::test_repo::TestRepo;

/// A repository of `files` committed files `d{n / 10}/f{n}.txt`.
fn repository(files: usize) -> Option<TestRepo> {
    let repo = TestRepo::empty()?;
    for index in 0..files {
        repo.write(&format!("d{}/f{index}.txt", index / 10), "x\n");
    }
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", "initial"]);
    Some(repo)
}

/// Stages `paths` in libgit2's index (added when present, removed when not) and records them.
fn stage(repo: &Repository, index: &mut WorktreeIndex, paths: &[&str]) {
    let mut git_index = repo.index().unwrap();
    let root = repo.workdir().unwrap().to_path_buf();
    for path in paths {
        if std::fs::symlink_metadata(root.join(path)).is_ok_and(|meta| !meta.is_dir()) {
            git_index.add_path(Path::new(path)).unwrap();
        } else {
            git_index.remove_path(Path::new(path)).unwrap();
        }
        index.touched(path);
    }
    index.write(repo).unwrap();
}

/// What `git` makes of the index: it must hold the tree of libgit2's index; returns the
/// working tree's differences from it (none are expected) and untracked files.
fn git_view(repo: &TestRepo, libgit2: &Repository) -> String {
    let tree = libgit2.index().unwrap().write_tree().unwrap();
    assert_eq!(
        repo.git(&["diff", "--cached", "--name-only", &tree.to_string()]),
        "",
        "the index git reads differs from libgit2's"
    );
    let mut view = repo.git(&["diff", "--name-only"]);
    view.push_str(&repo.git(&["ls-files", "--others", "--exclude-standard"]));
    view
}

fn shared_files(repo: &TestRepo) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo.path().join(".git"))
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("sharedindex."))
        .collect();
    names.sort();
    names
}

#[test]
fn split_index_reads_back_in_git_through_changes_deletions_and_type_changes() {
    let Some(repo) = repository(200) else {
        return;
    };
    let libgit2 = Repository::open(repo.path()).unwrap();
    let mut index = WorktreeIndex::open(&libgit2).unwrap().with_split_min(10);
    index.write(&libgit2).unwrap();
    assert_eq!(shared_files(&repo).len(), 1);
    assert_eq!(git_view(&repo, &libgit2), "");
    let full = fs_err::metadata(repo.path().join(".git").join(&shared_files(&repo)[0]))
        .unwrap()
        .len();

    // A change, a new file, a deletion.
    repo.write("d3/f30.txt", "changed\n");
    repo.write("new/file.txt", "new\n");
    fs_err::remove_file(repo.path().join("d5/f51.txt")).unwrap();
    stage(
        &libgit2,
        &mut index,
        &["d3/f30.txt", "new/file.txt", "d5/f51.txt"],
    );
    assert_eq!(git_view(&repo, &libgit2), "");
    let split = fs_err::metadata(repo.path().join(".git/index"))
        .unwrap()
        .len();
    assert!(split * 5 < full, "split index {split} bytes, full {full}");

    // A file replaced by a directory, a directory replaced by a file.
    fs_err::remove_file(repo.path().join("d7/f70.txt")).unwrap();
    repo.write("d7/f70.txt/inner.txt", "inner\n");
    fs_err::remove_dir_all(repo.path().join("d8")).unwrap();
    repo.write("d8", "now a file\n");
    let mut paths = vec!["d7/f70.txt", "d7/f70.txt/inner.txt", "d8"];
    let removed: Vec<String> = (80..90).map(|n| format!("d8/f{n}.txt")).collect();
    paths.extend(removed.iter().map(String::as_str));
    stage(&libgit2, &mut index, &paths);
    assert_eq!(git_view(&repo, &libgit2), "");
    assert_eq!(shared_files(&repo).len(), 1);

    // Changes past a fifth of the shared index: a new shared index replaces the old one.
    let before = shared_files(&repo);
    let many: Vec<String> = (100..160)
        .map(|n| format!("d{}/f{n}.txt", n / 10))
        .collect();
    for path in &many {
        repo.write(path, "rewritten\n");
    }
    stage(
        &libgit2,
        &mut index,
        &many.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(git_view(&repo, &libgit2), "");
    let after = shared_files(&repo);
    assert_eq!(after.len(), 1);
    assert_ne!(before, after);

    // git itself can write the index after fabro, and fabro after git.
    repo.write("d1/f10.txt", "by git\n");
    repo.git(&["add", "d1/f10.txt"]);
    repo.write("d2/f20.txt", "by fabro\n");
    stage(&libgit2, &mut index, &["d1/f10.txt", "d2/f20.txt"]);
    assert_eq!(git_view(&repo, &libgit2), "");
}

#[test]
fn small_indexes_are_written_whole_and_read_by_libgit2() {
    let Some(repo) = repository(30) else {
        return;
    };
    let libgit2 = Repository::open(repo.path()).unwrap();
    let mut index = WorktreeIndex::open(&libgit2).unwrap();
    repo.write("d0/f1.txt", "changed\n");
    stage(&libgit2, &mut index, &["d0/f1.txt"]);
    assert_eq!(git_view(&repo, &libgit2), "");
    assert!(shared_files(&repo).is_empty());
    let fresh = Repository::open(repo.path()).unwrap();
    assert_eq!(fresh.index().unwrap().len(), 30);
    let mut options = git2::StatusOptions::new();
    options.show(git2::StatusShow::Workdir);
    assert!(fresh.statuses(Some(&mut options)).unwrap().is_empty());
}

#[test]
fn inspect_reads_a_worktree_with_a_split_index() {
    let Some(repo) = repository(100) else {
        return;
    };
    let libgit2 = Repository::open(repo.path()).unwrap();
    let mut index = WorktreeIndex::open(&libgit2).unwrap().with_split_min(10);
    repo.write("d0/f1.txt", "changed\n");
    stage(&libgit2, &mut index, &["d0/f1.txt"]);
    repo.git(&["commit", "-q", "-m", "second"]);
    assert!(Repository::open(repo.path())
        .unwrap()
        .statuses(None)
        .is_err());
    assert!(matches!(
        crate::git::inspect(&repo.path()).unwrap(),
        crate::git::RepoState::Clean { .. }
    ));
    repo.write("d0/f2.txt", "changed\n");
    repo.write("untracked.txt", "new\n");
    match crate::git::inspect(&repo.path()).unwrap() {
        crate::git::RepoState::Dirty { modified, .. } => assert_eq!(modified, ["d0/f2.txt"]),
        other => panic!("expected a dirty tree, got {other:?}"),
    }
}

/// Reads back what [`super::encode_ewah`] wrote: the bit size and the words.
fn decode_ewah(bytes: &[u8]) -> (u32, Vec<u64>) {
    let u32_at = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    let bit_size = u32_at(0);
    let count = u32_at(4) as usize;
    let encoded: Vec<u64> = (0..count)
        .map(|n| u64::from_be_bytes(bytes[8 + n * 8..16 + n * 8].try_into().unwrap()))
        .collect();
    assert_eq!(bytes.len(), 8 + count * 8 + 4);
    let mut words = Vec::new();
    let mut position = 0;
    let mut last_marker = 0;
    while position < encoded.len() {
        let marker = encoded[position];
        last_marker = position;
        assert_eq!(marker & 1, 0, "runs are of zero words");
        let zeros = (marker >> 1) & u64::from(u32::MAX);
        let literals = (marker >> 33) as usize;
        words.extend(std::iter::repeat_n(0, zeros as usize));
        words.extend_from_slice(&encoded[position + 1..position + 1 + literals]);
        position += 1 + literals;
    }
    assert_eq!(u32_at(8 + count * 8) as usize, last_marker);
    (bit_size, words)
}

proptest::proptest! {
    /// Sparse and dense bitmaps read back as written; runs of zero words take no space.
    #[test]
    fn ewah_bitmaps_read_back(bits in proptest::collection::btree_set(0usize..5000, 0..40)) {
        let bit_size: usize = 5000;
        let mut words = vec![0u64; bit_size.div_ceil(64)];
        for bit in &bits {
            words[bit / 64] |= 1 << (bit % 64);
        }
        let mut out = Vec::new();
        super::encode_ewah(&mut out, bit_size, &words);
        proptest::prop_assert_eq!(decode_ewah(&out), (bit_size as u32, words));
        proptest::prop_assert!(out.len() <= 12 + 8 * (1 + 2 * bits.len()));
    }
}

#[test]
fn split_index_bitmaps_with_long_runs_read_back_in_git() {
    let Some(repo) = repository(2000) else {
        return;
    };
    let libgit2 = Repository::open(repo.path()).unwrap();
    let mut index = WorktreeIndex::open(&libgit2).unwrap().with_split_min(10);
    index.write(&libgit2).unwrap();
    // Entries far apart (runs of zero words between them), one deleted.
    repo.write("d20/f200.txt", "changed\n");
    repo.write("d150/f1500.txt", "changed\n");
    fs_err::remove_file(repo.path().join("d99/f999.txt")).unwrap();
    stage(
        &libgit2,
        &mut index,
        &["d20/f200.txt", "d150/f1500.txt", "d99/f999.txt"],
    );
    assert_eq!(git_view(&repo, &libgit2), "");
    assert_eq!(repo.git(&["ls-files"]).lines().count(), 1999);
    let split = fs_err::metadata(repo.path().join(".git/index"))
        .unwrap()
        .len();
    assert!(split < 400, "split index of 3 entries: {split} bytes");
}

#[test]
fn a_large_index_is_split_when_the_worktree_is_set_up() {
    let Some(repo) = repository(200) else {
        return;
    };
    let libgit2 = Repository::open(repo.path()).unwrap();
    let mut index = WorktreeIndex::open(&libgit2).unwrap().with_split_min(10);
    index.split_now(&libgit2).unwrap();
    let shared = shared_files(&repo);
    assert_eq!(shared.len(), 1, "the shared index is written at set-up");
    assert_eq!(git_view(&repo, &libgit2), "");
    // The first stage writes only its change over it.
    repo.write("d4/f40.txt", "changed\n");
    stage(&libgit2, &mut index, &["d4/f40.txt"]);
    assert_eq!(shared_files(&repo), shared);
    assert_eq!(git_view(&repo, &libgit2), "");
    // A small index is left as libgit2 wrote it.
    let Some(small) = repository(5) else {
        return;
    };
    let libgit2 = Repository::open(small.path()).unwrap();
    let mut index = WorktreeIndex::open(&libgit2).unwrap().with_split_min(10);
    index.split_now(&libgit2).unwrap();
    assert!(shared_files(&small).is_empty());
}
