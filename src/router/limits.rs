//! Per-server call limits (a server's `trust.limits`): calls in flight at
//! once, a token bucket of call starts (rate and burst), and how long a
//! call over a limit may wait for room before it is refused. One gate per
//! server, counting every server's calls in flight (`/metrics`); the
//! limits are read per call, so a change applies to the next call and the
//! calls already in flight still count against it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

use super::CallError;
use crate::model::{CallLimits, ServerId};

/// Every server's gate, made on its first call.
#[derive(Default)]
pub(super) struct Limiters {
    by_server: Mutex<HashMap<ServerId, Arc<Gate>>>,
}

struct Gate {
    state: Mutex<Level>,
    /// Told when a call ends (room for a call waiting on concurrency).
    room: Notify,
    in_flight_gauge: prometheus_client::metrics::gauge::Gauge,
}

/// How full a server is.
struct Level {
    in_flight: u32,
    /// Call starts left in the bucket (full on first use).
    tokens: Option<f64>,
    last: Instant,
}

/// What a call finds at the gate.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Let through: its slot and its token are taken.
    Admitted,
    /// Every slot is taken.
    Busy,
    /// No token: the next comes after this long.
    NoToken(Duration),
}

impl Level {
    /// Takes a slot and a token together, or neither: a call refused for
    /// one limit never uses up the other.
    fn try_admit(&mut self, limits: &CallLimits, now: Instant) -> Verdict {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        if let Some(max) = limits.max_concurrent
            && self.in_flight >= max
        {
            self.refill(limits, elapsed);
            return Verdict::Busy;
        }
        if let Some(rate) = limits.calls_per_second {
            let tokens = self.refill(limits, elapsed);
            if tokens < 1.0 {
                return Verdict::NoToken(Duration::from_secs_f64((1.0 - tokens) / rate));
            }
            self.tokens = Some(tokens - 1.0);
        }
        self.in_flight += 1;
        Verdict::Admitted
    }

    /// The bucket after `elapsed` seconds at the current rate, never above
    /// the current size (a smaller burst takes effect at once).
    fn refill(&mut self, limits: &CallLimits, elapsed: f64) -> f64 {
        let (Some(rate), Some(size)) = (limits.calls_per_second, limits.bucket_size()) else {
            self.tokens = None;
            return 0.0;
        };
        let size = f64::from(size);
        let tokens = self.tokens.map_or(size, |t| (t + elapsed * rate).min(size));
        self.tokens = Some(tokens);
        tokens
    }
}

/// A call let through: holds its place among the server's calls in
/// flight until dropped.
pub(super) struct Admitted {
    gate: Arc<Gate>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut level = self.gate.state.lock().unwrap_or_else(|e| e.into_inner());
        level.in_flight = level.in_flight.saturating_sub(1);
        drop(level);
        self.gate.in_flight_gauge.dec();
        self.gate.room.notify_waiters();
    }
}

impl Limiters {
    fn gate(&self, server: ServerId, name: &str) -> Arc<Gate> {
        let mut map = self.by_server.lock().unwrap_or_else(|e| e.into_inner());
        let gate = map.entry(server).or_insert_with(|| {
            Arc::new(Gate {
                state: Mutex::new(Level {
                    in_flight: 0,
                    tokens: None,
                    last: Instant::now(),
                }),
                room: Notify::new(),
                in_flight_gauge: crate::metrics::global()
                    .calls_in_flight
                    .get_or_create(&label(name))
                    .clone(),
            })
        });
        Arc::clone(gate)
    }

    /// Lets a call to `server` start, waiting up to its `wait_ms` for
    /// room; refused with the limit named when there is none.
    pub(super) async fn admit(
        &self,
        server: ServerId,
        name: &str,
        limits: &CallLimits,
    ) -> Result<Admitted, CallError> {
        let gate = self.gate(server, name);
        let metrics = crate::metrics::global();
        let deadline =
            Instant::now() + Duration::from_millis(u64::from(limits.wait_ms.unwrap_or(0)));
        let mut waited = false;
        let refused = loop {
            // Listening before looking, so a call ending in between is
            // not missed.
            let room = gate.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            let now = Instant::now();
            let verdict = gate
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .try_admit(limits, now);
            match verdict {
                Verdict::Admitted => break None,
                Verdict::Busy if now < deadline => {
                    waited = true;
                    let _ = tokio::time::timeout(deadline - now, room).await;
                }
                Verdict::Busy => break Some("concurrent"),
                Verdict::NoToken(until) if now + until <= deadline => {
                    waited = true;
                    tokio::time::sleep(until).await;
                }
                Verdict::NoToken(_) => break Some("rate"),
            }
        };
        if waited {
            metrics.calls_waited.get_or_create(&label(name)).inc();
        }
        let Some(limit) = refused else {
            gate.in_flight_gauge.inc();
            return Ok(Admitted { gate });
        };
        metrics
            .calls_limited
            .get_or_create(&crate::metrics::LimitLabel {
                server: name.to_owned(),
                limit: limit.to_owned(),
            })
            .inc();
        let text = if limit == "rate" {
            format!(
                "{} calls per second (burst {})",
                limits.calls_per_second.unwrap_or_default(),
                limits.bucket_size().unwrap_or(1)
            )
        } else {
            format!(
                "{} concurrent calls",
                limits.max_concurrent.unwrap_or_default()
            )
        };
        Err(CallError::Limited {
            server: name.to_owned(),
            limit: text,
        })
    }
}

fn label(server: &str) -> crate::metrics::ServerLabel {
    crate::metrics::ServerLabel {
        server: server.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(at: Instant) -> Level {
        Level {
            in_flight: 0,
            tokens: None,
            last: at,
        }
    }

    #[test]
    fn the_bucket_lets_a_burst_through_then_says_when_the_next_token_comes() {
        let start = Instant::now();
        let limits = CallLimits {
            calls_per_second: Some(4.0),
            burst: Some(2),
            ..CallLimits::default()
        };
        let mut level = level(start);
        assert_eq!(level.try_admit(&limits, start), Verdict::Admitted);
        assert_eq!(level.try_admit(&limits, start), Verdict::Admitted);
        let Verdict::NoToken(wait) = level.try_admit(&limits, start) else {
            panic!("empty")
        };
        assert!((wait.as_secs_f64() - 0.25).abs() < 1e-9, "{wait:?}");
        let later = start + Duration::from_millis(250);
        assert_eq!(level.try_admit(&limits, later), Verdict::Admitted);
        assert_eq!(level.in_flight, 3);
    }

    #[test]
    fn a_call_refused_for_concurrency_keeps_its_token() {
        let start = Instant::now();
        let limits = CallLimits {
            max_concurrent: Some(1),
            calls_per_second: Some(0.001),
            burst: Some(2),
            ..CallLimits::default()
        };
        let mut level = level(start);
        assert_eq!(level.try_admit(&limits, start), Verdict::Admitted);
        for _ in 0..5 {
            assert_eq!(level.try_admit(&limits, start), Verdict::Busy);
        }
        level.in_flight -= 1;
        assert_eq!(level.try_admit(&limits, start), Verdict::Admitted);
    }

    #[test]
    fn new_limits_count_the_calls_already_in_flight_and_keep_the_bucket_level() {
        let start = Instant::now();
        let loose = CallLimits {
            max_concurrent: Some(4),
            calls_per_second: Some(0.001),
            burst: Some(3),
            ..CallLimits::default()
        };
        let mut level = level(start);
        for _ in 0..3 {
            assert_eq!(level.try_admit(&loose, start), Verdict::Admitted);
        }
        let tight = CallLimits {
            max_concurrent: Some(2),
            ..loose.clone()
        };
        assert_eq!(level.try_admit(&tight, start), Verdict::Busy);
        level.in_flight = 0;
        // The bucket the loose limits emptied stays empty.
        assert!(matches!(
            level.try_admit(&tight, start),
            Verdict::NoToken(_)
        ));
        // Without a rate, only concurrency counts.
        let unlimited = CallLimits::default();
        assert_eq!(level.try_admit(&unlimited, start), Verdict::Admitted);
    }
}
