//! A registered server as the store keeps it, and the records that hang off it
//! (connection history, audit log).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use utoipa::ToSchema;
use uuid::Uuid;

use super::status::{ServerStatus, StatusTrigger};

/// How a sealed secret starts in the store (`store::secrets`).
pub const SEALED_PREFIX: &str = "enc:v1:";

/// A server's stable identifier (a UUID); names can be re-used after removal,
/// ids never are.
pub type ServerId = Uuid;

/// Shown instead of a secret value.
pub const REDACTED: &str = "***";

/// How the aggregator reaches a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum TransportType {
    /// A child process speaking MCP on stdin/stdout.
    Stdio,
    /// The legacy (2024-11-05) HTTP+SSE transport.
    Sse,
    /// Streamable HTTP.
    Http,
}

impl TransportType {
    pub fn as_str(self) -> &'static str {
        match self {
            TransportType::Stdio => "STDIO",
            TransportType::Sse => "SSE",
            TransportType::Http => "HTTP",
        }
    }
}

impl fmt::Display for TransportType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The transport-specific connection settings, already validated.
///
/// `env` and `headers` values are secrets: the store encrypts them at rest and
/// the API only ever shows their keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transport_type", rename_all = "UPPERCASE")]
pub enum Transport {
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
    },
    Sse {
        url: String,
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
    Http {
        base_url: String,
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
}

impl Transport {
    /// What a catalog-only server (never connected: an evaluation's, a
    /// test's) is registered with.
    pub fn placeholder() -> Transport {
        Transport::Stdio {
            command: "true".into(),
            args: Vec::new(),
            env: Default::default(),
            cwd: None,
        }
    }

    pub fn transport_type(&self) -> TransportType {
        match self {
            Transport::Stdio { .. } => TransportType::Stdio,
            Transport::Sse { .. } => TransportType::Sse,
            Transport::Http { .. } => TransportType::Http,
        }
    }

    /// The secret-bearing map of this transport (`env` or `headers`).
    pub fn secrets(&self) -> &BTreeMap<String, String> {
        match self {
            Transport::Stdio { env, .. } => env,
            Transport::Sse { headers, .. } | Transport::Http { headers, .. } => headers,
        }
    }

    /// The API's `connection_config` object for this transport; with
    /// `redact`, secret values are replaced by `"***"` (what the API shows).
    pub fn connection_config(&self, redact: bool) -> serde_json::Value {
        use serde_json::{Value, json};
        let secrets = |map: &BTreeMap<String, String>| -> Value {
            map.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        Value::from(if redact { REDACTED } else { v.as_str() }),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        match self {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                json!({"command": command, "args": args, "env": secrets(env), "cwd": cwd})
            }
            Transport::Sse { url, headers } => json!({"url": url, "headers": secrets(headers)}),
            Transport::Http { base_url, headers } => {
                json!({"base_url": base_url, "headers": secrets(headers)})
            }
        }
    }

    /// What of this transport is still sealed after the store opened it
    /// (`secret.key` replaced or lost): the names of those values (`env` or
    /// header names, `url`). Never sent as they are: the server would get
    /// the sealed text as its secret.
    pub fn sealed_values(&self) -> Vec<&str> {
        let url = match self {
            Transport::Stdio { .. } => None,
            Transport::Sse { url, .. } => Some(url),
            Transport::Http { base_url, .. } => Some(base_url),
        };
        url.filter(|u| u.starts_with(SEALED_PREFIX))
            .map(|_| "url")
            .into_iter()
            .chain(
                self.secrets()
                    .iter()
                    .filter(|(_, v)| v.starts_with(SEALED_PREFIX))
                    .map(|(k, _)| k.as_str()),
            )
            .collect()
    }

    /// The server's URL (SSE and HTTP), which may carry credentials.
    pub fn url_mut(&mut self) -> Option<&mut String> {
        match self {
            Transport::Stdio { .. } => None,
            Transport::Sse { url, .. } => Some(url),
            Transport::Http { base_url, .. } => Some(base_url),
        }
    }

    pub fn secrets_mut(&mut self) -> &mut BTreeMap<String, String> {
        match self {
            Transport::Stdio { env, .. } => env,
            Transport::Sse { headers, .. } | Transport::Http { headers, .. } => headers,
        }
    }
}

/// Where a registration came from; a config file wins for the servers it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ServerSource {
    Api,
    ConfigFile { path: String },
}

/// Everything the store keeps about one server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerRecord {
    pub id: ServerId,
    pub name: String,
    pub description: Option<String>,
    pub transport: Transport,
    pub health_check_url: Option<String>,
    /// Seconds between this server's health checks (none: the daemon's
    /// `--health-interval`).
    #[serde(default)]
    pub health_check_interval_secs: Option<u32>,
    pub auto_connect: bool,
    pub priority: i32,
    pub status: ServerStatus,
    pub error_message: Option<String>,
    pub tool_count: u32,
    pub registered_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub connected_at: Option<DateTime<Utc>>,
    pub last_health_check: Option<DateTime<Utc>>,
    pub source: ServerSource,
    /// The protocol revision the server spoke at its last connect; the
    /// next connect starts in that era (none yet: probe).
    #[serde(default)]
    pub protocol_version: Option<String>,
    /// How to log in to it when it asks (an HTTP server): a
    /// pre-registered client, scopes. None: discovered and registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthClientSettings>,
    /// Pinning, argument checks and call limits.
    #[serde(default)]
    pub trust: super::TrustSettings,
}

/// A server's OAuth client settings (config `oauth`, the API's `oauth`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OAuthClientSettings {
    /// A client registered with the authorization server beforehand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Its secret (sealed at rest, never shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The authorization server (its issuer) that client belongs to: its
    /// id and secret go to no other. Unset: the issuer of the first login
    /// made with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The scopes to ask for (else the server's challenge or metadata say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    /// An HTTPS URL where our client metadata document is published, used
    /// as the client id where the authorization server takes those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_metadata_url: Option<String>,
}

impl OAuthClientSettings {
    /// What the API shows: the secret as `***`.
    pub fn redacted(&self) -> OAuthClientSettings {
        OAuthClientSettings {
            client_secret: self.client_secret.as_ref().map(|_| REDACTED.to_owned()),
            ..self.clone()
        }
    }
}

impl ServerRecord {
    /// What a session runs on: the record without what is read per call
    /// or per table (description, priority, call limits, argument checks)
    /// and without what moves while it runs (status, error, times, tool
    /// count, protocol revision). Two registrations with the same view
    /// need no reconnect between them.
    pub fn session_view(&self) -> ServerRecord {
        let mut trust = self.trust.clone();
        trust.limits = super::CallLimits::default();
        trust.validate_arguments = None;
        ServerRecord {
            description: None,
            priority: 0,
            status: ServerStatus::Disconnected,
            error_message: None,
            tool_count: 0,
            updated_at: self.registered_at,
            connected_at: None,
            last_health_check: None,
            protocol_version: None,
            trust,
            ..self.clone()
        }
    }

    /// A new registration in its first state: DISCONNECTED, no tools yet,
    /// auto-connect on, priority 0, a fresh id.
    pub fn new(
        name: impl Into<String>,
        transport: Transport,
        source: ServerSource,
    ) -> ServerRecord {
        let now = Utc::now();
        ServerRecord {
            id: Uuid::new_v4(),
            name: name.into(),
            description: None,
            transport,
            health_check_url: None,
            health_check_interval_secs: None,
            auto_connect: true,
            priority: 0,
            status: ServerStatus::Disconnected,
            error_message: None,
            tool_count: 0,
            registered_at: now,
            updated_at: now,
            connected_at: None,
            last_health_check: None,
            source,
            protocol_version: None,
            oauth: None,
            trust: Default::default(),
        }
    }
}

/// One line of a server's connection history (append-only, bounded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ConnectionHistoryEntry {
    pub timestamp: DateTime<Utc>,
    /// `REGISTERED`, `UPDATED`, or the status entered (`CONNECTING`, `CONNECTED`, …).
    pub event_type: String,
    pub from_status: Option<ServerStatus>,
    pub to_status: Option<ServerStatus>,
    pub trigger: Option<StatusTrigger>,
    pub details: Option<String>,
}

/// One server operation: who did what, when, and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    /// Monotonic sequence number, assigned by the store.
    #[serde(default)]
    pub seq: u64,
    pub timestamp: DateTime<Utc>,
    /// `api:<peer address>`, `cli:<user>@<peer address>`, `config:<file>` or `system`.
    pub actor: String,
    /// `register`, `remove`, `upsert`, `connect`, …
    pub action: String,
    /// The server's name (the id may not exist yet, or any more).
    pub server: String,
    /// `ok`, or the error the operation ended with.
    pub result: String,
    /// What changed, for a status change (`CONNECTED -> DEGRADED
    /// (health_degraded): …`).
    #[serde(default)]
    pub details: Option<String>,
}

/// Which audit entries to show; every set field must match.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditFilter {
    /// The server's name, exactly.
    pub server: Option<String>,
    /// The action, exactly (`register`, `connect`, `status`, …).
    pub action: Option<String>,
    /// Part of the actor (`health-monitor`, `cli:`, a token name, an address).
    pub actor: Option<String>,
    /// `ok`, or `error` for every entry that did not end `ok`.
    pub result: Option<AuditResult>,
    /// At or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Before this time.
    pub until: Option<DateTime<Utc>>,
}

/// How an operation ended, as a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AuditResult {
    Ok,
    Error,
}

impl AuditFilter {
    pub fn matches(&self, entry: &AuditEntry) -> bool {
        self.server.as_ref().is_none_or(|s| *s == entry.server)
            && self.action.as_ref().is_none_or(|a| *a == entry.action)
            && self
                .actor
                .as_ref()
                .is_none_or(|a| entry.actor.contains(a.as_str()))
            && self
                .result
                .is_none_or(|r| (entry.result == "ok") == (r == AuditResult::Ok))
            && self.since.is_none_or(|t| entry.timestamp >= t)
            && self.until.is_none_or(|t| entry.timestamp < t)
    }
}
