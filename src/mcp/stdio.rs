//! MCP over stdin/stdout: one client (Claude Desktop, an IDE), newline-
//! delimited JSON-RPC. Requests run concurrently; stdout carries nothing but
//! protocol (logs go to stderr).

use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::incoming::Incoming;
use super::outbound::Outbound;
use super::{ClientConnection, FrontDoor};
use crate::jsonrpc::Outgoing;
use crate::limits::{self, Line};

/// Serves one client on `input`/`output` until the input ends, `shutdown`,
/// or the client stops taking its answers; `profile` (checked by the
/// caller) is the view it sees.
pub async fn serve(
    server: Arc<FrontDoor>,
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
    profile: Option<String>,
    shutdown: CancellationToken,
) {
    // One token ends the loop: shutdown, or a client that stopped taking
    // its answers. Waited on through one pinned future, registered once.
    let stop = shutdown.child_token();
    let (outbound, queue) =
        Outbound::with_stall_token(limits::CLIENT_QUEUE, limits::CLIENT_STALL, stop.clone());
    let outbound = Arc::new(outbound);
    let stopped = stop.cancelled();
    tokio::pin!(stopped);
    let client = ClientConnection::new(Arc::clone(&outbound));
    if let Some(profile) = &profile {
        client.set_profile(profile);
    }

    let writer = spawn_line_writer(output, queue);
    let notifier = tokio::spawn(super::subscriptions::forward_list_changes(
        server.router().clone(),
        Arc::clone(&client),
    ));
    // A client that sends without reading waits here instead of piling up
    // running requests.
    let running = Arc::new(Semaphore::new(limits::CLIENT_CONCURRENCY));

    let mut reader = BufReader::with_capacity(64 * 1024, input);
    let mut line = Vec::new();
    loop {
        let max = limits::max_message_bytes();
        let read = tokio::select! {
            read = limits::read_line(&mut reader, &mut line, max) => read,
            () = &mut stopped => break,
        };
        match read {
            Ok(Line::Complete) => {}
            Ok(Line::TooLong(tail)) => {
                // Named by its id when the bytes kept of it hold it, so the
                // client stops waiting for an answer.
                let detail =
                    format!("message larger than the {max} byte limit (--max-message-bytes)");
                let cut = crate::jsonrpc::CutMessage::read(&line, tail.as_slice());
                let answer = match cut.request_id() {
                    Some(id) => {
                        crate::jsonrpc::error(id.clone(), crate::jsonrpc::INVALID_REQUEST, &detail)
                    }
                    None => super::incoming::parse_error(&detail),
                };
                if !outbound.deliver(answer).await {
                    break;
                }
                continue;
            }
            Ok(Line::End) | Err(_) => break,
        }
        let text = trim(&line);
        if text.is_empty() {
            continue;
        }
        let messages = match super::incoming::parse(text) {
            Ok(parsed) => parsed.into_messages().1,
            Err(err) => {
                if !outbound
                    .deliver(super::incoming::parse_error(&err.to_string()))
                    .await
                {
                    break;
                }
                continue;
            }
        };
        for message in messages {
            let permit = match Arc::clone(&running).try_acquire_owned() {
                Ok(permit) => permit,
                Err(_) => {
                    let permit = tokio::select! {
                        permit = Arc::clone(&running).acquire_owned() => permit,
                        () = &mut stopped => break,
                    };
                    let Ok(permit) = permit else { break };
                    permit
                }
            };
            dispatch(&server, &client, message, permit);
        }
    }
    notifier.abort();
    drop(client);
    drop(outbound);
    // Answers already queued still go out.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
}

fn dispatch(
    server: &Arc<FrontDoor>,
    client: &Arc<ClientConnection>,
    message: Incoming,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    match message {
        Incoming::Request {
            id,
            method,
            params,
            arguments,
        } => {
            let (server, client) = (Arc::clone(server), Arc::clone(client));
            // Registered before it runs, so `notifications/cancelled` can
            // always find it; a cancelled request gets no answer.
            let cancelled = client.begin(&id);
            // Boxed: the request's future is several kilobytes, and
            // spawning moves it into the task by value (a visible share of
            // a call's CPU under load).
            tokio::spawn(Box::pin(async move {
                let answer = tokio::select! {
                    answer = server.handle_request(&client, id.clone(), &method, params, arguments) => Some(answer),
                    () = cancelled.cancelled() => None,
                };
                client.end(&id);
                if let Some(answer) = answer {
                    client.outbound().deliver(answer).await;
                }
                drop(permit);
            }));
        }
        Incoming::Other(message) => server.handle_other(client, &message),
        Incoming::Invalid(answer) => {
            let client = Arc::clone(client);
            tokio::spawn(async move {
                client.outbound().deliver(answer).await;
                drop(permit);
            });
        }
    }
}

/// Writes each message as one JSON line, in order, until the queue closes.
/// Answers that queued meanwhile go out in the same write: under load the
/// client is woken once for many answers.
pub fn spawn_line_writer(
    output: impl AsyncWrite + Unpin + Send + 'static,
    mut queue: mpsc::Receiver<Outgoing>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut output = output;
        let mut lines = Vec::new();
        while let Some(message) = queue.recv().await {
            lines.clear();
            push_json_line(&mut lines, &message);
            while lines.len() < WRITE_BATCH_BYTES
                && let Ok(message) = queue.try_recv()
            {
                push_json_line(&mut lines, &message);
            }
            if lines.is_empty() {
                continue;
            }
            if output.write_all(&lines).await.is_err() || output.flush().await.is_err() {
                break;
            }
            // One huge answer (a long tools/list) must not stay allocated
            // for the life of the connection.
            if lines.capacity() > WRITE_BATCH_BYTES * 4 {
                lines = Vec::new();
            }
        }
    })
}

/// Bytes of queued answers written to the client in one write at most.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// Appends `message` to `lines` as one JSON line (nothing if it cannot be
/// serialised, which a message always can).
fn push_json_line(lines: &mut Vec<u8>, message: &Outgoing) {
    let start = lines.len();
    match serde_json::to_writer(&mut *lines, message) {
        Ok(()) => lines.push(b'\n'),
        Err(_) => lines.truncate(start),
    }
}

/// Our stdin as an async reader, read through epoll when it is a pipe (a
/// client launched us from Python, Rust, a shell) or a Unix socket (Node
/// and Electron clients — Claude Desktop, VS Code, Cursor — give a child
/// socketpairs for its stdio); anything else (a terminal, a file) through
/// tokio's blocking-thread reader, which hands every read to another thread
/// (measured with a Node client: 10k calls/s against 90k through epoll).
pub fn stdin() -> Box<dyn AsyncRead + Unpin + Send> {
    match duplicate(rustix::stdio::stdin()) {
        Some(fd) => reader_from(fd),
        None => Box::new(tokio::io::stdin()),
    }
}

/// Our stdout as an async writer (see `stdin`).
pub fn stdout() -> Box<dyn AsyncWrite + Unpin + Send> {
    match duplicate(rustix::stdio::stdout()) {
        Some(fd) => writer_from(fd),
        None => Box::new(tokio::io::stdout()),
    }
}

/// A client's input descriptor (ours, or one a `stdio` relay handed the
/// daemon) as an async reader: through epoll for a pipe or a Unix socket,
/// else (a terminal, a file) through blocking threads. Out of descriptors
/// to duplicate one with, it reads as ended.
pub fn reader_from(fd: std::os::fd::OwnedFd) -> Box<dyn AsyncRead + Unpin + Send> {
    match Stream::of(fd) {
        Stream::Pipe(fd) => {
            let spare = fd.try_clone();
            match (tokio::net::unix::pipe::Receiver::from_owned_fd(fd), spare) {
                (Ok(pipe), _) => Box::new(pipe),
                (Err(_), Ok(fd)) => Box::new(blocking(fd)),
                (Err(_), Err(_)) => Box::new(tokio::io::empty()),
            }
        }
        Stream::Socket(socket) => Box::new(socket),
        Stream::Other(fd) => Box::new(blocking(fd)),
    }
}

/// A client's output descriptor as an async writer (see `reader_from`;
/// out of descriptors, what is written is lost).
pub fn writer_from(fd: std::os::fd::OwnedFd) -> Box<dyn AsyncWrite + Unpin + Send> {
    match Stream::of(fd) {
        Stream::Pipe(fd) => {
            let spare = fd.try_clone();
            match (tokio::net::unix::pipe::Sender::from_owned_fd(fd), spare) {
                (Ok(pipe), _) => Box::new(pipe),
                (Err(_), Ok(fd)) => Box::new(blocking(fd)),
                (Err(_), Err(_)) => Box::new(tokio::io::sink()),
            }
        }
        Stream::Socket(socket) => Box::new(socket),
        Stream::Other(fd) => Box::new(blocking(fd)),
    }
}

/// A descriptor read and written through blocking threads.
fn blocking(fd: std::os::fd::OwnedFd) -> tokio::fs::File {
    tokio::fs::File::from_std(std::fs::File::from(fd))
}

/// What one of our standard descriptors is.
enum Stream {
    Pipe(std::os::fd::OwnedFd),
    Socket(tokio::net::UnixStream),
    Other(std::os::fd::OwnedFd),
}

impl Stream {
    fn of(fd: std::os::fd::OwnedFd) -> Stream {
        use rustix::fs::FileType;
        let Ok(stat) = rustix::fs::fstat(&fd) else {
            return Stream::Other(fd);
        };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Fifo => Stream::Pipe(fd),
            FileType::Socket if is_unix_stream(&fd) => {
                let Ok(spare) = fd.try_clone() else {
                    return Stream::Other(fd);
                };
                let socket = std::os::unix::net::UnixStream::from(fd);
                match socket
                    .set_nonblocking(true)
                    .and_then(|()| tokio::net::UnixStream::from_std(socket))
                {
                    Ok(socket) => Stream::Socket(socket),
                    Err(_) => Stream::Other(spare),
                }
            }
            _ => Stream::Other(fd),
        }
    }
}

/// Whether a socket is a Unix stream socket (what Node's socketpairs are).
fn is_unix_stream(fd: &std::os::fd::OwnedFd) -> bool {
    use rustix::net::{AddressFamily, SocketType, sockopt};
    sockopt::socket_domain(fd).ok() == Some(AddressFamily::UNIX)
        && sockopt::socket_type(fd).ok() == Some(SocketType::STREAM)
}

fn duplicate(fd: std::os::fd::BorrowedFd<'static>) -> Option<std::os::fd::OwnedFd> {
    // Close-on-exec: the servers we spawn must never inherit our client's
    // pipes (they could read its requests or write into the protocol).
    rustix::io::fcntl_dupfd_cloexec(fd, 3).ok()
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
