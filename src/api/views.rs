//! What the API shows of a server: every stored field except secret values,
//! which appear as their keys with `"***"`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::model::health::HealthFigures;
use crate::model::{
    ServerRecord, ServerSource, ServerStatus, ToolRecord, Transport, TransportType,
};

/// A registered server (`GET /servers/{id}`, `POST /servers`, list items).
#[derive(Debug, Serialize, ToSchema)]
pub struct ServerView {
    pub id: Uuid,
    pub name: String,
    pub description: Option<String>,
    pub transport_type: TransportType,
    /// The transport settings, with `env` and `headers` values redacted.
    #[schema(value_type = Object)]
    pub connection_config: Value,
    pub status: ServerStatus,
    pub error_message: Option<String>,
    pub health_check_url: Option<String>,
    /// The server's own seconds between health checks (`null`: the daemon's).
    pub health_check_interval_secs: Option<u32>,
    pub auto_connect: bool,
    pub priority: i32,
    pub tool_count: u32,
    /// Present (`true`) while a server that just connected is being listed:
    /// `tool_count` is about to change.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub discovering: bool,
    /// When the server was last checked, actively or by answering a call.
    pub last_health_check: Option<DateTime<Utc>>,
    /// Response times, failures, error rate and uptime since the aggregator
    /// started; `null` for a server never connected since then.
    pub health: Option<HealthFigures>,
    pub registered_at: DateTime<Utc>,
    pub connected_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    pub source: ServerSource,
    /// The MCP revision the server spoke at its last connect (`2026-07-28`,
    /// `2025-06-18`, …); `null` before its first connect.
    pub protocol_version: Option<String>,
    /// Its OAuth client settings, when given (the secret as `***`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauth: Option<crate::model::OAuthClientSettings>,
    /// Pinning policy, argument checks and call limits.
    pub trust: crate::model::TrustSettings,
    /// Where its login stands (HTTP servers without an `Authorization`
    /// header): `state` (`none`, `authorized`, `needs_login`, `failed`),
    /// and `authorization_url` exactly while it waits for a login.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<crate::oauth::AuthView>,
    /// Present when the list was asked for with `include_tools=true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolView>>,
}

/// A tool of a server (`GET /servers/{id}/tools`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolView {
    /// The tool id, `server.original_name`.
    pub id: String,
    /// Same as `id`: the tool id `server.tool`, which the API calls `name`.
    pub name: String,
    pub original_name: String,
    /// The name MCP clients see; `null` when the tool was rejected.
    pub wire_name: Option<String>,
    /// Why the tool is not offered to MCP clients: a wire-name collision, or
    /// a definition refused (too large, nested too deep, an invalid
    /// `x-mcp-header`); `null` when it is offered.
    pub rejected_reason: Option<String>,
    /// Held back by the trust checks: why, and the fingerprint held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold: Option<crate::model::Hold>,
    /// What the poisoning checks found in its definition.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<crate::model::Finding>,
    pub description: Option<String>,
    #[schema(value_type = Object)]
    pub input_schema: Value,
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Value>,
    #[schema(value_type = Option<Object>)]
    pub annotations: Option<Value>,
    pub source_server_id: Uuid,
    pub source_server: String,
    pub skill_ids: Vec<String>,
    pub primary_skill_id: Option<String>,
    pub is_classified: bool,
    /// `DISCOVERED`, `CLASSIFYING`, `CLASSIFIED` or `UNCLASSIFIED`.
    pub classification_state: crate::model::ClassificationState,
    /// Each assigned skill with its confidence, highest first.
    pub skills: Vec<crate::model::SkillAssignment>,
    /// Why the last classification failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classification_error: Option<String>,
    pub is_external: bool,
    pub discovered_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl ToolView {
    pub fn new(tool: &ToolRecord) -> ToolView {
        let field = |name: &str| tool.definition.field(name);
        ToolView {
            id: tool.id.clone(),
            name: tool.id.clone(),
            original_name: tool.original_name.clone(),
            // A refused tool's name stays reserved, but no client sees it.
            wire_name: tool.wire_name.clone().filter(|_| tool.refused.is_none()),
            rejected_reason: tool.withheld_because().map(str::to_owned),
            hold: tool.hold.clone(),
            findings: tool.findings.clone(),
            description: tool.description.clone(),
            input_schema: field("inputSchema").unwrap_or_else(|| json!({"type": "object"})),
            output_schema: field("outputSchema"),
            annotations: field("annotations"),
            source_server_id: tool.server_id,
            source_server: tool.server_name.clone(),
            skill_ids: tool.skill_ids.clone(),
            primary_skill_id: tool.primary_skill_id.clone(),
            is_classified: tool.is_classified,
            classification_state: tool.classification.state,
            skills: tool.classification.skills.clone(),
            classification_error: tool.classification.error.clone(),
            is_external: tool.is_external,
            discovered_at: tool.discovered_at,
            updated_at: tool.updated_at,
        }
    }
}

impl ServerView {
    pub fn new(record: &ServerRecord) -> ServerView {
        ServerView {
            id: record.id,
            name: record.name.clone(),
            description: record.description.clone(),
            transport_type: record.transport.transport_type(),
            connection_config: redacted_config(&record.transport),
            status: record.status,
            error_message: record
                .error_message
                .as_deref()
                .map(crate::model::redact::redact_text),
            health_check_url: record
                .health_check_url
                .as_deref()
                .map(crate::model::redact::redact_url),
            health_check_interval_secs: record.health_check_interval_secs,
            auto_connect: record.auto_connect,
            priority: record.priority,
            tool_count: record.tool_count,
            discovering: false,
            last_health_check: record.last_health_check,
            health: None,
            registered_at: record.registered_at,
            connected_at: record.connected_at,
            updated_at: record.updated_at,
            source: record.source.clone(),
            protocol_version: record.protocol_version.clone(),
            oauth: record.oauth.as_ref().map(|o| o.redacted()),
            trust: record.trust.clone(),
            auth: None,
            tools: None,
        }
    }

    /// Adds where its login stands; without `may_log_in`, a pending
    /// login's URL and code are left out (whoever opens the URL finishes
    /// the login, as the account they sign in with).
    pub fn with_auth(
        mut self,
        auth: Option<crate::oauth::AuthView>,
        may_log_in: bool,
    ) -> ServerView {
        self.auth = auth.map(|mut auth| {
            if !may_log_in {
                auth.authorization_url = None;
                auth.user_code = None;
            }
            auth
        });
        self
    }

    /// Marks a connected server whose lists are still being discovered.
    pub fn with_discovering(mut self, discovering: bool) -> ServerView {
        self.discovering = discovering && self.status.is_available();
        self
    }

    /// Adds the live health figures (kept in memory, not in the store).
    pub fn with_health(mut self, figures: Option<HealthFigures>) -> ServerView {
        if let Some(figures) = figures {
            self.last_health_check = figures.last_health_check.or(self.last_health_check);
            let mut figures = figures;
            figures.last_error = figures
                .last_error
                .as_deref()
                .map(crate::model::redact::redact_text);
            figures.list_error = figures
                .list_error
                .as_deref()
                .map(crate::model::redact::redact_text);
            self.health = Some(figures);
        }
        self
    }
}

/// The connection settings with secret values replaced and any credential
/// in a URL (userinfo, secret query parameters) hidden.
pub fn redacted_config(transport: &Transport) -> Value {
    let mut shown = transport.connection_config(true);
    for field in ["url", "base_url"] {
        if let Some(Value::String(url)) = shown.get_mut(field) {
            *url = crate::model::redact::redact_url(url);
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn secrets_show_keys_only() {
        let stdio = Transport::Stdio {
            command: "x".into(),
            args: vec!["--flag".into()],
            env: BTreeMap::from([("API_KEY".to_owned(), "s3cret".to_owned())]),
            cwd: None,
        };
        let shown = redacted_config(&stdio);
        assert_eq!(shown["env"]["API_KEY"], crate::model::server::REDACTED);
        assert!(!shown.to_string().contains("s3cret"));

        let http = Transport::Http {
            base_url: "https://user:pa55@example.com/mcp".into(),
            headers: BTreeMap::from([("Authorization".to_owned(), "Bearer tok".to_owned())]),
        };
        let shown = redacted_config(&http).to_string();
        assert!(
            !shown.contains("pa55") && !shown.contains("Bearer tok"),
            "{shown}"
        );
        assert!(shown.contains("Authorization"));
    }
}
