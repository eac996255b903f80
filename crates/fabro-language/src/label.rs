//! Edge labels: normalisation for preferred-label matching and accelerator keys of human
//! gate options (SPEC 4.5, 5.5).

/// Normalises a label: trim, lowercase, strip one accelerator prefix (`[K] `, `K) `,
/// `K - ` with K of 1–3 letters or digits), trim again. `"[A] Approve"` → `approve`.
pub fn normalize_label(label: &str) -> String {
    let lowered = label.trim().to_lowercase();
    let stripped = match accelerator_prefix(&lowered) {
        Some((_, rest)) => rest,
        None => &lowered,
    };
    stripped.trim().to_owned()
}

/// The accelerator key of an option label: the key of an accelerator prefix, else the
/// first character. `None` only for an empty label.
pub fn accelerator_key(label: &str) -> Option<String> {
    let trimmed = label.trim();
    match accelerator_prefix(trimmed) {
        Some((key, _)) => Some(key.to_owned()),
        None => trimmed.chars().next().map(String::from),
    }
}

/// The label as a person reads it once its key is shown beside it: without its
/// accelerator prefix, case kept (`"[A] Approve"` → `Approve`, `"Yes"` → `Yes`). A label
/// that is only a prefix stays whole.
pub fn strip_accelerator(label: &str) -> &str {
    let trimmed = label.trim();
    match accelerator_prefix(trimmed) {
        Some((_, rest)) if !rest.trim().is_empty() => rest.trim(),
        _ => trimmed,
    }
}

/// Splits an accelerator prefix off `text`: returns the key and the remaining text.
fn accelerator_prefix(text: &str) -> Option<(&str, &str)> {
    if let Some(inner) = text.strip_prefix('[') {
        let close = inner.find(']')?;
        let key = &inner[..close];
        return Some((key, inner[close + 1..].trim_start_matches(' ')));
    }
    let key_len = text
        .char_indices()
        .take_while(|(_, c)| c.is_alphanumeric())
        .take(4)
        .count();
    if !(1..=3).contains(&key_len) {
        return None;
    }
    let key_end = text
        .char_indices()
        .nth(key_len)
        .map_or(text.len(), |(index, _)| index);
    let (key, rest) = text.split_at(key_end);
    if let Some(rest) = rest.strip_prefix(')') {
        return Some((key, rest));
    }
    rest.strip_prefix(" - ").map(|rest| (key, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(label: &str, normalized: &str, key: Option<&str>) {
        assert_eq!(normalize_label(label), normalized, "normalising {label:?}");
        assert_eq!(accelerator_key(label).as_deref(), key, "key of {label:?}");
    }

    #[test]
    fn stripped_labels_keep_their_case() {
        assert_eq!(strip_accelerator("[A] Approve"), "Approve");
        assert_eq!(strip_accelerator("R) Revise it"), "Revise it");
        assert_eq!(strip_accelerator("q - Quit"), "Quit");
        assert_eq!(strip_accelerator(" Review later "), "Review later");
        assert_eq!(strip_accelerator("[A]"), "[A]");
        assert_eq!(strip_accelerator("exit"), "exit");
    }

    #[test]
    fn accelerator_forms() {
        check("[A] Approve", "approve", Some("A"));
        check("A) Approve", "approve", Some("A"));
        check("AB) Approve", "approve", Some("AB"));
        check("A - Approve", "approve", Some("A"));
        check(" approve ", "approve", Some("a"));
        check("[Enter]Go", "go", Some("Enter"));
        check("ABCD) Four", "abcd) four", Some("A"));
        check("Yes", "yes", Some("Y"));
        check("", "", None);
        check("A-B", "a-b", Some("A"));
    }
}
