//! Logins to servers that ask for one: start (`…/login`), forget
//! (`…/logout`), and the callback the authorization server sends the
//! browser back to (`/oauth/callback`: no admin token, since a browser
//! redirect carries none; the single-use `state` is its credential, and
//! the host and origin checks apply as everywhere).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;

use super::extract::{Actor, PathParam, QueryParams};
use crate::http_error::{ErrorBody, HttpError};
use crate::oauth::{AuthState, CallbackQuery, OAuthError};

/// `POST …/login` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct LoginResponse {
    pub state: AuthState,
    /// Open it in a browser; the login finishes through the daemon's
    /// `/oauth/callback`, and the server connects.
    pub authorization_url: String,
    /// For a device login: the code to type at `authorization_url`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_code: Option<String>,
    /// How long the URL stays usable, in seconds.
    pub expires_in: u64,
}

/// `POST …/login` body (optional).
#[derive(Debug, Default, serde::Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    /// Log in with the device authorization grant (RFC 8628): for a box
    /// without a browser; the answer has the URL to open elsewhere and the
    /// code to type there.
    #[serde(default)]
    pub device: bool,
}

/// `POST …/logout` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct LogoutResponse {
    /// Whether a login was held (and is now forgotten).
    pub logged_out: bool,
}

async fn server_auth(
    state: &AppState,
    id: &str,
) -> Result<
    (
        crate::model::ServerRecord,
        std::sync::Arc<crate::oauth::OAuth>,
        std::sync::Arc<crate::oauth::ServerAuth>,
    ),
    HttpError,
> {
    let record = state.registry.get(id).await?;
    let oauth = state
        .router
        .oauth()
        .cloned()
        .ok_or_else(|| HttpError::new(StatusCode::CONFLICT, "logins are not available here"))?;
    let auth = oauth.for_server(&record).ok_or_else(|| {
        HttpError::unprocessable(format!(
            "{} does not log in: only HTTP servers without a configured Authorization header do",
            record.name
        ))
    })?;
    Ok((record, oauth, auth))
}

/// Start a login to a server: discovery, client registration, and the
/// authorization URL to open.
#[utoipa::path(
    post,
    path = "/api/v1/aggregator/servers/{id}/login",
    tag = "servers",
    params(("id" = String, Path, description = "Server id or name")),
    request_body(content = Option<LoginRequest>, description = "`{\"device\": true}` for a device login"),
    responses(
        (status = 200, body = LoginResponse),
        (status = 404, description = "Server not found", body = ErrorBody),
        (status = 422, description = "Not a server that logs in", body = ErrorBody),
        (status = 502, description = "Discovery or registration failed", body = ErrorBody),
    )
)]
pub async fn login(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(id): PathParam<String>,
    body: axum::body::Bytes,
) -> Result<axum::Json<LoginResponse>, HttpError> {
    let request: LoginRequest = if body.iter().all(u8::is_ascii_whitespace) {
        LoginRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|err| HttpError::unprocessable(format!("invalid body: {err}")))?
    };
    let (record, oauth, auth) = server_auth(&state, &id).await?;
    let started = if request.device {
        oauth.start_device_login(&auth).await
    } else {
        oauth.start_login(&auth).await
    };
    let result = match &started {
        Ok(_) => "ok".to_owned(),
        Err(err) => err.to_string(),
    };
    let _ = state
        .registry
        .audit_event(&actor, "login", &record.name, &result)
        .await;
    match started {
        Ok(url) => Ok(axum::Json(LoginResponse {
            state: AuthState::NeedsLogin,
            authorization_url: url,
            user_code: auth.view().user_code,
            expires_in: crate::oauth::LOGIN_EXPIRY.as_secs(),
        })),
        Err(err) => Err(HttpError::new(StatusCode::BAD_GATEWAY, err.to_string())),
    }
}

/// Forget a server's login (its tokens are revoked where the authorization
/// server offers it); the server needs a login again.
#[utoipa::path(
    post,
    path = "/api/v1/aggregator/servers/{id}/logout",
    tag = "servers",
    params(("id" = String, Path, description = "Server id or name")),
    responses(
        (status = 200, body = LogoutResponse),
        (status = 404, description = "Server not found", body = ErrorBody),
        (status = 422, description = "Not a server that logs in", body = ErrorBody),
    )
)]
pub async fn logout(
    State(state): State<AppState>,
    Actor(actor): Actor,
    PathParam(id): PathParam<String>,
) -> Result<axum::Json<LogoutResponse>, HttpError> {
    let (record, oauth, auth) = server_auth(&state, &id).await?;
    let done = oauth.logout(&auth).await;
    let result = match &done {
        Ok(_) => "ok".to_owned(),
        Err(err) => err.to_string(),
    };
    let _ = state
        .registry
        .audit_event(&actor, "logout", &record.name, &result)
        .await;
    let logged_out =
        done.map_err(|err| HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()))?;
    // The session holds no token any more: reconnecting shows it.
    if logged_out {
        let _ = state.router.disconnect(record.id, true).await;
        let _ = state.router.connect(record.id).await;
    }
    Ok(axum::Json(LogoutResponse { logged_out }))
}

/// Where the authorization server sends the browser back to.
#[utoipa::path(
    get,
    path = "/oauth/callback",
    tag = "servers",
    responses(
        (status = 200, description = "Logged in (an HTML page)"),
        (status = 400, description = "Unknown, used or expired login, or refused", body = ErrorBody),
    )
)]
pub async fn callback(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<CallbackQuery>,
) -> Response {
    let Some(oauth) = state.router.oauth().cloned() else {
        return HttpError::new(StatusCode::NOT_FOUND, "logins are not available here")
            .into_response();
    };
    match oauth.callback(&query).await {
        Ok(server) => {
            let _ = state
                .registry
                .audit_event("oauth-callback", "login", &server, "ok")
                .await;
            Html(format!(
                "<!doctype html><meta charset=utf-8><title>Logged in</title><p>mcp-aggregator is logged in to <b>{}</b>. You can close this page.</p>",
                html_escape(&server)
            ))
            .into_response()
        }
        Err(err) => {
            let status = match err {
                OAuthError::Callback(_) | OAuthError::Refused { .. } => StatusCode::BAD_REQUEST,
                _ => StatusCode::BAD_GATEWAY,
            };
            HttpError::new(status, err.to_string()).into_response()
        }
    }
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
