//! API errors: every failure leaves as `{"detail": "…"}` with its
//! status code (404, 409, 413, 422, 503), never as a bare text body.

use axum::http::StatusCode;

use crate::http_error::HttpError;
use crate::registry::RegistryError;

impl From<RegistryError> for HttpError {
    fn from(err: RegistryError) -> Self {
        let status = match &err {
            RegistryError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            RegistryError::Conflict(_) => StatusCode::CONFLICT,
            RegistryError::NotFound(_)
            | RegistryError::ProfileNotFound(_)
            | RegistryError::ToolNotFound(_) => StatusCode::NOT_FOUND,
            RegistryError::Stale(_) => StatusCode::CONFLICT,
            // Nothing is wrong with the request: the disk is full (507), or
            // failing or damaged (503); said once in the log by the store.
            RegistryError::Store(store) if store.is_disk_full() => StatusCode::INSUFFICIENT_STORAGE,
            RegistryError::Store(store) if store.is_storage_failure() => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            RegistryError::Store(_) | RegistryError::Task(_) => {
                tracing::error!(error = %err, "request failed inside the store");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        HttpError::new(status, err.to_string())
    }
}
