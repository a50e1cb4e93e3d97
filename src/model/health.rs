//! Server health as rules and figures (one failed check warns, two in a row
//! make a server DEGRADED, three make it ERROR; a call that succeeded counts
//! as a passed check): what a
//! health check's outcome and the server's recent calls make of its status,
//! and the figures shown for it. Pure: the checks themselves run in the
//! sessions' supervisor.

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::ServerStatus;

/// Consecutive failed checks that make a server `DEGRADED`.
pub const DEGRADED_AFTER: u32 = 2;
/// Consecutive failed checks that make it `ERROR` (and reconnected).
pub const ERROR_AFTER: u32 = 3;

/// What one health check found.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckOutcome {
    /// The server answered (or was heard from since the last check).
    Passed,
    /// No answer in time, a 5xx, a broken link: counts towards the thresholds.
    Failed(String),
    /// The health URL answered 4xx: a configuration problem to warn about,
    /// not a sign the server is down.
    Inconclusive(String),
}

/// What the server's recent calls show.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallSignals {
    /// Calls judged (the recent ones).
    pub calls: usize,
    pub errors: usize,
    /// p95 of the recent calls' latency, ms.
    pub p95_ms: f64,
    /// The server's usual call latency (a slow average of past p50s), ms.
    pub baseline_ms: Option<f64>,
}

/// When calls alone degrade a server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallRules {
    /// Fewer recent calls than this say nothing.
    pub min_calls: usize,
    /// Share of failed calls that degrades.
    pub error_rate: f64,
    /// p95 this many times the baseline degrades…
    pub slow_factor: f64,
    /// …when it is also above this, ms (a 1 ms server at 12 ms is fine).
    pub slow_floor_ms: f64,
}

impl Default for CallRules {
    fn default() -> CallRules {
        CallRules {
            min_calls: 5,
            error_rate: 0.5,
            slow_factor: 10.0,
            slow_floor_ms: 1000.0,
        }
    }
}

impl CallSignals {
    /// Why the calls say the server is struggling, if they do.
    pub fn trouble(&self, rules: &CallRules) -> Option<String> {
        if self.calls < rules.min_calls {
            return None;
        }
        let rate = self.errors as f64 / self.calls as f64;
        if rate >= rules.error_rate {
            return Some(format!(
                "{} of the last {} calls failed",
                self.errors, self.calls
            ));
        }
        if let Some(baseline) = self.baseline_ms
            && self.p95_ms > baseline * rules.slow_factor
            && self.p95_ms > rules.slow_floor_ms
        {
            return Some(format!(
                "calls slowed down: p95 {:.0} ms against a usual {:.0} ms",
                self.p95_ms, baseline
            ));
        }
        None
    }
}

/// What the supervisor should do after a check.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Nothing changes.
    Stay,
    /// Log a warning (first failure, or an inconclusive check).
    Warn(String),
    /// Move to `DEGRADED` for this reason.
    Degrade(String),
    /// Back to `CONNECTED`.
    Recover,
    /// Move to `ERROR`: close the session and reconnect.
    Fail(String),
}

/// Applies the thresholds: `failures` is the count of consecutive failed
/// checks including this one (0 when it passed).
pub fn judge(
    status: ServerStatus,
    outcome: &CheckOutcome,
    failures: u32,
    calls: Option<String>,
) -> Verdict {
    match outcome {
        CheckOutcome::Failed(reason) => {
            if failures >= ERROR_AFTER {
                Verdict::Fail(format!(
                    "{failures} health checks failed in a row: {reason}"
                ))
            } else if failures >= DEGRADED_AFTER {
                if status == ServerStatus::Degraded {
                    Verdict::Warn(format!("health check failed again: {reason}"))
                } else {
                    Verdict::Degrade(format!(
                        "{failures} health checks failed in a row: {reason}"
                    ))
                }
            } else {
                Verdict::Warn(format!("health check failed: {reason}"))
            }
        }
        CheckOutcome::Inconclusive(reason) => Verdict::Warn(reason.clone()),
        CheckOutcome::Passed => match (status, calls) {
            (ServerStatus::Connected, Some(trouble)) => Verdict::Degrade(trouble),
            (ServerStatus::Degraded, None) => Verdict::Recover,
            _ => Verdict::Stay,
        },
    }
}

/// Response times, ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct ResponseTimes {
    pub last: Option<f64>,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
}

/// A server's health figures, as the API and CLI show them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct HealthFigures {
    /// Seconds between checks for this server.
    pub check_interval_secs: u64,
    /// Time to answer (calls and health checks), over the recent answers.
    pub response_time_ms: ResponseTimes,
    pub consecutive_failures: u32,
    pub last_error: Option<String>,
    /// When the server was last checked (actively, or seen answering).
    pub last_health_check: Option<DateTime<Utc>>,
    /// Failed share of the recent calls (0 when there were none).
    pub error_rate: f64,
    /// How many recent calls `error_rate` is over.
    pub recent_calls: usize,
    pub checks_passed: u64,
    pub checks_failed: u64,
    /// Share of the time since the aggregator started (or the server was
    /// registered) that the server was CONNECTED or DEGRADED.
    pub uptime_ratio: f64,
    /// Why the server is DEGRADED, when it is.
    pub degraded_reason: Option<String>,
    /// Why the last listing of the server's tools failed (its tools stay
    /// as last stored); none once a listing succeeds.
    pub list_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use ServerStatus::*;

    fn failed() -> CheckOutcome {
        CheckOutcome::Failed("no answer".into())
    }

    #[test]
    fn thresholds_warn_degrade_then_fail() {
        assert!(matches!(
            judge(Connected, &failed(), 1, None),
            Verdict::Warn(_)
        ));
        assert!(matches!(
            judge(Connected, &failed(), 2, None),
            Verdict::Degrade(_)
        ));
        assert!(matches!(
            judge(Degraded, &failed(), 2, None),
            Verdict::Warn(_)
        ));
        assert!(matches!(
            judge(Degraded, &failed(), 3, None),
            Verdict::Fail(_)
        ));
        assert!(matches!(
            judge(Connected, &failed(), 4, None),
            Verdict::Fail(_)
        ));
    }

    #[test]
    fn a_pass_recovers_unless_calls_are_in_trouble() {
        let passed = CheckOutcome::Passed;
        assert_eq!(judge(Degraded, &passed, 0, None), Verdict::Recover);
        assert_eq!(judge(Connected, &passed, 0, None), Verdict::Stay);
        assert_eq!(
            judge(Connected, &passed, 0, Some("bad".into())),
            Verdict::Degrade("bad".into())
        );
        assert_eq!(
            judge(Degraded, &passed, 0, Some("bad".into())),
            Verdict::Stay
        );
    }

    #[test]
    fn inconclusive_checks_only_warn() {
        let outcome = CheckOutcome::Inconclusive("404".into());
        assert!(matches!(
            judge(Connected, &outcome, 0, None),
            Verdict::Warn(_)
        ));
    }

    #[test]
    fn call_signals() {
        let rules = CallRules::default();
        let signals = |calls, errors, p95_ms, baseline_ms| CallSignals {
            calls,
            errors,
            p95_ms,
            baseline_ms,
        };
        assert_eq!(
            signals(4, 4, 1.0, None).trouble(&rules),
            None,
            "too few calls"
        );
        assert!(signals(10, 5, 1.0, None).trouble(&rules).is_some());
        assert_eq!(signals(10, 4, 1.0, None).trouble(&rules), None);
        assert!(
            signals(10, 0, 5000.0, Some(100.0))
                .trouble(&rules)
                .is_some_and(|why| why.contains("p95"))
        );
        assert_eq!(
            signals(10, 0, 500.0, Some(10.0)).trouble(&rules),
            None,
            "slower but under the floor"
        );
        assert_eq!(signals(10, 0, 5000.0, Some(1000.0)).trouble(&rules), None);
    }
}
