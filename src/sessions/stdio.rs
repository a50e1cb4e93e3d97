//! STDIO transport: the server is a child process speaking newline-delimited
//! JSON-RPC on stdin/stdout. It runs in its own process group so that
//! everything it spawns (`npx` wrappers, grandchildren) is terminated with
//! it; its stderr goes to our log, tagged with the server's name.

use bytes::Bytes;
use rustix::io::FdFlags;
use rustix::process::{Pid, Signal};
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use super::transport::{Inbound, LinkError, LinkState, Received};

/// Longest stderr line kept in the log.
const MAX_LOG_LINE: usize = 8 * 1024;
/// How long a child gets between SIGTERM and SIGKILL.
pub const TERMINATE_GRACE: Duration = Duration::from_millis(1000);

pub struct StdioLink {
    outbound: mpsc::Sender<Bytes>,
    state: Arc<LinkState>,
    pid: u32,
    kill: Arc<Notify>,
    exited: CancellationToken,
}

/// What to run.
pub struct StdioSpec<'a> {
    pub command: &'a str,
    pub args: &'a [String],
    pub env: &'a BTreeMap<String, String>,
    pub cwd: Option<&'a str>,
}

/// Set once the daemon's store is a PostgreSQL reached with `PGPASSWORD`:
/// that password is then the daemon's, not a server's.
static STORE_PASSWORD_IN_ENV: AtomicBool = AtomicBool::new(false);

/// Withholds `PGPASSWORD` from the servers started from now on (the daemon
/// reaches its shared store with it).
pub fn withhold_store_password() {
    STORE_PASSWORD_IN_ENV.store(true, Ordering::Relaxed);
}

/// The daemon's own settings and credentials are not a server's: every
/// `MCP_AGGREGATOR_*` variable (the admin token, the classifier's API
/// key), and `PGPASSWORD` when it opens the shared store. A server that
/// echoes its environment (or any process it starts) would otherwise
/// hand a view-bound client the admin token. A server's own `env` may
/// still set any of them.
fn withhold_daemon_environment(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if name
            .to_str()
            .is_some_and(|name| name.starts_with("MCP_AGGREGATOR_"))
        {
            command.env_remove(&name);
        }
    }
    if STORE_PASSWORD_IN_ENV.load(Ordering::Relaxed) {
        command.env_remove("PGPASSWORD");
    }
}

/// Spawns the server and wires its pipes.
pub fn open(server: &str, spec: &StdioSpec<'_>, inbound: Inbound) -> Result<StdioLink, LinkError> {
    let mut command = Command::new(spec.command);
    // Every process the server starts inherits the mark: those that leave
    // its group are still found and ended with it.
    let mark = crate::reaper::Mark::new();
    withhold_daemon_environment(&mut command);
    command
        .args(spec.args)
        .envs(spec.env)
        .env(crate::reaper::MARK_ENV, mark.value())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = spec.cwd {
        command.current_dir(cwd);
    }
    let mut child = crate::reaper::spawn(command).map_err(|err| LinkError::Spawn {
        command: spec.command.to_owned(),
        reason: err.to_string(),
    })?;
    let pid = child.id().ok_or_else(|| LinkError::Spawn {
        command: spec.command.to_owned(),
        reason: "the process exited at once".to_owned(),
    })?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(LinkError::Spawn {
            command: spec.command.to_owned(),
            reason: "its pipes could not be opened".to_owned(),
        });
    };
    let state = Arc::new(LinkState::default());
    let (outbound, mut queue) = mpsc::channel::<Bytes>(256);

    // Writer: one message per line. Whatever queued meanwhile goes out in
    // the same write (one wake-up of the server for many calls under load);
    // a line is never split over two writes (it would wake the server for
    // half a line).
    let writer_state = Arc::clone(&state);
    tokio::spawn(async move {
        let mut stdin = stdin;
        let mut lines = Vec::new();
        while let Some(message) = queue.recv().await {
            lines.clear();
            push_line(&mut lines, &message);
            while lines.len() < WRITE_BATCH_BYTES
                && let Ok(message) = queue.try_recv()
            {
                push_line(&mut lines, &message);
            }
            let written = async {
                stdin.write_all(&lines).await?;
                stdin.flush().await
            };
            if let Err(err) = written.await {
                writer_state.close(format!("cannot write to the server's stdin: {err}"));
                break;
            }
            // One huge request must not stay allocated for the life of the
            // session.
            if lines.capacity() > WRITE_BATCH_BYTES * 4 {
                lines = Vec::new();
            }
        }
        // Dropping stdin closes it: the MCP way of asking a server to stop.
    });

    // Reader: every line is a JSON-RPC message (or a batch).
    let reader_state = Arc::clone(&state);
    let name = server.to_owned();
    tokio::spawn(async move {
        let mut reader = BufReader::with_capacity(64 * 1024, stdout);
        let mut line = Vec::new();
        loop {
            let max = crate::limits::max_message_bytes();
            match crate::limits::read_line(&mut reader, &mut line, max).await {
                Ok(crate::limits::Line::End) => {
                    reader_state.close("the server closed its stdout");
                    break;
                }
                Ok(crate::limits::Line::Complete) => {}
                Ok(crate::limits::Line::TooLong(tail)) => {
                    let cut = crate::jsonrpc::CutMessage::read(&line, tail.as_slice());
                    let Some(id) = cut.answer_id().and_then(serde_json::Value::as_u64) else {
                        tracing::warn!(
                            server = %name,
                            limit = max,
                            "the server wrote a message larger than the limit (--max-message-bytes); ignored"
                        );
                        continue;
                    };
                    // The request it answers gets an error now, not at its
                    // timeout (which may be an hour away).
                    tracing::warn!(
                        server = %name,
                        limit = max,
                        id = %id,
                        "the server's answer is larger than the limit (--max-message-bytes); its request fails"
                    );
                    let why = format!(
                        "the server's answer is larger than the {max} byte limit (--max-message-bytes)"
                    );
                    if inbound.send(Received::Lost { id, why }).await.is_err() {
                        return;
                    }
                    continue;
                }
                Err(err) => {
                    reader_state.close(format!("cannot read the server's stdout: {err}"));
                    break;
                }
            }
            let text = trim_line(&line);
            if text.is_empty() {
                continue;
            }
            match crate::jsonrpc::split_raw(text) {
                Ok(messages) => {
                    for message in messages {
                        if inbound.send(message.into()).await.is_err() {
                            return;
                        }
                    }
                }
                Err(_) => tracing::warn!(
                    server = %name,
                    line = %String::from_utf8_lossy(&text[..text.len().min(MAX_LOG_LINE)]),
                    "the server wrote a line that is not JSON-RPC to stdout; ignored"
                ),
            }
        }
    });

    // Stderr into our log.
    let name = server.to_owned();
    tokio::spawn(log_stderr(name, stderr));

    // Waiter: owns the child; reaps it, and on request terminates the group.
    let kill = Arc::new(Notify::new());
    let exited = CancellationToken::new();
    tokio::spawn(supervise_child(
        server.to_owned(),
        child,
        pid,
        mark,
        Arc::clone(&kill),
        exited.clone(),
        Arc::clone(&state),
    ));

    Ok(StdioLink {
        outbound,
        state,
        pid,
        kill,
        exited,
    })
}

impl StdioLink {
    pub async fn send(&self, message: Bytes) -> Result<(), LinkError> {
        if self.state.is_closed() {
            return Err(LinkError::Closed(self.state.reason()));
        }
        self.outbound
            .send(message)
            .await
            .map_err(|_| LinkError::Closed(self.state.reason()))
    }

    pub fn send_detached(&self, message: Bytes) {
        let _ = self.outbound.try_send(message);
    }

    pub fn state(&self) -> &LinkState {
        &self.state
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Terminates the process group (SIGTERM, then SIGKILL after the grace
    /// period) and waits until the child is reaped.
    pub async fn close(&self) {
        self.kill.notify_one();
        self.exited.cancelled().await;
    }
}

impl Drop for StdioLink {
    /// A link dropped without `close` (a handshake that timed out, an
    /// attempt cancelled by a disconnect or a removal) still ends its
    /// process group: the waiter terminates and reaps it.
    fn drop(&mut self) {
        if !self.exited.is_cancelled() {
            self.kill.notify_one();
        }
    }
}

/// Kills the group if the waiter itself is dropped before it reaped the
/// child (the runtime shutting down): nothing the group started survives.
struct GroupGuard(u32);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        signal_group(self.0, Signal::KILL);
    }
}

async fn supervise_child(
    server: String,
    mut child: Child,
    pgid: u32,
    mark: crate::reaper::Mark,
    kill: Arc<Notify>,
    exited: CancellationToken,
    state: Arc<LinkState>,
) {
    // Whatever the leader left behind in its group is killed on every way
    // out of here, including this task being dropped.
    let group = GroupGuard(pgid);
    let (status, escaped_grace, known) = tokio::select! {
        status = child.wait() => (status, TERMINATE_GRACE, Default::default()),
        () = kill.notified() => {
            // Found while the leader lives: its descendants that left the
            // group are still linked to it.
            let family = {
                let mark = mark.clone();
                tokio::task::spawn_blocking(move || crate::reaper::family(&mark, Some(pgid)))
                    .await
                    .unwrap_or_default()
            };
            let termed = std::time::Instant::now();
            signal_group(pgid, Signal::TERM);
            for process in &family {
                crate::reaper::signal(*process, Signal::TERM);
            }
            let status = match tokio::time::timeout(TERMINATE_GRACE, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    signal_group(pgid, Signal::KILL);
                    child.wait().await
                }
            };
            // The rest of their grace: a leader that exits at once must not
            // cut short the time its escaped descendants get to stop (one
            // told to stop may still be handling it on a busy machine).
            (status, TERMINATE_GRACE.saturating_sub(termed.elapsed()), family)
        }
    };
    crate::reaper::forget(pgid);
    drop(group);
    // Processes that left the group (and the leader's orphans, now ours).
    let escaped =
        tokio::task::spawn_blocking(move || crate::reaper::end(&mark, known, escaped_grace))
            .await
            .unwrap_or_default();
    if escaped > 0 {
        tracing::info!(
            server = %server,
            processes = escaped,
            "ended the server's processes that had left its process group"
        );
    }
    let description = match &status {
        Ok(status) => format!("the server process exited ({status})"),
        Err(err) => format!("the server process could not be waited for: {err}"),
    };
    tracing::debug!(server = %server, pid = pgid, "{description}");
    state.close(description);
    exited.cancel();
}

/// Marks every descriptor above stderr close-on-exec. Ours are opened that
/// way already; this covers the ones inherited from whoever started us (a
/// client that leaked its pipes, a build tool's jobserver), which the
/// servers we spawn must never see.
pub fn close_inherited_on_exec() {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: only fcntl sees this borrow, and fcntl on a descriptor
        // number has no memory-safety preconditions; a closed one (the
        // directory listing's own) fails with EBADF, which is fine.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        if let Ok(flags) = rustix::io::fcntl_getfd(fd)
            && !flags.contains(FdFlags::CLOEXEC)
        {
            let _ = rustix::io::fcntl_setfd(fd, flags | FdFlags::CLOEXEC);
        }
    }
}

/// Sends `signal` to every process of the group (ESRCH, "already gone", is fine).
pub fn signal_group(pgid: u32, signal: Signal) {
    let Ok(pgid) = i32::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // A positive pgid that is our own child's group is never our group or
    // init's.
    if let Some(pgid) = Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(pgid, signal);
    }
}

/// Copies a server's stderr into the log, at most
/// `limits::STDERR_LOG_BYTES_PER_SEC` (in bursts): a server writing
/// megabytes a second must not fill the disk with our log. What is dropped
/// is counted, said when dropping starts and then once a minute. The pipe
/// is always read on, so the server never blocks on it.
async fn log_stderr(server: String, stderr: impl AsyncRead + Unpin) {
    use crate::limits::{STDERR_LINE_COST, STDERR_LOG_BURST, STDERR_LOG_BYTES_PER_SEC};
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut rate = crate::limits::ByteRate::new(STDERR_LOG_BYTES_PER_SEC, STDERR_LOG_BURST);
    let dropped_counter = crate::metrics::global()
        .stderr_lines_dropped
        .get_or_create(&crate::metrics::ServerLabel {
            server: server.clone(),
        })
        .clone();
    let (mut dropped_lines, mut dropped_bytes) = (0u64, 0u64);
    let mut last_report: Option<std::time::Instant> = None;
    loop {
        match crate::limits::read_line(&mut reader, &mut line, MAX_LOG_LINE).await {
            Ok(crate::limits::Line::End) | Err(_) => break,
            Ok(_) => {
                let text = trim_line(&line);
                if text.is_empty() {
                    continue;
                }
                let now = std::time::Instant::now();
                let cost = (text.len() as u64).max(STDERR_LINE_COST);
                if !rate.take(cost, now) {
                    dropped_lines += 1;
                    dropped_bytes += text.len() as u64;
                    dropped_counter.inc();
                    if last_report.is_none() {
                        last_report = Some(now);
                        tracing::warn!(
                            server = %server,
                            "the server writes to stderr faster than the log takes ({} KiB/s); dropping lines, counted",
                            STDERR_LOG_BYTES_PER_SEC / 1024
                        );
                    }
                } else {
                    let text = String::from_utf8_lossy(text);
                    tracing::info!(target: "mcp_aggregator::server_stderr", server = %server, "{text}");
                }
                if let Some(since) = last_report
                    && now.duration_since(since) >= STDERR_DROP_REPORT
                {
                    if dropped_lines > 0 {
                        tracing::warn!(
                            server = %server,
                            lines = dropped_lines,
                            bytes = dropped_bytes,
                            "stderr lines dropped in the last minute (more than the log takes)"
                        );
                    }
                    // A quiet minute ends the report; the next drop
                    // starts another.
                    last_report = (dropped_lines > 0).then_some(now);
                    (dropped_lines, dropped_bytes) = (0, 0);
                }
            }
        }
    }
    if dropped_lines > 0 {
        tracing::warn!(
            server = %server,
            lines = dropped_lines,
            bytes = dropped_bytes,
            "stderr lines dropped before the server's stderr closed"
        );
    }
}

/// How often dropped stderr lines are reported while dropping goes on.
const STDERR_DROP_REPORT: Duration = Duration::from_secs(60);

fn trim_line(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    &line[..end]
}

/// Bytes of queued messages written to a server in one write at most.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// Appends `message` to `lines` as one newline-terminated line.
fn push_line(lines: &mut Vec<u8>, message: &[u8]) {
    lines.extend_from_slice(message);
    if !message.ends_with(b"\n") {
        lines.push(b'\n');
    }
}
