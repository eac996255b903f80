//! [`ChangeTracker`] snapshots against [`GitSnapshot::take`] over randomized changes, with a
//! change source that reports what the test wrote (or, to show that the comparison notices,
//! leaves a write out).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::*;
use crate::snapshot::tests::repository;

/// Reports the paths pushed into `pending`; `None` once when `lose` is set.
struct Reported {
    root: PathBuf,
    pending: Arc<Mutex<Vec<String>>>,
    lose: Arc<Mutex<bool>>,
}

impl ChangeSource for Reported {
    fn root(&self) -> &Path {
        &self.root
    }

    fn changes(&mut self) -> Option<Vec<String>> {
        let paths = std::mem::take(&mut *self.pending.lock().unwrap());
        (!std::mem::take(&mut *self.lose.lock().unwrap())).then_some(paths)
    }
}

fn env() -> ProcessEnv {
    let mut env = ProcessEnv::inherit();
    env.set("GIT_CONFIG_NOSYSTEM", "1");
    env.set("GIT_CONFIG_GLOBAL", "/dev/null");
    env.set("GIT_OPTIONAL_LOCKS", "0");
    env
}

/// A small deterministic generator (no dependency for one test).
struct Lcg(u64);

impl Lcg {
    fn random_range(&mut self, range: std::ops::Range<usize>) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        range.start + (self.0 >> 33) as usize % (range.end - range.start)
    }
}

/// Applies one random change below `root`; returns the paths a watch would report.
fn random_change(rng: &mut Lcg, root: &Path) -> Vec<String> {
    let dirs = ["", "sub/", "sub/deep/", "ignored/", "other/"];
    let dir = dirs[rng.random_range(0..dirs.len())];
    let name = format!("{dir}f{}.txt", rng.random_range(0..6));
    let path = root.join(&name);
    match rng.random_range(0..5) {
        0 | 1 => {
            fs_err::create_dir_all(path.parent().unwrap()).unwrap();
            fs_err::write(&path, format!("{}\n", rng.random_range(0..3))).unwrap();
        }
        2 => {
            let _ = std::fs::remove_file(&path);
        }
        3 => {
            fs_err::write(
                root.join("tracked.txt"),
                format!("{}\n", rng.random_range(0..3)),
            )
            .unwrap();
            return vec!["tracked.txt".to_owned()];
        }
        _ => {
            // A new directory with a file, reported as the directory.
            let directory = format!("{dir}new{}", rng.random_range(0..3));
            fs_err::create_dir_all(root.join(&directory)).unwrap();
            fs_err::write(root.join(&directory).join("inner.txt"), "x\n").unwrap();
            return vec![directory];
        }
    }
    vec![name]
}

#[test]
fn tracked_snapshots_equal_full_snapshots_and_a_missed_write_shows() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let repo = repository();
        let root = repo.path().canonicalize().unwrap();
        fs_err::create_dir_all(root.join("sub")).unwrap();
        let pending = Arc::new(Mutex::new(Vec::new()));
        let lose = Arc::new(Mutex::new(false));
        let tracking = FileTracking::with_tracker(ChangeTracker::new(Box::new(Reported {
            root: root.clone(),
            pending: Arc::clone(&pending),
            lose: Arc::clone(&lose),
        })));
        let env = env();
        let mut rng = Lcg(7);
        for step in 0..60 {
            for _ in 0..rng.random_range(1..4) {
                let reported = random_change(&mut rng, &root);
                pending.lock().unwrap().extend(reported);
            }
            if step == 30 {
                *lose.lock().unwrap() = true;
            }
            for directory in [root.clone(), root.join("sub")] {
                let tracked = tracking.snapshot(&directory, &env).await;
                let full = GitSnapshot::take(&directory, &env).await;
                assert_eq!(tracked, full, "step {step} in {}", directory.display());
            }
        }
        // A write the source leaves out is missing from the tracked snapshot.
        fs_err::write(root.join("unreported.txt"), "x\n").unwrap();
        let tracked = tracking.snapshot(&root, &env).await.unwrap();
        let full = GitSnapshot::take(&root, &env).await.unwrap();
        assert!(full.paths().any(|path| path == "unreported.txt"));
        assert!(!tracked.paths().any(|path| path == "unreported.txt"));
        // Outside the tracked tree, the snapshot is a plain one.
        let elsewhere = repository();
        assert_eq!(
            tracking.snapshot(elsewhere.path(), &env).await,
            GitSnapshot::take(elsewhere.path(), &env).await
        );
    });
}
