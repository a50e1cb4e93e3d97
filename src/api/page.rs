//! The admin page at `/`: a few static files embedded in the binary (no
//! CDN, no network), and the sign-in that lets a browser, which cannot set
//! an `Authorization` header on a navigation, hold a session cookie
//! instead. The page itself is only a client of the API.
//!
//! The cookie is a random session id, never the token: browsers do not
//! separate cookies by port, so every other listener on 127.0.0.1 the
//! browser visits receives it. A session ends with sign-out or with the
//! daemon, and a request it authorises that changes anything must come
//! from this very origin (port included), which no page elsewhere on
//! loopback can claim.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::AppState;
use crate::http_error::HttpError;

/// The cookie that carries the admin token for the page's requests.
/// `HttpOnly` keeps it from scripts, `SameSite=Strict` from every request
/// another site starts (the request guard refuses those too).
pub const SESSION_COOKIE: &str = "mcp_aggregator_admin";

const INDEX_HTML: &str = include_str!("../../assets/admin/index.html");
const SIGNIN_HTML: &str = include_str!("../../assets/admin/signin.html");
const APP_JS: &str = include_str!("../../assets/admin/app.js");
const SIGNIN_JS: &str = include_str!("../../assets/admin/signin.js");
const APP_CSS: &str = include_str!("../../assets/admin/app.css");

/// Only the page's own files run, load or are connected to; it is never
/// framed (clickjacking) and submits nowhere else.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Signed-in browsers at most; the oldest session ends first.
const MAX_SESSIONS: usize = 64;

/// The page's live sessions (random ids), in memory only.
#[derive(Clone, Default)]
pub struct Sessions(Arc<Mutex<VecDeque<String>>>);

impl Sessions {
    fn open(&self) -> String {
        let id = crate::oauth::flow::random_token(32);
        let mut live = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if live.len() >= MAX_SESSIONS {
            live.pop_front();
        }
        live.push_back(id.clone());
        id
    }

    fn close(&self, id: &str) {
        let mut live = self.0.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|known| !super::constant_time_eq(known.as_bytes(), id.as_bytes()));
    }

    fn is_live(&self, id: &str) -> bool {
        let live = self.0.lock().unwrap_or_else(|e| e.into_inner());
        live.iter()
            .any(|known| super::constant_time_eq(known.as_bytes(), id.as_bytes()))
    }

    /// Whether a request carries a live session and, when it changes
    /// anything, comes from this listener's own origin. Every cookie of
    /// ours counts: another page on loopback can add one, not remove ours.
    pub fn admits(&self, method: &Method, headers: &HeaderMap) -> bool {
        let live = cookie_values(headers).any(|id| self.is_live(id));
        live && (matches!(*method, Method::GET | Method::HEAD) || same_origin(headers))
    }
}

/// `Origin` names exactly the host (and port) the request was sent to, or
/// the browser says it is same-origin. Another port of the same loopback
/// address is another origin.
fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    match (text(header::ORIGIN), text(header::HOST)) {
        (Some(origin), Some(host)) => {
            origin.eq_ignore_ascii_case(&format!("http://{host}"))
                || origin.eq_ignore_ascii_case(&format!("https://{host}"))
        }
        (None, _) => text(header::HeaderName::from_static("sec-fetch-site")) == Some("same-origin"),
        _ => false,
    }
}

/// The static files anyone past the request guard may fetch: code and
/// style identical in every build, with nothing of the store in them.
pub fn is_public_asset(path: &str) -> bool {
    matches!(
        path,
        "/admin/app.js" | "/admin/signin.js" | "/admin/app.css" | "/admin/session"
    )
}

fn page(status: StatusCode, content_type: &'static str, body: &'static str) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // A new binary brings new files: never serve the last one's.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The sign-in form, in place of the page, for a browser without the token.
pub fn signin_page() -> Response {
    page(
        StatusCode::UNAUTHORIZED,
        "text/html; charset=utf-8",
        SIGNIN_HTML,
    )
}

pub async fn index() -> Response {
    page(StatusCode::OK, "text/html; charset=utf-8", INDEX_HTML)
}

pub async fn app_js() -> Response {
    page(StatusCode::OK, "text/javascript; charset=utf-8", APP_JS)
}

pub async fn signin_js() -> Response {
    page(StatusCode::OK, "text/javascript; charset=utf-8", SIGNIN_JS)
}

pub async fn app_css() -> Response {
    page(StatusCode::OK, "text/css; charset=utf-8", APP_CSS)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    token: String,
}

/// `POST /admin/session {"token"}`: 204 with the cookie when the token is
/// the admin token (or none is required), 401 otherwise.
pub async fn sign_in(
    State(state): State<AppState>,
    body: Result<Json<SignIn>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(sign_in)) = body else {
        return HttpError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "send {\"token\": \"…\"} as application/json",
        )
        .into_response();
    };
    let Some(expected) = state.token.as_deref() else {
        return StatusCode::NO_CONTENT.into_response();
    };
    if !super::constant_time_eq(sign_in.token.as_bytes(), expected.as_bytes()) {
        return HttpError::new(StatusCode::UNAUTHORIZED, "that is not the admin token")
            .into_response();
    }
    let id = state.page_sessions.open();
    let cookie = format!("{SESSION_COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict");
    match HeaderValue::from_str(&cookie) {
        Ok(value) => (StatusCode::NO_CONTENT, [(header::SET_COOKIE, value)]).into_response(),
        Err(_) => HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, "cannot set the session")
            .into_response(),
    }
}

/// `GET /admin/session`: whether this daemon asks for its token (the page
/// offers "Sign out" only then). Says nothing else.
pub async fn session_info(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(serde_json::json!({"token_required": state.token.is_some()}))
}

/// `DELETE /admin/session`: ends the session and forgets the cookie.
pub async fn sign_out(State(state): State<AppState>, headers: HeaderMap) -> Response {
    for id in cookie_values(&headers) {
        state.page_sessions.close(id);
    }
    let expired = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    match HeaderValue::from_str(&expired) {
        Ok(value) => (StatusCode::NO_CONTENT, [(header::SET_COOKIE, value)]).into_response(),
        Err(_) => StatusCode::NO_CONTENT.into_response(),
    }
}

/// The values of every cookie of ours a request carries.
fn cookie_values(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, value)| *name == SESSION_COOKIE && !value.is_empty())
        .map(|(_, value)| value)
}
