//! MCP over Streamable HTTP at `/mcp`: `initialize` opens a session
//! (`Mcp-Session-Id`), POSTs carry requests (answered as JSON, or as an SSE
//! stream when the call reports progress), GET opens the stream of
//! notifications, DELETE ends the session. `Origin` and `Host` are checked
//! against DNS rebinding.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::handler::{self, ClientConnection, Incoming, McpServer};
use crate::api::error::ApiError;

pub const SESSION_HEADER: &str = "mcp-session-id";
/// Largest request body accepted on `/mcp`.
pub const MAX_MCP_BODY: usize = 32 * 1024 * 1024;
/// Sessions kept at most (the oldest idle one makes room).
pub const MAX_SESSIONS: usize = 10_000;

/// One HTTP client session.
struct HttpSession {
    connection: Arc<ClientConnection>,
    /// Notifications waiting for a GET stream (taken by the first GET).
    notifications: Mutex<Option<mpsc::UnboundedReceiver<Value>>>,
    last_used: Mutex<std::time::Instant>,
    notifier: tokio::task::AbortHandle,
}

impl Drop for HttpSession {
    fn drop(&mut self) {
        self.notifier.abort();
    }
}

/// The `/mcp` routes, for the daemon's HTTP listener.
pub fn routes<S: Clone + Send + Sync + 'static>(mcp: McpHttp) -> axum::Router<S> {
    axum::Router::new()
        .route("/mcp", axum::routing::post(post).get(get).delete(delete))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_MCP_BODY))
        .with_state(mcp)
}

/// The `/mcp` endpoint's state.
#[derive(Clone)]
pub struct McpHttp {
    server: Arc<McpServer>,
    sessions: Arc<Mutex<HashMap<String, Arc<HttpSession>>>>,
    /// Hosts (`Host` header, without port) accepted besides loopback names.
    allowed_hosts: Arc<Vec<String>>,
}

impl McpHttp {
    pub fn new(server: Arc<McpServer>, allowed_hosts: Vec<String>) -> McpHttp {
        McpHttp {
            server,
            sessions: Arc::new(Mutex::new(HashMap::new())),
            allowed_hosts: Arc::new(allowed_hosts),
        }
    }

    fn session(&self, headers: &HeaderMap) -> Result<Arc<HttpSession>, ApiError> {
        let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "missing Mcp-Session-Id header; send initialize first",
            ));
        };
        let found = self.sessions.lock().ok().and_then(|s| s.get(id).cloned());
        match found {
            Some(session) => {
                if let Ok(mut last) = session.last_used.lock() {
                    *last = std::time::Instant::now();
                }
                Ok(session)
            }
            None => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown or expired MCP session",
            )),
        }
    }

    fn open_session(&self) -> (String, Arc<HttpSession>) {
        let (outbound, notifications) = mpsc::unbounded_channel();
        let connection = ClientConnection::new(outbound);
        // Until the client opens its GET stream, nothing we send reaches it.
        connection.set_accepts_requests(false);
        let notifier = tokio::spawn(handler::forward_list_changes(
            self.server.router().clone(),
            Arc::clone(&connection),
        ));
        let session = Arc::new(HttpSession {
            connection,
            notifications: Mutex::new(Some(notifications)),
            last_used: Mutex::new(std::time::Instant::now()),
            notifier: notifier.abort_handle(),
        });
        let id = uuid::Uuid::new_v4().simple().to_string();
        if let Ok(mut sessions) = self.sessions.lock() {
            if sessions.len() >= MAX_SESSIONS {
                let oldest = sessions
                    .iter()
                    .min_by_key(|(_, s)| {
                        s.last_used
                            .lock()
                            .map(|t| *t)
                            .unwrap_or_else(|_| std::time::Instant::now())
                    })
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    sessions.remove(&oldest);
                }
            }
            sessions.insert(id.clone(), Arc::clone(&session));
        }
        (id, session)
    }

    /// Rejects requests whose `Origin` or `Host` is not local or allowed.
    fn check_origin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let allowed = |host: &str| {
            let host = host.trim_start_matches('[');
            let name = match host.rfind(']') {
                Some(end) => &host[..end],
                None => host.split(':').next().unwrap_or(host),
            };
            matches!(name, "localhost" | "127.0.0.1" | "::1")
                || self.allowed_hosts.iter().any(|h| h == name)
        };
        if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok())
            && origin != "null"
        {
            let host = url::Url::parse(origin)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_default();
            if !allowed(&host) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!("Origin {origin} is not allowed"),
                ));
            }
        }
        if let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok())
            && !allowed(host)
        {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("Host {host} is not allowed"),
            ));
        }
        Ok(())
    }
}

/// `POST /mcp`.
pub async fn post(State(mcp): State<McpHttp>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(err) = mcp.check_origin(&headers) {
        return err.into_response();
    }
    let message: Value = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(err) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(handler::parse_error(&err.to_string())),
            )
                .into_response();
        }
    };
    let batch = message.is_array();
    let messages = match message {
        Value::Array(items) => items,
        single => vec![single],
    };
    let is_initialize = messages
        .iter()
        .any(|m| m.get("method").and_then(Value::as_str) == Some("initialize"));
    let (session_id, session) = if is_initialize {
        let (id, session) = mcp.open_session();
        (Some(id), session)
    } else {
        match mcp.session(&headers) {
            Ok(session) => (None, session),
            Err(err) => return err.into_response(),
        }
    };
    let connection = Arc::clone(&session.connection);

    let mut requests = Vec::new();
    let mut answers = Vec::new();
    for message in messages {
        match handler::classify(message) {
            Incoming::Request { id, method, params } => requests.push((id, method, params)),
            Incoming::Other(message) => mcp.server.handle_other(&connection, &message),
            Incoming::Invalid(answer) => answers.push(answer),
        }
    }
    if requests.is_empty() && answers.is_empty() {
        return with_session(StatusCode::ACCEPTED.into_response(), session_id);
    }

    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let reports_progress = requests.iter().any(|(_, _, params)| {
        params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .is_some()
    });

    if wants_stream && reports_progress && !batch {
        // Progress goes out on this response's stream, then the answer.
        let (tx, rx) = mpsc::unbounded_channel::<Value>();
        let stream_connection = connection.for_stream(tx.clone());
        let server = Arc::clone(&mcp.server);
        for (id, method, params) in requests {
            let (server, tx, per_call) = (
                Arc::clone(&server),
                tx.clone(),
                Arc::clone(&stream_connection),
            );
            let tracked = Arc::clone(&connection);
            let cancelled = connection.begin(&id);
            tokio::spawn(async move {
                let answer = tokio::select! {
                    answer = server.handle_request(&per_call, id.clone(), &method, params) => Some(answer),
                    () = cancelled.cancelled() => None,
                };
                tracked.end(&id);
                if let Some(answer) = answer {
                    let _ = tx.send(answer);
                }
            });
        }
        drop(tx);
        let events = UnboundedReceiverStream::new(rx).map(|message| {
            Ok::<_, std::convert::Infallible>(
                Event::default().event("message").data(message.to_string()),
            )
        });
        let response = Sse::new(events)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response();
        return with_session(response, session_id);
    }

    let server = Arc::clone(&mcp.server);
    let calls = requests.into_iter().map(|(id, method, params)| {
        let (server, connection) = (Arc::clone(&server), Arc::clone(&connection));
        async move {
            server
                .handle_request(&connection, id, &method, params)
                .await
        }
    });
    answers.extend(futures_util::future::join_all(calls).await);
    let body = if batch {
        Value::Array(answers)
    } else {
        answers.pop().unwrap_or(Value::Null)
    };
    with_session(axum::Json(body).into_response(), session_id)
}

/// `GET /mcp`: the session's notification stream.
pub async fn get(State(mcp): State<McpHttp>, headers: HeaderMap) -> Response {
    if let Err(err) = mcp.check_origin(&headers) {
        return err.into_response();
    }
    let session = match mcp.session(&headers) {
        Ok(session) => session,
        Err(err) => return err.into_response(),
    };
    let Some(receiver) = session
        .notifications
        .lock()
        .ok()
        .and_then(|mut slot| slot.take())
    else {
        return ApiError::new(
            StatusCode::CONFLICT,
            "this session already has a notification stream",
        )
        .into_response();
    };
    session.connection.set_accepts_requests(true);
    let events = UnboundedReceiverStream::new(receiver).map(|message| {
        Ok::<_, std::convert::Infallible>(
            Event::default().event("message").data(message.to_string()),
        )
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// `DELETE /mcp`: ends the session.
pub async fn delete(State(mcp): State<McpHttp>, headers: HeaderMap) -> Response {
    if let Err(err) = mcp.check_origin(&headers) {
        return err.into_response();
    }
    let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return ApiError::new(StatusCode::BAD_REQUEST, "missing Mcp-Session-Id header")
            .into_response();
    };
    let removed = mcp.sessions.lock().ok().and_then(|mut s| s.remove(id));
    match removed {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => {
            ApiError::new(StatusCode::NOT_FOUND, "unknown or expired MCP session").into_response()
        }
    }
}

fn with_session(mut response: Response, session_id: Option<String>) -> Response {
    if let Some(id) = session_id
        && let Ok(value) = HeaderValue::from_str(&id)
    {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}
