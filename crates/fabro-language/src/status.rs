//! Canonical stage statuses and the aliases accepted when reading them (SPEC 4.4).
//!
//! Everything fabro writes uses [`StageStatus::as_str`]; everything it reads (routing JSON,
//! `status.json`, checkpoint files, condition literals) goes through [`StageStatus::parse`],
//! which accepts the canonical names and their aliases case-insensitively.

use std::fmt;

/// Canonical stage status (SPEC 4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StageStatus {
    /// The stage did its job.
    Success,
    /// Acceptable but incomplete.
    PartialSuccess,
    /// The stage failed.
    Fail,
    /// Nothing to do; routes like any other outcome.
    Skipped,
    /// Asks for another attempt; internal, never visible to conditions.
    Retry,
}

/// Every accepted spelling with its status, canonical names and aliases alike (SPEC 4.4 table).
const SPELLINGS: [(&str, StageStatus); 10] = [
    ("success", StageStatus::Success),
    ("succeeded", StageStatus::Success),
    ("partial_success", StageStatus::PartialSuccess),
    ("partially_succeeded", StageStatus::PartialSuccess),
    ("fail", StageStatus::Fail),
    ("failed", StageStatus::Fail),
    ("failure", StageStatus::Fail),
    ("error", StageStatus::Fail),
    ("skipped", StageStatus::Skipped),
    ("retry", StageStatus::Retry),
];

impl StageStatus {
    /// Canonical lowercase name: "success", "partial_success", "fail", "skipped", "retry".
    pub fn as_str(self) -> &'static str {
        match self {
            StageStatus::Success => "success",
            StageStatus::PartialSuccess => "partial_success",
            StageStatus::Fail => "fail",
            StageStatus::Skipped => "skipped",
            StageStatus::Retry => "retry",
        }
    }

    /// Parses a canonical name or alias, case-insensitively: succeeded→Success, partially_succeeded→PartialSuccess,
    /// failed/failure/error→Fail. "retry" → Retry. Anything else → None.
    ///
    /// The text is not trimmed, and only ASCII letters fold case (SPEC 4.4: `FAIL`, `Failed` and
    /// `ERROR` all read as `fail`). Allocation-free, since conditions call it on every evaluation.
    pub fn parse(text: &str) -> Option<StageStatus> {
        SPELLINGS
            .iter()
            .find(|(spelling, _)| spelling.eq_ignore_ascii_case(text))
            .map(|&(_, status)| status)
    }
}

/// Written as the canonical name.
impl serde::Serialize for StageStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Read through [`StageStatus::parse`]: canonical names and aliases, any case.
impl<'de> serde::Deserialize<'de> for StageStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<StageStatus, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        StageStatus::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown status '{text}'")))
    }
}

impl fmt::Display for StageStatus {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::StageStatus;

    fn check(text: &str, expected: Option<StageStatus>) {
        assert_eq!(StageStatus::parse(text), expected, "parsing {text:?}");
    }

    #[test]
    fn statuses_serialise_canonically_and_read_aliases() {
        assert_eq!(
            serde_json::to_string(&StageStatus::PartialSuccess).expect("serialises"),
            "\"partial_success\""
        );
        let read = |text: &str| serde_json::from_str::<StageStatus>(text).ok();
        assert_eq!(read("\"FAILED\""), Some(StageStatus::Fail));
        assert_eq!(read("\"Succeeded\""), Some(StageStatus::Success));
        assert_eq!(read("\"needs_dod\""), None);
    }

    #[test]
    fn canonical_names_round_trip() {
        for status in [
            StageStatus::Success,
            StageStatus::PartialSuccess,
            StageStatus::Fail,
            StageStatus::Skipped,
            StageStatus::Retry,
        ] {
            check(status.as_str(), Some(status));
            assert_eq!(status.to_string(), status.as_str());
        }
    }

    #[test]
    fn aliases_map_to_canonical_status() {
        check("succeeded", Some(StageStatus::Success));
        check("partially_succeeded", Some(StageStatus::PartialSuccess));
        check("failed", Some(StageStatus::Fail));
        check("failure", Some(StageStatus::Fail));
        check("error", Some(StageStatus::Fail));
    }

    #[test]
    fn matching_ignores_case() {
        check("FAIL", Some(StageStatus::Fail));
        check("Failed", Some(StageStatus::Fail));
        check("ERROR", Some(StageStatus::Fail));
        check("Partial_Success", Some(StageStatus::PartialSuccess));
        check("RETRY", Some(StageStatus::Retry));
    }

    #[test]
    fn other_text_is_not_a_status() {
        check("", None);
        check(" success", None);
        check("success ", None);
        check("needs_dod", None);
        check("skip", None);
        check("partial", None);
        check("successful", None);
    }

    #[test]
    fn display_uses_canonical_lowercase_name() {
        assert_eq!(StageStatus::PartialSuccess.to_string(), "partial_success");
        assert_eq!(format!("{}", StageStatus::Fail), "fail");
    }
}
