//! Markdown for `prompt.md` and `response.md` (SPEC 15) that cannot execute anything:
//! raw HTML (blocks and inline) is shown as text, images become their alt text (no
//! request leaves the page), and links keep only `http`, `https`, `mailto` and
//! relative destinations (anything else, `javascript:` included, becomes `#`).

use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd};

/// `source` as HTML with every raw HTML fragment escaped.
pub fn render(source: &str) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let events = Parser::new_ext(source, options).filter_map(|event| match event {
        Event::Html(html) | Event::InlineHtml(html) => Some(Event::Text(html)),
        Event::Start(Tag::HtmlBlock) => Some(Event::Start(Tag::Paragraph)),
        Event::End(TagEnd::HtmlBlock) => Some(Event::End(TagEnd::Paragraph)),
        Event::Start(Tag::Image { .. }) | Event::End(TagEnd::Image) => None,
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => Some(Event::Start(Tag::Link {
            link_type,
            dest_url: safe_destination(dest_url),
            title,
            id,
        })),
        other => Some(other),
    });
    let mut html = String::with_capacity(source.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut html, events);
    html
}

fn safe_destination(destination: CowStr<'_>) -> CowStr<'_> {
    let lower = destination.trim().to_ascii_lowercase();
    let scheme_end = lower.find([':', '/', '?', '#']);
    let has_scheme = scheme_end.is_some_and(|end| lower[end..].starts_with(':'));
    let allowed = !has_scheme
        || ["http:", "https:", "mailto:"]
            .iter()
            .any(|scheme| lower.starts_with(scheme));
    if allowed {
        destination
    } else {
        CowStr::Borrowed("#")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_html_is_text() {
        let html = render("Hi <img src=x onerror=alert(1)> there\n\n<script>alert(2)</script>\n");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(
            html.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{html}"
        );
        assert!(
            html.contains("&lt;script&gt;alert(2)&lt;/script&gt;"),
            "{html}"
        );
    }

    #[test]
    fn markdown_still_renders() {
        let html = render("# Title\n\n*em* and `code`\n\n- a\n- b\n\n```\n<b>x</b>\n```\n");
        assert!(html.contains("<h1>Title</h1>"), "{html}");
        assert!(html.contains("<em>em</em>"), "{html}");
        assert!(html.contains("<li>a</li>"), "{html}");
        assert!(html.contains("&lt;b&gt;x&lt;/b&gt;"), "{html}");
    }

    #[test]
    fn only_safe_links_and_no_images() {
        let html = render("[a](javascript:alert(1)) [b](https://example.test/x) [c](/runs/1) ![pic](http://x/y.png)");
        assert!(html.contains("<a href=\"#\">a</a>"), "{html}");
        assert!(html.contains("href=\"https://example.test/x\""), "{html}");
        assert!(html.contains("href=\"/runs/1\""), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("pic"), "{html}");
        let html = render("[d]( JaVaScRiPt:alert(1))");
        assert!(!html.to_ascii_lowercase().contains("javascript"), "{html}");
    }
}
