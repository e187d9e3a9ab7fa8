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
    /// The server is as busy as its bounds allow; retry after the given seconds.
    #[error("{0}")]
    Busy(String, u64),
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        if let AppError::Busy(message, retry_after) = &self {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(axum::http::header::RETRY_AFTER, retry_after.to_string())],
                Json(serde_json::json!({ "error": message })),
            )
                .into_response();
        }
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
            AppError::Busy(..) => StatusCode::SERVICE_UNAVAILABLE,
        };
        (status, Json(serde_json::json!({ "error": self.to_string() }))).into_response()
    }
}
