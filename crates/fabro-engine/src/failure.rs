//! Message classification and failure signatures (SPEC 9.1, 9.8); the failure class
//! itself is [`fabro_llm::FailureClass`], re-exported here.

pub use fabro_llm::FailureClass;

/// Classifies the message of an untyped LLM or engine error (SPEC 9.1): lowercased, the
/// first matching row in the order canceled, transient_infra, budget_exhausted,
/// structural wins; otherwise deterministic. Numbers match only as whole words.
pub fn classify_message(message: &str) -> FailureClass {
    let lower = message.to_lowercase();
    const CANCELED: &[&str] = &["cancel", "interrupt"];
    const TRANSIENT: &[&str] = &[
        "timeout",
        "timed out",
        "rate limit",
        "too many requests",
        "connection refused",
        "connection reset",
        "broken pipe",
        "temporarily unavailable",
        "service unavailable",
        "could not resolve host",
        "network is unreachable",
    ];
    const TRANSIENT_CODES: &[&str] = &["500", "502", "503", "504"];
    const BUDGET: &[&str] = &[
        "context length",
        "context window",
        "quota",
        "turn limit",
        "token limit",
        "max turns",
        "budget",
    ];
    if CANCELED.iter().any(|word| lower.contains(word)) {
        FailureClass::Canceled
    } else if TRANSIENT.iter().any(|word| lower.contains(word))
        || TRANSIENT_CODES
            .iter()
            .any(|code| contains_whole_word(&lower, code))
    {
        FailureClass::TransientInfra
    } else if BUDGET.iter().any(|word| lower.contains(word)) {
        FailureClass::BudgetExhausted
    } else if lower.contains("scope violation") {
        FailureClass::Structural
    } else {
        FailureClass::Deterministic
    }
}

/// Whether `needle` occurs in `text` with no letter, digit or `_` on either side.
fn contains_whole_word(text: &str, needle: &str) -> bool {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(needle).any(|(start, _)| {
        let before = text[..start].chars().next_back();
        let after = text[start + needle.len()..].chars().next();
        !before.is_some_and(is_word) && !after.is_some_and(is_word)
    })
}

/// The failure signature `{node_id}|{class}|{normalised reason}` (SPEC 9.8).
pub fn failure_signature(node_id: &str, class: FailureClass, reason: &str) -> String {
    format!("{node_id}|{class}|{}", normalize_reason(reason))
}

/// Normalises a failure reason: trim and lowercase; runs of 7+ hex digits bounded by
/// non-word characters become `<hex>`; remaining digit runs become `<n>`; whitespace
/// runs collapse; cut to 240 characters.
pub fn normalize_reason(reason: &str) -> String {
    let lower = reason.trim().to_lowercase();
    let chars: Vec<char> = lower.chars().collect();
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(lower.len());
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        if c.is_ascii_hexdigit() && (index == 0 || !is_word(chars[index - 1])) {
            let end = chars[index..]
                .iter()
                .position(|c| !c.is_ascii_hexdigit())
                .map_or(chars.len(), |offset| index + offset);
            let bounded = end == chars.len() || !is_word(chars[end]);
            if end - index >= 7 && bounded {
                out.push_str("<hex>");
                index = end;
                continue;
            }
        }
        if c.is_ascii_digit() {
            while index < chars.len() && chars[index].is_ascii_digit() {
                index += 1;
            }
            out.push_str("<n>");
            continue;
        }
        if c.is_whitespace() {
            while index < chars.len() && chars[index].is_whitespace() {
                index += 1;
            }
            out.push(' ');
            continue;
        }
        out.push(c);
        index += 1;
    }
    out.chars().take(240).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_follows_the_row_order() {
        let check = |message: &str, class: FailureClass| {
            assert_eq!(classify_message(message), class, "{message}");
        };
        check("request canceled by user", FailureClass::Canceled);
        check("Connection reset by peer", FailureClass::TransientInfra);
        check("HTTP 503 from upstream", FailureClass::TransientInfra);
        check("listening on port 5030", FailureClass::Deterministic);
        check("copied 1500 files", FailureClass::Deterministic);
        check("quota exceeded", FailureClass::BudgetExhausted);
        check(
            "write scope violation: /etc/passwd",
            FailureClass::Structural,
        );
        check("index out of bounds", FailureClass::Deterministic);
        check("timeout while cancelling", FailureClass::Canceled);
    }

    #[test]
    fn reasons_normalise_for_signatures() {
        assert_eq!(
            failure_signature(
                "implement",
                FailureClass::Deterministic,
                "  Handler panicked: index out of bounds "
            ),
            "implement|deterministic|handler panicked: index out of bounds"
        );
        assert_eq!(
            normalize_reason("commit deadbeef1 failed 3 times"),
            "commit <hex> failed <n> times"
        );
        assert_eq!(
            normalize_reason("id abc1234x and 12\n\n  lines"),
            "id abc<n>x and <n> lines"
        );
        assert_eq!(normalize_reason("sha 0123456789abcdef."), "sha <hex>.");
        assert_eq!(normalize_reason(&"é".repeat(300)).chars().count(), 240);
    }
}
