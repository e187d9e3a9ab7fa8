//! One error type for every handler: a status code and a message that never leaks internals.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::storage::StorageError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The request is wrong; the message says how.
    #[error("{0}")]
    BadRequest(String),
    /// What was asked for does not exist on this server; the message says why.
    #[error("{0}")]
    NotFound(String),
    /// ClickHouse did not answer.
    #[error("storage is unavailable")]
    Storage(#[from] StorageError),
    /// A bug or a crashed task; the message is logged, not shown.
    #[error("internal error")]
    Internal(String),
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = match &self {
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::NotFound(_) => StatusCode::NOT_FOUND,
            AppError::Storage(e) => {
                tracing::error!(error = %e, "request failed in storage");
                StatusCode::SERVICE_UNAVAILABLE
            }
            AppError::Internal(e) => {
                tracing::error!(error = %e, "request failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        (status, Json(serde_json::json!({ "error": self.to_string() }))).into_response()
    }
}
