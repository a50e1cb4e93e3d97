//! The daemon's Unix socket, where `stdio` relays attach (see `relay`):
//! owner-only, and only a process of our own user is served. Each
//! connection is one client: a handshake line (the config file it brings
//! is applied first), then MCP lines both ways, served as stdio is. Counts
//! the clients attached, for `--idle-exit`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::DaemonError;
use super::config_files::ConfigFiles;
use crate::mcp::FrontDoor;
use crate::relay::{HANDSHAKE_VERSION, Hello, MAX_HELLO_BYTES, Welcome};

/// How long a connection gets to send its handshake.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a daemon staying for the clients of `/mcp` looks again at
/// least (with a zero `--idle-exit`, whether they are gone yet).
const STAYING_RECHECK: Duration = Duration::from_secs(1);
/// The first wait for a client of a daemon that has had none yet: the
/// relay that started it attaches within moments, but not within a zero
/// `--idle-exit`.
const FIRST_CLIENT_GRACE: Duration = Duration::from_secs(60);

/// What a local client is served with.
#[derive(Clone)]
pub struct LocalServices {
    pub mcp: Arc<FrontDoor>,
    pub config_files: ConfigFiles,
    pub registry: crate::registry::Registry,
}

/// The listening socket.
pub struct LocalSocket {
    path: PathBuf,
    attached: watch::Receiver<Attached>,
}

/// Who is attached.
#[derive(Debug, Clone, Copy, Default)]
struct Attached {
    now: usize,
    /// Whether any client ever attached.
    ever: bool,
}

impl LocalSocket {
    /// Binds the data dir's socket (one left by a daemon that did not stop
    /// cleanly is replaced: this process owns the data dir) and serves
    /// clients on it until `shutdown`.
    pub fn bind(
        data_dir: &Path,
        services: LocalServices,
        shutdown: CancellationToken,
    ) -> Result<LocalSocket, DaemonError> {
        let path = crate::paths::socket_path(data_dir);
        let socket_error = |source| DaemonError::DataFile {
            path: path.clone(),
            source,
        };
        crate::paths::create_socket_dir(&path).map_err(socket_error)?;
        match std::fs::remove_file(&path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                return Err(socket_error(err));
            }
            _ => {}
        }
        let listener = tokio::net::UnixListener::bind(&path).map_err(socket_error)?;
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(socket_error)?;
        }
        let (count, attached) = watch::channel(Attached::default());
        tokio::spawn(accept(
            listener,
            path.clone(),
            services,
            Arc::new(count),
            shutdown,
        ));
        Ok(LocalSocket { path, attached })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Cancels `shutdown` once no client has been attached for `idle`
    /// (the first wait is at least `FIRST_CLIENT_GRACE`), nor has `/mcp`
    /// had one (`http_in_use` with the idle time: a session open, a
    /// request under way or one within it).
    pub fn exit_when_idle(
        &self,
        idle: Duration,
        shutdown: CancellationToken,
        http_in_use: impl Fn(Duration) -> bool + Send + 'static,
    ) {
        let mut attached = self.attached.clone();
        tokio::spawn(async move {
            // Said once each time the socket's last client has gone.
            let mut said_staying = false;
            loop {
                let wait = match attached.wait_for(|a| a.now == 0).await {
                    Ok(a) if a.ever => idle,
                    Ok(_) => idle.max(FIRST_CLIENT_GRACE),
                    Err(_) => return,
                };
                // Staying, looked at again after the idle time, and never
                // in a busy loop (`--idle-exit 0s`).
                let sleep = if said_staying {
                    wait.max(STAYING_RECHECK)
                } else {
                    wait
                };
                let idle_passed = tokio::select! {
                    () = tokio::time::sleep(sleep) => true,
                    changed = attached.wait_for(|a| a.now > 0) => {
                        if changed.is_err() {
                            return;
                        }
                        false
                    }
                    () = shutdown.cancelled() => return,
                };
                if idle_passed && http_in_use(wait) {
                    if !std::mem::replace(&mut said_staying, true) {
                        tracing::info!(
                            "no client on the socket for {}; staying for the clients of /mcp",
                            humantime::format_duration(wait)
                        );
                    }
                    continue;
                }
                if !idle_passed {
                    said_staying = false;
                }
                // One may have attached in the same instant.
                if idle_passed && attached.borrow().now == 0 {
                    tracing::info!(
                        "no client for {}; stopping (--idle-exit)",
                        humantime::format_duration(wait)
                    );
                    shutdown.cancel();
                    return;
                }
            }
        });
    }
}

/// Serves clients until `shutdown`, then removes the socket at once: a
/// client starting meanwhile starts the next daemon instead of attaching
/// to one that is stopping (it waits for this one's store).
async fn accept(
    listener: tokio::net::UnixListener,
    path: PathBuf,
    services: LocalServices,
    count: Arc<watch::Sender<Attached>>,
    shutdown: CancellationToken,
) {
    let own_uid = rustix::process::getuid().as_raw();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // Out of descriptors, most likely: wait for some to close.
                    tracing::warn!("cannot accept a local client: {err}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => {
                let _ = std::fs::remove_file(&path);
                return;
            }
        };
        match stream.peer_cred() {
            Ok(cred) if cred.uid() == own_uid => {}
            Ok(cred) => {
                tracing::warn!(uid = cred.uid(), "refused a local client of another user");
                continue;
            }
            Err(err) => {
                tracing::warn!("refused a local client whose user is unknown: {err}");
                continue;
            }
        }
        let (services, count, shutdown) = (services.clone(), Arc::clone(&count), shutdown.clone());
        tokio::spawn(async move {
            count.send_modify(|a| {
                a.now += 1;
                a.ever = true;
            });
            serve_client(stream, &services, shutdown).await;
            count.send_modify(|a| a.now -= 1);
        });
    }
}

async fn serve_client(stream: UnixStream, services: &LocalServices, shutdown: CancellationToken) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    let read = tokio::time::timeout(
        HELLO_TIMEOUT,
        crate::limits::read_line(&mut reader, &mut line, MAX_HELLO_BYTES),
    )
    .await;
    let mut profile = None;
    let welcome = match read {
        Ok(Ok(crate::limits::Line::Complete)) => match serde_json::from_slice::<Hello>(&line) {
            Ok(hello) if hello.version == HANDSHAKE_VERSION => {
                profile = hello.profile.clone();
                attach(hello, services).await
            }
            Ok(hello) => Welcome::Refused {
                reason: format!(
                    "handshake version {} (this daemon speaks {HANDSHAKE_VERSION}): the daemon runs another mcp-aggregator build; stop it and start again",
                    hello.version
                ),
            },
            Err(err) => Welcome::Refused {
                reason: format!("not a handshake: {err}"),
            },
        },
        Ok(Ok(crate::limits::Line::TooLong(_))) => Welcome::Refused {
            reason: format!("handshake larger than {MAX_HELLO_BYTES} bytes"),
        },
        // Gone, or silent: nobody to answer.
        Ok(Ok(crate::limits::Line::End)) | Ok(Err(_)) | Err(_) => return,
    };
    // Stopping: no welcome, and the relay tries the next daemon.
    if shutdown.is_cancelled() {
        return;
    }
    let attached = matches!(welcome, Welcome::Attached { .. });
    let mut answer = match serde_json::to_vec(&welcome) {
        Ok(answer) => answer,
        Err(_) => return,
    };
    answer.push(b'\n');
    if write.write_all(&answer).await.is_err() || !attached {
        return;
    }
    // The relay sent nothing after its hello until it read the welcome.
    if !reader.buffer().is_empty() {
        return;
    }
    let mode = tokio::time::timeout(HELLO_TIMEOUT, receive_mode(reader.get_ref().as_ref())).await;
    match mode {
        Ok(Ok(Mode::HandedOver { input, output })) => {
            // The client is ours to talk to directly. The relay's end of
            // this connection closing (the client killed it) ends the
            // session; the session ending closes ours (the relay exits).
            let session = shutdown.child_token();
            let relay_gone = session.clone();
            let mut control = reader.into_inner();
            let watcher = tokio::spawn(async move {
                let mut ignored = [0u8; 64];
                while let Ok(read) = tokio::io::AsyncReadExt::read(&mut control, &mut ignored).await
                {
                    if read == 0 {
                        break;
                    }
                }
                relay_gone.cancel();
            });
            let (input, output) = (
                crate::mcp::stdio::reader_from(input),
                crate::mcp::stdio::writer_from(output),
            );
            crate::mcp::stdio::serve(Arc::clone(&services.mcp), input, output, profile, session)
                .await;
            let farewell = if shutdown.is_cancelled() {
                crate::relay::STOPPING
            } else {
                crate::relay::RELEASED
            };
            let _ = write.write_all(&[farewell]).await;
            drop(write);
            watcher.abort();
        }
        Ok(Ok(Mode::Copying)) => {
            crate::mcp::stdio::serve(Arc::clone(&services.mcp), reader, write, profile, shutdown)
                .await;
        }
        Ok(Ok(Mode::Gone)) | Ok(Err(_)) | Err(_) => {}
    }
}

/// What the relay does after the welcome.
enum Mode {
    /// Its client's input and output, to serve directly.
    HandedOver {
        input: std::os::fd::OwnedFd,
        output: std::os::fd::OwnedFd,
    },
    /// Bytes come and go through this connection.
    Copying,
    /// It left (or sent something else).
    Gone,
}

/// Reads the relay's one byte after the welcome and the descriptors that
/// come with it (received close-on-exec: the servers we start never
/// inherit a client's pipes).
async fn receive_mode(socket: &UnixStream) -> std::io::Result<Mode> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    socket
        .async_io(tokio::io::Interest::READABLE, || {
            let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut byte = [0u8; 1];
            let received = recvmsg(
                socket,
                &mut [std::io::IoSliceMut::new(&mut byte)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
            )?;
            let mut descriptors: Vec<std::os::fd::OwnedFd> = Vec::new();
            for message in control.drain() {
                if let RecvAncillaryMessage::ScmRights(rights) = message {
                    descriptors.extend(rights);
                }
            }
            Ok(match (received.bytes, byte[0], descriptors.len()) {
                (1, crate::relay::HANDING_OVER, 2) => {
                    let output = descriptors.pop();
                    let input = descriptors.pop();
                    match (input, output) {
                        (Some(input), Some(output)) => Mode::HandedOver { input, output },
                        _ => Mode::Gone,
                    }
                }
                (1, crate::relay::COPYING, 0) => Mode::Copying,
                _ => Mode::Gone,
            })
        })
        .await
}

/// Applies the client's config file (in its environment, and kept applied
/// as it changes) and says what went wrong, if anything: the client is
/// attached either way, to what the daemon has.
async fn attach(hello: Hello, services: &LocalServices) -> Welcome {
    let mut warnings = Vec::new();
    if let Some(path) = &hello.config
        && let Err(reason) = services.config_files.apply_file(path, hello.env).await
    {
        warnings.push(format!(
            "{reason}; the daemon's servers are used as they were"
        ));
    }
    // The config file (just applied) may be what defines it.
    if let Some(profile) = &hello.profile
        && let Err(err) = services.mcp.router().check_profile(profile).await
    {
        return Welcome::Refused {
            reason: crate::daemon::unknown_profile(&services.registry, err).await,
        };
    }
    Welcome::Attached {
        pid: std::process::id(),
        warnings,
    }
}
