//! Whether `/mcp` is serving anyone, for a daemon that stops once it has
//! no client (`--idle-exit`): a request counts until its answer's body is
//! done (an SSE stream while it stays open), and the last one keeps the
//! daemon for the idle time after it, as a client on the socket does while
//! attached. HTTP sessions still open count as clients too (see
//! `McpHttp::in_use_within`).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

/// The requests under way and when the last one came.
#[derive(Clone)]
pub struct HttpUse {
    in_flight: Arc<AtomicUsize>,
    /// Milliseconds after `since` a request last came or ended.
    last_request: Arc<AtomicU64>,
    since: Instant,
}

impl Default for HttpUse {
    fn default() -> HttpUse {
        HttpUse {
            in_flight: Arc::default(),
            last_request: Arc::default(),
            since: Instant::now(),
        }
    }
}

impl HttpUse {
    /// Whether a request is under way, or one came or ended within `idle`.
    pub fn busy_within(&self, idle: Duration) -> bool {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return true;
        }
        let last = Duration::from_millis(self.last_request.load(Ordering::Relaxed));
        self.since.elapsed().saturating_sub(last) < idle
    }

    /// Marks now as the last moment a client was heard from or served.
    fn touch(&self) {
        let now = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_request.fetch_max(now, Ordering::Relaxed);
    }

    fn enter(&self) -> Entered {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.touch();
        Entered(self.clone())
    }
}

/// One request under way, until dropped: the idle time counts from its
/// end (a long call, a stream closed).
struct Entered(HttpUse);

impl Drop for Entered {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The middleware: the request counts until its answer's body is done.
pub async fn count(State(usage): State<HttpUse>, request: Request, next: Next) -> Response {
    let entered = usage.enter();
    next.run(request).await.map(|body| {
        Body::new(Counted {
            body,
            _entered: entered,
        })
    })
}

/// An answer's body that holds its request's place while it lives.
struct Counted {
    body: Body,
    _entered: Entered,
}

impl http_body::Body for Counted {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
