//! Legacy HTTP+SSE transport (MCP 2024-11-05): a GET opens an event stream
//! whose first `endpoint` event names the URL to POST messages to; the
//! server's messages arrive as `message` events on the stream. rmcp has no
//! client for it, so this is ours.

use bytes::Bytes;
use futures_util::StreamExt as _;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::over_http::{bounded_events, header_map, status_error, unreachable};
use super::transport::{Inbound, LinkError, LinkState};
use crate::http_client::root_cause;

pub struct SseLink {
    inner: Arc<Inner>,
    reader: JoinHandle<()>,
}

struct Inner {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    headers: HeaderMap,
    state: LinkState,
}

/// Opens the event stream and waits (up to `timeout`) for the endpoint.
pub async fn open(
    server: &str,
    client: reqwest::Client,
    url: &str,
    headers: &BTreeMap<String, String>,
    inbound: Inbound,
    timeout: Duration,
) -> Result<SseLink, LinkError> {
    let stream_url = reqwest::Url::parse(url)
        .map_err(|err| LinkError::Protocol(format!("invalid URL {url:?}: {err}")))?;
    let headers = header_map(headers)?;
    let response = client
        .get(stream_url.clone())
        .headers(headers.clone())
        .header(ACCEPT, "text/event-stream")
        .send()
        .await
        .map_err(|err| {
            LinkError::Http(format!("cannot reach {stream_url}: {}", root_cause(&err)))
        })?;
    if matches!(response.status().as_u16(), 401 | 403) {
        tracing::warn!(
            server,
            status = response.status().as_u16(),
            "the server refused our credentials; check the configured headers"
        );
        return Err(LinkError::Unauthorized {
            status: response.status().as_u16(),
        });
    }
    if !response.status().is_success() {
        return Err(status_error(response).await);
    }
    let (endpoint_tx, endpoint_rx) = oneshot::channel::<Result<reqwest::Url, LinkError>>();
    let state_holder: Arc<std::sync::OnceLock<Arc<Inner>>> = Arc::new(std::sync::OnceLock::new());
    let reader_holder = Arc::clone(&state_holder);
    let server_name = server.to_owned();
    let base = stream_url.clone();
    let reader = tokio::spawn(async move {
        let mut events = sse_stream::SseStream::from_bytes_stream(bounded_events(response));
        let mut endpoint_tx = Some(endpoint_tx);
        let reason = loop {
            let Some(event) = events.next().await else {
                break "the server closed the event stream".to_owned();
            };
            let event = match event {
                Ok(event) => event,
                Err(err) => break format!("the event stream broke: {err}"),
            };
            match event.event.as_deref() {
                Some("endpoint") => {
                    let data = event.data.unwrap_or_default();
                    let resolved = endpoint_of(&base, &data);
                    if let Some(tx) = endpoint_tx.take() {
                        let _ = tx.send(resolved);
                    }
                }
                None | Some("message") => {
                    let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                        continue;
                    };
                    // Nothing was sent yet: "answers" now would be taken
                    // for those of the requests about to be sent.
                    if endpoint_tx.is_some() {
                        tracing::warn!(server = %server_name, "the server sent a message before naming its endpoint; ignored");
                        continue;
                    }
                    match crate::jsonrpc::split_raw(data.as_bytes()) {
                        Ok(messages) => {
                            for message in messages {
                                if inbound.send(message.into()).await.is_err() {
                                    return;
                                }
                            }
                        }
                        Err(err) => {
                            tracing::warn!(server = %server_name, "the server sent an event that is not JSON: {err}")
                        }
                    }
                }
                Some(_) => {}
            }
        };
        if let Some(inner) = reader_holder.get() {
            inner.state.close(reason);
        } else if let Some(tx) = endpoint_tx.take() {
            let _ = tx.send(Err(LinkError::Closed(reason)));
        }
    });
    let endpoint = match tokio::time::timeout(timeout, endpoint_rx).await {
        Ok(Ok(Ok(endpoint))) => endpoint,
        Ok(Ok(Err(err))) => {
            reader.abort();
            return Err(err);
        }
        Ok(Err(_)) => {
            reader.abort();
            return Err(LinkError::Closed(
                "the event stream ended before naming an endpoint".into(),
            ));
        }
        Err(_) => {
            reader.abort();
            return Err(LinkError::Protocol(
                "no `endpoint` event on the stream in time".into(),
            ));
        }
    };
    let inner = Arc::new(Inner {
        client,
        endpoint,
        headers,
        state: LinkState::default(),
    });
    let _ = state_holder.set(Arc::clone(&inner));
    if reader.is_finished() {
        inner.state.close("the server closed the event stream");
    }
    Ok(SseLink { inner, reader })
}

/// Where the `endpoint` event says to POST: only on the event stream's
/// own origin, as the official TypeScript SDK requires — the POSTs carry
/// the configured headers and every message, which must not go to
/// whatever origin a server names.
fn endpoint_of(stream: &reqwest::Url, data: &str) -> Result<reqwest::Url, LinkError> {
    let endpoint = stream
        .join(data.trim())
        .map_err(|err| LinkError::Protocol(format!("bad endpoint {data:?}: {err}")))?;
    if !crate::http_client::same_origin(stream, &endpoint) {
        return Err(LinkError::Protocol(format!(
            "the server named an endpoint on another origin ({}) than its event stream ({}); refused: headers and messages never leave their origin",
            crate::http_client::shown(&endpoint),
            stream.origin().ascii_serialization()
        )));
    }
    Ok(endpoint)
}

impl SseLink {
    pub fn state(&self) -> &LinkState {
        &self.inner.state
    }

    pub async fn send(&self, message: Bytes) -> Result<(), LinkError> {
        Inner::post(&self.inner, message).await
    }

    pub fn send_detached(&self, message: Bytes) {
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move {
            let _ = Inner::post(&inner, message).await;
        });
    }

    pub async fn close(&self) {
        self.reader.abort();
        self.inner.state.close("closed by the aggregator");
    }
}

impl Drop for SseLink {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Inner {
    async fn post(&self, message: Bytes) -> Result<(), LinkError> {
        if self.state.is_closed() {
            return Err(LinkError::Closed(self.state.reason()));
        }
        let response = self
            .client
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(message)
            .send()
            .await
            .map_err(|err| unreachable(&self.state, &self.endpoint, &err))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(status_error(response).await)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_accepted_only_on_the_streams_origin() {
        let stream = reqwest::Url::parse("http://127.0.0.1:3001/sse").unwrap();
        for same in ["/messages?session=1", "messages", "http://127.0.0.1:3001/m"] {
            let endpoint = endpoint_of(&stream, same).unwrap();
            assert_eq!(endpoint.origin(), stream.origin(), "{same}");
        }
        for other in [
            "http://localhost:3001/steal",
            "http://127.0.0.1:3002/steal",
            "https://127.0.0.1:3001/steal",
            "//evil.example/steal",
        ] {
            let err = endpoint_of(&stream, other).unwrap_err().to_string();
            assert!(err.contains("another origin"), "{other}: {err}");
        }
    }
}
