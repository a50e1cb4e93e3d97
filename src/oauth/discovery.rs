//! Finding where to log in: the server's `WWW-Authenticate` challenge, its
//! protected-resource metadata (RFC 9728) and its authorization server's
//! metadata (RFC 8414, OpenID discovery), with the fallbacks of the MCP
//! authorization spec (the well-known paths, and the 2025-03-26 servers
//! that are their own authorization server).

use serde::Deserialize;
use std::time::Duration;

use super::OAuthError;

/// The largest metadata document read.
const METADATA_MAX: usize = 256 * 1024;
const FETCH_TIMEOUT: Duration = Duration::from_secs(15);

/// The parameters of a `Bearer` challenge.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Challenge {
    pub resource_metadata: Option<String>,
    pub scope: Option<String>,
    pub error: Option<String>,
}

impl Challenge {
    /// Reads the `Bearer` challenge of a `WWW-Authenticate` value (other
    /// schemes are skipped); quoted and token values both.
    pub fn parse(header: &str) -> Challenge {
        let mut challenge = Challenge::default();
        let Some(start) = find_scheme(header, "bearer") else {
            return challenge;
        };
        let mut rest = &header[start..];
        loop {
            rest = rest.trim_start_matches([' ', ',', '\t']);
            let Some(eq) = rest.find('=') else { break };
            let name = rest[..eq].trim().to_ascii_lowercase();
            // A new scheme starts ("Basic realm=…"): this challenge ended.
            if name.contains(' ') {
                break;
            }
            rest = rest[eq + 1..].trim_start();
            let value;
            if let Some(quoted) = rest.strip_prefix('"') {
                let mut out = String::new();
                let mut chars = quoted.char_indices();
                let mut end = quoted.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            if let Some((_, next)) = chars.next() {
                                out.push(next);
                            }
                        }
                        '"' => {
                            end = i + 1;
                            break;
                        }
                        c => out.push(c),
                    }
                }
                value = out;
                rest = &quoted[end.min(quoted.len())..];
            } else {
                let end = rest.find(',').unwrap_or(rest.len());
                value = rest[..end].trim().to_owned();
                rest = &rest[end..];
            }
            match name.as_str() {
                "resource_metadata" => challenge.resource_metadata = Some(value),
                "scope" => challenge.scope = Some(value),
                "error" => challenge.error = Some(value),
                _ => {}
            }
        }
        challenge
    }
}

/// Where the parameters of `scheme` start in a `WWW-Authenticate` value.
fn find_scheme(header: &str, scheme: &str) -> Option<usize> {
    let lower = header.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find(scheme) {
        let at = from + at;
        let before_ok = at == 0 || matches!(lower.as_bytes()[at - 1], b' ' | b',');
        let after = at + scheme.len();
        let after_ok = after == lower.len() || lower.as_bytes()[after] == b' ';
        if before_ok && after_ok {
            return Some(after);
        }
        from = after;
    }
    None
}

/// RFC 9728 protected-resource metadata (the fields we use).
#[derive(Debug, Clone, Deserialize)]
pub struct ResourceMetadata {
    pub resource: Option<String>,
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Option<Vec<String>>,
}

/// RFC 8414 authorization-server metadata (the fields we use).
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
pub struct ServerMetadata {
    pub issuer: Option<String>,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    pub registration_endpoint: Option<String>,
    pub revocation_endpoint: Option<String>,
    pub device_authorization_endpoint: Option<String>,
    pub scopes_supported: Option<Vec<String>>,
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    pub code_challenge_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
}

/// What discovery found for one server.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The resource the tokens are for (RFC 8707 `resource`).
    pub resource: String,
    /// The authorization server's issuer identifier.
    pub issuer: String,
    pub metadata: ServerMetadata,
    /// The scopes the resource metadata lists, when it does.
    pub scopes_supported: Option<Vec<String>>,
}

/// The resource identifier of an MCP server URL: without fragment (and
/// query kept, as RFC 8707 allows), the canonical form clients send.
pub fn resource_of(server_url: &url::Url) -> String {
    let mut url = server_url.clone();
    url.set_fragment(None);
    let text = url.to_string();
    // `https://host/` and `https://host` name one resource; the form
    // without the slash is the canonical one.
    match text.strip_suffix('/') {
        Some(trimmed) if url.path() == "/" && url.query().is_none() => trimmed.to_owned(),
        _ => text,
    }
}

/// Whether the metadata's `resource` names this server: the same origin,
/// and a path that is the server's or one of its parents.
pub fn resource_matches(declared: &str, server_url: &url::Url) -> bool {
    let Ok(declared) = url::Url::parse(declared) else {
        return false;
    };
    if declared.origin() != server_url.origin() {
        return false;
    }
    let declared_path = declared.path().trim_end_matches('/');
    let server_path = server_url.path().trim_end_matches('/');
    server_path == declared_path
        || server_path.starts_with(&format!("{declared_path}/"))
        || declared_path.is_empty()
}

/// Runs discovery for `server_url` after a 401 that carried `challenge`.
pub async fn discover(
    http: &reqwest::Client,
    server_url: &url::Url,
    challenge: &Challenge,
) -> Result<Discovered, OAuthError> {
    let resource_metadata = fetch_resource_metadata(http, server_url, challenge).await?;
    let (resource, issuer, scopes_supported) = match resource_metadata {
        Some(metadata) => {
            let resource = match metadata.resource.as_deref() {
                Some(declared) if resource_matches(declared, server_url) => declared.to_owned(),
                Some(declared) => {
                    return Err(OAuthError::Discovery(format!(
                        "the server's protected-resource metadata is for {declared}, not for {}; refusing to send it a token",
                        resource_of(server_url)
                    )));
                }
                None => resource_of(server_url),
            };
            let issuer = metadata
                .authorization_servers
                .first()
                .cloned()
                .ok_or_else(|| {
                    OAuthError::Discovery(
                        "the server's protected-resource metadata names no authorization server"
                            .into(),
                    )
                })?;
            (resource, issuer, metadata.scopes_supported)
        }
        // A 2025-03-26 server: it is its own authorization server.
        None => {
            let origin = server_url.origin().ascii_serialization();
            (resource_of(server_url), origin, None)
        }
    };
    let issuer_url = url::Url::parse(&issuer).map_err(|err| {
        OAuthError::Discovery(format!(
            "the authorization server {issuer:?} is not a URL: {err}"
        ))
    })?;
    check_fetched(&issuer_url, server_url)?;
    let metadata = match fetch_server_metadata(http, &issuer_url).await? {
        Some(metadata) => {
            // RFC 8414 §3.3: the metadata must be the issuer's own.
            let declared = metadata.issuer.as_deref().unwrap_or_default();
            if !same_issuer(declared, &issuer) {
                return Err(OAuthError::Discovery(format!(
                    "the authorization server metadata names issuer {declared:?}, not {issuer:?}; refusing it"
                )));
            }
            metadata
        }
        None => default_endpoints(&issuer_url),
    };
    if metadata.authorization_endpoint.is_none() || metadata.token_endpoint.is_none() {
        return Err(OAuthError::Discovery(format!(
            "the authorization server {issuer} names no authorization or token endpoint"
        )));
    }
    for endpoint in [
        &metadata.authorization_endpoint,
        &metadata.token_endpoint,
        &metadata.registration_endpoint,
        &metadata.device_authorization_endpoint,
        &metadata.revocation_endpoint,
    ]
    .into_iter()
    .flatten()
    {
        check_endpoint(endpoint)?;
    }
    // RFC 7636 / the MCP spec: no S256, no login.
    if let Some(methods) = &metadata.code_challenge_methods_supported
        && !methods.iter().any(|m| m == "S256")
    {
        return Err(OAuthError::Discovery(format!(
            "the authorization server {issuer} does not support PKCE with S256; refusing to log in without it"
        )));
    }
    Ok(Discovered {
        resource,
        issuer,
        metadata,
        scopes_supported,
    })
}

/// An endpoint a login sends the user or a credential to: HTTPS, or plain
/// HTTP on this machine only (a browser is never handed `file:`,
/// `vscode:` or the like, and no secret crosses the network in clear).
fn check_endpoint(endpoint: &str) -> Result<(), OAuthError> {
    let url = url::Url::parse(endpoint).map_err(|err| {
        OAuthError::Discovery(format!("the endpoint {endpoint:?} is not a URL: {err}"))
    })?;
    let loopback = match url.host() {
        Some(url::Host::Domain(host)) => host == "localhost" || host.ends_with(".localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        scheme => Err(OAuthError::Discovery(format!(
            "the endpoint {endpoint} is not HTTPS ({scheme}); refusing to use it"
        ))),
    }
}

/// A URL the server named for discovery (its metadata, its authorization
/// server) is fetched only over HTTPS, plain HTTP on this machine, or on
/// the server's own origin (which the user chose): a hostile server must
/// not make the daemon probe other hosts of its network.
fn check_fetched(url: &url::Url, server_url: &url::Url) -> Result<(), OAuthError> {
    if url.origin() == server_url.origin() {
        return Ok(());
    }
    check_endpoint(url.as_str())
}

/// Issuer identifiers compared as RFC 8414 asks (exactly), a trailing
/// slash on a bare origin aside.
pub fn same_issuer(a: &str, b: &str) -> bool {
    a == b || a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// The 2025-03-26 defaults when an authorization server publishes no
/// metadata: its origin's `/authorize`, `/token` and `/register`.
fn default_endpoints(issuer: &url::Url) -> ServerMetadata {
    let origin = issuer.origin().ascii_serialization();
    ServerMetadata {
        issuer: Some(origin.clone()),
        authorization_endpoint: Some(format!("{origin}/authorize")),
        token_endpoint: Some(format!("{origin}/token")),
        registration_endpoint: Some(format!("{origin}/register")),
        revocation_endpoint: None,
        device_authorization_endpoint: None,
        scopes_supported: None,
        token_endpoint_auth_methods_supported: None,
        code_challenge_methods_supported: None,
        client_id_metadata_document_supported: false,
        authorization_response_iss_parameter_supported: false,
    }
}

/// The resource metadata: from the challenge's URL, else the path-aware
/// well-known URL, else the origin's. `None`: the server publishes none.
async fn fetch_resource_metadata(
    http: &reqwest::Client,
    server_url: &url::Url,
    challenge: &Challenge,
) -> Result<Option<ResourceMetadata>, OAuthError> {
    let mut candidates = Vec::new();
    if let Some(url) = &challenge.resource_metadata {
        let url = server_url.join(url).map_err(|err| {
            OAuthError::Discovery(format!("resource_metadata {url:?} is not a URL: {err}"))
        })?;
        check_fetched(&url, server_url)?;
        candidates.push(url);
    }
    let origin = server_url.origin().ascii_serialization();
    let path = server_url.path().trim_end_matches('/');
    if !path.is_empty() {
        candidates.extend(url_of(&format!(
            "{origin}/.well-known/oauth-protected-resource{path}"
        )));
    }
    candidates.extend(url_of(&format!(
        "{origin}/.well-known/oauth-protected-resource"
    )));
    for url in candidates {
        if let Some(metadata) = fetch_json::<ResourceMetadata>(http, &url).await? {
            return Ok(Some(metadata));
        }
    }
    Ok(None)
}

/// The authorization server's metadata, at the URLs the MCP spec lists in
/// its order: OAuth then OpenID, path-inserted; OpenID path-appended.
async fn fetch_server_metadata(
    http: &reqwest::Client,
    issuer: &url::Url,
) -> Result<Option<ServerMetadata>, OAuthError> {
    let origin = issuer.origin().ascii_serialization();
    let path = issuer.path().trim_end_matches('/');
    let candidates: Vec<String> = if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    };
    for url in candidates.iter().filter_map(|c| url_of(c)) {
        if let Some(metadata) = fetch_json::<ServerMetadata>(http, &url).await? {
            return Ok(Some(metadata));
        }
    }
    Ok(None)
}

fn url_of(text: &str) -> Option<url::Url> {
    url::Url::parse(text).ok()
}

/// GETs a JSON document; `None` for a 4xx (not published there), an error
/// when the server cannot be reached or answers something unreadable.
async fn fetch_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &url::Url,
) -> Result<Option<T>, OAuthError> {
    let response = http
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .timeout(FETCH_TIMEOUT)
        .send()
        .await
        .map_err(|err| {
            OAuthError::Discovery(format!(
                "cannot fetch {url}: {}",
                crate::http_client::root_cause(&err)
            ))
        })?;
    let status = response.status();
    if status.is_client_error() || status.is_redirection() {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(OAuthError::Discovery(format!(
            "{url} answered HTTP {status}"
        )));
    }
    let body = crate::http_client::bounded_body(response, METADATA_MAX)
        .await
        .map_err(|err| OAuthError::Discovery(format!("cannot read {url}: {err}")))?;
    match serde_json::from_slice(&body) {
        Ok(value) => Ok(Some(value)),
        Err(err) => Err(OAuthError::Discovery(format!(
            "{url} is not valid metadata: {err}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_are_read_quoted_or_not_and_beside_other_schemes() {
        let c = Challenge::parse(
            r#"Basic realm="x", Bearer error="insufficient_scope", scope="a b", resource_metadata="https://h/.well-known/oauth-protected-resource/mcp""#,
        );
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(c.scope.as_deref(), Some("a b"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://h/.well-known/oauth-protected-resource/mcp")
        );
        let c = Challenge::parse("Bearer scope=read, error=invalid_token");
        assert_eq!(c.scope.as_deref(), Some("read"));
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        assert_eq!(Challenge::parse("Basic realm=\"x\""), Challenge::default());
        let c = Challenge::parse(r#"Bearer realm="a \"quoted\" realm", scope="s""#);
        assert_eq!(c.scope.as_deref(), Some("s"));
    }

    #[test]
    fn endpoints_are_https_or_on_this_machine() {
        assert!(check_endpoint("https://as.example/token").is_ok());
        assert!(check_endpoint("http://127.0.0.1:9/token").is_ok());
        assert!(check_endpoint("http://localhost:9/authorize").is_ok());
        assert!(check_endpoint("http://as.example/token").is_err());
        assert!(check_endpoint("file:///etc/passwd").is_err());
        assert!(check_endpoint("vscode://x").is_err());
        let server = url::Url::parse("http://192.168.1.5:8080/mcp").unwrap();
        let at = |text: &str| url::Url::parse(text).unwrap();
        assert!(check_fetched(&at("http://192.168.1.5:8080/.well-known/x"), &server).is_ok());
        assert!(check_fetched(&at("https://login.example/"), &server).is_ok());
        assert!(check_fetched(&at("http://127.0.0.1:9/as"), &server).is_ok());
        assert!(check_fetched(&at("http://192.0.2.1/latest/meta-data"), &server).is_err());
        assert!(check_fetched(&at("file:///etc/passwd"), &server).is_err());
    }

    #[test]
    fn the_resource_is_the_server_url_and_metadata_must_name_it() {
        let server = url::Url::parse("https://h.example/mcp").unwrap();
        assert_eq!(resource_of(&server), "https://h.example/mcp");
        assert_eq!(
            resource_of(&url::Url::parse("https://h.example/").unwrap()),
            "https://h.example"
        );
        assert!(resource_matches("https://h.example/mcp", &server));
        assert!(resource_matches("https://h.example", &server));
        assert!(!resource_matches("https://evil.example/mcp", &server));
        assert!(!resource_matches("https://h.example/other", &server));
    }
}
