//! Tests of asset capture against temporary working directories.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::*;

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn work_dir(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    fn asset_dir(&self) -> PathBuf {
        asset_dir(&self.dir.path().join("run"), "Run Tests", 1)
    }

    fn write(&self, relative: &str, contents: &str) {
        let path = self.work_dir().join(relative);
        fs_err::create_dir_all(path.parent().unwrap()).unwrap();
        fs_err::write(path, contents).unwrap();
    }
}

fn scanner(include: &[&str], limits: CaptureLimits) -> AssetScanner {
    let include: Vec<String> = include.iter().map(|glob| (*glob).to_owned()).collect();
    AssetScanner::new(&include, limits).unwrap()
}

fn captured_paths(report: &CaptureReport) -> Vec<&str> {
    report
        .captured
        .iter()
        .map(|asset| asset.path.as_str())
        .collect()
}

#[test]
fn junit_and_playwright_report_are_captured() {
    let fixture = Fixture::new();
    fixture.write("src/main.rs", "fn main() {}");
    let scanner = scanner(&[], CaptureLimits::default());
    let baseline = scanner.baseline(&fixture.work_dir());
    fixture.write("junit.xml", "<testsuites/>");
    fixture.write("reports/junit-unit.xml", "<testsuites/>");
    fixture.write("playwright-report/index.html", "<html/>");
    fixture.write("playwright-report/data/shot.png", "png");
    fixture.write("web/test-results/login/trace.zip", "zip");
    fixture.write("e2e/cypress/videos/login.mp4", "mp4");
    fixture.write("e2e/cypress/screenshots/fail.png", "png");
    fixture.write("traces/run.trace.zip", "zip");
    fixture.write("videos/not-cypress.mp4", "no");
    fixture.write("junit.txt", "no");
    fixture.write("src/lib.rs", "no");
    let report = scanner.capture(&baseline, &fixture.asset_dir());
    assert_eq!(
        captured_paths(&report),
        vec![
            "e2e/cypress/screenshots/fail.png",
            "e2e/cypress/videos/login.mp4",
            "junit.xml",
            "playwright-report/data/shot.png",
            "playwright-report/index.html",
            "reports/junit-unit.xml",
            "traces/run.trace.zip",
            "web/test-results/login/trace.zip",
        ]
    );
    assert!(report.skipped.is_empty());
    let stored = fixture
        .dir
        .path()
        .join("run/artifacts/files/run-tests/retry_1/playwright-report/data/shot.png");
    assert_eq!(report.captured[3].stored, stored);
    assert_eq!(fs_err::read_to_string(stored).unwrap(), "png");
    assert_eq!(report.captured[2].size, "<testsuites/>".len() as u64);
}

#[test]
fn unchanged_files_are_skipped_and_changed_ones_captured() {
    let fixture = Fixture::new();
    fixture.write("junit.xml", "<old/>");
    fixture.write("test-results/kept.png", "same");
    let scanner = scanner(&[], CaptureLimits::default());
    let baseline = scanner.baseline(&fixture.work_dir());
    fixture.write("junit.xml", "<new and longer/>");
    let report = scanner.capture(&baseline, &fixture.asset_dir());
    assert_eq!(captured_paths(&report), vec!["junit.xml"]);
    // A second attempt with a fresh baseline does not repeat attempt 1's files.
    let baseline = scanner.baseline(&fixture.work_dir());
    let report = scanner.capture(&baseline, &fixture.asset_dir());
    assert!(report.captured.is_empty());
}

#[test]
fn the_rescan_after_an_attempt_is_the_next_attempts_baseline() {
    let fixture = Fixture::new();
    fixture.write("src/lib.rs", "");
    let scanner = scanner(&[], CaptureLimits::default());
    let baseline = scanner.baseline(&fixture.work_dir());
    fixture.write("junit.xml", "<first/>");
    let (report, snapshot) = scanner.capture_with_snapshot(&baseline, &fixture.asset_dir());
    assert_eq!(captured_paths(&report), vec!["junit.xml"]);
    assert_eq!(snapshot.work_dir(), fixture.work_dir());
    // junit.xml is seconds old at most, so only the snapshot's fingerprint keeps the
    // next attempt from capturing it again.
    let baseline = snapshot.into_baseline().expect("a complete scan");
    let (report, snapshot) = scanner.capture_with_snapshot(&baseline, &fixture.asset_dir());
    assert!(report.captured.is_empty(), "{report:?}");
    let baseline = snapshot.into_baseline().expect("a complete scan");
    fixture.write("junit.xml", "<second, longer/>");
    let report = scanner.capture(&baseline, &fixture.asset_dir());
    assert_eq!(captured_paths(&report), vec!["junit.xml"]);
}

#[test]
fn a_rescan_cut_short_is_no_baseline() {
    let fixture = Fixture::new();
    fixture.write("junit.xml", "<x/>");
    let limits = CaptureLimits {
        scan_timeout: Duration::ZERO,
        ..CaptureLimits::default()
    };
    let scanner = scanner(&[], limits);
    let baseline = scanner.baseline(&fixture.work_dir());
    let (report, snapshot) = scanner.capture_with_snapshot(&baseline, &fixture.asset_dir());
    assert!(matches!(
        report.skipped.last(),
        Some(AssetSkip::ScanTimedOut { .. })
    ));
    assert!(snapshot.into_baseline().is_none());
}

#[test]
fn files_with_an_old_mtime_are_not_collected() {
    let fixture = Fixture::new();
    let scanner = scanner(&[], CaptureLimits::default());
    let baseline = scanner.baseline(&fixture.work_dir());
    fixture.write("test-results/unpacked.png", "old");
    fixture.write("test-results/fresh.png", "new");
    let old = SystemTime::now() - Duration::from_secs(3600);
    fs_err::File::options()
        .write(true)
        .open(fixture.work_dir().join("test-results/unpacked.png"))
        .unwrap()
        .file()
        .set_modified(old)
        .unwrap();
    let report = scanner.capture(&baseline, &fixture.asset_dir());
    assert_eq!(captured_paths(&report), vec!["test-results/fresh.png"]);
}

#[test]
fn excluded_directories_are_never_scanned() {
    let fixture = Fixture::new();
    let scanner = scanner(&["**/*.html"], CaptureLimits::default());
    let baseline = scanner.baseline(&fixture.work_dir());
    for dir in [
        "node_modules/pkg",
        "app/node_modules",
        ".git",
        "target/debug",
        ".fabro",
        ".cache/ms-playwright",
        ".yarn/cache",
    ] {
        fixture.write(&format!("{dir}/test-results/a.png"), "x");
        fixture.write(&format!("{dir}/junit.xml"), "x");
        fixture.write(&format!("{dir}/page.html"), "x");
    }
    fixture.write(".cache/other/junit.xml", "scanned");
    fixture.write("cache/ms-playwright/junit.xml", "scanned");
    let report = scanner.capture(&baseline, &fixture.asset_dir());
    assert_eq!(
        captured_paths(&report),
        vec![".cache/other/junit.xml", "cache/ms-playwright/junit.xml"]
    );
}

#[test]
fn include_globs_add_candidates() {
    let fixture = Fixture::new();
    let scanner = scanner(&["reports/*.html", "*.lcov"], CaptureLimits::default());
    let baseline = scanner.baseline(&fixture.work_dir());
    fixture.write("reports/coverage.html", "x");
    fixture.write("reports/deep/other.html", "x");
    fixture.write("pkg/coverage.lcov", "x");
    fixture.write("notes.md", "x");
    let report = scanner.capture(&baseline, &fixture.asset_dir());
    assert_eq!(
        captured_paths(&report),
        vec!["pkg/coverage.lcov", "reports/coverage.html"]
    );
    assert!(AssetScanner::new(&["a[z-a]".to_owned()], CaptureLimits::default()).is_err());
}

#[test]
fn files_over_the_default_size_limit_are_skipped() {
    let fixture = Fixture::new();
    let scanner = scanner(&[], CaptureLimits::default());
    let baseline = scanner.baseline(&fixture.work_dir());
    fixture.write("test-results/small.png", "x");
    let big = fixture.work_dir().join("test-results/video.webm");
    fs_err::File::create(&big)
        .unwrap()
        .set_len(10 * 1024 * 1024 + 1)
        .unwrap();
    let report = scanner.capture(&baseline, &fixture.asset_dir());
    assert_eq!(captured_paths(&report), vec!["test-results/small.png"]);
    assert_eq!(
        report.skipped,
        vec![AssetSkip::FileTooLarge {
            path: "test-results/video.webm".to_owned(),
            size: 10 * 1024 * 1024 + 1,
            limit: 10 * 1024 * 1024,
        }]
    );
    assert!(!fixture.asset_dir().join("test-results/video.webm").exists());
}

#[test]
fn count_and_total_limits_skip_further_files() {
    let fixture = Fixture::new();
    let limits = CaptureLimits {
        max_file_bytes: 10,
        max_files: 2,
        max_total_bytes: 8,
        scan_timeout: Duration::from_secs(30),
    };
    let scanner = scanner(&[], limits);
    let baseline = scanner.baseline(&fixture.work_dir());
    fixture.write("test-results/a.txt", "12345");
    fixture.write("test-results/b.txt", "123456");
    fixture.write("test-results/c.txt", "123");
    fixture.write("test-results/d.txt", "1");
    fixture.write("test-results/e.txt", "12345678901");
    let report = scanner.capture(&baseline, &fixture.asset_dir());
    assert_eq!(
        captured_paths(&report),
        vec!["test-results/a.txt", "test-results/c.txt"]
    );
    assert_eq!(
        report.skipped,
        vec![
            AssetSkip::TotalTooLarge {
                path: "test-results/b.txt".to_owned(),
                size: 6,
                limit: 8
            },
            AssetSkip::TooManyFiles {
                path: "test-results/d.txt".to_owned(),
                limit: 2
            },
            AssetSkip::FileTooLarge {
                path: "test-results/e.txt".to_owned(),
                size: 11,
                limit: 10
            },
        ]
    );
    assert_eq!(
        report.skipped[0].to_string(),
        "asset test-results/b.txt skipped: its 6 bytes would exceed the 8-byte total for this attempt"
    );
}

#[test]
fn a_scan_past_its_deadline_reports_a_skip() {
    let fixture = Fixture::new();
    fixture.write("junit.xml", "x");
    let limits = CaptureLimits {
        scan_timeout: Duration::ZERO,
        ..CaptureLimits::default()
    };
    let scanner = scanner(&[], limits);
    let baseline = scanner.baseline(&fixture.work_dir());
    let report = scanner.capture(&baseline, &fixture.asset_dir());
    assert!(report.captured.is_empty());
    assert_eq!(
        report.skipped,
        vec![AssetSkip::ScanTimedOut {
            after: Duration::ZERO
        }]
    );
}

#[test]
fn missing_working_directory_captures_nothing() {
    let scanner = scanner(&[], CaptureLimits::default());
    let baseline = scanner.baseline(Path::new("/nonexistent/fabro/work"));
    let report = scanner.capture(&baseline, Path::new("/nonexistent/fabro/assets"));
    assert_eq!(report, CaptureReport::default());
}

#[test]
fn node_slug_lowercases_and_replaces_other_characters() {
    for (node_id, slug) in [
        ("run_tests", "run_tests"),
        ("Run Tests", "run-tests"),
        ("e2e.Playwright-2", "e2e-playwright-2"),
        ("Übung/ä", "-bung--"),
    ] {
        assert_eq!(node_slug(node_id), slug, "{node_id}");
    }
    assert_eq!(
        asset_dir(Path::new("/r"), "Build", 3),
        Path::new("/r/artifacts/files/build/retry_3")
    );
}

#[test]
fn skipped_directories_are_never_entered() {
    let work = tempfile::tempdir().expect("tempdir");
    let home = work.path().join("fabro-home");
    fs_err::create_dir_all(home.join("scratch/r1/test-results")).expect("mkdir");
    let scanner = AssetScanner::new(&[], CaptureLimits::default())
        .expect("scanner")
        .skipping(&home);
    let baseline = scanner.baseline(work.path());
    fs_err::write(home.join("scratch/r1/test-results/out.txt"), "x").expect("write");
    fs_err::write(work.path().join("junit.xml"), "<testsuite/>").expect("write");
    let report = scanner.capture(&baseline, &work.path().join("assets"));
    let captured: Vec<&str> = report
        .captured
        .iter()
        .map(|asset| asset.path.as_str())
        .collect();
    assert_eq!(captured, ["junit.xml"]);
}
