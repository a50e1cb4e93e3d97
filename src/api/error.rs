//! API errors: every failure leaves as `{"detail": "…"}` with the seed's
//! status code (404, 409, 413, 422, 503), never as a bare text body.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::registry::RegistryError;

/// The body of every error response.
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct ErrorBody {
    pub detail: String,
}

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub detail: String,
}

impl ApiError {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> ApiError {
        ApiError {
            status,
            detail: detail.into(),
        }
    }

    pub fn unprocessable(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
    }
}

impl IntoResponse for ApiError {
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

impl From<RegistryError> for ApiError {
    fn from(err: RegistryError) -> Self {
        let status = match &err {
            RegistryError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            RegistryError::Conflict(_) => StatusCode::CONFLICT,
            RegistryError::NotFound(_) => StatusCode::NOT_FOUND,
            RegistryError::Store(_) | RegistryError::Task(_) => {
                tracing::error!(error = %err, "request failed inside the store");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        ApiError::new(status, err.to_string())
    }
}
