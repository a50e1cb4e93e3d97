//! What both HTTP transports (Streamable HTTP and the 2024 HTTP+SSE)
//! share: the configured headers as a header map, a request that did not
//! reach the server, an error status read (boundedly) into a link error,
//! and a response's bytes bounded per SSE event.

use bytes::Bytes;
use futures_util::StreamExt as _;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::collections::BTreeMap;

use super::transport::{LinkError, LinkState};
use crate::http_client::{bounded_body, root_cause};

/// The configured headers as a header map (validated at registration; this
/// only fails for records written by hand).
pub(super) fn header_map(headers: &BTreeMap<String, String>) -> Result<HeaderMap, LinkError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| LinkError::Protocol(format!("invalid header name {name:?}")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| LinkError::Protocol(format!("invalid value for header {name}")))?;
        map.insert(name, value);
    }
    Ok(map)
}

/// A request that did not reach the server; a refused connection also
/// closes the link (the server is gone).
pub(super) fn unreachable(
    state: &LinkState,
    url: &reqwest::Url,
    err: &reqwest::Error,
) -> LinkError {
    let reason = format!("cannot reach {url}: {}", root_cause(err));
    if err.is_connect() {
        state.close(reason.clone());
    }
    LinkError::Http(reason)
}

/// An answer that is not a success, as an error (the body shortened; no
/// more of it is read than is shown).
/// The most of an HTTP error body we read.
pub(super) const ERROR_BODY_MAX: usize = 64 * 1024;

/// Whether an HTTP error body is a JSON-RPC error answering a request.
pub(super) fn is_error_answer(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|message| {
        message
            .get("error")
            .is_some_and(serde_json::Value::is_object)
            && message.get("id").is_some_and(|id| !id.is_null())
    })
}

pub(super) async fn status_error(response: reqwest::Response) -> LinkError {
    let status = response.status().as_u16();
    let body = bounded_body(response, ERROR_BODY_MAX)
        .await
        .unwrap_or_default();
    status_error_from(status, &body)
}

/// An HTTP error status as a link error, with the start of its body.
pub(super) fn status_error_from(status: u16, body: &[u8]) -> LinkError {
    const SHOWN: usize = 500;
    LinkError::Status {
        status,
        body: String::from_utf8_lossy(body).chars().take(SHOWN).collect(),
    }
}

/// A response's bytes for an SSE parser, ending in an error once one event
/// passes the message limit (the parser would otherwise buffer it whole).
pub(super) fn bounded_events(
    response: reqwest::Response,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    let max = crate::limits::max_message_bytes();
    let mut check = crate::limits::EventSizeCheck::default();
    response.bytes_stream().scan(false, move |failed, chunk| {
        if *failed {
            return std::future::ready(None);
        }
        let item = match chunk {
            Err(err) => Err(std::io::Error::other(err)),
            Ok(chunk) if check.feed(&chunk, max) => Ok(chunk),
            Ok(_) => {
                *failed = true;
                Err(std::io::Error::other(format!(
                    "an event larger than the {max} byte limit"
                )))
            }
        };
        std::future::ready(Some(item))
    })
}
