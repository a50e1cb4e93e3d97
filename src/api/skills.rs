//! `/api/v1/skills`: the taxonomy (list, add, edit, hide or delete), the
//! tools of a skill, reclassification, classification progress and the
//! suggestion queue. Calls the skills service and the registry (audit).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::extract::{Actor, JsonBody, PathParam, QueryParams};
use super::views::ToolView;
use crate::http_error::{ErrorBody, HttpError};
use crate::model::{Skill, SkillSuggestion};
use crate::skills::{
    ClassificationProgress, ReclassifyScope, SkillChanges, SkillView, SkillsError,
};

impl From<SkillsError> for HttpError {
    fn from(err: SkillsError) -> Self {
        let status = match &err {
            SkillsError::Invalid(_) | SkillsError::IdMismatch { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            SkillsError::NotFound(_) | SkillsError::SuggestionNotFound(_) => StatusCode::NOT_FOUND,
            SkillsError::Exists(_) => StatusCode::CONFLICT,
            // As for every other resource: nothing wrong with the request.
            SkillsError::Store(store) if store.is_disk_full() => StatusCode::INSUFFICIENT_STORAGE,
            SkillsError::Store(store) if store.is_storage_failure() => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            SkillsError::Store(_) | SkillsError::Index(_) | SkillsError::Task(_) => {
                tracing::error!(error = %err, "skills request failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        HttpError::new(status, err.to_string())
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Include hidden skills (built-in skills an admin hid).
    #[serde(default)]
    pub include_hidden: bool,
}

/// A skill as written by an admin.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillBody {
    /// Lowercase letters, digits and `_` (2–64, starting with a letter).
    /// Optional on PUT (the path names the skill).
    #[serde(default)]
    pub id: String,
    pub name: String,
    pub description: String,
    /// Phrases people use for what its tools do (at most 30).
    #[serde(default)]
    pub examples: Vec<String>,
    /// Hidden skills classify nothing (PUT `false` shows a hidden one again).
    #[serde(default)]
    pub hidden: bool,
}

impl SkillBody {
    fn into_skill(self) -> Skill {
        Skill {
            id: self.id,
            name: self.name,
            description: self.description,
            examples: self.examples,
            builtin: false,
            hidden: self.hidden,
        }
    }
}

async fn audit(state: &AppState, actor: &str, action: &str, skill: &str) {
    super::audit_done(state, actor, action, &format!("skill:{skill}")).await;
}

/// Every skill with how many tools it has.
#[utoipa::path(get, path = "/api/v1/skills", tag = "skills", params(ListQuery),
    responses((status = 200, body = Vec<SkillView>)))]
pub async fn list_skills(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<Vec<SkillView>>, HttpError> {
    Ok(Json(state.skills.list(query.include_hidden).await?))
}

/// Add a skill; tools are classified again to consider it.
#[utoipa::path(post, path = "/api/v1/skills", tag = "skills", request_body = SkillBody,
    responses(
        (status = 201, body = SkillView),
        (status = 409, description = "The id is taken", body = ErrorBody),
        (status = 422, description = "Invalid id or texts", body = ErrorBody),
    ))]
pub async fn create_skill(
    State(state): State<AppState>,
    Actor(actor): Actor,
    JsonBody(body): JsonBody<SkillBody>,
) -> Result<Response, HttpError> {
    let view = state.skills.create(body.into_skill()).await?;
    audit(&state, &actor, "skill_create", &view.skill.id).await;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

#[utoipa::path(get, path = "/api/v1/skills/{id}", tag = "skills",
    params(("id" = String, Path, description = "Skill id")),
    responses((status = 200, body = SkillView), (status = 404, body = ErrorBody)))]
pub async fn get_skill(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<Json<SkillView>, HttpError> {
    Ok(Json(state.skills.get(&id).await?))
}

/// Replace a skill's name, description, examples and visibility.
#[utoipa::path(put, path = "/api/v1/skills/{id}", tag = "skills", request_body = SkillBody,
    params(("id" = String, Path, description = "Skill id")),
    responses(
        (status = 200, body = SkillView),
        (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody),
    ))]
pub async fn update_skill(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(id): PathParam<String>,
    JsonBody(body): JsonBody<SkillBody>,
) -> Result<Json<SkillView>, HttpError> {
    let view = state.skills.update(&id, body.into_skill()).await?;
    audit(&state, &actor, "skill_update", &id).await;
    Ok(Json(view))
}

/// Delete a skill. A built-in skill is hidden instead (200 with the
/// hidden skill); it can be shown again with PUT `hidden: false`.
#[utoipa::path(delete, path = "/api/v1/skills/{id}", tag = "skills",
    params(("id" = String, Path, description = "Skill id")),
    responses(
        (status = 200, description = "A built-in skill, now hidden", body = SkillView),
        (status = 204, description = "Deleted"),
        (status = 404, body = ErrorBody),
    ))]
pub async fn delete_skill(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(id): PathParam<String>,
) -> Result<Response, HttpError> {
    let remains = state.skills.delete(&id).await?;
    audit(
        &state,
        &actor,
        if remains.is_some() {
            "skill_hide"
        } else {
            "skill_delete"
        },
        &id,
    )
    .await;
    Ok(match remains {
        Some(hidden) => Json(hidden).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

/// The tools classified into a skill.
#[utoipa::path(get, path = "/api/v1/skills/{id}/tools", tag = "skills",
    params(("id" = String, Path, description = "Skill id")),
    responses((status = 200, body = Vec<ToolView>), (status = 404, body = ErrorBody)))]
pub async fn skill_tools(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<Json<Vec<ToolView>>, HttpError> {
    let tools = state.skills.tools_of(&id).await?;
    Ok(Json(tools.iter().map(ToolView::new).collect()))
}

/// Which tools to classify again; neither field = every tool.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReclassifyRequest {
    /// Only these servers' tools (names or ids).
    #[serde(default)]
    pub servers: Option<Vec<String>>,
    /// Only these tools (`server.tool`).
    #[serde(default)]
    pub tool_ids: Option<Vec<String>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReclassifyResponse {
    /// Tools queued for classification.
    pub queued: usize,
}

/// Classify tools again (in the background).
#[utoipa::path(post, path = "/api/v1/skills/reclassify", tag = "skills",
    request_body = ReclassifyRequest,
    responses(
        (status = 202, body = ReclassifyResponse),
        (status = 404, description = "An unknown server", body = ErrorBody),
        (status = 422, description = "Not a JSON object of this shape (`{}` for every tool)", body = ErrorBody),
    ))]
pub async fn reclassify(
    State(state): State<AppState>,
    Actor(actor): Actor,
    JsonBody(body): JsonBody<ReclassifyRequest>,
) -> Result<Response, HttpError> {
    let servers = match body.servers {
        Some(names) => {
            let mut ids = HashSet::new();
            for name in names {
                ids.insert(state.registry.get(&name).await?.id);
            }
            Some(ids)
        }
        None => None,
    };
    let queued = state
        .skills
        .reclassify(ReclassifyScope {
            servers,
            tool_ids: body.tool_ids.map(|ids| ids.into_iter().collect()),
        })
        .await?;
    audit(&state, &actor, "skill_reclassify", "*").await;
    Ok((StatusCode::ACCEPTED, Json(ReclassifyResponse { queued })).into_response())
}

/// Where classification stands.
#[utoipa::path(get, path = "/api/v1/skills/status", tag = "skills",
    responses((status = 200, body = ClassificationProgress)))]
pub async fn classification_status(State(state): State<AppState>) -> Json<ClassificationProgress> {
    Json(state.skills.progress().borrow().clone())
}

/// Skills the taxonomy seems to lack: tools that fit none, queued for review.
#[utoipa::path(get, path = "/api/v1/skills/suggestions", tag = "skills",
    responses((status = 200, body = Vec<SkillSuggestion>)))]
pub async fn list_suggestions(
    State(state): State<AppState>,
) -> Result<Json<Vec<SkillSuggestion>>, HttpError> {
    Ok(Json(state.skills.suggestions().await?))
}

/// What to change in a proposed skill when accepting it (all optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcceptBody {
    /// The new skill's id instead of the one made from its proposed name.
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub examples: Option<Vec<String>>,
}

/// Add the skill a suggestion proposes (its tools' description and
/// examples, or what the body says instead); the suggestion leaves the
/// queue and tools are classified again.
#[utoipa::path(post, path = "/api/v1/skills/suggestions/{id}/accept", tag = "skills",
    params(("id" = u64, Path, description = "Suggestion id")),
    request_body(content = AcceptBody, description = "Optional changes"),
    responses(
        (status = 201, body = SkillView),
        (status = 404, body = ErrorBody),
        (status = 409, description = "The id is taken", body = ErrorBody),
        (status = 422, description = "Invalid id, texts or body", body = ErrorBody),
    ))]
pub async fn accept_suggestion(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(id): PathParam<u64>,
    body: axum::body::Bytes,
) -> Result<Response, HttpError> {
    // No body at all accepts the proposal as it is.
    let body: AcceptBody = if body.iter().all(u8::is_ascii_whitespace) {
        AcceptBody::default()
    } else {
        super::extract::parse_json(&body)?
    };
    let changes = SkillChanges {
        id: body.id,
        name: body.name,
        description: body.description,
        examples: body.examples,
    };
    let view = state.skills.accept_suggestion(id, changes).await?;
    audit(&state, &actor, "skill_create", &view.skill.id).await;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// Dismiss a suggestion (after adding the skill, or deciding against it).
#[utoipa::path(delete, path = "/api/v1/skills/suggestions/{id}", tag = "skills",
    params(("id" = u64, Path, description = "Suggestion id")),
    responses(
        (status = 204, description = "Dismissed"),
        (status = 404, body = ErrorBody),
        (status = 422, description = "Not a suggestion id", body = ErrorBody),
    ))]
pub async fn dismiss_suggestion(
    State(state): State<AppState>,
    PathParam(id): PathParam<u64>,
) -> Result<StatusCode, HttpError> {
    state.skills.dismiss_suggestion(id).await?;
    Ok(StatusCode::NO_CONTENT)
}
