//! `mcp-aggregator stdio` as a thin relay: one daemon owns a data dir
//! (redb allows one process) and every client's `stdio` process passes its
//! bytes to it over the daemon's Unix socket. When no daemon runs, the
//! first relay starts one in the background (detached, its log in the data
//! dir); clients starting at the same moment take turns on a lock, so they
//! end with one. After a one-line handshake (the client's config file and
//! the environment its `$VAR`s expand in) the relay hands its stdin and
//! stdout to the daemon (`SCM_RIGHTS`): the daemon then talks to the
//! client directly, as if it were the process the client started, and
//! the relay only waits, asleep, until the daemon is done with them (or
//! ends, or the relay is killed, which ends the client's session). Where
//! descriptors cannot be passed, bytes are copied both ways on two
//! blocking threads instead.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead as _, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::ConfigError;
use crate::paths;

/// What the handshake looks like; a daemon refuses another version.
pub const HANDSHAKE_VERSION: u32 = 3;
/// After the welcome, the relay's one byte: its stdin and stdout come
/// with it (`SCM_RIGHTS`) ...
pub const HANDING_OVER: u8 = b'F';
/// ... or bytes will be copied through the socket.
pub const COPYING: u8 = b'B';
/// The daemon's one byte when it is done with a handed-over client (its
/// input ended) ...
pub const RELEASED: u8 = b'D';
/// ... or when it stops with the client still attached. A connection that
/// closes without either is a daemon that died.
pub const STOPPING: u8 = b'S';
/// Longest handshake line a daemon reads (it carries the environment).
pub const MAX_HELLO_BYTES: usize = 4 * 1024 * 1024;
/// How long a daemon started for a client gets until it takes clients
/// (its store checked, its index opened).
pub const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the daemon gets to answer the handshake (a config file to
/// apply, a busy store).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a starting daemon's socket is tried.
const START_POLL: Duration = Duration::from_millis(20);
/// A daemon log past this size is moved aside (`daemon.log.1`) when a
/// relay starts a daemon.
const MAX_LOG_BYTES: u64 = 16 * 1024 * 1024;

/// The first line a relay sends.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    /// The client's config file, absolute.
    #[serde(default)]
    pub config: Option<PathBuf>,
    /// The relay's environment: the config file's `$VAR`s expand in it
    /// (each client's own, not the daemon's).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The profile whose view the client sees (none: everything).
    #[serde(default)]
    pub profile: Option<String>,
}

/// The daemon's answer to a `Hello`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Welcome {
    /// Attached: MCP lines follow. `warnings` are worth telling the user
    /// (a config file the daemon could not apply).
    Attached {
        pid: u32,
        #[serde(default)]
        warnings: Vec<String>,
    },
    /// Not attached, and why.
    Refused { reason: String },
}

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot use the data dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the aggregator daemon: {0}")]
    Start(String),
    #[error("the aggregator daemon refused this client: {0}")]
    Refused(String),
    #[error("the aggregator daemon did not answer the handshake: {0}")]
    Handshake(String),
    #[error("relaying failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the aggregator daemon stopped while this client was attached")]
    DaemonStopped,
    #[error(
        "the aggregator daemon ended without a word while this client was attached (killed, or it crashed: see its log)"
    )]
    DaemonGone,
}

impl RelayError {
    /// 2 for what the user can fix in the command (a config file, a data
    /// dir, a refused handshake), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            RelayError::Config(_) | RelayError::DataDir { .. } | RelayError::Refused(_) => 2,
            _ => 1,
        }
    }
}

/// What a relay needs.
#[derive(Debug, Clone)]
pub struct RelayOptions {
    pub data_dir: PathBuf,
    pub config: Option<PathBuf>,
    /// The profile whose view the client sees.
    pub profile: Option<String>,
    /// The arguments of the `serve` a daemon started for this client runs
    /// with (the data dir, `--idle-exit`, the client's settings).
    pub daemon_args: Vec<OsString>,
    /// The daemon's settings this command line gave (`--expose search`,
    /// …): a daemon already running keeps the ones it started with.
    pub daemon_settings: Vec<String>,
}

/// Relays stdin and stdout to the data dir's daemon (started if none
/// runs) until either side ends. Blocking.
pub fn run(options: &RelayOptions) -> Result<(), RelayError> {
    // A broken config file is said here, before any daemon starts.
    let config = match &options.config {
        Some(path) => {
            crate::config::load(path)?;
            Some(std::path::absolute(path)?)
        }
        None => None,
    };
    let hello = Hello {
        version: HANDSHAKE_VERSION,
        config,
        // Variables that are not UTF-8 cannot be in a config file's
        // expansion anyway (and `vars()` would panic on them).
        env: std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .collect(),
        profile: options.profile.clone(),
    };
    // A daemon that is stopping (its last client left a moment ago) closes
    // without a welcome: the next one is started, or found.
    let deadline = Instant::now() + START_TIMEOUT;
    let (socket, welcome, started) = loop {
        let (socket, started) = connect_or_start(options)?;
        match handshake(&socket, &hello) {
            Ok(welcome) => break (socket, welcome, started),
            Err(RelayError::Handshake(reason)) if Instant::now() < deadline => {
                tracing::debug!("the daemon closed without a welcome ({reason}); trying again");
                std::thread::sleep(START_POLL);
            }
            Err(err) => return Err(err),
        }
    };
    match welcome {
        Welcome::Attached { pid, warnings } => {
            tracing::debug!(daemon = pid, "attached to the aggregator daemon");
            for warning in warnings {
                tracing::warn!("{warning}");
            }
            if !started && !options.daemon_settings.is_empty() {
                tracing::warn!(
                    "the aggregator daemon for {} was running already, and keeps the settings it started with: `{}` applies once it is stopped and a client starts it again (or give them to `mcp-aggregator serve`)",
                    options.data_dir.display(),
                    options.daemon_settings.join(" ")
                );
            }
        }
        Welcome::Refused { reason } => return Err(RelayError::Refused(reason)),
    }
    match hand_over(&socket) {
        Ok(()) => wait_until_released(&socket),
        Err(err) => {
            tracing::debug!("cannot hand the descriptors over ({err}); copying bytes");
            (&socket).write_all(&[COPYING])?;
            pump(socket)
        }
    }
}

/// Passes our stdin and stdout to the daemon, with `HANDING_OVER`.
fn hand_over(socket: &UnixStream) -> std::io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let descriptors = [rustix::stdio::stdin(), rustix::stdio::stdout()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&descriptors)) {
        return Err(std::io::Error::other("no room for the descriptors"));
    }
    let sent = sendmsg(
        socket,
        &[std::io::IoSlice::new(&[HANDING_OVER])],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if sent == 1 {
        Ok(())
    } else {
        Err(std::io::Error::other("the hand-over was not sent"))
    }
}

/// Sleeps until the daemon is done with the client (its input ended:
/// `RELEASED`), or stops (`STOPPING`), or dies (the connection closes
/// without a word): the client's host sees the last two as a failure.
fn wait_until_released(socket: &UnixStream) -> Result<(), RelayError> {
    let mut said = [0u8; 64];
    loop {
        match (&*socket).read(&mut said) {
            Ok(0) => return Err(RelayError::DaemonGone),
            Ok(read) if said[..read].contains(&RELEASED) => return Ok(()),
            Ok(read) if said[..read].contains(&STOPPING) => {
                return Err(RelayError::DaemonStopped);
            }
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => {
                return Err(RelayError::DaemonGone);
            }
            Err(err) => return Err(err.into()),
        }
    }
}

/// Connects to the daemon's socket, and only to a daemon of our own user:
/// the hello carries our environment, and a socket path in a shared
/// directory could have been put there by anyone.
fn connect(socket: &Path) -> Option<UnixStream> {
    let stream = UnixStream::connect(socket).ok()?;
    let ours = rustix::process::getuid().as_raw();
    match rustix::net::sockopt::socket_peercred(&stream) {
        Ok(peer) if peer.uid.as_raw() == ours => Some(stream),
        Ok(peer) => {
            tracing::error!(
                socket = %socket.display(),
                uid = peer.uid.as_raw(),
                "the socket belongs to another user; not attaching to it"
            );
            None
        }
        Err(_) => None,
    }
}

/// The daemon's socket: connected at once when a daemon runs, else after
/// starting one (or after another client started one first); and whether
/// this client started it.
fn connect_or_start(options: &RelayOptions) -> Result<(UnixStream, bool), RelayError> {
    let socket = paths::socket_path(&options.data_dir);
    if let Some(stream) = connect(&socket) {
        return Ok((stream, false));
    }
    let data_dir_error = |source| RelayError::DataDir {
        path: options.data_dir.clone(),
        source,
    };
    paths::create_private_dir(&options.data_dir).map_err(data_dir_error)?;
    // Released when `_lock` is dropped (or this process ends). Without it
    // (a full disk refusing the file) clients starting together may start
    // two daemons, of which the store lets one run.
    let _lock = start_lock(&options.data_dir);
    // Another client may have started it while this one waited.
    if let Some(stream) = connect(&socket) {
        return Ok((stream, false));
    }
    let mut daemon = start_daemon(options)?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(stream) = connect(&socket) {
            // Reaped when it ends, should this client outlive it.
            std::thread::spawn(move || daemon.wait());
            return Ok((stream, true));
        }
        if let Some(status) = daemon.try_wait()? {
            return Err(RelayError::Start(format!(
                "it exited ({status}) before taking clients; its log ({}) ends with:\n{}",
                options.data_dir.join(paths::DAEMON_LOG_FILE).display(),
                log_tail(&options.data_dir)
            )));
        }
        if Instant::now() >= deadline {
            return Err(RelayError::Start(format!(
                "it did not take clients within {START_TIMEOUT:?} (pid {}); see {}",
                daemon.id(),
                options.data_dir.join(paths::DAEMON_LOG_FILE).display()
            )));
        }
        std::thread::sleep(START_POLL);
    }
}

/// The data dir's start lock, held (waited for while another client
/// starts a daemon); none when the file cannot be made.
fn start_lock(data_dir: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = data_dir.join(paths::START_LOCK_FILE);
    let locked = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .and_then(|file| {
            rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
            Ok(file)
        });
    match locked {
        Ok(file) => Some(file),
        Err(err) => {
            tracing::warn!(
                "cannot lock {} ({err}); starting the daemon without it",
                path.display()
            );
            None
        }
    }
}

/// Starts `mcp-aggregator serve` for the data dir, detached from this
/// client: its own process group (a client's Ctrl-C or hang-up is not
/// its), no terminal, its output appended to the data dir's log.
fn start_daemon(options: &RelayOptions) -> Result<std::process::Child, RelayError> {
    use std::os::unix::process::CommandExt as _;
    let log_path = options.data_dir.join(paths::DAEMON_LOG_FILE);
    if std::fs::metadata(&log_path).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
        let _ = std::fs::rename(&log_path, options.data_dir.join("daemon.log.1"));
    }
    let log = {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
    };
    // A full disk: the daemon still serves what is stored, unlogged.
    let (stdout, stderr) = match log.and_then(|log| Ok((log.try_clone()?, log))) {
        Ok((out, err)) => (
            std::process::Stdio::from(out),
            std::process::Stdio::from(err),
        ),
        Err(err) => {
            tracing::warn!(
                "cannot write {} ({err}); the daemon runs without a log",
                log_path.display()
            );
            (std::process::Stdio::null(), std::process::Stdio::null())
        }
    };
    let executable = std::env::current_exe()
        .map_err(|err| RelayError::Start(format!("cannot find our own executable: {err}")))?;
    let child = std::process::Command::new(executable)
        .args(&options.daemon_args)
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .map_err(|err| RelayError::Start(err.to_string()))?;
    tracing::info!(
        pid = child.id(),
        log = %log_path.display(),
        "started the aggregator daemon for {}",
        options.data_dir.display()
    );
    Ok(child)
}

/// The last lines of the daemon's log, for an error message.
fn log_tail(data_dir: &Path) -> String {
    let text = std::fs::read_to_string(data_dir.join(paths::DAEMON_LOG_FILE)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

/// Sends the hello and reads the answer, byte by byte up to its newline:
/// what follows it is MCP and belongs to the client.
fn handshake(socket: &UnixStream, hello: &Hello) -> Result<Welcome, RelayError> {
    let mut line = serde_json::to_vec(hello).map_err(std::io::Error::other)?;
    line.push(b'\n');
    (&*socket).write_all(&line)?;
    socket.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut answer = Vec::new();
    let mut reader = std::io::BufReader::with_capacity(1, socket);
    let read = reader.read_until(b'\n', &mut answer);
    socket.set_read_timeout(None)?;
    match read {
        Ok(0) => Err(RelayError::Handshake(
            "it closed the connection (see its log)".into(),
        )),
        Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => Err(
            RelayError::Handshake("it closed the connection (see its log)".into()),
        ),
        Ok(_) => serde_json::from_slice(&answer)
            .map_err(|err| RelayError::Handshake(format!("an answer that makes no sense: {err}"))),
        Err(err) => Err(RelayError::Handshake(err.to_string())),
    }
}

/// Copies stdin to the daemon and the daemon to stdout until the daemon
/// closes (after the client's input ended and its answers went out, or
/// when it stops). Raw descriptors, no buffering: a message goes on as
/// soon as it arrives.
fn pump(socket: UnixStream) -> Result<(), RelayError> {
    let to_daemon = socket.try_clone()?;
    let duplicate = |fd| rustix::io::fcntl_dupfd_cloexec(fd, 3).map(std::fs::File::from);
    let stdin = duplicate(rustix::stdio::stdin()).map_err(std::io::Error::from)?;
    let stdout = duplicate(rustix::stdio::stdout()).map_err(std::io::Error::from)?;
    std::thread::spawn(move || {
        let _ = forward(stdin, &to_daemon);
        // The daemon answers what is under way, then closes.
        let _ = to_daemon.shutdown(std::net::Shutdown::Write);
    });
    match forward(&socket, stdout) {
        Ok(()) => Ok(()),
        // The client went away: nothing left to relay to.
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Bytes from `from` to `to` as they come, until `from` ends. Not
/// `std::io::copy`: between a pipe and a Unix socket it splices, and a
/// splice into a Unix socket was seen holding a small message back (a
/// client's second request never reached the daemon).
fn forward(mut from: impl std::io::Read, mut to: impl std::io::Write) -> std::io::Result<()> {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) => return Ok(()),
            Ok(read) => to.write_all(&buffer[..read])?,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
}
