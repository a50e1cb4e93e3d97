//! How far a server is trusted: whether its definitions are pinned (and
//! what a change to a pinned one does), whether calls' arguments are
//! checked against the tool's schema, and the limits its calls are kept
//! within. Per server, in the config file and
//! the API; pure data and its validation.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a changed or newly offered definition of a server does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PinPolicy {
    /// Nothing is pinned or held; findings are still reported.
    Off,
    /// Changes go through, flagged and audited.
    Warn,
    /// Trust on first use, then every change is held until approved.
    #[default]
    Block,
}

impl PinPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PinPolicy::Off => "off",
            PinPolicy::Warn => "warn",
            PinPolicy::Block => "block",
        }
    }
}

/// The limits a server's calls are kept within; a limit left out does not
/// apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallLimits {
    /// Calls in flight at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// Calls started per second, on average (a token bucket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_second: Option<f64>,
    /// Calls that may start at once after a quiet spell (the bucket's
    /// size; default: one second's worth, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Seconds a call may take before it is cancelled (default: the
    /// daemon's call timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_timeout_secs: Option<u32>,
    /// Milliseconds a call over a limit waits for room before it is
    /// refused (default 0: refused at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u32>,
}

impl CallLimits {
    pub fn is_empty(&self) -> bool {
        *self == CallLimits::default()
    }
}

/// A server's trust settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TrustSettings {
    /// `off`, `warn` or `block` (default).
    #[serde(default)]
    pub pinning: PinPolicy,
    #[serde(default, skip_serializing_if = "CallLimits::is_empty")]
    pub limits: CallLimits,
    /// Whether a call's arguments are checked against the tool's
    /// `inputSchema` before the call is sent (default: the daemon's
    /// `--validate-arguments`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validate_arguments: Option<bool>,
}

/// Bounds of the limits, so a typo cannot make a server unusable or a
/// wait unbounded.
pub const MAX_CONCURRENT: u32 = 10_000;
pub const MAX_CALLS_PER_SECOND: f64 = 100_000.0;
pub const MAX_CALL_TIMEOUT_SECS: u32 = 86_400;
pub const MAX_WAIT_MS: u32 = 600_000;

impl CallLimits {
    /// What is wrong with these limits: the field (relative to `limits`)
    /// and why.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if let Some(n) = self.max_concurrent
            && !(1..=MAX_CONCURRENT).contains(&n)
        {
            return Some((
                "max_concurrent",
                format!("must be 1–{MAX_CONCURRENT}, not {n}"),
            ));
        }
        if let Some(rate) = self.calls_per_second
            && !(rate.is_finite() && rate > 0.0 && rate <= MAX_CALLS_PER_SECOND)
        {
            return Some((
                "calls_per_second",
                format!("must be above 0 and at most {MAX_CALLS_PER_SECOND}, not {rate}"),
            ));
        }
        if let Some(burst) = self.burst {
            if self.calls_per_second.is_none() {
                return Some(("burst", "needs calls_per_second".to_owned()));
            }
            if !(1..=MAX_CONCURRENT).contains(&burst) {
                return Some(("burst", format!("must be 1–{MAX_CONCURRENT}, not {burst}")));
            }
        }
        if let Some(secs) = self.call_timeout_secs
            && !(1..=MAX_CALL_TIMEOUT_SECS).contains(&secs)
        {
            return Some((
                "call_timeout_secs",
                format!("must be 1–{MAX_CALL_TIMEOUT_SECS} seconds, not {secs}"),
            ));
        }
        if let Some(ms) = self.wait_ms
            && ms > MAX_WAIT_MS
        {
            return Some((
                "wait_ms",
                format!("must be at most {MAX_WAIT_MS} ms, not {ms}"),
            ));
        }
        None
    }

    /// The token bucket's size: `burst`, else a second's worth (at least 1).
    pub fn bucket_size(&self) -> Option<u32> {
        let rate = self.calls_per_second?;
        Some(self.burst.unwrap_or_else(|| (rate.ceil() as u32).max(1)))
    }
}

/// How bad a finding is: `high` holds the item back (unless the policy is
/// `off` or the user approved that very definition).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Low,
    Medium,
    High,
}

/// One thing the poisoning checks found in a definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Finding {
    /// The rule's id (`instructions.override`, `unicode.invisible`, …).
    pub rule: String,
    pub severity: Severity,
    /// Where in the definition: `description`, `name`, a JSON path into
    /// `inputSchema`, `instructions`.
    pub field: String,
    /// The offending span of that field's text, in bytes.
    pub start: usize,
    pub end: usize,
    /// The span as text (invisible characters written as `U+XXXX`).
    pub excerpt: String,
    /// Why it is suspicious.
    pub message: String,
}

/// Why a definition is held back from clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HoldReason {
    /// It differs from the definition approved.
    Changed,
    /// The server offered it after its definitions were approved.
    New,
    /// The poisoning checks found something of high severity.
    Findings,
    /// A user rejected this very definition.
    Rejected,
}

impl HoldReason {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::Changed => "changed",
            HoldReason::New => "new",
            HoldReason::Findings => "findings",
            HoldReason::Rejected => "rejected",
        }
    }
}

/// A definition held back: not listed, refused at call time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Hold {
    pub reason: HoldReason,
    /// What a client or user is told: why, and how to approve.
    pub message: String,
    /// The fingerprint held back (an approval names what it approves).
    pub fingerprint: String,
    pub since: chrono::DateTime<chrono::Utc>,
}

/// A user's decision on a held-back definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Pin it and offer it.
    Approve,
    /// Keep it held until the server changes it.
    Reject,
}

/// The approved definition of one item of one server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pin {
    pub fingerprint: String,
    /// The pinned fields as approved, to show what changed.
    pub definition: serde_json::Value,
    pub approved_at: chrono::DateTime<chrono::Utc>,
    /// `trust-on-first-use`, `warn-policy`, or who approved it.
    pub approved_by: String,
    /// A definition a user rejected (held until the server changes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
    /// Made by a release whose fingerprint covers the UI a host renders
    /// (`_meta.ui`). A pin without it is carried over to today's
    /// fingerprint once, at the first listing after an upgrade.
    #[serde(default)]
    pub ui_pinned: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_out_of_range_name_their_field() {
        let bad = |limits: CallLimits| limits.problem().map(|(field, _)| field);
        assert_eq!(bad(CallLimits::default()), None);
        assert_eq!(
            bad(CallLimits {
                max_concurrent: Some(0),
                ..Default::default()
            }),
            Some("max_concurrent")
        );
        assert_eq!(
            bad(CallLimits {
                calls_per_second: Some(f64::NAN),
                ..Default::default()
            }),
            Some("calls_per_second")
        );
        assert_eq!(
            bad(CallLimits {
                burst: Some(3),
                ..Default::default()
            }),
            Some("burst")
        );
        assert_eq!(
            bad(CallLimits {
                wait_ms: Some(MAX_WAIT_MS + 1),
                ..Default::default()
            }),
            Some("wait_ms")
        );
    }

    #[test]
    fn the_bucket_holds_a_seconds_worth_unless_told() {
        let limits = CallLimits {
            calls_per_second: Some(2.5),
            ..Default::default()
        };
        assert_eq!(limits.bucket_size(), Some(3));
        let limits = CallLimits {
            burst: Some(10),
            ..limits
        };
        assert_eq!(limits.bucket_size(), Some(10));
    }

    #[test]
    fn settings_read_from_json_refuse_unknown_fields() {
        let settings: TrustSettings =
            serde_json::from_str(r#"{"pinning": "warn", "limits": {"max_concurrent": 2}}"#)
                .unwrap();
        assert_eq!(settings.pinning, PinPolicy::Warn);
        assert_eq!(settings.limits.max_concurrent, Some(2));
        assert!(serde_json::from_str::<TrustSettings>(r#"{"pining": "off"}"#).is_err());
        assert_eq!(
            serde_json::from_str::<TrustSettings>("{}").unwrap(),
            TrustSettings::default()
        );
    }
}
