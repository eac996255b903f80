//! Conversion of attribute literals to typed values (SPEC 2.4).
//!
//! Literals carry no type of their own: `max_retries=3` and `max_retries="3"` are the same.
//! Each attribute converts its literal with one of these functions; a failure becomes an
//! `attribute_type` diagnostic at the attribute.

use std::time::Duration;

/// Parses a Boolean: `true` or `false`, case-insensitive.
pub fn parse_bool(text: &str) -> Option<bool> {
    if text.eq_ignore_ascii_case("true") {
        Some(true)
    } else if text.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// Parses an Integer `-?[0-9]+` into an `i64`; out of range is `None`.
pub fn parse_integer(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Parses a Float: an Integer or `-?[0-9]*\.[0-9]+`.
pub fn parse_float(text: &str) -> Option<f64> {
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let whole_ok = whole.bytes().all(|b| b.is_ascii_digit());
    let valid = match fraction {
        Some(fraction) => {
            whole_ok && !fraction.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit())
        }
        None => whole_ok && !whole.is_empty(),
    };
    if !valid {
        return None;
    }
    text.parse().ok()
}

/// Parses a Duration: `{n}ms`, `{n}s`, `{n}m`, `{n}h`, `{n}d`, or a bare integer meaning
/// seconds. Fractions, signs and other units are rejected.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let amount: u64 = text[..digits].parse().ok()?;
    let millis_per_unit: u64 = match &text[digits..] {
        "" | "s" => 1_000,
        "ms" => 1,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    amount
        .checked_mul(millis_per_unit)
        .map(Duration::from_millis)
}

/// Writes a duration in the largest unit that expresses it exactly (SPEC 2.10:
/// `600s` → `10m`, `90s` → `90s`, `1500ms` → `1500ms`).
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis == 0 {
        return "0s".to_owned();
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if millis.is_multiple_of(size) {
            return format!("{}{unit}", millis / size);
        }
    }
    format!("{millis}ms")
}

/// Splits a List: comma-separated, items trimmed, empty items dropped.
#[inline]
pub fn parse_list(text: &str) -> Vec<String> {
    if text.is_empty() {
        // The common case (no `class`, no `write_scope`), without a call or the split.
        return Vec::new();
    }
    parse_list_items(text)
}

/// [`parse_list`] of a non-empty text.
#[inline(never)]
fn parse_list_items(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans() {
        assert_eq!(parse_bool("TRUE"), Some(true));
        assert_eq!(parse_bool("false"), Some(false));
        assert_eq!(parse_bool("yes"), None);
        assert_eq!(parse_bool("1"), None);
    }

    #[test]
    fn integers_and_floats() {
        assert_eq!(parse_integer("-12"), Some(-12));
        assert_eq!(parse_integer("+1"), None);
        assert_eq!(parse_integer("1.0"), None);
        assert_eq!(parse_integer("99999999999999999999"), None);
        assert_eq!(parse_float("0.5"), Some(0.5));
        assert_eq!(parse_float("-.5"), Some(-0.5));
        assert_eq!(parse_float("3"), Some(3.0));
        assert_eq!(parse_float("1e5"), None);
        assert_eq!(parse_float("inf"), None);
        assert_eq!(parse_float("."), None);
    }

    #[test]
    fn durations() {
        let check = |text: &str, millis: Option<u64>| {
            assert_eq!(
                parse_duration(text),
                millis.map(Duration::from_millis),
                "{text}"
            );
        };
        check("900s", Some(900_000));
        check("1200", Some(1_200_000));
        check("250ms", Some(250));
        check("2m", Some(120_000));
        check("1h", Some(3_600_000));
        check("1d", Some(86_400_000));
        check("1.5h", None);
        check("-1s", None);
        check("5x", None);
        check("s", None);
        check("99999999999999999999d", None);
    }

    #[test]
    fn durations_format_in_the_largest_exact_unit() {
        let check = |millis: u64, expected: &str| {
            assert_eq!(format_duration(Duration::from_millis(millis)), expected);
        };
        check(600_000, "10m");
        check(90_000, "90s");
        check(1_500, "1500ms");
        check(7_200_000, "2h");
        check(0, "0s");
    }

    #[test]
    fn lists() {
        assert_eq!(parse_list(" code , critical,,"), ["code", "critical"]);
        assert!(parse_list("").is_empty());
    }
}
