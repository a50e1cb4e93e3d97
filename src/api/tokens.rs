//! Named tokens with scopes: `read` (GET requests of the admin API),
//! `mcp` (the MCP endpoint, optionally one view), `admin` (everything).
//! Created (the secret shown once), listed and revoked through
//! `/api/v1/aggregator/tokens`; kept hashed in the store and in memory
//! for the check every request passes.

use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use utoipa::ToSchema;

use super::AppState;
use super::extract::{Actor, JsonBody, PathParam};
use crate::http_error::{ErrorBody, HttpError};
use crate::model::token::{token_hash, validate_token_name};
use crate::model::{NamedToken, TokenScope};

/// The named tokens, by the hash of their secret.
#[derive(Clone)]
pub struct Tokens {
    by_hash: Arc<RwLock<HashMap<String, NamedToken>>>,
    /// The name of each token revoked: streams it holds open end.
    revoked: tokio::sync::broadcast::Sender<Arc<str>>,
}

impl Default for Tokens {
    fn default() -> Tokens {
        Tokens {
            by_hash: Arc::default(),
            revoked: tokio::sync::broadcast::channel(64).0,
        }
    }
}

impl Tokens {
    /// Told the name of each token revoked (here or, with shared tables,
    /// on another replica).
    pub fn revocations(&self) -> tokio::sync::broadcast::Sender<Arc<str>> {
        self.revoked.clone()
    }

    /// These tokens (as the store holds them).
    pub fn new(stored: Vec<NamedToken>) -> Tokens {
        let tokens = Tokens::default();
        if let Ok(mut map) = tokens.by_hash.write() {
            for token in stored {
                map.insert(token.hash.clone(), token);
            }
        }
        tokens
    }

    /// Puts the stored tokens in place of those held (another replica
    /// created or revoked one).
    pub fn replace_all(&self, stored: Vec<NamedToken>) {
        let mut gone: Vec<String> = Vec::new();
        if let Ok(mut map) = self.by_hash.write() {
            let kept: std::collections::HashSet<&str> =
                stored.iter().map(|t| t.name.as_str()).collect();
            gone = map
                .values()
                .filter(|t| !kept.contains(t.name.as_str()))
                .map(|t| t.name.clone())
                .collect();
            *map = stored.into_iter().map(|t| (t.hash.clone(), t)).collect();
        }
        for name in gone {
            let _ = self.revoked.send(Arc::from(name));
        }
    }

    /// The token whose secret this is.
    pub fn find(&self, secret: &str) -> Option<NamedToken> {
        let hash = token_hash(secret);
        self.by_hash.read().ok()?.get(&hash).cloned()
    }

    fn insert(&self, token: NamedToken) {
        if let Ok(mut map) = self.by_hash.write() {
            map.insert(token.hash.clone(), token);
        }
    }

    fn remove(&self, name: &str) {
        if let Ok(mut map) = self.by_hash.write() {
            map.retain(|_, t| t.name != name);
        }
        let _ = self.revoked.send(Arc::from(name));
    }
}

/// Why a named token may not make this request (none: it may). A token
/// bound to a view reaches it as `/mcp/NAME` or `/mcp?profile=NAME`.
pub fn scope_refusal(
    token: &NamedToken,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Option<String> {
    let is_mcp = path == "/mcp" || path.starts_with("/mcp/");
    match token.scope {
        TokenScope::Admin => None,
        TokenScope::Read if !is_mcp && matches!(*method, Method::GET | Method::HEAD) => None,
        TokenScope::Read => Some(format!(
            "token {} has scope read: GET requests of the admin API only",
            token.name
        )),
        TokenScope::Mcp => match (&token.profile, is_mcp) {
            (_, false) => Some(format!(
                "token {} has scope mcp: the MCP endpoint only",
                token.name
            )),
            (Some(profile), true) if !reaches_view(path, query, profile) => Some(format!(
                "token {} reaches only the view {profile}: use /mcp/{profile}",
                token.name
            )),
            _ => None,
        },
    }
}

/// Whether a request names exactly the view `profile`: in its path, or as
/// `/mcp` with every `profile` parameter naming it.
fn reaches_view(path: &str, query: Option<&str>, profile: &str) -> bool {
    let named: Vec<String> = query
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .filter(|(key, _)| key == "profile")
                .map(|(_, value)| value.into_owned())
                .collect()
        })
        .unwrap_or_default();
    let in_query = named.iter().all(|name| name == profile);
    match path.strip_prefix("/mcp/") {
        Some(in_path) => in_path == profile && in_query,
        None => path == "/mcp" && !named.is_empty() && in_query,
    }
}

/// `POST /api/v1/aggregator/tokens`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    /// `^[a-z][a-z0-9_-]*$`, at most 64 characters, unique.
    pub name: String,
    pub scope: TokenScope,
    /// For an `mcp` token: the one view (profile) it reaches.
    #[serde(default)]
    pub profile: Option<String>,
}

/// A named token as the API shows it (never its secret or hash).
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenView {
    pub name: String,
    pub scope: TokenScope,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub created_by: String,
}

impl TokenView {
    fn new(token: &NamedToken) -> TokenView {
        TokenView {
            name: token.name.clone(),
            scope: token.scope,
            profile: token.profile.clone(),
            created_at: token.created_at,
            created_by: token.created_by.clone(),
        }
    }
}

/// A token just created: the secret, shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedToken {
    #[serde(flatten)]
    pub token: TokenView,
    /// `Authorization: Bearer <secret>`; not kept anywhere: copy it now.
    pub secret: String,
}

/// Create a named token (the secret is in the answer, and nowhere else).
#[utoipa::path(
    post,
    path = "/api/v1/aggregator/tokens",
    tag = "process",
    request_body = CreateTokenRequest,
    responses(
        (status = 201, body = CreatedToken),
        (status = 409, description = "A token of that name exists", body = ErrorBody),
        (status = 422, description = "Invalid name, scope or profile", body = ErrorBody),
    )
)]
pub async fn create_token(
    State(state): State<AppState>,
    Actor(actor): Actor,
    JsonBody(request): JsonBody<CreateTokenRequest>,
) -> Result<(StatusCode, Json<CreatedToken>), HttpError> {
    validate_token_name(&request.name).map_err(HttpError::unprocessable)?;
    if let Some(profile) = &request.profile {
        if request.scope != TokenScope::Mcp {
            return Err(HttpError::unprocessable(
                "profile: only an mcp token is bound to a view",
            ));
        }
        crate::model::profile::validate_profile_name(profile)
            .map_err(|err| HttpError::unprocessable(format!("profile: {err}")))?;
        // A token bound to a view that is not there reaches nothing: most
        // likely a typo, said now rather than at its first use.
        match state.registry.profile(profile).await {
            Ok(_) => {}
            Err(crate::registry::RegistryError::ProfileNotFound(_)) => {
                return Err(HttpError::unprocessable(format!(
                    "profile: there is no view named {profile}; make it first (`mcp-aggregator profiles set {profile} …` or PUT /api/v1/profiles/{profile})"
                )));
            }
            Err(err) => return Err(err.into()),
        }
    }
    let secret = format!("mcpa_{}", crate::oauth::flow::random_token(32));
    let token = NamedToken {
        name: request.name,
        scope: request.scope,
        profile: request.profile,
        hash: token_hash(&secret),
        created_at: chrono::Utc::now(),
        created_by: actor.clone(),
    };
    state.registry.add_token(token.clone(), &actor).await?;
    state.tokens.insert(token.clone());
    Ok((
        StatusCode::CREATED,
        Json(CreatedToken {
            token: TokenView::new(&token),
            secret,
        }),
    ))
}

/// The named tokens (never their secrets).
#[utoipa::path(
    get,
    path = "/api/v1/aggregator/tokens",
    tag = "process",
    responses((status = 200, body = Vec<TokenView>))
)]
pub async fn list_tokens(State(state): State<AppState>) -> Result<Json<Vec<TokenView>>, HttpError> {
    let mut tokens = state.registry.tokens().await?;
    tokens.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(tokens.iter().map(TokenView::new).collect()))
}

/// Revoke a named token: it stops working at once.
#[utoipa::path(
    delete,
    path = "/api/v1/aggregator/tokens/{name}",
    tag = "process",
    params(("name" = String, Path, description = "The token's name")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 404, description = "No such token", body = ErrorBody),
    )
)]
pub async fn revoke_token(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(name): PathParam<String>,
) -> Result<StatusCode, HttpError> {
    let removed = state.registry.revoke_token(&name, &actor).await?;
    state.tokens.remove(&name);
    match removed {
        Some(_) => Ok(StatusCode::NO_CONTENT),
        None => Err(HttpError::new(
            StatusCode::NOT_FOUND,
            format!("Token not found: {name}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(scope: TokenScope, profile: Option<&str>) -> NamedToken {
        NamedToken {
            name: "t".into(),
            scope,
            profile: profile.map(str::to_owned),
            hash: String::new(),
            created_at: chrono::Utc::now(),
            created_by: String::new(),
        }
    }

    #[test]
    fn each_scope_reaches_what_it_names() {
        let read = token(TokenScope::Read, None);
        assert!(scope_refusal(&read, &Method::GET, "/api/v1/aggregator/servers", None).is_none());
        assert!(scope_refusal(&read, &Method::POST, "/api/v1/aggregator/servers", None).is_some());
        assert!(
            scope_refusal(&read, &Method::DELETE, "/api/v1/aggregator/servers/x", None).is_some()
        );
        assert!(scope_refusal(&read, &Method::GET, "/mcp", None).is_some());
        let mcp = token(TokenScope::Mcp, None);
        assert!(scope_refusal(&mcp, &Method::POST, "/mcp", None).is_none());
        assert!(scope_refusal(&mcp, &Method::POST, "/mcp/anything", None).is_none());
        assert!(scope_refusal(&mcp, &Method::GET, "/api/v1/aggregator/servers", None).is_some());
        let bound = token(TokenScope::Mcp, Some("dev"));
        assert!(scope_refusal(&bound, &Method::POST, "/mcp/dev", None).is_none());
        assert!(scope_refusal(&bound, &Method::POST, "/mcp", None).is_some());
        assert!(scope_refusal(&bound, &Method::POST, "/mcp/ops", None).is_some());
        assert!(scope_refusal(&bound, &Method::POST, "/mcpx", None).is_some());
        assert!(scope_refusal(&bound, &Method::POST, "/mcp", Some("profile=dev")).is_none());
        assert!(scope_refusal(&bound, &Method::POST, "/mcp", Some("profile=ops")).is_some());
        assert!(
            scope_refusal(
                &bound,
                &Method::POST,
                "/mcp",
                Some("profile=dev&profile=ops")
            )
            .is_some()
        );
        assert!(scope_refusal(&bound, &Method::POST, "/mcp/dev", Some("profile=ops")).is_some());
        assert!(scope_refusal(&bound, &Method::POST, "/mcp", Some("other=dev")).is_some());
        let admin = token(TokenScope::Admin, None);
        assert!(
            scope_refusal(&admin, &Method::DELETE, "/api/v1/aggregator/tokens/x", None).is_none()
        );
    }
}
