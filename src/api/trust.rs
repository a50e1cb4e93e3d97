//! `/api/v1/aggregator/tools/…`: what the trust checks hold back, what
//! changed in a definition since it was approved (word by word), and the
//! user's approval or rejection of it.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::extract::{Actor, PathParam};
use crate::http_error::{ErrorBody, HttpError};
use crate::model::{CatalogKind, Decision, Finding, HeldItem, Hold, PinPolicy, ToolRecord};
use crate::trust::FieldChange;

/// A tool as the trust checks see it: whether it is offered, what was
/// approved, what changed since, and what the poisoning checks found.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolChanges {
    /// `tool`, `prompt` or `resource_template`.
    pub kind: &'static str,
    /// A tool's id (`server.tool`), or a prompt's (`prompt:server.name`) or
    /// resource template's (`template:server:uriTemplate`).
    pub tool_id: String,
    pub server: String,
    /// The name clients see (when offered).
    pub wire_name: Option<String>,
    /// The server's pinning policy.
    pub pinning: PinPolicy,
    /// `offered`, or `held` (see `hold`).
    pub state: &'static str,
    pub hold: Option<Hold>,
    /// The fingerprint of the definition the server offers now.
    pub fingerprint: String,
    /// The approved definition's fingerprint, when and by whom (none:
    /// never approved).
    pub approved: Option<Approval>,
    /// The fields that differ from the approved definition, word by word
    /// (every field, for a definition never approved).
    pub changes: Vec<FieldChange>,
    pub findings: Vec<Finding>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Approval {
    pub fingerprint: String,
    pub approved_at: chrono::DateTime<chrono::Utc>,
    pub approved_by: String,
    /// A definition a user rejected, when one was.
    pub rejected: Option<String>,
}

/// The body of an approval or rejection (optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// The fingerprint looked at (from `…/changes`): refused with 409 if
    /// the server changed the definition again since.
    #[serde(default)]
    pub fingerprint: Option<String>,
}

/// What changed in a tool's definition since it was approved.
async fn changes_of(state: &AppState, tool: ToolRecord) -> Result<ToolChanges, HttpError> {
    let pin = state.registry.tool_pin(&tool).await?;
    let definition = tool.definition.value();
    Ok(ToolChanges {
        kind: "tool",
        tool_id: tool.id.clone(),
        server: tool.server_name.clone(),
        wire_name: tool.wire_name.clone().filter(|_| tool.refused.is_none()),
        ..described(
            state,
            tool.server_id,
            &definition,
            pin,
            tool.hold,
            tool.findings,
        )
        .await?
    })
}

/// What changed in a prompt's or resource template's definition since it
/// was approved.
async fn item_changes_of(state: &AppState, item: HeldItem) -> Result<ToolChanges, HttpError> {
    let pin = state.registry.item_pin(&item).await?;
    let (hold, findings) = match item.trust.clone() {
        Some(trust) => (Some(trust.hold), trust.findings),
        None => (None, Vec::new()),
    };
    Ok(ToolChanges {
        kind: item.kind.as_str(),
        tool_id: item.id(),
        server: item.server_name.clone(),
        wire_name: None,
        ..described(state, item.server_id, &item.definition, pin, hold, findings).await?
    })
}

/// A definition against its pin: the server's policy, the state, the
/// fingerprints, what changed word by word (the item's names left blank).
async fn described(
    state: &AppState,
    server_id: crate::model::ServerId,
    definition: &serde_json::Value,
    pin: Option<crate::model::Pin>,
    hold: Option<Hold>,
    findings: Vec<Finding>,
) -> Result<ToolChanges, HttpError> {
    let pinning = state
        .registry
        .get(&server_id.to_string())
        .await?
        .trust
        .pinning;
    let current = crate::trust::pinned_fields(definition);
    let approved_fields = pin
        .as_ref()
        .map_or(serde_json::Value::Null, |p| p.definition.clone());
    Ok(ToolChanges {
        kind: "",
        tool_id: String::new(),
        server: String::new(),
        wire_name: None,
        pinning,
        state: if hold.is_some() { "held" } else { "offered" },
        fingerprint: crate::trust::fingerprint(definition),
        approved: pin.map(|p| Approval {
            fingerprint: p.fingerprint,
            approved_at: p.approved_at,
            approved_by: p.approved_by,
            rejected: p.rejected,
        }),
        changes: crate::trust::changes(&approved_fields, &current),
        findings,
        hold,
    })
}

/// Whether `id` names a prompt or resource template rather than a tool.
fn names_item(id: &str) -> bool {
    CatalogKind::parse_item_id(id).is_some()
}

#[utoipa::path(
    get,
    path = "/api/v1/aggregator/tools/{id}/changes",
    tag = "tools",
    params(("id" = String, Path, description = "Tool id (server.tool) or the name clients see; or a prompt (prompt:server.name) or resource template (template:server:uriTemplate)")),
    responses(
        (status = 200, body = ToolChanges),
        (status = 404, description = "Tool not found", body = ErrorBody),
    )
)]
pub async fn tool_changes(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<Json<ToolChanges>, HttpError> {
    if names_item(&id) {
        let item = state.registry.find_item(&id).await?;
        return Ok(Json(item_changes_of(&state, item).await?));
    }
    let tool = state.registry.find_tool(&id).await?;
    Ok(Json(changes_of(&state, tool).await?))
}

/// Every tool held back by the trust checks (changed, new, or flagged by
/// the poisoning checks), with what changed.
#[utoipa::path(
    get,
    path = "/api/v1/aggregator/tools/held",
    tag = "tools",
    responses((status = 200, body = Vec<ToolChanges>))
)]
pub async fn held_tools(
    State(state): State<AppState>,
) -> Result<Json<Vec<ToolChanges>>, HttpError> {
    let held = state.registry.held_tools().await?;
    let mut out = Vec::with_capacity(held.len());
    for tool in held {
        out.push(changes_of(&state, tool).await?);
    }
    for item in state.registry.held_items().await? {
        out.push(item_changes_of(&state, item).await?);
    }
    Ok(Json(out))
}

/// An empty body asks for no fingerprint check.
fn decision_request(body: &[u8]) -> Result<DecisionRequest, HttpError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(DecisionRequest::default())
    } else {
        super::extract::parse_json(body)
    }
}

async fn decide(
    state: AppState,
    actor: String,
    id: String,
    request: DecisionRequest,
    decision: Decision,
) -> Result<Json<ToolChanges>, HttpError> {
    if names_item(&id) {
        let item = state.registry.find_item(&id).await?;
        let decided = state
            .registry
            .decide_item(&item, request.fingerprint, decision, &actor)
            .await?;
        return Ok(Json(item_changes_of(&state, decided).await?));
    }
    let tool = state.registry.find_tool(&id).await?;
    let decided = state
        .registry
        .decide_tool(&tool, request.fingerprint, decision, &actor)
        .await?;
    Ok(Json(changes_of(&state, decided).await?))
}

/// Approves a tool's current definition: it is pinned and offered.
#[utoipa::path(
    post,
    path = "/api/v1/aggregator/tools/{id}/approve",
    tag = "tools",
    params(("id" = String, Path, description = "Tool id (server.tool) or the name clients see; or a prompt (prompt:server.name) or resource template (template:server:uriTemplate)")),
    request_body(content = Option<DecisionRequest>, description = "The fingerprint looked at (optional)"),
    responses(
        (status = 200, body = ToolChanges),
        (status = 404, description = "Tool not found", body = ErrorBody),
        (status = 409, description = "The definition changed again since it was looked at", body = ErrorBody),
        (status = 422, description = "A body that is not a decision", body = ErrorBody),
    )
)]
pub async fn approve_tool(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(id): PathParam<String>,
    body: axum::body::Bytes,
) -> Result<Json<ToolChanges>, HttpError> {
    let request = decision_request(&body)?;
    decide(state, actor, id, request, Decision::Approve).await
}

/// Rejects a tool's current definition: it stays held until the server
/// changes it.
#[utoipa::path(
    post,
    path = "/api/v1/aggregator/tools/{id}/reject",
    tag = "tools",
    params(("id" = String, Path, description = "Tool id (server.tool) or the name clients see; or a prompt (prompt:server.name) or resource template (template:server:uriTemplate)")),
    request_body(content = Option<DecisionRequest>, description = "The fingerprint looked at (optional)"),
    responses(
        (status = 200, body = ToolChanges),
        (status = 404, description = "Tool not found", body = ErrorBody),
        (status = 409, description = "Nothing to reject, or the definition changed again", body = ErrorBody),
        (status = 422, description = "A body that is not a decision", body = ErrorBody),
    )
)]
pub async fn reject_tool(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(id): PathParam<String>,
    body: axum::body::Bytes,
) -> Result<Json<ToolChanges>, HttpError> {
    let request = decision_request(&body)?;
    decide(state, actor, id, request, Decision::Reject).await
}
