//! Failure signatures (SPEC 9.8); the failure class and the message rules of SPEC 9.1
//! live in `fabro_llm` ([`FailureClass`], [`classify_message`]), re-exported here.

pub use fabro_llm::FailureClass;

/// The failure signature `{node_id}|{class}|{normalised reason}` (SPEC 9.8).
pub(crate) fn failure_signature(node_id: &str, class: FailureClass, reason: &str) -> String {
    format!("{node_id}|{class}|{}", normalize_reason(reason))
}

/// Normalises a failure reason: trim and lowercase; runs of 7+ hex digits bounded by
/// non-word characters become `<hex>`; remaining digit runs become `<n>`; whitespace
/// runs collapse; cut to 240 characters.
pub(crate) fn normalize_reason(reason: &str) -> String {
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
    use fabro_llm::classify_message;

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
