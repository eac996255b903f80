//! The UI's stylesheet and script, compiled into the binary (SPEC 15: no CDN, no Node,
//! usable offline). They need no token: they hold no data.

use axum::http::header;
use axum::response::IntoResponse;
use fabro_engine::EventKind;

/// The stylesheet.
pub const CSS: &str = include_str!("app.css");
/// The script that keeps the pages live, as written: [`script`] serves it with the
/// engine's event names filled in.
pub const JS: &str = include_str!("app.js");
/// The icon.
pub const ICON: &str = include_str!("icon.svg");

/// `GET /ui/app.css`.
pub async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        CSS,
    )
}

/// `GET /ui/app.js`.
pub async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        served_script().as_str(),
    )
}

/// [`JS`] with the event names of [`EventKind`] (and SSE's default `message`) and its
/// terminal events filled in, so the page listens to every event the engine writes.
fn served_script() -> &'static String {
    static SCRIPT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let mut names: Vec<&str> = EventKind::NAMES.to_vec();
        names.push("message");
        let terminal: serde_json::Map<String, serde_json::Value> = EventKind::TERMINAL
            .iter()
            .map(|name| ((*name).to_owned(), serde_json::Value::Bool(true)))
            .collect();
        JS.replacen(
            "/*EVENT_NAMES*/[]",
            &serde_json::Value::from(names).to_string(),
            1,
        )
        .replacen(
            "/*TERMINAL_EVENTS*/{}",
            &serde_json::Value::Object(terminal).to_string(),
            1,
        )
    });
    &SCRIPT
}

/// `GET /favicon.ico` (an SVG icon, so the browser's own request finds something).
pub async fn icon() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "max-age=86400"),
        ],
        ICON,
    )
}

#[cfg(test)]
mod tests {
    use fabro_engine::EventKind;

    /// The served script listens to every event the engine writes, from the engine's
    /// own list, and knows its terminal events.
    #[test]
    fn the_script_lists_every_event_of_the_engine() {
        let script = super::served_script();
        assert!(!script.contains("/*EVENT_NAMES*/"), "filled in");
        for name in EventKind::NAMES {
            assert!(script.contains(&format!("\"{name}\"")), "{name}");
        }
        assert!(script.contains(r#"{"WorkflowRunCompleted":true,"WorkflowRunFailed":true}"#));
    }
}
