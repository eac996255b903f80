//! A unified diff as HTML (SPEC 15): one line per row, added lines, removed lines, hunk
//! headers and file headers each with their own class, every line escaped. The `+` and
//! `-` stay visible, so the change is not shown by colour alone.

use super::escape;

/// `diff` (unified format) as a `<pre>` with one `<span>` per line.
pub fn render(diff: &str) -> String {
    if diff.trim().is_empty() {
        return "<p class=\"empty\">No changes.</p>".to_owned();
    }
    let mut html = String::with_capacity(diff.len() * 2);
    html.push_str("<pre class=\"diff\">");
    for line in diff.lines() {
        let class = if line.starts_with("+++") || line.starts_with("---") {
            "file"
        } else if line.starts_with("diff ") || line.starts_with("index ") {
            "meta"
        } else if line.starts_with("@@") {
            "hunk"
        } else if line.starts_with('+') {
            "add"
        } else if line.starts_with('-') {
            "del"
        } else {
            "ctx"
        };
        html.push_str(&format!("<span class=\"{class}\">{}</span>", escape(line)));
    }
    html.push_str("</pre>");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_classified_and_escaped() {
        let html = render(
            "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old <b>\n+new <script>\n same\n",
        );
        assert!(
            html.contains("<span class=\"del\">-old &lt;b&gt;</span>"),
            "{html}"
        );
        assert!(
            html.contains("<span class=\"add\">+new &lt;script&gt;</span>"),
            "{html}"
        );
        assert!(
            html.contains("<span class=\"hunk\">@@ -1 +1 @@</span>"),
            "{html}"
        );
        assert!(
            html.contains("<span class=\"file\">+++ b/x</span>"),
            "{html}"
        );
        assert!(html.contains("<span class=\"ctx\"> same</span>"), "{html}");
        assert_eq!(render(""), "<p class=\"empty\">No changes.</p>");
    }
}
