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
    /// ClickHouse did not answer, or refused the read (answered 422 when it refused it as too
    /// large: [`StorageError::too_large`]).
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
                // Not "unavailable": retried as it is, the read is refused again.
                if let Some(why) = e.too_large() {
                    let error = format!("storage refused this read as too large ({why}): narrow the selector or the time range, or ask for fewer rows");
                    return (
                        StatusCode::UNPROCESSABLE_ENTITY,
                        Json(serde_json::json!({ "error": error })),
                    )
                        .into_response();
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> Response {
        let source = clickhouse::error::Error::BadResponse(text.into());
        AppError::Storage(StorageError::Query { what: "read", source }).into_response()
    }

    /// A read ClickHouse refuses as too large is answered as such, not as storage that is down
    /// (a 100,000-node read was answered 503 "storage is unavailable": issue 49). The texts are
    /// ClickHouse 18.16's and 26.x's (chdb) for the same refusals.
    #[test]
    fn a_read_too_large_is_not_storage_down() {
        for text in [
            "Code: 168, e.displayText() = DB::Exception: AST is too big. Maximum: 50000",
            "Code: 168. DB::Exception: AST is too big. Maximum: 2. (TOO_BIG_AST)",
            "Code: 241, e.displayText() = DB::Exception: Memory limit (for query) exceeded: would use 3.73 GiB",
            "Code: 241. DB::Exception: Query memory limit exceeded: would use 1.10 MiB. (MEMORY_LIMIT_EXCEEDED)",
            "Code: 158. DB::Exception: Limit for rows (controlled by 'max_rows_to_read' setting) exceeded. (TOO_MANY_ROWS)",
        ] {
            assert_eq!(refused(text).status(), StatusCode::UNPROCESSABLE_ENTITY, "{text}");
        }
        for text in [
            "Code: 241. DB::Exception: Memory limit (total) exceeded: would use 20.00 GiB. (MEMORY_LIMIT_EXCEEDED)",
            "Code: 210. DB::NetException: Connection refused",
            "no code at all",
        ] {
            assert_eq!(refused(text).status(), StatusCode::SERVICE_UNAVAILABLE, "{text}");
        }
    }
}
