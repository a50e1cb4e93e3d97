//! `mcp-aggregator stdio` when a daemon already owns the data dir (redb
//! allows one process): instead of failing, pass MCP between stdin/stdout
//! and the daemon's `/mcp`, so there is one store and one set of child
//! processes.

use bytes::Bytes;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio_util::sync::CancellationToken;

use crate::sessions::LinkError;
use crate::sessions::http;

/// Relays until the input ends or `shutdown`.
pub async fn relay(
    mcp_url: &str,
    token: Option<String>,
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
    shutdown: CancellationToken,
) -> Result<(), LinkError> {
    let mut headers = BTreeMap::new();
    if let Some(token) = token {
        headers.insert("Authorization".to_owned(), format!("Bearer {token}"));
    }
    let (inbound, mut from_daemon) = crate::sessions::inbound_channel();
    let client = crate::http_client::client(std::time::Duration::from_secs(10));
    let link = Arc::new(http::open("daemon", client, mcp_url, &headers, inbound)?);
    let (to_client, queue) = crate::mcp::outbound::Outbound::for_client();
    let to_client = Arc::new(to_client);

    let writer = crate::mcp::stdio::spawn_line_writer(output, queue);
    let forward_link = Arc::clone(&link);
    let forward_client = Arc::clone(&to_client);
    let forwarder = tokio::spawn(async move {
        while let Some(message) = from_daemon.recv().await {
            let envelope = crate::jsonrpc::Envelope::read(&message);
            let has_id = envelope.as_ref().is_ok_and(|e| e.id.is_some());
            // Later requests carry the negotiated version as a header.
            if let Some(version) = envelope
                .ok()
                .and_then(|e| e.result)
                .and_then(negotiated_version)
            {
                // Agreed by `initialize`: a 2025 revision, which mirrors
                // nothing into headers.
                forward_link.set_protocol_version(&version, false);
            }
            // Passed on as the daemon wrote it. Notifications may be
            // dropped for a client that is behind; answers and requests
            // wait for room (or stall the client).
            let message = crate::jsonrpc::Outgoing::Raw(message);
            let delivered = if has_id {
                forward_client.deliver(message).await
            } else {
                forward_client.notify(message)
            };
            if !delivered {
                break;
            }
        }
    });

    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        let max = crate::limits::max_message_bytes();
        let read = tokio::select! {
            read = crate::limits::read_line(&mut reader, &mut line, max) => read,
            () = shutdown.cancelled() => break,
            () = to_client.stalled() => break,
        };
        match read {
            Ok(crate::limits::Line::Complete) => {}
            Ok(crate::limits::Line::TooLong) => {
                let answer = crate::mcp::incoming::parse_error(&format!(
                    "message larger than the {max} byte limit"
                ));
                to_client.deliver(answer).await;
                continue;
            }
            Ok(crate::limits::Line::End) | Err(_) => break,
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let parsed: Option<Value> = serde_json::from_str(text).ok();
        let is_initialized = parsed
            .as_ref()
            .and_then(|m| m.get("method"))
            .and_then(Value::as_str)
            .is_some_and(|m| m == "notifications/initialized");
        if let Err(err) = link.send(Bytes::from(text.to_owned())).await {
            // Tell the client why its request got no answer.
            if let Some(id) = parsed
                .as_ref()
                .and_then(|m| m.get("id"))
                .filter(|_| parsed.as_ref().is_some_and(|m| m.get("method").is_some()))
            {
                to_client
                    .deliver(crate::jsonrpc::error(
                        id.clone(),
                        crate::jsonrpc::INTERNAL_ERROR,
                        &format!("the aggregator daemon did not take the message: {err}"),
                    ))
                    .await;
            }
            if link.state().is_closed() {
                break;
            }
        }
        if is_initialized {
            link.open_listening_stream();
        }
    }
    link.close().await;
    forwarder.abort();
    drop(to_client);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
    Ok(())
}

/// The protocol version an initialize result names, if it is one.
fn negotiated_version(result: &serde_json::value::RawValue) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Initialized {
        #[serde(rename = "protocolVersion")]
        protocol_version: Option<String>,
    }
    serde_json::from_str::<Initialized>(result.get())
        .ok()?
        .protocol_version
}
