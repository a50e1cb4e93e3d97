//! The OAuth requests themselves: PKCE (S256), the authorization URL,
//! the token endpoint (code, refresh) with the client authentication the
//! authorization server takes (basic, post, none), dynamic client
//! registration (RFC 7591) and revocation (RFC 7009).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use std::time::Duration;

use super::OAuthError;
use super::discovery::ServerMetadata;

const TOKEN_TIMEOUT: Duration = Duration::from_secs(20);
/// The largest token or registration answer read.
const ANSWER_MAX: usize = 256 * 1024;

/// A random URL-safe string of `bytes` random bytes (state, verifier).
pub fn random_token(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    rustix::rand::getrandom(&mut buffer, rustix::rand::GetRandomFlags::empty()).ok();
    // getrandom never fails on Linux for small buffers; should it, the
    // fallback is still unpredictable enough for a single-use value.
    if buffer.iter().all(|b| *b == 0) {
        for b in &mut buffer {
            *b = fastrand::u8(..);
        }
    }
    URL_SAFE_NO_PAD.encode(buffer)
}

/// The S256 challenge of a PKCE verifier.
pub fn challenge_of(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()))
}

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// `client_secret_basic`.
    Basic,
    /// `client_secret_post`.
    Post,
    /// `none`: a public client (the id in the body).
    None,
}

impl ClientAuth {
    /// The method to use for a client with or without a secret, among the
    /// ones the server lists (RFC 8414's default when it lists none is
    /// `client_secret_basic`).
    pub fn choose(has_secret: bool, supported: Option<&[String]>) -> ClientAuth {
        if !has_secret {
            return ClientAuth::None;
        }
        match supported {
            None => ClientAuth::Basic,
            Some(methods) if methods.iter().any(|m| m == "client_secret_basic") => {
                ClientAuth::Basic
            }
            Some(methods) if methods.iter().any(|m| m == "client_secret_post") => ClientAuth::Post,
            Some(_) => ClientAuth::Basic,
        }
    }

    pub fn from_registered(method: Option<&str>, has_secret: bool) -> ClientAuth {
        match method {
            Some("client_secret_post") => ClientAuth::Post,
            Some("client_secret_basic") => ClientAuth::Basic,
            Some("none") => ClientAuth::None,
            _ if has_secret => ClientAuth::Basic,
            _ => ClientAuth::None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuth::Basic => "client_secret_basic",
            ClientAuth::Post => "client_secret_post",
            ClientAuth::None => "none",
        }
    }
}

/// The client the aggregator is at one authorization server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Client {
    pub client_id: String,
    pub client_secret: Option<String>,
    pub auth: ClientAuth,
    /// The redirect URI it was registered with (a registered client is
    /// registered again when the daemon's callback moved).
    pub redirect_uri: String,
    /// How it came to be: `pre_registered`, `metadata_document`, `dynamic`.
    pub kind: String,
}

/// What the token endpoint answered.
#[derive(Debug, Clone, Deserialize)]
pub struct TokenAnswer {
    pub access_token: String,
    pub token_type: Option<String>,
    /// Some servers send it as a string; zero means unknown.
    #[serde(default, deserialize_with = "seconds")]
    pub expires_in: Option<u64>,
    pub refresh_token: Option<String>,
    pub scope: Option<String>,
}

/// The grant type of a device login's token requests (RFC 8628).
pub const DEVICE_CODE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// What the device authorization endpoint answered.
#[derive(Debug, Clone, Deserialize)]
pub struct DeviceAnswer {
    pub device_code: String,
    pub user_code: String,
    pub verification_uri: String,
    pub verification_uri_complete: Option<String>,
    pub expires_in: Option<u64>,
    pub interval: Option<u64>,
}

/// Starts a device login (RFC 8628 §3.1).
pub async fn device_authorization(
    http: &reqwest::Client,
    endpoint: &str,
    client: &Client,
    resource: &str,
    scope: Option<&str>,
) -> Result<DeviceAnswer, OAuthError> {
    let mut form = vec![("resource", resource.to_owned())];
    if let Some(scope) = scope.filter(|s| !s.is_empty()) {
        form.push(("scope", scope.to_owned()));
    }
    let request = authenticated_form(http.post(endpoint), client, form);
    read_answer(request, "the device authorization endpoint").await
}

/// A form request authenticated as `client` at the token endpoint's
/// method (RFC 6749 §2.3: basic, post, or its id alone for a public one).
fn authenticated_form(
    request: reqwest::RequestBuilder,
    client: &Client,
    mut form: Vec<(&str, String)>,
) -> reqwest::RequestBuilder {
    let mut request = request
        .header(reqwest::header::ACCEPT, "application/json")
        .timeout(TOKEN_TIMEOUT);
    match client.auth {
        ClientAuth::Basic => {
            // RFC 6749 §2.3.1: both parts form-encoded before base64.
            let encode =
                |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let secret = client.client_secret.as_deref().unwrap_or_default();
            let credentials = base64::engine::general_purpose::STANDARD.encode(format!(
                "{}:{}",
                encode(&client.client_id),
                encode(secret)
            ));
            request = request.header(
                reqwest::header::AUTHORIZATION,
                format!("Basic {credentials}"),
            );
        }
        ClientAuth::Post => {
            form.push(("client_id", client.client_id.clone()));
            form.push((
                "client_secret",
                client.client_secret.clone().unwrap_or_default(),
            ));
        }
        ClientAuth::None => form.push(("client_id", client.client_id.clone())),
    }
    with_form(request, &form)
}

/// Sends an OAuth request and reads its JSON answer: an error answer
/// (`{"error"}`) as `Refused`, anything else unreadable as what it is.
async fn read_answer<T: serde::de::DeserializeOwned>(
    request: reqwest::RequestBuilder,
    what: &str,
) -> Result<T, OAuthError> {
    let response = request.send().await.map_err(|err| {
        OAuthError::Token(format!(
            "cannot reach {what}: {}",
            crate::http_client::root_cause(&err)
        ))
    })?;
    let status = response.status();
    let body = crate::http_client::bounded_body(response, ANSWER_MAX)
        .await
        .map_err(|err| OAuthError::Token(format!("cannot read the answer of {what}: {err}")))?;
    if !status.is_success() {
        return Err(match serde_json::from_slice::<ErrorAnswer>(&body) {
            Ok(answer) => OAuthError::Refused {
                error: answer.error,
                description: answer.error_description.unwrap_or_default(),
            },
            Err(_) => OAuthError::Token(format!("{what} answered HTTP {status}")),
        });
    }
    serde_json::from_slice(&body)
        .map_err(|err| OAuthError::Token(format!("the answer of {what} is not valid: {err}")))
}

/// A number of seconds, as a number or a numeric string (0: not said).
fn seconds<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(match value {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|s| *s > 0))
}

/// An error answer of the token or registration endpoint.
#[derive(Debug, Clone, Deserialize)]
struct ErrorAnswer {
    error: String,
    error_description: Option<String>,
}

/// The authorization URL of a login.
pub struct AuthorizationRequest<'a> {
    pub endpoint: &'a str,
    pub client_id: &'a str,
    pub redirect_uri: &'a str,
    pub state: &'a str,
    pub verifier: &'a str,
    pub scope: Option<&'a str>,
    pub resource: &'a str,
}

impl AuthorizationRequest<'_> {
    pub fn url(&self) -> Result<String, OAuthError> {
        let mut url = url::Url::parse(self.endpoint).map_err(|err| {
            OAuthError::Discovery(format!(
                "the authorization endpoint {:?} is not a URL: {err}",
                self.endpoint
            ))
        })?;
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("response_type", "code")
                .append_pair("client_id", self.client_id)
                .append_pair("redirect_uri", self.redirect_uri)
                .append_pair("state", self.state)
                .append_pair("code_challenge", &challenge_of(self.verifier))
                .append_pair("code_challenge_method", "S256")
                .append_pair("resource", self.resource);
            if let Some(scope) = self.scope.filter(|s| !s.is_empty()) {
                query.append_pair("scope", scope);
            }
        }
        Ok(url.to_string())
    }
}

/// A token request: the grant's own fields, with the client's
/// authentication and the resource added.
pub async fn token_request(
    http: &reqwest::Client,
    endpoint: &str,
    client: &Client,
    resource: &str,
    mut form: Vec<(&str, String)>,
) -> Result<TokenAnswer, OAuthError> {
    form.push(("resource", resource.to_owned()));
    let request = authenticated_form(http.post(endpoint), client, form);
    let answer: TokenAnswer = read_answer(request, "the token endpoint").await?;
    if answer
        .token_type
        .as_deref()
        .is_some_and(|t| !t.eq_ignore_ascii_case("bearer"))
    {
        return Err(OAuthError::Token(format!(
            "the token endpoint issued a {:?} token; only bearer tokens are supported",
            answer.token_type.unwrap_or_default()
        )));
    }
    // Sent in an `Authorization` header: one that cannot be would be kept
    // as a good login and fail every connection after it.
    if !is_header_token(&answer.access_token) {
        return Err(OAuthError::Token(
            "the token endpoint issued an access token that cannot be sent in a header \
             (empty, or with control characters)"
                .into(),
        ));
    }
    Ok(answer)
}

/// Whether `token` can go in an `Authorization: Bearer` header: visible
/// ASCII and spaces only, not empty.
fn is_header_token(token: &str) -> bool {
    !token.trim().is_empty() && token.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// A request with a form-encoded body.
fn with_form(request: reqwest::RequestBuilder, form: &[(&str, String)]) -> reqwest::RequestBuilder {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    request
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(body)
}

/// Registers the aggregator as a client (RFC 7591).
pub async fn register(
    http: &reqwest::Client,
    metadata: &ServerMetadata,
    redirect_uri: &str,
    scope: Option<&str>,
) -> Result<Client, OAuthError> {
    let Some(endpoint) = metadata.registration_endpoint.as_deref() else {
        return Err(OAuthError::Registration(
            "the authorization server offers no dynamic client registration; give the server a pre-registered client (`oauth.client_id` in its config)".into(),
        ));
    };
    #[derive(Deserialize)]
    struct Registered {
        client_id: String,
        client_secret: Option<String>,
        token_endpoint_auth_method: Option<String>,
    }
    // A public client when the server takes one; else one with a secret.
    let methods = metadata.token_endpoint_auth_methods_supported.as_deref();
    let wanted = match methods {
        Some(m) if !m.iter().any(|x| x == "none") => ClientAuth::choose(true, Some(m)).as_str(),
        _ => "none",
    };
    // SEP-837: a loopback callback is a native application's.
    let loopback = url::Url::parse(redirect_uri)
        .is_ok_and(|u| matches!(u.host_str(), Some("127.0.0.1" | "localhost" | "[::1]")));
    let mut grant_types = vec!["authorization_code", "refresh_token"];
    if metadata.device_authorization_endpoint.is_some() {
        grant_types.push(DEVICE_CODE_GRANT);
    }
    let mut body = serde_json::json!({
        "client_name": "mcp-aggregator",
        "application_type": if loopback { "native" } else { "web" },
        "redirect_uris": [redirect_uri],
        "grant_types": grant_types,
        "response_types": ["code"],
        "token_endpoint_auth_method": wanted,
    });
    if let Some(scope) = scope.filter(|s| !s.is_empty()) {
        body["scope"] = scope.into();
    }
    let response = http
        .post(endpoint)
        .json(&body)
        .timeout(TOKEN_TIMEOUT)
        .send()
        .await
        .map_err(|err| {
            OAuthError::Registration(format!(
                "cannot reach the registration endpoint: {}",
                crate::http_client::root_cause(&err)
            ))
        })?;
    let status = response.status();
    let answer = crate::http_client::bounded_body(response, ANSWER_MAX)
        .await
        .map_err(|err| OAuthError::Registration(format!("cannot read the registration: {err}")))?;
    if !status.is_success() {
        let detail = serde_json::from_slice::<ErrorAnswer>(&answer)
            .map(|e| format!("{} {}", e.error, e.error_description.unwrap_or_default()))
            .unwrap_or_else(|_| format!("HTTP {status}"));
        return Err(OAuthError::Registration(format!(
            "the authorization server refused to register us: {}",
            detail.trim()
        )));
    }
    let registered: Registered = serde_json::from_slice(&answer)
        .map_err(|err| OAuthError::Registration(format!("the registration is not valid: {err}")))?;
    let has_secret = registered.client_secret.is_some();
    Ok(Client {
        auth: ClientAuth::from_registered(
            registered.token_endpoint_auth_method.as_deref(),
            has_secret,
        ),
        client_id: registered.client_id,
        client_secret: registered.client_secret,
        redirect_uri: redirect_uri.to_owned(),
        kind: "dynamic".into(),
    })
}

/// Revokes a token (RFC 7009); best effort.
pub async fn revoke(http: &reqwest::Client, endpoint: &str, client: &Client, token: &str) {
    let request = authenticated_form(
        http.post(endpoint),
        client,
        vec![("token", token.to_owned())],
    );
    if let Err(err) = request.send().await {
        tracing::debug!(
            "cannot revoke a token: {}",
            crate::http_client::root_cause(&err)
        );
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_access_token_must_fit_in_a_header() {
        assert!(super::is_header_token("eyJhbGciOi.J9-_~+/="));
        assert!(!super::is_header_token("good\r\nX-Injected: 1"));
        assert!(!super::is_header_token(""));
        assert!(!super::is_header_token("caf\u{e9}"));
    }

    use super::*;

    #[test]
    fn the_pkce_challenge_is_the_unpadded_base64url_sha256_of_the_verifier() {
        assert_eq!(
            challenge_of("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gXk-fEjXk"),
            "aG-5ZL4Jxyv6Adw-xvJkCsQts0LW5DITdISa2heZ0Mw"
        );
        let a = random_token(32);
        assert_eq!(a.len(), 43);
        assert_ne!(a, random_token(32));
    }

    #[test]
    fn client_authentication_follows_what_the_server_lists() {
        let list = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(ClientAuth::choose(false, None), ClientAuth::None);
        assert_eq!(ClientAuth::choose(true, None), ClientAuth::Basic);
        assert_eq!(
            ClientAuth::choose(true, Some(&list(&["client_secret_post"]))),
            ClientAuth::Post
        );
        assert_eq!(
            ClientAuth::choose(
                true,
                Some(&list(&["client_secret_post", "client_secret_basic"]))
            ),
            ClientAuth::Basic
        );
    }
}
