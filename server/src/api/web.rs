//! The web UI, built by Vite into web/dist and embedded into the binary at build time.

use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

include!(concat!(env!("OUT_DIR"), "/web_assets.rs"));

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

pub(super) async fn asset(uri: Uri) -> Response {
    let path = uri.path().trim_start_matches('/');
    if path.starts_with("api/") {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({"error": "no such API route"})),
        )
            .into_response();
    }
    let path = if path.is_empty() { "index.html" } else { path };
    match WEB_ASSETS.iter().find(|(name, _)| *name == path) {
        Some((name, bytes)) => ([(header::CONTENT_TYPE, content_type(name))], *bytes).into_response(),
        None if WEB_ASSETS.is_empty() => (
            StatusCode::NOT_FOUND,
            "the web UI was not built into this server: run `make web` and rebuild\n",
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "not found\n").into_response(),
    }
}
