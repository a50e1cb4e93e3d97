//! The server status state machine (docs/rules.md, Server status lifecycle).
//!
//! `ServerStatus::transition` is the only place that decides whether a status
//! change is allowed; every other module asks it instead of assigning statuses.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use utoipa::ToSchema;

/// Where a server stands with respect to its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ServerStatus {
    Disconnected,
    Connecting,
    Connected,
    Degraded,
    Error,
}

/// What caused a status change; recorded in the connection history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusTrigger {
    /// An admin (or auto-connect) asked to connect.
    Connect,
    /// The MCP handshake finished.
    ConnectSucceeded,
    /// The handshake failed or timed out.
    ConnectFailed,
    /// An admin asked to disconnect (or the server is being removed).
    Disconnect,
    /// Two consecutive failed health checks.
    HealthDegraded,
    /// A health check passed again.
    HealthRecovered,
    /// The transport was lost (the process exited, the stream broke).
    Failure,
    /// Three failed health checks in a row: the session is closed and
    /// reconnected.
    HealthFailed,
    /// A scheduled or on-demand reconnect attempt after an error.
    Reconnect,
    /// The process restarted: no session survives a restart, so every server
    /// starts from `DISCONNECTED`. Allowed from any status.
    ProcessRestart,
}

/// A status change the state machine refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid status transition {from} -> {to} ({trigger:?})")]
pub struct InvalidTransition {
    pub from: ServerStatus,
    pub to: ServerStatus,
    pub trigger: StatusTrigger,
}

impl StatusTrigger {
    /// Who makes a change of this kind, for the audit log (an admin's
    /// connect or disconnect is audited as that admin's operation too).
    pub fn actor(self) -> &'static str {
        match self {
            StatusTrigger::HealthDegraded
            | StatusTrigger::HealthRecovered
            | StatusTrigger::HealthFailed => "health-monitor",
            StatusTrigger::ProcessRestart => "system",
            _ => "supervisor",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StatusTrigger::Connect => "connect",
            StatusTrigger::ConnectSucceeded => "connect_succeeded",
            StatusTrigger::ConnectFailed => "connect_failed",
            StatusTrigger::Disconnect => "disconnect",
            StatusTrigger::HealthDegraded => "health_degraded",
            StatusTrigger::HealthRecovered => "health_recovered",
            StatusTrigger::Failure => "failure",
            StatusTrigger::HealthFailed => "health_failed",
            StatusTrigger::Reconnect => "reconnect",
            StatusTrigger::ProcessRestart => "process_restart",
        }
    }
}

impl ServerStatus {
    pub const ALL: [ServerStatus; 5] = [
        ServerStatus::Disconnected,
        ServerStatus::Connecting,
        ServerStatus::Connected,
        ServerStatus::Degraded,
        ServerStatus::Error,
    ];

    /// The transition table: the specified lifecycle (docs/rules.md, Server
    /// status lifecycle), plus the edges an admin needs: disconnecting a
    /// server that is connecting, degraded
    /// or in error (which also stops its retries), and `DISCONNECTED -> ERROR`
    /// when a connection cannot even be attempted (bad command, bad URL).
    pub fn can_transition_to(self, to: ServerStatus) -> bool {
        use ServerStatus::*;
        matches!(
            (self, to),
            (Disconnected, Connecting)
                | (Disconnected, Error)
                | (Connecting, Connected)
                | (Connecting, Error)
                | (Connecting, Disconnected)
                | (Connected, Disconnected)
                | (Connected, Degraded)
                | (Connected, Error)
                | (Degraded, Connected)
                | (Degraded, Error)
                | (Degraded, Disconnected)
                | (Error, Connecting)
                | (Error, Disconnected)
        )
    }

    /// Checks a change against the table; `ProcessRestart` may reset any status
    /// to `DISCONNECTED` because sessions never outlive the process.
    pub fn transition(
        self,
        to: ServerStatus,
        trigger: StatusTrigger,
    ) -> Result<ServerStatus, InvalidTransition> {
        let allowed = if trigger == StatusTrigger::ProcessRestart {
            to == ServerStatus::Disconnected
        } else {
            self.can_transition_to(to)
        };
        if allowed {
            Ok(to)
        } else {
            Err(InvalidTransition {
                from: self,
                to,
                trigger,
            })
        }
    }

    /// Whether the server's tools are offered for listing, search and calls.
    pub fn is_available(self) -> bool {
        matches!(self, ServerStatus::Connected | ServerStatus::Degraded)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ServerStatus::Disconnected => "DISCONNECTED",
            ServerStatus::Connecting => "CONNECTING",
            ServerStatus::Connected => "CONNECTED",
            ServerStatus::Degraded => "DEGRADED",
            ServerStatus::Error => "ERROR",
        }
    }
}

impl fmt::Display for ServerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ServerStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ServerStatus::ALL
            .into_iter()
            .find(|status| status.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!(
                    "unknown status {s:?}; expected one of DISCONNECTED, CONNECTING, CONNECTED, DEGRADED, ERROR"
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::ServerStatus::*;
    use super::*;

    /// Every (from, to) pair of the table, valid and invalid.
    #[test]
    fn transition_table_is_exactly_the_documented_one() {
        let valid = [
            (Disconnected, Connecting),
            (Disconnected, Error),
            (Connecting, Connected),
            (Connecting, Error),
            (Connecting, Disconnected),
            (Connected, Disconnected),
            (Connected, Degraded),
            (Connected, Error),
            (Degraded, Connected),
            (Degraded, Error),
            (Degraded, Disconnected),
            (Error, Connecting),
            (Error, Disconnected),
        ];
        let mut checked = 0;
        for from in ServerStatus::ALL {
            for to in ServerStatus::ALL {
                let expected = valid.contains(&(from, to));
                assert_eq!(
                    from.can_transition_to(to),
                    expected,
                    "{from} -> {to} should be {}",
                    if expected { "valid" } else { "invalid" }
                );
                let result = from.transition(to, StatusTrigger::Connect);
                assert_eq!(result.is_ok(), expected, "{from} -> {to}");
                if let Err(err) = result {
                    assert_eq!((err.from, err.to), (from, to));
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 25);
    }

    #[test]
    fn specified_transitions_are_all_valid() {
        // The specified lifecycle's table (docs/rules.md), row by row.
        for (from, to) in [
            (Disconnected, Connecting),
            (Connecting, Connected),
            (Connecting, Error),
            (Connected, Disconnected),
            (Connected, Degraded),
            (Connected, Error),
            (Degraded, Connected),
            (Degraded, Error),
            (Error, Connecting),
        ] {
            assert!(from.can_transition_to(to), "{from} -> {to}");
        }
    }

    #[test]
    fn no_status_transitions_to_itself() {
        for status in ServerStatus::ALL {
            assert!(!status.can_transition_to(status), "{status} -> {status}");
        }
    }

    #[test]
    fn process_restart_only_resets_to_disconnected() {
        for from in ServerStatus::ALL {
            assert_eq!(
                from.transition(Disconnected, StatusTrigger::ProcessRestart),
                Ok(Disconnected)
            );
            assert!(
                from.transition(Connected, StatusTrigger::ProcessRestart)
                    .is_err()
            );
        }
    }

    #[test]
    fn parses_case_insensitively_and_rejects_unknown() {
        assert_eq!("connected".parse::<ServerStatus>(), Ok(Connected));
        assert_eq!("DEGRADED".parse::<ServerStatus>(), Ok(Degraded));
        let err = "RUNNING".parse::<ServerStatus>().unwrap_err();
        assert!(err.contains("RUNNING"), "{err}");
    }

    #[test]
    fn only_connected_and_degraded_are_available() {
        let available: Vec<_> = ServerStatus::ALL
            .into_iter()
            .filter(|s| s.is_available())
            .collect();
        assert_eq!(available, vec![Connected, Degraded]);
    }
}
