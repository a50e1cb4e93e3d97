//! Per-server call limits (a server's `trust.limits`): calls in flight at
//! once, a token bucket of call starts (rate and burst), and how long a
//! call over a limit may wait for room before it is refused. One limiter
//! per server, replaced when its settings change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::CallError;
use crate::model::{CallLimits, ServerId};

/// The limiters of every server that has limits.
#[derive(Default)]
pub(super) struct Limiters {
    by_server: Mutex<HashMap<ServerId, Arc<Limiter>>>,
}

struct Limiter {
    limits: CallLimits,
    in_flight: Option<Arc<Semaphore>>,
    bucket: Option<Mutex<Bucket>>,
}

/// Call starts: `size` at most, refilled at `rate` per second.
struct Bucket {
    tokens: f64,
    size: f64,
    rate: f64,
    last: Instant,
}

impl Bucket {
    /// Takes a token, or says how long until one is there.
    fn take(&mut self, now: Instant) -> Option<Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.size);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

/// A call let through: holds its place among the server's calls in
/// flight until dropped.
pub(super) struct Admitted {
    _permit: Option<OwnedSemaphorePermit>,
    gauge: Option<String>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(server) = &self.gauge {
            crate::metrics::global()
                .calls_in_flight
                .get_or_create(&label(server))
                .dec();
        }
    }
}

fn label(server: &str) -> crate::metrics::ServerLabel {
    crate::metrics::ServerLabel {
        server: server.to_owned(),
    }
}

impl Limiters {
    fn limiter(&self, server: ServerId, limits: &CallLimits) -> Arc<Limiter> {
        let mut map = self.by_server.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(current) = map.get(&server)
            && current.limits == *limits
        {
            return Arc::clone(current);
        }
        let limiter = Arc::new(Limiter {
            limits: limits.clone(),
            in_flight: limits
                .max_concurrent
                .map(|n| Arc::new(Semaphore::new(n as usize))),
            bucket: limits.calls_per_second.map(|rate| {
                let size = f64::from(limits.bucket_size().unwrap_or(1));
                Mutex::new(Bucket {
                    tokens: size,
                    size,
                    rate,
                    last: Instant::now(),
                })
            }),
        });
        map.insert(server, Arc::clone(&limiter));
        limiter
    }

    /// Lets a call to `server` start, waiting up to its `wait_ms` for
    /// room; refused with the limit named when there is none.
    pub(super) async fn admit(
        &self,
        server: ServerId,
        name: &str,
        limits: &CallLimits,
    ) -> Result<Admitted, CallError> {
        if limits.max_concurrent.is_none() && limits.calls_per_second.is_none() {
            return Ok(Admitted {
                _permit: None,
                gauge: None,
            });
        }
        let limiter = self.limiter(server, limits);
        let metrics = crate::metrics::global();
        let deadline =
            Instant::now() + Duration::from_millis(u64::from(limits.wait_ms.unwrap_or(0)));
        let refuse = |limit: &str, text: String| {
            metrics
                .calls_limited
                .get_or_create(&crate::metrics::LimitLabel {
                    server: name.to_owned(),
                    limit: limit.to_owned(),
                })
                .inc();
            CallError::Limited {
                server: name.to_owned(),
                limit: text,
            }
        };
        let mut waited = false;
        if let Some(bucket) = &limiter.bucket {
            loop {
                let now = Instant::now();
                let until = bucket.lock().unwrap_or_else(|e| e.into_inner()).take(now);
                let Some(until) = until else { break };
                if now + until > deadline {
                    let rate = limits.calls_per_second.unwrap_or_default();
                    return Err(refuse(
                        "rate",
                        format!(
                            "{rate} calls per second (burst {})",
                            limits.bucket_size().unwrap_or(1)
                        ),
                    ));
                }
                waited = true;
                // A bounded wait for the next token (at most `wait_ms`).
                tokio::time::sleep(until).await;
            }
        }
        let permit = match &limiter.in_flight {
            None => None,
            Some(semaphore) => match Arc::clone(semaphore).try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let waited_for =
                        tokio::time::timeout(left, Arc::clone(semaphore).acquire_owned()).await;
                    match waited_for {
                        Ok(Ok(permit)) if !left.is_zero() => {
                            waited = true;
                            Some(permit)
                        }
                        _ => {
                            let n = limits.max_concurrent.unwrap_or_default();
                            return Err(refuse("concurrent", format!("{n} concurrent calls")));
                        }
                    }
                }
            },
        };
        if waited {
            metrics.calls_waited.get_or_create(&label(name)).inc();
        }
        metrics.calls_in_flight.get_or_create(&label(name)).inc();
        Ok(Admitted {
            _permit: permit,
            gauge: Some(name.to_owned()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_lets_a_burst_through_then_says_when_the_next_token_comes() {
        let start = Instant::now();
        let mut bucket = Bucket {
            tokens: 2.0,
            size: 2.0,
            rate: 4.0,
            last: start,
        };
        assert_eq!(bucket.take(start), None);
        assert_eq!(bucket.take(start), None);
        let wait = bucket.take(start).expect("empty");
        assert!((wait.as_secs_f64() - 0.25).abs() < 1e-9, "{wait:?}");
        assert_eq!(bucket.take(start + Duration::from_millis(250)), None);
    }
}
