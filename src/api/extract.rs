//! Request extractors whose rejections are `{"detail": …}` errors with the
//! field path, instead of axum's plain-text ones.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use std::net::SocketAddr;

use crate::http_error::HttpError;

/// Header the CLI sets so the audit log can say who acted.
pub const ACTOR_HEADER: &str = "x-mcp-aggregator-actor";

/// A JSON body; malformed or mistyped input is a 422 naming the field,
/// an oversized one a 413. The content type is not required to be JSON:
/// `curl -d` users forget it, and the body must parse as JSON anyway.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(body_rejection)?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses a JSON document, with the path of the first wrong field.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, HttpError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(HttpError::unprocessable(
            "request body is empty; expected a JSON object",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let detail = if inner.is_syntax() || inner.is_eof() {
            format!("Invalid JSON: {inner}")
        } else if path == "." {
            // serde names the field in the message for missing/unknown fields.
            strip_position(&inner.to_string())
        } else {
            format!("{path}: {}", strip_position(&inner.to_string()))
        };
        HttpError::unprocessable(detail)
    })?;
    de.end()
        .map_err(|err| HttpError::unprocessable(format!("Invalid JSON: {err}")))?;
    Ok(value)
}

fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(pos) => message[..pos].to_owned(),
        None => message.to_owned(),
    }
}

fn body_rejection(rejection: BytesRejection) -> HttpError {
    let status = rejection.status();
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        HttpError::new(
            status,
            format!(
                "request body is larger than the {} byte limit",
                super::MAX_BODY_BYTES
            ),
        )
    } else {
        HttpError::new(
            status,
            format!("cannot read the request body: {}", rejection.body_text()),
        )
    }
}

/// A query string; a bad value is a 422 naming the parameter.
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for QueryParams<T> {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryParams(q.0))
            .map_err(|err: QueryRejection| {
                HttpError::unprocessable(format!("invalid query string: {}", err.body_text()))
            })
    }
}

/// A path parameter.
pub struct PathParam<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathParam<T> {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathParam(p.0))
            .map_err(|err: PathRejection| {
                HttpError::unprocessable(format!("invalid path: {}", err.body_text()))
            })
    }
}

/// Who is making the request, for the audit log: the CLI's self-description
/// (if any) and the peer address.
pub struct Actor(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Actor {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0.ip().to_string())
            .unwrap_or_else(|| "unknown".to_owned());
        let claimed = parts
            .headers
            .get(ACTOR_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.chars()
                    .filter(|c| c.is_ascii_graphic())
                    .take(64)
                    .collect::<String>()
            })
            .filter(|v| !v.is_empty());
        let who = match claimed {
            Some(claimed) => format!("{claimed}@{peer}"),
            None => format!("api:{peer}"),
        };
        Ok(Actor(match parts.extensions.get::<super::TokenName>() {
            Some(token) => format!("{who} token:{}", token.0),
            None => who,
        }))
    }
}
