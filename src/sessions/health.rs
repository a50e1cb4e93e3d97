//! The health monitor's settings and its active check: the server's
//! health URL when it has one, else the request its revision asks whether
//! a server is alive with (`ping`; `server/discover` in 2026-07-28, which
//! has no ping). What checks and calls show is kept in `vitals.rs`.

use std::time::Duration;

use super::rpc_error::RpcError;
use super::session::Session;
use crate::model::health::{CallRules, CheckOutcome};

/// The health monitor's settings (docs/rules.md, Health monitoring).
#[derive(Debug, Clone, Copy)]
pub struct HealthSettings {
    /// Time between checks of a server that has no interval of its own.
    pub interval: Duration,
    /// Longest a check may take; the next one is due an interval after it
    /// ended.
    pub timeout: Duration,
    /// When calls alone degrade a server.
    pub call_rules: CallRules,
    /// A server in ERROR whose last attempt failed less than this long ago
    /// fails calls at once instead of being asked to reconnect again.
    pub breaker_cooldown: Duration,
}

impl Default for HealthSettings {
    fn default() -> HealthSettings {
        HealthSettings {
            interval: Duration::from_secs(30),
            timeout: Duration::from_secs(5),
            call_rules: CallRules::default(),
            breaker_cooldown: Duration::from_secs(5),
        }
    }
}

impl HealthSettings {
    /// The interval for a server (its own, else the daemon's).
    pub fn interval_for(&self, own_secs: Option<u32>) -> Duration {
        own_secs.map_or(self.interval, |s| Duration::from_secs(u64::from(s.max(1))))
    }
}

/// One active check: the health URL (2xx healthy; 5xx, timeouts and
/// connection errors fail; 4xx is inconclusive), else a ping on the
/// session (any answer, even an error, shows the server is alive).
pub async fn check(
    session: &Session,
    http: &reqwest::Client,
    url: Option<&str>,
    timeout: Duration,
) -> CheckOutcome {
    if let Some(url) = url {
        return match http.get(url).timeout(timeout).send().await {
            Ok(answer) => {
                let status = answer.status();
                if status.is_success() {
                    CheckOutcome::Passed
                } else if status.is_client_error() {
                    CheckOutcome::Inconclusive(format!(
                        "the health URL answered {status}; check the server's health_check_url"
                    ))
                } else {
                    CheckOutcome::Failed(format!("the health URL answered {status}"))
                }
            }
            Err(err) if err.is_timeout() => {
                CheckOutcome::Failed(format!("the health URL did not answer within {timeout:?}"))
            }
            // Says nothing of the server's health: a configuration to fix.
            Err(err) if err.is_redirect() => CheckOutcome::Inconclusive(format!(
                "the health URL {}; check the server's health_check_url",
                crate::http_client::root_cause(&err)
            )),
            Err(err) => CheckOutcome::Failed(crate::model::redact::shown_reason(&format!(
                "the health URL could not be reached: {err}"
            ))),
        };
    }
    let method = session.liveness_method();
    match session.request_with_timeout(method, None, timeout).await {
        Ok(_) | Err(RpcError::Server { .. }) => CheckOutcome::Passed,
        Err(RpcError::Timeout(_)) => {
            CheckOutcome::Failed(format!("no answer to {method} within {timeout:?}"))
        }
        Err(err) => CheckOutcome::Failed(format!("{method} failed: {err}")),
    }
}
