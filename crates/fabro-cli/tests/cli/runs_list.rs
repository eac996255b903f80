//! `fabro runs --status S --limit N` (SPEC 17.4): filters, the limit, start times in local
//! time with their age, and the workflow path when two listed runs share a name.

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::{code, fabro, stderr, stdout};

const FRAME_START: &str = "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n";

fn run(env: &TestEnv, file: &str, run_id: &str, script: &str, expected_code: i32) {
    env.write(
        file,
        &format!("{FRAME_START}  t [shape=parallelogram, script=\"{script}\"]\n  start -> t -> exit\n}}\n"),
    );
    let output = fabro(env, &["run", file, "--run-id", run_id]);
    assert_eq!(code(&output), expected_code, "{}", stderr(&output));
}

/// The cells of each table row (cells are separated by two spaces or more).
fn rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip(1)
        .map(|line| {
            line.split("  ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

fn listed(env: &TestEnv, args: &[&str]) -> Vec<String> {
    let mut all = vec!["runs"];
    all.extend_from_slice(args);
    let output = fabro(env, &all);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    rows(&stdout(&output))
        .into_iter()
        .map(|row| row[0].clone())
        .collect()
}

#[test]
fn runs_filter_by_status_and_limit_the_list() {
    let env = TestEnv::new("runs_filter");
    run(&env, "a.fabro", "r-one", "true", 0);
    run(&env, "a.fabro", "r-partial", "exit 4", 3);
    run(&env, "a.fabro", "r-two", "true", 0);

    assert_eq!(listed(&env, &[]), ["r-two", "r-partial", "r-one"]);
    assert_eq!(listed(&env, &["--status", "success"]), ["r-two", "r-one"]);
    assert_eq!(
        listed(
            &env,
            &["--status", "partial_success", "--status", "success"]
        ),
        ["r-two", "r-partial", "r-one"]
    );
    assert_eq!(listed(&env, &["--status", "fail"]), Vec::<String>::new());
    assert_eq!(listed(&env, &["--limit", "2"]), ["r-two", "r-partial"]);
    assert_eq!(
        listed(&env, &["--status", "success", "--limit", "1"]),
        ["r-two"]
    );

    let output = fabro(&env, &["runs", "--json", "--status", "partial_success"]);
    let json: Value = serde_json::from_str(&stdout(&output)).expect("one JSON document");
    let ids: Vec<&str> = json
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|run| run["run_id"].as_str())
        .collect();
    assert_eq!(ids, ["r-partial"]);

    let output = fabro(&env, &["runs", "--status", "finished"]);
    assert_eq!(code(&output), 2, "an unknown status is a usage error");
    assert!(stderr(&output).contains("finished"), "{}", stderr(&output));
}

/// `2026-11-25T08:33:00.123Z` plus 5 h 30 min as `2026-11-25 14:03`.
fn kolkata_minute(utc: &str) -> String {
    let number = |range: std::ops::Range<usize>| -> i64 { utc[range].parse().expect("a number") };
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    let minutes = number(11..13) * 60 + number(14..16) + 5 * 60 + 30;
    // Days since 1970-01-01 of the civil date, and back (proleptic Gregorian calendar).
    let shifted_year = if month <= 2 { year - 1 } else { year };
    let era = shifted_year.div_euclid(400);
    let year_of_era = shifted_year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468 + minutes / (24 * 60);
    let minutes = minutes % (24 * 60);
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}",
        minutes / 60,
        minutes % 60
    )
}

#[test]
fn the_kolkata_conversion_of_the_test_crosses_days() {
    assert_eq!(
        kolkata_minute("2026-11-25T08:33:00.123Z"),
        "2026-11-25 14:03"
    );
    assert_eq!(kolkata_minute("2026-12-31T20:00:00Z"), "2027-01-01 01:30");
    assert_eq!(kolkata_minute("2028-02-28T19:00:00Z"), "2028-02-29 00:30");
}

#[test]
fn runs_show_local_start_times_with_their_age_and_paths_of_shared_names() {
    let env = TestEnv::new("runs_local_time");
    run(&env, "first.fabro", "r-first", "true", 0);
    env.write(
        "other.fabro",
        "digraph other {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit\n}\n",
    );
    let output = fabro(&env, &["run", "other.fabro", "--run-id", "r-other"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    run(&env, "second.fabro", "r-second", "true", 0);

    let output = fabro(&env, &["runs", "--json"]);
    let json: Value = serde_json::from_str(&stdout(&output)).expect("one JSON document");
    let started = json[0]["started_at"]
        .as_str()
        .expect("a start time")
        .to_owned();
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .arg("runs")
        .env("TZ", "Asia/Kolkata")
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let rows = rows(&stdout(&output));
    assert_eq!(rows[0][0], "r-second");
    assert_eq!(
        rows[0][1], "w (second.fabro)",
        "a shared name shows the path"
    );
    assert_eq!(rows[1][1], "other", "a name of its own stays bare");
    assert_eq!(rows[2][1], "w (first.fabro)");
    let cell = &rows[0][3];
    let (time, age) = cell
        .split_once(" (")
        .unwrap_or_else(|| panic!("time and age: {cell}"));
    assert_eq!(time, kolkata_minute(&started), "local time: {cell}");
    let age = age
        .strip_suffix(" ago)")
        .unwrap_or_else(|| panic!("an age: {cell}"));
    let (number, unit) = age.split_at(age.len() - 1);
    assert!(
        number.parse::<u64>().is_ok() && (unit == "s" || unit == "m"),
        "a recent run's age: {cell}"
    );
}
