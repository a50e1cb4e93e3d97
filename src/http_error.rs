//! The `{"detail": "…"}` error response every HTTP route of the listener
//! answers with (the admin API, its guard, and `/mcp`), never a bare text
//! body.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error response.
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct ErrorBody {
    pub detail: String,
}

/// An error response.
#[derive(Debug)]
pub struct HttpError {
    pub status: StatusCode,
    pub detail: String,
}

impl HttpError {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> HttpError {
        HttpError {
            status,
            detail: detail.into(),
        }
    }

    pub fn unprocessable(detail: impl Into<String>) -> HttpError {
        HttpError::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                detail: self.detail,
            }),
        )
            .into_response()
    }
}
