//! Streamable HTTP transport (MCP 2025-03-26 and later): every message is a
//! POST to the endpoint; a request's answer comes back as JSON or as an SSE
//! stream; `Mcp-Session-Id` ties the requests together; a GET stream carries
//! what the server sends on its own (notifications, requests).

use bytes::Bytes;
use futures_util::StreamExt as _;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::task::JoinHandle;

use super::over_http::{
    ERROR_BODY_MAX, bounded_events, header_map, is_error_answer, status_error_from, unreachable,
};
use super::transport::{Inbound, LinkError, LinkState, Received};
use crate::http_client::{bounded_body, root_cause};

const SESSION_HEADER: &str = "mcp-session-id";
const PROTOCOL_HEADER: &str = "mcp-protocol-version";
const EVENT_STREAM: &str = "text/event-stream";
/// How often the listening stream is re-opened before the link is declared dead.
const LISTEN_RETRIES: u32 = 3;
/// How often a request's event stream that ended before its answer is
/// resumed (GET with `Last-Event-ID`) before we stop waiting on it.
const RESUME_ATTEMPTS: u32 = 16;
/// The wait before resuming when the server named none (`retry:`).
const DEFAULT_RESUME_DELAY: Duration = Duration::from_millis(500);
/// The shortest wait before a listening stream is opened again, doubled
/// for each stream in a row that ended within `LISTEN_QUICK_END`.
const LISTEN_MIN_DELAY: Duration = Duration::from_secs(1);
const LISTEN_QUICK_END: Duration = Duration::from_secs(5);
/// How much longer than the longest wait an answer's body is read.
const ANSWER_READ_MARGIN: Duration = Duration::from_secs(5);
/// The longest `retry:` we honour: a server cannot park a call for hours.
const MAX_RESUME_DELAY: Duration = Duration::from_secs(60);

/// The id of the request a message is, if it is one (its answer is
/// waited for), and whether it opens a subscription (whose stream lasts).
fn request_id(message: &[u8]) -> (Option<u64>, bool) {
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        id: Option<u64>,
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    match serde_json::from_slice::<Request>(message) {
        Ok(Request {
            id,
            method: Some(method),
        }) => (id, method == "subscriptions/listen"),
        _ => (None, false),
    }
}

/// How an event stream ended.
#[derive(Debug, Default)]
struct StreamEnd {
    /// The stream ended without an error.
    clean: bool,
    /// A JSON-RPC response was among its messages.
    answered: bool,
    /// The last event id seen (to resume from).
    last_event_id: Option<String>,
    /// The reconnection time the server asked for.
    retry: Option<Duration>,
}

pub struct HttpLink {
    inner: Arc<Inner>,
    listener: std::sync::Mutex<Option<JoinHandle<()>>>,
}

struct Inner {
    server: String,
    client: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    session_id: RwLock<Option<HeaderValue>>,
    protocol_version: RwLock<Option<HeaderValue>>,
    /// Whether each request mirrors its method and target into headers
    /// (as the revision spoken asks).
    mirrors_method_headers: std::sync::atomic::AtomicBool,
    inbound: Inbound,
    state: LinkState,
    /// The server's login, when it may ask for one.
    auth: Option<Authorizer>,
    /// The longest any request waits for its answer: reading an answer
    /// longer than that (a server trickling its body) only holds a
    /// connection nobody waits on.
    answer_within: Duration,
}

/// A server's login and the service that keeps it.
#[derive(Clone)]
pub struct Authorizer {
    pub oauth: Arc<crate::oauth::OAuth>,
    pub server: Arc<crate::oauth::ServerAuth>,
}

/// Prepares the link; nothing is sent until the first message.
pub fn open(
    server: &str,
    client: reqwest::Client,
    url: &str,
    headers: &BTreeMap<String, String>,
    inbound: Inbound,
    auth: Option<Authorizer>,
    answer_within: Duration,
) -> Result<HttpLink, LinkError> {
    let url = reqwest::Url::parse(url)
        .map_err(|err| LinkError::Protocol(format!("invalid URL {url:?}: {err}")))?;
    let headers = header_map(headers)?;
    Ok(HttpLink {
        inner: Arc::new(Inner {
            server: server.to_owned(),
            client,
            url,
            headers,
            session_id: RwLock::new(None),
            protocol_version: RwLock::new(None),
            mirrors_method_headers: std::sync::atomic::AtomicBool::new(false),
            inbound,
            state: LinkState::default(),
            auth,
            answer_within,
        }),
        listener: std::sync::Mutex::new(None),
    })
}

impl HttpLink {
    pub fn state(&self) -> &LinkState {
        &self.inner.state
    }

    pub fn set_protocol_version(&self, version: &str, mirrors_method_headers: bool) {
        if let (Ok(value), Ok(mut slot)) = (
            HeaderValue::from_str(version),
            self.inner.protocol_version.write(),
        ) {
            *slot = Some(value);
        }
        self.inner
            .mirrors_method_headers
            .store(mirrors_method_headers, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn forget_protocol_version(&self) {
        if let Ok(mut slot) = self.inner.protocol_version.write() {
            *slot = None;
        }
        self.inner
            .mirrors_method_headers
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sends one message; returns once the server accepted it. A response
    /// body (JSON or SSE) is read in the background into the inbound channel.
    pub async fn send(&self, message: Bytes) -> Result<(), LinkError> {
        Inner::post(&self.inner, message, &[]).await
    }

    /// Sends one message with extra headers (a call's `Mcp-Param-*`).
    pub async fn send_with_headers(
        &self,
        message: Bytes,
        headers: &[(String, String)],
    ) -> Result<(), LinkError> {
        Inner::post(&self.inner, message, headers).await
    }

    pub fn send_detached(&self, message: Bytes) {
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move {
            let _ = Inner::post(&inner, message, &[]).await;
        });
    }

    /// Opens the GET stream for server-initiated messages. Servers that do
    /// not offer one answer 405, which is fine.
    pub fn open_listening_stream(&self) {
        let inner = Arc::clone(&self.inner);
        let task = tokio::spawn(async move { inner.listen().await });
        if let Ok(mut slot) = self.listener.lock()
            && let Some(old) = slot.replace(task)
        {
            old.abort();
        }
    }

    /// Whether the server gave this link a session (`Mcp-Session-Id`).
    pub fn has_session(&self) -> bool {
        self.inner.session_id.read().is_ok_and(|s| s.is_some())
    }

    /// Ends the session on the server (DELETE) and stops listening.
    pub async fn close(&self) {
        if let Ok(mut slot) = self.listener.lock()
            && let Some(task) = slot.take()
        {
            task.abort();
        }
        if self.has_session() {
            let (request, _) = self.inner.request(reqwest::Method::DELETE).await;
            let _ = request.timeout(Duration::from_secs(2)).send().await;
        }
        self.inner.state.close("closed by the aggregator");
    }
}

impl Drop for HttpLink {
    fn drop(&mut self) {
        if let Ok(mut slot) = self.listener.lock()
            && let Some(task) = slot.take()
        {
            task.abort();
        }
    }
}

impl Inner {
    /// Whether requests mirror their method and target into headers.
    fn mirrors_method_headers(&self) -> bool {
        self.mirrors_method_headers
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A request with the link's headers and, when the server has one,
    /// the access token (refreshed first when about to expire).
    async fn request(&self, method: reqwest::Method) -> (reqwest::RequestBuilder, Option<String>) {
        let bearer = match &self.auth {
            Some(auth) => auth.oauth.bearer(&auth.server).await,
            None => None,
        };
        let mut request = self
            .client
            .request(method, self.url.clone())
            .headers(self.headers.clone());
        if let Some(token) = &bearer {
            request = request.bearer_auth(token);
        }
        if let Some(session) = self.session_id.read().ok().and_then(|s| s.clone()) {
            request = request.header(SESSION_HEADER, session);
        }
        if let Some(version) = self.protocol_version.read().ok().and_then(|v| v.clone()) {
            request = request.header(PROTOCOL_HEADER, version);
        }
        (request, bearer)
    }

    /// What to do about a 401 or 403: `Ok` to send again (a fresh token
    /// is held), else the error the request ends with.
    async fn refused(
        &self,
        response: &reqwest::Response,
        sent: Option<&str>,
        retried: bool,
    ) -> Result<(), LinkError> {
        let status = response.status().as_u16();
        let Some(auth) = self.auth.as_ref() else {
            tracing::warn!(
                server = %self.server,
                status,
                "the server refused our credentials; check the configured headers"
            );
            return Err(LinkError::Unauthorized { status });
        };
        let challenge = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok());
        match auth
            .oauth
            .refused(&auth.server, status, challenge, sent)
            .await
        {
            crate::oauth::AfterRefusal::Retry if !retried => Ok(()),
            crate::oauth::AfterRefusal::Retry => Err(LinkError::Unauthorized { status }),
            crate::oauth::AfterRefusal::NeedsLogin(message) => Err(LinkError::NeedsLogin(message)),
            crate::oauth::AfterRefusal::Fail(reason) => Err(LinkError::Auth(reason)),
        }
    }

    async fn post(
        self: &Arc<Self>,
        message: Bytes,
        extra: &[(String, String)],
    ) -> Result<(), LinkError> {
        if self.state.is_closed() {
            return Err(LinkError::Closed(self.state.reason()));
        }
        let had_session = self.session_id.read().map(|s| s.is_some()).unwrap_or(false);
        let mut retried = false;
        let response = loop {
            let (request, sent) = self.request(reqwest::Method::POST).await;
            let mut request = request
                .header(CONTENT_TYPE, "application/json")
                .header(ACCEPT, "application/json, text/event-stream");
            if self.mirrors_method_headers() {
                for (name, value) in mirrored_headers(&message) {
                    request = request.header(name, value);
                }
                for (name, value) in extra {
                    request = request.header(name.as_str(), value.as_str());
                }
            }
            let response = request
                .body(message.clone())
                .send()
                .await
                .map_err(|err| unreachable(&self.state, &self.url, &err))?;
            let status = response.status();
            if status == reqwest::StatusCode::UNAUTHORIZED
                || status == reqwest::StatusCode::FORBIDDEN
            {
                self.refused(&response, sent.as_deref(), retried).await?;
                retried = true;
                continue;
            }
            if let (Some(auth), Some(_)) = (&self.auth, &sent) {
                auth.server.accepted();
            }
            break response;
        };
        let status = response.status();
        if let Some(session) = response.headers().get(SESSION_HEADER)
            && let Ok(mut slot) = self.session_id.write()
            && slot.is_none()
        {
            *slot = Some(session.clone());
        }
        if status == reqwest::StatusCode::NOT_FOUND && had_session {
            let reason = "the server no longer knows this session (HTTP 404)".to_owned();
            self.state.close(reason.clone());
            return Err(LinkError::Closed(reason));
        }
        if !status.is_success() {
            // A 2026-07-28 server answers a request it refuses with a 4xx
            // whose body is the JSON-RPC error: that is the answer.
            let body = bounded_body(response, ERROR_BODY_MAX)
                .await
                .unwrap_or_default();
            if is_error_answer(&body) {
                self.deliver_json(&body).await;
                return Ok(());
            }
            return Err(status_error_from(status.as_u16(), &body));
        }
        if status == reqwest::StatusCode::ACCEPTED {
            return Ok(());
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let (waiting, listens) = request_id(&message);
        let inner = Arc::clone(self);
        // A subscription's stream lasts as long as the subscription; any
        // other answer is read no longer than anyone waits for it, and
        // not after the link closed.
        let limit = (!listens).then_some(self.answer_within + ANSWER_READ_MARGIN);
        let closed = self.state.token();
        tokio::spawn(async move {
            let read = async {
                if content_type.starts_with(EVENT_STREAM) {
                    let end = inner.read_event_stream(response, None).await;
                    inner.resume(end).await
                } else {
                    inner.read_json_body(response, &content_type).await
                }
            };
            let bounded = async {
                match limit {
                    Some(limit) => tokio::time::timeout(limit, read).await.unwrap_or_else(|_| {
                        Some(format!("the server's answer did not end within {limit:?}"))
                    }),
                    None => read.await,
                }
            };
            let unanswered = tokio::select! {
                unanswered = bounded => unanswered,
                () = closed.cancelled() => None,
            };
            // Nothing else will bring this answer: the request fails now,
            // not at its timeout.
            if let (Some(id), Some(why)) = (waiting, unanswered)
                && !inner.state.is_closed()
            {
                tracing::warn!(server = %inner.server, "{why}");
                let _ = inner.inbound.send(Received::Lost { id, why }).await;
            }
        });
        Ok(())
    }

    /// Passes the messages of a body on; true if one was a response.
    async fn deliver_json(&self, body: &[u8]) -> bool {
        self.deliver_text(body).await.unwrap_or_else(|err| {
            tracing::warn!(server = %self.server, "the server sent a body that is not JSON: {err}");
            false
        })
    }

    /// Reads a JSON body as it arrives: one message, a batch, or several
    /// JSON texts one after another (a server that streams its frames as
    /// newline-delimited JSON), each passed on as soon as it is complete —
    /// a server may wait for our answer to a request it just sent before
    /// it writes the rest. Says why when the body held no answer.
    async fn read_json_body(
        &self,
        mut response: reqwest::Response,
        content_type: &str,
    ) -> Option<String> {
        let max = crate::limits::max_message_bytes();
        let mut buffer: Vec<u8> = Vec::new();
        let mut splitter = crate::jsonrpc::TextSplitter::default();
        let mut answered = false;
        let mut texts = 0usize;
        let not_json = |err: serde_json::Error| {
            let shown = match content_type {
                "" => "no Content-Type".to_owned(),
                shown => format!("Content-Type {shown}"),
            };
            format!("the server answered with a body that is not JSON-RPC ({shown}): {err}")
        };
        loop {
            let chunk = match response.chunk().await {
                Ok(chunk) => chunk,
                Err(err) => {
                    return (!answered)
                        .then(|| format!("the server's answer broke off: {}", root_cause(&err)));
                }
            };
            let Some(chunk) = chunk else {
                if !buffer.iter().all(u8::is_ascii_whitespace) {
                    texts += 1;
                    match self.deliver_text(&buffer).await {
                        Ok(delivered) => answered |= delivered,
                        Err(err) => return (!answered).then(|| not_json(err)),
                    }
                }
                // An empty 200 is read as the 202 it should have been: some
                // servers send the answer on the listening stream instead.
                return (!answered && texts > 0)
                    .then(|| "the server's answer held no response to the request".to_owned());
            };
            buffer.extend_from_slice(&chunk);
            // Texts are taken from the front and the buffer moved once per
            // chunk: a chunk of many small messages is not quadratic.
            let mut start = 0;
            while let Some(end) = splitter.complete(&buffer[start..]) {
                splitter.reset();
                texts += 1;
                match self.deliver_text(&buffer[start..start + end]).await {
                    Ok(delivered) => answered |= delivered,
                    Err(err) => return (!answered).then(|| not_json(err)),
                }
                start += end;
            }
            buffer.drain(..start);
            if buffer.len() > max {
                return (!answered).then(|| {
                    format!(
                        "the server's answer is larger than the {max} byte limit (--max-message-bytes)"
                    )
                });
            }
        }
    }

    /// Passes on the messages of one complete text of a body: whether one
    /// was an answer, or why the text is not JSON-RPC.
    async fn deliver_text(&self, text: &[u8]) -> Result<bool, serde_json::Error> {
        let mut answered = false;
        for message in crate::jsonrpc::split_raw(text)? {
            answered |=
                crate::jsonrpc::Envelope::read(&message).is_ok_and(|envelope| envelope.is_answer());
            if self.inbound.send(message.into()).await.is_err() {
                break;
            }
        }
        Ok(answered)
    }

    /// Reads an SSE stream to its end; `resumed_from` is the event id the
    /// stream continues from, if it is a resumption.
    async fn read_event_stream(
        &self,
        response: reqwest::Response,
        resumed_from: Option<String>,
    ) -> StreamEnd {
        let mut end = StreamEnd {
            last_event_id: resumed_from,
            ..StreamEnd::default()
        };
        let mut events = sse_stream::SseStream::from_bytes_stream(bounded_events(response));
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    if let Some(id) = event.id.filter(|id| !id.is_empty()) {
                        end.last_event_id = Some(id);
                    }
                    if let Some(retry) = event.retry {
                        end.retry = Some(Duration::from_millis(retry).min(MAX_RESUME_DELAY));
                    }
                    let is_message = event.event.as_deref().is_none_or(|e| e == "message");
                    if let (true, Some(data)) = (is_message, event.data)
                        && !data.trim().is_empty()
                    {
                        end.answered |= self.deliver_json(data.as_bytes()).await;
                    }
                }
                Err(err) => {
                    tracing::debug!(server = %self.server, "event stream broke: {err}");
                    return end;
                }
            }
        }
        end.clean = true;
        end
    }

    /// A request's event stream ended before its answer: resume it with a
    /// GET carrying `Last-Event-ID`, after the delay the server asked for
    /// (`retry:`), until the answer comes. Says why when the answer will
    /// not come: without an event id there is nothing to resume from.
    async fn resume(&self, mut end: StreamEnd) -> Option<String> {
        let mut attempts = 0;
        while !end.answered && !self.state.is_closed() {
            let Some(last) = end.last_event_id.clone() else {
                return Some(
                    "the server's event stream ended without the answer, and cannot be resumed (no event id)"
                        .to_owned(),
                );
            };
            attempts += 1;
            if attempts > RESUME_ATTEMPTS {
                return Some(format!(
                    "the server's event stream ended without the answer; gave up resuming it after {RESUME_ATTEMPTS} attempts"
                ));
            }
            tokio::time::sleep(end.retry.unwrap_or(DEFAULT_RESUME_DELAY)).await;
            let response = self
                .request(reqwest::Method::GET)
                .await
                .0
                .header(ACCEPT, EVENT_STREAM)
                .header("last-event-id", last.as_str())
                .send()
                .await;
            match response {
                Ok(response) if response.status().is_success() => {
                    let retry = end.retry;
                    end = self.read_event_stream(response, Some(last)).await;
                    end.retry = end.retry.or(retry);
                }
                Ok(response) => {
                    return Some(format!(
                        "the server's event stream ended without the answer, and the server did not resume it (HTTP {})",
                        response.status().as_u16()
                    ));
                }
                Err(err) => {
                    tracing::debug!(server = %self.server, "cannot resume an event stream: {}", root_cause(&err));
                }
            }
        }
        None
    }

    /// The long-lived GET stream. When it breaks, it is re-opened a few
    /// times; a server that cannot be reached any more closes the link so the
    /// supervisor reconnects.
    async fn listen(self: Arc<Self>) {
        let mut failures = 0;
        let mut last_event_id: Option<String> = None;
        let mut retry: Option<Duration> = None;
        // Streams the server closes as soon as they open are opened again
        // less and less often (a `retry: 0` must not become a busy loop).
        let mut quick_ends: u32 = 0;
        while !self.state.is_closed() {
            let mut request = self
                .request(reqwest::Method::GET)
                .await
                .0
                .header(ACCEPT, EVENT_STREAM);
            if let Some(last) = &last_event_id {
                request = request.header("last-event-id", last.as_str());
            }
            match request.send().await {
                Ok(response) if response.status().is_success() => {
                    failures = 0;
                    let opened = tokio::time::Instant::now();
                    let end = self.read_event_stream(response, last_event_id.take()).await;
                    last_event_id = end.last_event_id;
                    retry = end.retry.or(retry);
                    quick_ends = match opened.elapsed() < LISTEN_QUICK_END {
                        true => quick_ends.saturating_add(1),
                        false => 0,
                    };
                    let floor = LISTEN_MIN_DELAY
                        .saturating_mul(2u32.saturating_pow(quick_ends.min(6)))
                        .min(MAX_RESUME_DELAY);
                    // The server closed the stream and said when to come back.
                    if let Some(delay) = retry.filter(|_| end.clean) {
                        tokio::time::sleep(delay.max(floor)).await;
                        continue;
                    }
                    if quick_ends > 0 {
                        tokio::time::sleep(floor).await;
                    }
                }
                // 405: no listening stream offered; 404: none at this
                // endpoint (a stateless server: a session that is gone shows
                // on the next POST); other 4xx: not for us.
                Ok(response) if response.status().is_client_error() => {
                    tracing::debug!(server = %self.server, status = response.status().as_u16(), "no listening stream");
                    return;
                }
                // The server answers, but not this: its requests still work,
                // so the link stays and goes on without a listening stream
                // (list changes then show at the next list or relist).
                Ok(response) if response.status().is_server_error() => {
                    failures += 1;
                    if failures > LISTEN_RETRIES {
                        tracing::warn!(
                            server = %self.server,
                            status = response.status().as_u16(),
                            "the server's listening stream keeps failing; going on without it"
                        );
                        return;
                    }
                }
                Ok(_) | Err(_) => {
                    failures += 1;
                    if failures > LISTEN_RETRIES {
                        self.state
                            .close(format!("lost the connection to {}", self.url));
                        return;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(250 * u64::from(failures.max(1)))).await;
        }
    }
}

/// The `Mcp-Method` and `Mcp-Name` headers a 2026-07-28 request carries:
/// its method, and for a call, read or prompt its target (base64 sentinel
/// form when the value cannot be a plain header value).
fn mirrored_headers(message: &[u8]) -> Vec<(&'static str, HeaderValue)> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        method: Option<String>,
        params: Option<Target>,
    }
    #[derive(serde::Deserialize)]
    struct Target {
        name: Option<String>,
        uri: Option<String>,
    }
    let Ok(envelope) = serde_json::from_slice::<Envelope>(message) else {
        return Vec::new();
    };
    let Some(method) = envelope.method else {
        return Vec::new();
    };
    let mut headers = Vec::with_capacity(2);
    if let Ok(value) = HeaderValue::from_str(&method) {
        headers.push(("mcp-method", value));
    }
    let target = match method.as_str() {
        "tools/call" | "prompts/get" => envelope.params.and_then(|p| p.name),
        "resources/read" => envelope.params.and_then(|p| p.uri),
        _ => None,
    };
    if let Some(target) = target {
        let text = crate::model::param_headers::encode(&target);
        if let Ok(value) = HeaderValue::from_str(&text) {
            headers.push(("mcp-name", value));
        }
    }
    headers
}
