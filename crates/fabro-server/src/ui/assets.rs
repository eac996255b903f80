//! The UI's stylesheet and script, compiled into the binary (SPEC 15: no CDN, no Node,
//! usable offline). They need no token: they hold no data.

use axum::http::header;
use axum::response::IntoResponse;

/// The stylesheet.
pub const CSS: &str = include_str!("app.css");
/// The script that keeps the pages live.
pub const JS: &str = include_str!("app.js");

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
        JS,
    )
}
