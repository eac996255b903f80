//! RFC 3339 UTC timestamps with milliseconds (SPEC 11.3), without a date library.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, as `2026-05-05T09:54:22.123Z`.
pub fn now_rfc3339() -> String {
    format_rfc3339(SystemTime::now())
}

/// Formats `time` as RFC 3339 UTC with milliseconds.
pub fn format_rfc3339(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let seconds = since_epoch.as_secs();
    let millis = since_epoch.subsec_millis();
    let days = i64::try_from(seconds / 86_400).unwrap_or(i64::MAX);
    let second_of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Parses the timestamps this crate writes (`2026-05-05T09:54:22.123Z`, SPEC 11.3);
/// also accepts whole seconds. Anything else is `None`.
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
        .checked_mul(86_400)?
        .checked_add(hour * 3600 + minute * 60 + second)?;
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds) + Duration::from_millis(millis))
}

/// (year, month, day) to days since 1970-01-01, proleptic Gregorian (Howard Hinnant's
/// algorithm, the inverse of `civil_from_days`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        let check = |seconds: u64, millis: u64, expected: &str| {
            let time = UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_millis(millis);
            assert_eq!(format_rfc3339(time), expected);
        };
        check(0, 0, "1970-01-01T00:00:00.000Z");
        check(951_782_400, 5, "2000-02-29T00:00:00.005Z");
        check(1_778_061_262, 123, "2026-05-06T09:54:22.123Z");
        check(4_102_444_799, 999, "2099-12-31T23:59:59.999Z");
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
        ] {
            check(bad, None);
        }
        for seconds in [0_u64, 86_399, 951_782_400, 4_102_444_799] {
            let time = UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_millis(7);
            assert_eq!(parse_rfc3339(&format_rfc3339(time)), Some(time));
        }
    }
}
