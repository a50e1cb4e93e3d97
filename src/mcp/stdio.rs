//! MCP over stdin/stdout: one client (Claude Desktop, an IDE), newline-
//! delimited JSON-RPC. Requests run concurrently; stdout carries nothing but
//! protocol (logs go to stderr).

use serde_json::Value;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::handler::{self, ClientConnection, Incoming, McpServer};

/// Longest line accepted from the client.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Serves one client on `input`/`output` until the input ends or `shutdown`.
pub async fn serve(
    server: Arc<McpServer>,
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
    shutdown: CancellationToken,
) {
    let (outbound, queue) = mpsc::unbounded_channel::<Value>();
    let client = ClientConnection::new(outbound.clone());

    let writer = spawn_line_writer(output, queue);
    let notifier = tokio::spawn(handler::forward_list_changes(
        server.router().clone(),
        Arc::clone(&client),
    ));

    let mut reader = BufReader::with_capacity(64 * 1024, input);
    let mut line = Vec::new();
    loop {
        if !next_line(&mut reader, &mut line, &shutdown).await {
            break;
        }
        if line.len() > MAX_LINE_BYTES {
            let _ = outbound.send(handler::parse_error("message too large"));
            continue;
        }
        let text = trim(&line);
        if text.is_empty() {
            continue;
        }
        let message: Value = match serde_json::from_slice(text) {
            Ok(message) => message,
            Err(err) => {
                let _ = outbound.send(handler::parse_error(&err.to_string()));
                continue;
            }
        };
        let messages = match message {
            Value::Array(batch) => batch,
            single => vec![single],
        };
        for message in messages {
            dispatch(&server, &client, message, &outbound);
        }
    }
    notifier.abort();
    drop(outbound);
    drop(client);
    // Answers already queued still go out.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
}

fn dispatch(
    server: &Arc<McpServer>,
    client: &Arc<ClientConnection>,
    message: Value,
    outbound: &mpsc::UnboundedSender<Value>,
) {
    match handler::classify(message) {
        Incoming::Request { id, method, params } => {
            let (server, client2, outbound) =
                (Arc::clone(server), Arc::clone(client), outbound.clone());
            // Registered before it runs, so `notifications/cancelled` can
            // always find it; a cancelled request gets no answer.
            let cancelled = client.begin(&id);
            tokio::spawn(async move {
                let answer = tokio::select! {
                    answer = server.handle_request(&client2, id.clone(), &method, params) => Some(answer),
                    () = cancelled.cancelled() => None,
                };
                client2.end(&id);
                if let Some(answer) = answer {
                    let _ = outbound.send(answer);
                }
            });
        }
        Incoming::Other(message) => server.handle_other(client, &message),
        Incoming::Invalid(answer) => {
            let _ = outbound.send(answer);
        }
    }
}

/// Reads the next line (newline included) into `line`; false at the end of
/// the input, on a read error, or on shutdown.
pub async fn next_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    line: &mut Vec<u8>,
    shutdown: &CancellationToken,
) -> bool {
    line.clear();
    tokio::select! {
        read = reader.read_until(b'\n', line) => matches!(read, Ok(n) if n > 0),
        () = shutdown.cancelled() => false,
    }
}

/// Writes each message as one JSON line, in order, until the queue closes.
pub fn spawn_line_writer(
    output: impl AsyncWrite + Unpin + Send + 'static,
    mut queue: mpsc::UnboundedReceiver<Value>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut output = output;
        while let Some(message) = queue.recv().await {
            let Ok(mut bytes) = serde_json::to_vec(&message) else {
                continue;
            };
            bytes.push(b'\n');
            if output.write_all(&bytes).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    })
}

/// Our stdin as an async reader. A pipe (the usual case: a client launched
/// us) is read through epoll; anything else (a terminal, a file) through
/// tokio's blocking-thread reader.
pub fn stdin() -> Box<dyn AsyncRead + Unpin + Send> {
    match duplicate(0).and_then(|fd| tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok()) {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::stdin()),
    }
}

/// Our stdout as an async writer (see `stdin`).
pub fn stdout() -> Box<dyn AsyncWrite + Unpin + Send> {
    match duplicate(1).and_then(|fd| tokio::net::unix::pipe::Sender::from_owned_fd(fd).ok()) {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::stdout()),
    }
}

fn duplicate(fd: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    // SAFETY: dup(2) has no memory-safety preconditions; a non-negative
    // result is a new descriptor that we own.
    let copy = unsafe { libc::dup(fd) };
    // SAFETY: `copy` was just returned by dup and is owned by nobody else.
    (copy >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(copy) })
}

fn trim(line: &[u8]) -> &[u8] {
    let start = line
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(line.len());
    let end = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |p| p + 1);
    &line[start..end]
}
