//! What each server's traffic and health checks show (`Vitals`, one per
//! server, shared by its sessions and its supervisor): when it was last
//! heard from, its recent calls with their latency and outcome, checks
//! passed and failed, time available. The rules that turn these into
//! statuses are `model::health`.

use chrono::{DateTime, Utc};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::rpc_error::RpcError;
use crate::metrics::{self, ServerLabel};
use crate::model::ServerStatus;
use crate::model::health::{CallRules, CallSignals, CheckOutcome, HealthFigures, ResponseTimes};

/// Calls whose error rate and latency are judged.
const RECENT_CALLS: usize = 20;
/// Answers (calls and checks) the response-time figures are over.
const RECENT_ANSWERS: usize = 100;
/// How much one check's p50 moves the latency baseline.
const BASELINE_WEIGHT: f64 = 0.1;

struct CallSample {
    micros: u64,
    ok: bool,
}

struct State {
    name: String,
    calls: VecDeque<CallSample>,
    /// Answer times in µs, calls and checks.
    answers: VecDeque<u64>,
    consecutive_failures: u32,
    last_error: Option<String>,
    last_check: Option<DateTime<Utc>>,
    checks_passed: u64,
    checks_failed: u64,
    baseline_ms: Option<f64>,
    degraded_reason: Option<String>,
    list_error: Option<String>,
    interval: Duration,
    /// For the uptime ratio.
    status: ServerStatus,
    status_since: Instant,
    available: Duration,
    since: Instant,
    /// When a connection attempt last failed (the circuit breaker's clock).
    last_failed_attempt: Option<Instant>,
}

/// One server's health record. Updated on the call path with one short
/// lock; read by the supervisor at each check and by the API.
pub struct Vitals {
    epoch: Instant,
    /// Milliseconds after `epoch` the server was last heard from (any
    /// message), plus one; 0: never.
    heard: AtomicU64,
    state: Mutex<State>,
    label: ServerLabel,
    /// This server's series, looked up once (not per call).
    calls: prometheus_client::metrics::counter::Counter,
    call_errors: prometheus_client::metrics::counter::Counter,
    call_seconds: prometheus_client::metrics::histogram::Histogram,
}

fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(rank.min(sorted.len() - 1)).copied()
}

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

impl Vitals {
    pub fn new(name: &str, status: ServerStatus, interval: Duration) -> Vitals {
        let now = Instant::now();
        let label = ServerLabel {
            server: name.to_owned(),
        };
        // Every counter exists from the start at 0: a rate over a series
        // that appears only at its first error is wrong.
        let m = metrics::global();
        for family in [&m.reconnects, &m.health_check_failures] {
            let _ = family.get_or_create(&label);
        }
        let calls = m.calls.get_or_create_owned(&label);
        let call_errors = m.call_errors.get_or_create_owned(&label);
        let call_seconds = m.call_seconds.get_or_create_owned(&label);
        Vitals {
            epoch: now,
            heard: AtomicU64::new(0),
            state: Mutex::new(State {
                name: name.to_owned(),
                calls: VecDeque::with_capacity(RECENT_CALLS),
                answers: VecDeque::with_capacity(RECENT_ANSWERS),
                consecutive_failures: 0,
                last_error: None,
                last_check: None,
                checks_passed: 0,
                checks_failed: 0,
                baseline_ms: None,
                degraded_reason: None,
                list_error: None,
                interval,
                status,
                status_since: now,
                available: Duration::ZERO,
                since: now,
                last_failed_attempt: None,
            }),
            label,
            calls,
            call_errors,
            call_seconds,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A point in time as this record counts it.
    pub fn mark(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// The server sent something: it is alive.
    pub fn heard(&self) {
        self.heard.store(self.mark(), Ordering::Relaxed);
    }

    /// Whether the server was heard from after `mark`.
    pub fn heard_since(&self, mark: u64) -> bool {
        self.heard.load(Ordering::Relaxed) > mark
    }

    /// A request made for a client ended: `took` after it was sent.
    pub fn record_call<T>(&self, took: Duration, outcome: &Result<T, RpcError>) {
        let ok = match outcome {
            Ok(_) => true,
            // The server answered: a refusal is the client's business,
            // except an internal error.
            Err(RpcError::Server { code, .. }) => *code != crate::jsonrpc::INTERNAL_ERROR,
            Err(_) => false,
        };
        let micros = took.as_micros() as u64;
        self.calls.inc();
        self.call_seconds.observe(took.as_secs_f64());
        if !ok {
            self.call_errors.inc();
        }
        let mut state = self.lock();
        if state.calls.len() == RECENT_CALLS {
            state.calls.pop_front();
        }
        state.calls.push_back(CallSample { micros, ok });
        if ok {
            push_answer(&mut state.answers, micros);
        }
    }

    /// The outcome of a health check (active, or passive when `took` is
    /// none); returns the consecutive failures counting this one.
    pub fn record_check(&self, outcome: &CheckOutcome, took: Option<Duration>) -> u32 {
        let m = metrics::global();
        if let Some(took) = took {
            m.health_check_seconds
                .get_or_create(&self.label)
                .observe(took.as_secs_f64());
        }
        let mut state = self.lock();
        state.last_check = Some(Utc::now());
        match outcome {
            CheckOutcome::Passed => {
                state.consecutive_failures = 0;
                state.checks_passed += 1;
                if let Some(took) = took {
                    push_answer(&mut state.answers, took.as_micros() as u64);
                }
            }
            CheckOutcome::Failed(reason) => {
                m.health_check_failures.get_or_create(&self.label).inc();
                state.consecutive_failures += 1;
                state.checks_failed += 1;
                state.last_error = Some(reason.clone());
            }
            CheckOutcome::Inconclusive(reason) => {
                state.last_error = Some(reason.clone());
            }
        }
        state.consecutive_failures
    }

    /// What the recent calls show; moves the latency baseline when they
    /// are not in trouble.
    pub fn call_trouble(&self, rules: &CallRules) -> Option<String> {
        let mut state = self.lock();
        let mut ok: Vec<u64> = state
            .calls
            .iter()
            .filter(|c| c.ok)
            .map(|c| c.micros)
            .collect();
        ok.sort_unstable();
        let signals = CallSignals {
            calls: state.calls.len(),
            errors: state.calls.iter().filter(|c| !c.ok).count(),
            p95_ms: percentile(&ok, 0.95).map_or(0.0, ms),
            baseline_ms: state.baseline_ms,
        };
        let trouble = signals.trouble(rules);
        if trouble.is_none()
            && ok.len() >= rules.min_calls
            && let Some(p50) = percentile(&ok, 0.5).map(ms)
        {
            state.baseline_ms = Some(match state.baseline_ms {
                Some(base) => base * (1.0 - BASELINE_WEIGHT) + p50 * BASELINE_WEIGHT,
                None => p50,
            });
        }
        trouble
    }

    /// A fresh session: failures and calls of the last one no longer count.
    pub fn reset_for_session(&self) {
        let mut state = self.lock();
        state.consecutive_failures = 0;
        state.calls.clear();
        state.list_error = None;
    }

    /// How the last listing of the server's tools went.
    pub fn listed(&self, error: Option<String>) {
        self.lock().list_error = error;
    }

    pub fn set_interval(&self, interval: Duration) {
        self.lock().interval = interval;
    }

    /// The server entered `status` (for the uptime ratio and the metrics).
    pub fn status_changed(&self, status: ServerStatus, reason: Option<String>) {
        let mut state = self.lock();
        let now = Instant::now();
        if state.status.is_available() {
            let spent = now.duration_since(state.status_since);
            state.available += spent;
        }
        state.status = status;
        state.status_since = now;
        state.degraded_reason = (status == ServerStatus::Degraded)
            .then_some(reason)
            .flatten();
        let all = ServerStatus::ALL.map(ServerStatus::as_str);
        metrics::global().set_status(&state.name, status.as_str(), &all);
    }

    /// A connection attempt starts; after an error it is a reconnect.
    pub fn attempt_started(&self) {
        if self.lock().status == ServerStatus::Error {
            metrics::global()
                .reconnects
                .get_or_create(&self.label)
                .inc();
        }
    }

    /// A connection attempt failed: the circuit breaker opens.
    pub fn attempt_failed(&self) {
        self.lock().last_failed_attempt = Some(Instant::now());
    }

    /// Whether a call should fail at once rather than ask a server in
    /// ERROR to reconnect: its last attempt failed less than `cooldown` ago.
    pub fn breaker_open(&self, cooldown: Duration) -> bool {
        self.lock()
            .last_failed_attempt
            .is_some_and(|at| at.elapsed() < cooldown)
    }

    /// Why the server is DEGRADED (none when it is not).
    pub fn degraded_reason(&self) -> Option<String> {
        self.lock().degraded_reason.clone()
    }

    /// The figures shown in the API and CLI.
    pub fn figures(&self) -> HealthFigures {
        let state = self.lock();
        let mut answers: Vec<u64> = state.answers.iter().copied().collect();
        let last = answers.last().copied().map(ms);
        answers.sort_unstable();
        let errors = state.calls.iter().filter(|c| !c.ok).count();
        let now = Instant::now();
        let mut available = state.available;
        if state.status.is_available() {
            available += now.duration_since(state.status_since);
        }
        let total = now.duration_since(state.since).as_secs_f64();
        HealthFigures {
            check_interval_secs: state.interval.as_secs(),
            response_time_ms: ResponseTimes {
                last,
                p50: percentile(&answers, 0.5).map(ms),
                p95: percentile(&answers, 0.95).map(ms),
            },
            consecutive_failures: state.consecutive_failures,
            last_error: state.last_error.clone(),
            last_health_check: state.last_check,
            error_rate: if state.calls.is_empty() {
                0.0
            } else {
                errors as f64 / state.calls.len() as f64
            },
            recent_calls: state.calls.len(),
            checks_passed: state.checks_passed,
            checks_failed: state.checks_failed,
            uptime_ratio: if total > 0.0 {
                (available.as_secs_f64() / total).min(1.0)
            } else {
                0.0
            },
            degraded_reason: state.degraded_reason.clone(),
            list_error: state.list_error.clone(),
        }
    }

    /// Forgets the server's metric series (it was removed).
    pub fn forget(&self) {
        let all = ServerStatus::ALL.map(ServerStatus::as_str);
        metrics::global().forget_server(&self.label.server, &all);
    }
}

fn push_answer(answers: &mut VecDeque<u64>, micros: u64) {
    if answers.len() == RECENT_ANSWERS {
        answers.pop_front();
    }
    answers.push_back(micros);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_follow_calls_and_checks() {
        let vitals = Vitals::new("s", ServerStatus::Connected, Duration::from_secs(30));
        for i in 0..10 {
            let outcome = if i < 6 {
                Ok(serde_json::Value::Null)
            } else {
                Err(RpcError::Timeout(Duration::from_secs(1)))
            };
            vitals.record_call(Duration::from_millis(10 + i), &outcome);
        }
        let figures = vitals.figures();
        assert_eq!(figures.recent_calls, 10);
        assert!((figures.error_rate - 0.4).abs() < 1e-9);
        assert_eq!(figures.response_time_ms.last, Some(15.0));
        assert_eq!(
            vitals.record_check(&CheckOutcome::Failed("x".into()), None),
            1
        );
        assert_eq!(
            vitals.record_check(&CheckOutcome::Failed("x".into()), None),
            2
        );
        assert_eq!(vitals.record_check(&CheckOutcome::Passed, None), 0);
        assert_eq!(vitals.figures().checks_failed, 2);
    }

    #[test]
    fn heard_since_sees_only_later_messages() {
        let vitals = Vitals::new("s", ServerStatus::Connected, Duration::from_secs(30));
        let before = vitals.mark();
        assert!(!vitals.heard_since(before));
        std::thread::sleep(Duration::from_millis(2));
        vitals.heard();
        assert!(vitals.heard_since(before));
        assert!(!vitals.heard_since(vitals.mark()));
    }

    #[test]
    fn the_breaker_opens_after_a_failed_attempt_only() {
        let vitals = Vitals::new("s", ServerStatus::Disconnected, Duration::from_secs(30));
        assert!(!vitals.breaker_open(Duration::from_secs(60)));
        vitals.status_changed(ServerStatus::Connecting, None);
        vitals.status_changed(ServerStatus::Error, Some("lost".into()));
        assert!(
            !vitals.breaker_open(Duration::from_secs(60)),
            "a lost link is retried by the next call"
        );
        vitals.attempt_failed();
        assert!(vitals.breaker_open(Duration::from_secs(60)));
        assert!(!vitals.breaker_open(Duration::ZERO));
    }
}
