//! `/api/v1/profiles`: named views (which servers, tools and skills a
//! client that picks one sees: `stdio --profile NAME`, `/mcp/NAME`) —
//! list, read with the tools the view has now, add or replace, remove.
//! Profiles of a config file are managed by it: the file's next apply puts
//! its own back.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::extract::{Actor, JsonBody, PathParam};
use crate::http_error::{ErrorBody, HttpError};
use crate::model::Profile;

/// A profile as written through the API (its name is in the path).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileBody {
    #[serde(default)]
    pub description: Option<String>,
    /// Server names (globs with `*` and `?`); absent: every server.
    #[serde(default)]
    pub servers: Option<Vec<String>>,
    /// Tool ids (`server.tool`) or wire names (`server__tool`), globs;
    /// absent: every tool.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Tools left out even when the other lists admit them (globs).
    #[serde(default)]
    pub exclude_tools: Vec<String>,
    /// Skill ids (globs): only tools classified into one of them.
    #[serde(default)]
    pub skills: Option<Vec<String>>,
}

/// A profile and what its view has now.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProfileView {
    #[serde(flatten)]
    pub profile: Profile,
    /// The MCP endpoint that serves this view.
    pub mcp_path: String,
    /// The tool ids the view lists now (of connected servers).
    pub visible_tools: Vec<String>,
    /// Said when a change replaced a config file's profile: the file's
    /// next apply puts its own back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

fn view_of(state: &AppState, profile: Profile) -> ProfileView {
    let table = state.router.table();
    let lists = state.router.view_of(&table, &profile.name);
    let mut visible_tools: Vec<String> = lists.tool_ids.iter().map(|id| id.to_string()).collect();
    visible_tools.sort_unstable();
    ProfileView {
        mcp_path: format!("/mcp/{}", profile.name),
        profile,
        visible_tools,
        warning: None,
    }
}

async fn audit(state: &AppState, actor: &str, action: &str, profile: &str) {
    super::audit_done(state, actor, action, &format!("profile:{profile}")).await;
}

/// Every profile.
#[utoipa::path(get, path = "/api/v1/profiles", tag = "profiles",
    responses((status = 200, body = Vec<Profile>)))]
pub async fn list_profiles(State(state): State<AppState>) -> Result<Json<Vec<Profile>>, HttpError> {
    Ok(Json(state.registry.profiles().await?))
}

/// A profile, with the tools its view lists now.
#[utoipa::path(get, path = "/api/v1/profiles/{name}", tag = "profiles",
    params(("name" = String, Path, description = "Profile name")),
    responses((status = 200, body = ProfileView), (status = 404, body = ErrorBody)))]
pub async fn get_profile(
    State(state): State<AppState>,
    PathParam(name): PathParam<String>,
) -> Result<Json<ProfileView>, HttpError> {
    let profile = state.registry.profile(&name).await?;
    // Seen by this process's views before it is shown.
    let _ = state.router.check_profile(&name).await;
    Ok(Json(view_of(&state, profile)))
}

/// Add a profile, or replace the one of this name. Clients using it see
/// the new view at once (and are sent list_changed if it changed for them).
#[utoipa::path(put, path = "/api/v1/profiles/{name}", tag = "profiles", request_body = ProfileBody,
    params(("name" = String, Path, description = "Profile name: ^[a-z][a-z0-9_-]*$, at most 64 characters")),
    responses(
        (status = 200, description = "Replaced", body = ProfileView),
        (status = 201, description = "Added", body = ProfileView),
        (status = 422, description = "Invalid name or pattern", body = ErrorBody),
    ))]
pub async fn put_profile(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(name): PathParam<String>,
    JsonBody(body): JsonBody<ProfileBody>,
) -> Result<Response, HttpError> {
    let profile = Profile {
        name,
        description: body.description,
        servers: body.servers,
        tools: body.tools,
        exclude_tools: body.exclude_tools,
        skills: body.skills,
        source: None,
        updated_at: chrono::Utc::now(),
    };
    let replaced_file = state
        .registry
        .profile(&profile.name)
        .await
        .ok()
        .and_then(|old| old.source);
    let created = state.registry.put_profile(profile.clone()).await?;
    audit(&state, &actor, "profile_put", &profile.name).await;
    // The view shown is the new one (the router reloads on the event too).
    state.router.reload_profiles_now().await;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut view = view_of(&state, profile);
    view.warning = replaced_file.map(|file| {
        format!(
            "profile {} was defined in {file}: the file's next apply (an edit of it, a client bringing it) puts its own back; change it there to keep the change",
            view.profile.name
        )
    });
    Ok((status, Json(view)).into_response())
}

/// Remove a profile. Clients still using it see nothing from then on.
#[utoipa::path(delete, path = "/api/v1/profiles/{name}", tag = "profiles",
    params(("name" = String, Path, description = "Profile name")),
    responses((status = 204, description = "Removed"), (status = 404, body = ErrorBody),
        (status = 409, description = "Tokens are bound to it", body = ErrorBody)))]
pub async fn delete_profile(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(name): PathParam<String>,
) -> Result<Response, HttpError> {
    state.registry.remove_unbound_profile(&name).await?;
    audit(&state, &actor, "profile_delete", &name).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}
