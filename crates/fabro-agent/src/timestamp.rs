//! UTC calendar arithmetic without a date library: RFC 3339 timestamps with
//! milliseconds (SPEC 11.3) and `YYYY-MM-DD` dates.
//!
//! The one copy of the proleptic Gregorian conversion (Howard Hinnant's
//! `days_from_civil` and its inverse) in the workspace. It lives in the lowest crate that
//! needs it: the agent dates its environment context; the engine stamps events,
//! checkpoints and run records and reads them back.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds of a day; UTC has no leap seconds in this arithmetic (SPEC 11.3).
const SECONDS_PER_DAY: u64 = 86_400;
/// Days from 0000-03-01 to 1970-01-01: the algorithm counts from a March 1st so that
/// the leap day ends the year.
const EPOCH_SHIFT_DAYS: i64 = 719_468;
/// Days of a 400-year Gregorian cycle.
const DAYS_PER_ERA: i64 = 146_097;

/// Now, as `2026-05-05T09:54:22.123Z`.
pub fn now_rfc3339() -> String {
    format_rfc3339(SystemTime::now())
}

/// Formats `time` as RFC 3339 UTC with milliseconds (`2026-05-05T09:54:22.123Z`).
/// Instants before 1970 are formatted as the epoch.
pub fn format_rfc3339(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let seconds = since_epoch.as_secs();
    let millis = since_epoch.subsec_millis();
    let second_of_day = seconds % SECONDS_PER_DAY;
    let (year, month, day) = civil_from_days(days_since_epoch(seconds));
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// The UTC date of `time` as `YYYY-MM-DD`; instants before 1970 give `1970-01-01`.
pub fn utc_date(time: SystemTime) -> String {
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    date_of_day(days_since_epoch(seconds))
}

/// Parses the timestamps [`format_rfc3339`] writes (`2026-05-05T09:54:22.123Z`); also
/// accepts whole seconds and fewer or more fraction digits (cut to milliseconds).
/// Anything else, and instants before 1970, are `None`.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date_parts = date.splitn(3, '-');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: u32 = date_parts.next()?.parse().ok()?;
    let day: u32 = date_parts.next()?.parse().ok()?;
    let (clock, fraction) = match time.split_once('.') {
        Some((clock, fraction)) => (clock, fraction),
        None => (time, "0"),
    };
    let mut clock_parts = clock.splitn(3, ':');
    let hour: u64 = clock_parts.next()?.parse().ok()?;
    let minute: u64 = clock_parts.next()?.parse().ok()?;
    let second: u64 = clock_parts.next()?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 || fraction.is_empty() || !fraction.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let millis: u64 = format!("{fraction:0<3}").get(..3)?.parse().ok()?;
    let days = u64::try_from(days_from_civil(year, month, day)).ok()?;
    let seconds = days
        .checked_mul(SECONDS_PER_DAY)?
        .checked_add(hour * 3600 + minute * 60 + second)?;
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds) + Duration::from_millis(millis))
}

/// Whole days between the epoch and `seconds` after it.
fn days_since_epoch(seconds: u64) -> i64 {
    i64::try_from(seconds / SECONDS_PER_DAY).unwrap_or(i64::MAX)
}

/// `YYYY-MM-DD` of a day count since 1970-01-01.
fn date_of_day(days: i64) -> String {
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days.saturating_add(EPOCH_SHIFT_DAYS);
    let era = shifted.div_euclid(DAYS_PER_ERA);
    let day_of_era = shifted.rem_euclid(DAYS_PER_ERA);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    // Months counted from March: 0 is March, 11 is February.
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // Both are in range by construction: day 1..=31, month 1..=12.
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

/// (year, month, day) to days since 1970-01-01, proleptic Gregorian; the inverse of
/// [`civil_from_days`] for valid dates.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * DAYS_PER_ERA + day_of_era - EPOCH_SHIFT_DAYS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_millis(millis)
    }

    #[test]
    fn formats_known_instants() {
        let check = |seconds: u64, millis: u64, expected: &str| {
            assert_eq!(format_rfc3339(at(seconds, millis)), expected);
        };
        check(0, 0, "1970-01-01T00:00:00.000Z");
        check(951_782_400, 5, "2000-02-29T00:00:00.005Z");
        check(1_778_061_262, 123, "2026-05-06T09:54:22.123Z");
        check(4_102_444_799, 999, "2099-12-31T23:59:59.999Z");
        assert_eq!(
            format_rfc3339(UNIX_EPOCH - Duration::from_secs(1)),
            "1970-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn year_boundaries_roll_over_at_midnight() {
        // 1999-12-31T23:59:59.999Z, one millisecond before 2000.
        assert_eq!(
            format_rfc3339(at(946_684_799, 999)),
            "1999-12-31T23:59:59.999Z"
        );
        assert_eq!(
            format_rfc3339(at(946_684_800, 0)),
            "2000-01-01T00:00:00.000Z"
        );
        assert_eq!(utc_date(at(1_767_225_599, 0)), "2025-12-31");
        assert_eq!(utc_date(at(1_767_225_600, 0)), "2026-01-01");
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
    }

    #[test]
    fn leap_years_follow_the_gregorian_rules() {
        // Divisible by 4: leap; by 100: not; by 400: leap.
        for (year, leap) in [
            (1900, false),
            (1996, true),
            (2000, true),
            (2023, false),
            (2024, true),
            (2100, false),
        ] {
            let march_first = days_from_civil(year, 3, 1);
            let last_of_february = civil_from_days(march_first - 1);
            let expected_day = if leap { 29 } else { 28 };
            assert_eq!(last_of_february, (year, 2, expected_day), "{year}");
            let year_length = days_from_civil(year + 1, 1, 1) - days_from_civil(year, 1, 1);
            assert_eq!(year_length, if leap { 366 } else { 365 }, "{year}");
        }
        assert_eq!(utc_date(at(951_782_400, 0)), "2000-02-29");
        assert_eq!(utc_date(at(951_868_800, 0)), "2000-03-01");
    }

    #[test]
    fn days_and_dates_are_inverse_over_centuries() {
        // Every day from 1600-01-01 to 2400-12-31, both directions.
        let first = days_from_civil(1600, 1, 1);
        let last = days_from_civil(2400, 12, 31);
        let mut previous = civil_from_days(first - 1);
        for days in first..=last {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year, month, day), days);
            assert!((year, month, day) > previous, "{days}");
            previous = (year, month, day);
        }
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
    }

    #[test]
    fn timestamps_parse_back_to_the_instant_they_name() {
        let check = |text: &str, expected: Option<Duration>| {
            assert_eq!(
                parse_rfc3339(text)
                    .map(|time| time.duration_since(UNIX_EPOCH).expect("after the epoch")),
                expected,
                "{text}"
            );
        };
        check("1970-01-01T00:00:00.000Z", Some(Duration::ZERO));
        check(
            "2000-02-29T00:00:00.005Z",
            Some(Duration::from_millis(951_782_400_005)),
        );
        check(
            "2026-05-06T09:54:22.123Z",
            Some(Duration::from_millis(1_778_061_262_123)),
        );
        check(
            "2026-05-06T09:54:22Z",
            Some(Duration::from_secs(1_778_061_262)),
        );
        check(
            "2026-05-06T09:54:22.1Z",
            Some(Duration::from_millis(1_778_061_262_100)),
        );
        for bad in [
            "",
            "2026-05-06",
            "2026-13-01T00:00:00Z",
            "2026-05-06T09:54:22.xZ",
            "2026-05-06T09:54:22+01:00",
            "1969-12-31T23:59:59Z",
        ] {
            check(bad, None);
        }
        for seconds in [0_u64, 86_399, 951_782_400, 946_684_799, 4_102_444_799] {
            let time = at(seconds, 7);
            assert_eq!(parse_rfc3339(&format_rfc3339(time)), Some(time));
        }
    }
}
