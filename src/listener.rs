//! The HTTP listener's accept loop (admin API and `/mcp` on one port),
//! written out instead of `axum::serve` for what a slow or hostile peer
//! must not be able to do: a connection that trickles its headers is cut
//! after the header-read timeout (which also closes idle keep-alive
//! connections), a request body that stops arriving is cut after the body
//! timeout, and open connections are capped (a warning when the cap is
//! reached; accepting resumes as connections close). At the cap, kept-alive
//! connections that have been served are asked to close once their current
//! request is answered (at most once a second): otherwise anyone sending a
//! cheap request every few seconds on `--max-connections` connections
//! would keep everyone else — the owner's admin token included — waiting
//! for ever. Event streams are not cut (named tokens' share of them is
//! bounded by `api::load`). The soft descriptor limit is raised at start so
//! the cap, not the limit, is what binds.

use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

/// Default for `--header-timeout`.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default time a request body may pause between chunks.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// What one peer can hold of the listener.
#[derive(Debug, Clone, Copy)]
pub struct ListenerLimits {
    /// Time to send a request's headers; also how long a keep-alive
    /// connection may sit idle between requests.
    pub header_timeout: Duration,
    /// Longest pause while a request body is read.
    pub body_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves `app` on `listener` until `shutdown`; then stops accepting, asks
/// every connection to finish its current request, and returns once they
/// have (the caller bounds that wait).
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ListenerLimits,
    shutdown: CancellationToken,
) {
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
        limits.body_timeout,
    ));
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Every connection task holds a receiver; all dropped = all closed.
    let (open_tx, open_rx) = watch::channel(());
    // Bumped to ask served keep-alive connections to close (at the cap).
    let (shed_tx, shed_rx) = watch::channel(0u64);
    let mut last_shed: Option<std::time::Instant> = None;
    let mut at_cap = false;
    'accepting: loop {
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                at_cap = false;
                slot
            }
            Err(_) => {
                if !at_cap {
                    tracing::warn!(
                        max = limits.max_connections,
                        "connection cap reached (--max-connections); served keep-alive connections are closed to make room"
                    );
                    at_cap = true;
                }
                loop {
                    if last_shed.is_none_or(|at| at.elapsed() >= SHED_EVERY) {
                        shed_tx.send_modify(|generation| *generation += 1);
                        last_shed = Some(std::time::Instant::now());
                    }
                    tokio::select! {
                        slot = Arc::clone(&slots).acquire_owned() => match slot {
                            Ok(slot) => break slot,
                            Err(_) => break 'accepting,
                        },
                        () = tokio::time::sleep(SHED_EVERY) => {}
                        () = shutdown.cancelled() => break 'accepting,
                    }
                }
            }
        };
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of descriptors or a connection reset before we
                    // took it: wait a little rather than spin.
                    tracing::debug!("accept failed: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        // Set once the connection has sent a request: one that has not yet
        // (just accepted) is never asked to close; the header timeout
        // bounds it.
        let served = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let served_seen = Arc::clone(&served);
        let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
            served_seen.store(true, std::sync::atomic::Ordering::Relaxed);
            request.extensions_mut().insert(ConnectInfo(remote));
            let mut app = app.clone();
            async move { tower_service::Service::call(&mut app, request).await }
        });
        let shutdown = shutdown.clone();
        let open = open_rx.clone();
        let mut shed = shed_rx.clone();
        shed.mark_unchanged();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(64 * 1024);
            let connection = builder
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::pin!(connection);
            let mut listening = true;
            loop {
                tokio::select! {
                    _ = connection.as_mut() => break,
                    () = shutdown.cancelled() => {
                        connection.as_mut().graceful_shutdown();
                        let _ = connection.as_mut().await;
                        break;
                    }
                    changed = shed.changed(), if listening => {
                        listening = changed.is_ok();
                        if listening && served.load(std::sync::atomic::Ordering::Relaxed) {
                            connection.as_mut().graceful_shutdown();
                            let _ = connection.as_mut().await;
                            break;
                        }
                    }
                }
            }
            drop(slot);
            drop(open);
        });
    }
    drop(listener);
    drop(open_rx);
    drop(shed_rx);
    open_tx.closed().await;
    drop(shed_tx);
}

/// How often, at most, served connections are asked to close while the
/// cap holds.
const SHED_EVERY: Duration = Duration::from_secs(1);

/// Raises the soft limit on open descriptors to the hard limit, so the
/// connection cap is what binds; returns the new soft limit.
pub fn raise_descriptor_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    // rustix says "unlimited" with None, the kernel with RLIM_INFINITY
    // (all ones), which is what callers are told.
    let value = |limit: Option<u64>| limit.unwrap_or(u64::MAX);
    let limit = getrlimit(Resource::Nofile);
    if value(limit.current) < value(limit.maximum) {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return Some(value(limit.maximum));
        }
    }
    Some(value(limit.current))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_descriptor_limit_is_raised_to_the_hard_one() {
        let soft = raise_descriptor_limit().expect("getrlimit works");
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(soft, limit.current.unwrap_or(u64::MAX));
        assert_eq!(limit.current, limit.maximum);
    }
}
