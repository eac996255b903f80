//! The UI's stylesheet and script, compiled into the binary (SPEC 15: no CDN, no Node,
//! usable offline). They need no token: they hold no data.

use axum::http::header;
use axum::response::IntoResponse;

/// The stylesheet.
pub const CSS: &str = include_str!("app.css");
/// The script that keeps the pages live.
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
        JS,
    )
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
