//! The mirrors, pushes and checkout checks of repositories named by URL, against bare
//! repositories made with the `git` program.

use std::path::Path;

use super::{
    checkout_origin, has_credentials, without_credentials, CheckoutOrigin, Mirrors, PushedRefs,
    RemotePush,
};
use crate::git::test_repo::{git_in, TestRepo};

/// A bare "remote" cloned from `repo`, with a tag `v1` on the first commit and a second
/// commit on `main`; its URL.
fn remote_of(repo: &TestRepo) -> String {
    repo.git(&["tag", "v1"]);
    repo.write("README.md", "hello again\n");
    repo.git(&["commit", "-q", "-am", "second"]);
    let remote = repo.outside("remote.git");
    git_in(
        &repo.path(),
        &["clone", "-q", "--bare", ".", remote.to_str().unwrap()],
    );
    remote.display().to_string()
}

fn rev(dir: &Path, name: &str) -> String {
    git_in(dir, &["rev-parse", name])
}

#[test]
fn a_ref_branch_tag_or_commit_of_a_url_is_fetched_into_one_mirror_and_checked_out() {
    let Some(repo) = TestRepo::new() else { return };
    let url = remote_of(&repo);
    let mirrors = Mirrors::new(repo.outside("mirrors"));
    let (mirror, head) = mirrors.resolve(&url, None).unwrap();
    assert_eq!(head, rev(&repo.path(), "main"));
    let (again, tagged) = mirrors.resolve(&url, Some("v1")).unwrap();
    assert_eq!(again, mirror, "one mirror per URL");
    assert_eq!(tagged, rev(&repo.path(), "v1^{commit}"));
    let (_, pinned) = mirrors.resolve(&url, Some(&tagged)).unwrap();
    assert_eq!(pinned, tagged);
    let checkout = repo.outside("checkout");
    Mirrors::checkout(&mirror, &tagged, &checkout).unwrap();
    assert_eq!(
        fs_err::read_to_string(checkout.join("README.md")).unwrap(),
        "hello\n"
    );
    assert!(!checkout.join(".git").exists());
    let missing = mirrors.resolve(&url, Some("no-such-branch")).unwrap_err();
    assert!(
        missing.to_string().contains("cannot fetch no-such-branch"),
        "{missing}"
    );
}

#[test]
fn a_push_is_a_compare_and_swap_on_what_was_last_pushed() {
    let Some(repo) = TestRepo::new() else { return };
    let url = remote_of(&repo);
    let remote = Path::new(&url);
    let (first, second) = (rev(&repo.path(), "main~1"), rev(&repo.path(), "main"));
    let mut owner = RemotePush::new(url.clone(), PushedRefs::default());
    owner
        .push(&repo.path().join(".git"), "run-1", &first, &first)
        .unwrap();
    assert_eq!(rev(remote, "fabro/run/run-1"), first);
    assert_eq!(rev(remote, "refs/fabro/run-1"), first);
    // A second worker took the run over from what the remote had and pushed.
    let fetched = Mirrors::new(repo.outside("mirrors"))
        .take_over(&url, "run-1", Some(&second))
        .unwrap();
    assert_eq!(fetched.pushed.branch.as_deref(), Some(first.as_str()));
    let mut taker = RemotePush::new(url.clone(), fetched.pushed);
    taker
        .push(&fetched.mirror, "run-1", &second, &second)
        .unwrap();
    // The first owner's next push expects `first` and is refused; nothing moves.
    let refused = owner
        .push(&repo.path().join(".git"), "run-1", &first, &second)
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("cannot push the refs of run run-1"),
        "{refused}"
    );
    assert_eq!(rev(remote, "fabro/run/run-1"), second);
    assert_eq!(rev(remote, "refs/fabro/run-1"), second);
}

#[test]
fn a_run_the_remote_does_not_have_leaves_no_stale_refs_in_the_mirror() {
    let Some(repo) = TestRepo::new() else { return };
    let url = remote_of(&repo);
    let mirrors = Mirrors::new(repo.outside("mirrors"));
    let (mirror, head) = mirrors.resolve(&url, None).unwrap();
    git_in(
        &mirror,
        &["update-ref", "refs/heads/fabro/run/run-2", &head],
    );
    // Reading leaves the mirror's refs alone (the run may execute in it).
    let read = mirrors.fetch_run(&url, "run-2", Some(&head)).unwrap();
    assert_eq!(read.pushed, PushedRefs::default());
    assert_eq!(rev(&mirror, "fabro/run/run-2"), head);
    let fetched = mirrors.take_over(&url, "run-2", Some(&head)).unwrap();
    assert_eq!(
        (&fetched.pushed.branch, &fetched.pushed.metadata),
        (&None, &None)
    );
    assert!(fetched.pushed.lease.is_some(), "fenced");
    assert_eq!(fetched.commit, head);
    let refs = git_in(&mirror, &["for-each-ref", "refs/heads/fabro"]);
    assert!(refs.is_empty(), "{refs}");
}

/// SPEC 18.4: a worker paused between asking for its lease and pushing pushes nothing
/// once another took the run over, even before the new worker's first push, and even
/// when it had pushed nothing yet; the fence is outside the run's history.
#[test]
fn a_takeover_fences_the_remote_against_the_previous_workers_next_push() {
    let Some(repo) = TestRepo::new() else { return };
    let url = remote_of(&repo);
    let remote = Path::new(&url);
    let git_dir = repo.path().join(".git");
    let (first, second) = (rev(&repo.path(), "main~1"), rev(&repo.path(), "main"));
    let mut paused = RemotePush::new(url.clone(), PushedRefs::default());
    paused.push(&git_dir, "run-1", &first, &first).unwrap();
    let mirrors = Mirrors::new(repo.outside("mirrors"));
    let taken = mirrors.take_over(&url, "run-1", Some(&second)).unwrap();
    assert_eq!(taken.pushed.metadata.as_deref(), Some(first.as_str()));
    let fence = taken.pushed.lease.clone().unwrap();
    assert_eq!(rev(remote, "refs/fabro-lease/run-1"), fence);
    assert_eq!(git_in(remote, &["rev-list", "--count", &fence]), "1");

    let refused = paused
        .push(&git_dir, "run-1", &second, &second)
        .unwrap_err();
    assert!(refused.to_string().contains("cannot push"), "{refused}");
    assert_eq!(rev(remote, "fabro/run/run-1"), first);
    assert_eq!(rev(remote, "refs/fabro/run-1"), first);
    let mut taker = RemotePush::new(url.clone(), taken.pushed);
    taker
        .push(&taken.mirror, "run-1", &second, &second)
        .unwrap();
    assert_eq!(rev(remote, "refs/fabro/run-1"), second);
    assert_eq!(rev(remote, "refs/fabro-lease/run-1"), second);

    // A run whose first worker had pushed nothing yet.
    let mut early = RemotePush::new(url.clone(), PushedRefs::default());
    mirrors.take_over(&url, "run-3", Some(&second)).unwrap();
    assert!(early.push(&git_dir, "run-3", &first, &first).is_err());
    let listed = git_in(remote, &["for-each-ref", "refs/heads/fabro/run/run-3"]);
    assert!(listed.is_empty(), "{listed}");
}

#[test]
fn a_checkout_offers_its_origin_only_when_clean_and_pushed() {
    let Some(repo) = TestRepo::new() else { return };
    assert_eq!(checkout_origin(&repo.path()).unwrap(), CheckoutOrigin::None);
    let url = remote_of(&repo);
    repo.git(&["remote", "add", "origin", &url]);
    let head = rev(&repo.path(), "HEAD");
    assert_eq!(
        checkout_origin(&repo.path().join("src")).unwrap(),
        CheckoutOrigin::Pushed {
            url,
            head,
            root: repo.path(),
        }
    );
    repo.write("README.md", "changed\n");
    assert_eq!(
        checkout_origin(&repo.path()).unwrap(),
        CheckoutOrigin::Dirty
    );
    repo.git(&["commit", "-q", "-am", "third"]);
    let third = rev(&repo.path(), "HEAD");
    assert_eq!(
        checkout_origin(&repo.path()).unwrap(),
        CheckoutOrigin::Unpushed { head: third }
    );
    // An older commit that a ref of the remote contains is pushed.
    repo.git(&["checkout", "-q", "--detach", "HEAD~2"]);
    assert!(matches!(
        checkout_origin(&repo.path()).unwrap(),
        CheckoutOrigin::Pushed { .. }
    ));
}

#[test]
fn credentials_in_a_url_are_not_shown() {
    let text = "fatal: unable to access 'https://me:s3cret@example.com/r.git/'";
    let shown = without_credentials(text, "https://me:s3cret@example.com/r.git");
    assert_eq!(
        shown,
        "fatal: unable to access 'https://example.com/r.git/'"
    );
}

#[test]
fn urls_with_passwords_or_http_users_carry_credentials() {
    for url in [
        "https://me:s3cret@example.com/r.git",
        "https://ghp_token@github.com/acme/r.git",
        "HTTP://x-access-token:abc@host/r.git",
        "ssh://git:pw@host/r.git",
    ] {
        assert!(has_credentials(url), "{url}");
    }
    for url in [
        "https://github.com/acme/r.git",
        "ssh://git@github.com/acme/r.git",
        "git@github.com:acme/r.git",
        "/srv/git/r.git",
        "file:///srv/git/r.git",
        "https://example.com/a@b/r.git",
    ] {
        assert!(!has_credentials(url), "{url}");
    }
}
