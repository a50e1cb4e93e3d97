//! The one request guard in front of every route of the HTTP listener (admin
//! API, `/mcp`, anything added later). Loopback is not a trust boundary:
//! every web page the user opens can send requests to it, and DNS rebinding
//! gets past the browser's same-origin rule. So:
//! - `Host` must name loopback (or a host given with `--allow-host`): a
//!   rebound name (`evil.example` resolving to 127.0.0.1) is refused;
//! - `Origin`, when a browser sends one, must name such a host too, and is
//!   never `null` (sandboxed iframes, `file:` pages);
//! - a request that changes state and carries a body must be
//!   `application/json`, which a page cannot send cross-site without a
//!   CORS preflight (that we never answer).
//!
//! The CLI and plain `curl` send a loopback `Host`, no `Origin`, and JSON.

use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;
use std::sync::Arc;

use crate::http_error::HttpError;

/// Which `Host` and `Origin` values the listener accepts.
#[derive(Debug, Clone, Default)]
pub struct HostPolicy {
    /// Lower-cased host names or addresses accepted besides loopback; `*`
    /// accepts any (for a listener behind a reverse proxy, token required).
    allowed: Arc<[String]>,
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "Host `{0}` is not allowed: this listener answers loopback names only (add the name with --allow-host to accept it)"
    )]
    Host(String),
    #[error("a Host header is required")]
    MissingHost,
    #[error("Origin `{0}` is not allowed: cross-site requests are refused")]
    Origin(String),
    #[error(
        "Content-Type `{0}` is not accepted for {1}: send `Content-Type: application/json` (curl: --json or -H 'Content-Type: application/json')"
    )]
    ContentType(String, Method),
}

impl Refusal {
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::ContentType(..) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            _ => StatusCode::FORBIDDEN,
        }
    }
}

impl HostPolicy {
    pub fn new(allowed: impl IntoIterator<Item = String>) -> HostPolicy {
        let allowed: Vec<String> = allowed
            .into_iter()
            .map(|h| strip_brackets(h.trim()).to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        HostPolicy {
            allowed: allowed.into(),
        }
    }

    /// Whether a bare host (no port) is loopback or allowed.
    pub fn allows_host(&self, host: &str) -> bool {
        let host = strip_brackets(host).to_ascii_lowercase();
        let host = host.trim_end_matches('.');
        is_loopback_name(host) || self.allowed.iter().any(|a| a == "*" || a == host)
    }

    /// Checks one request's headers.
    pub fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
        // Two of either: which one a proxy or a framework reads is anyone's
        // guess, so neither is believed.
        if headers.get_all(header::HOST).iter().nth(1).is_some() {
            return Err(Refusal::Host("(several Host headers)".to_owned()));
        }
        if headers.get_all(header::ORIGIN).iter().nth(1).is_some() {
            return Err(Refusal::Origin("(several Origin headers)".to_owned()));
        }
        let host = headers
            .get(header::HOST)
            .ok_or(Refusal::MissingHost)?
            .to_str()
            .map_err(|_| Refusal::Host("(not text)".to_owned()))?;
        if !self.allows_host(host_of_authority(host)) {
            return Err(Refusal::Host(printable(host)));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let text = origin.to_str().unwrap_or("(not text)");
            let allowed = url::Url::parse(text).ok().is_some_and(|url| {
                matches!(url.scheme(), "http" | "https")
                    && url.host_str().is_some_and(|h| self.allows_host(h))
            });
            if !allowed {
                return Err(Refusal::Origin(printable(text)));
            }
        }
        if changes_state(method)
            && (has_body(headers) || headers.contains_key(header::CONTENT_TYPE))
        {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if !is_json(content_type) {
                let shown = if content_type.is_empty() {
                    "(none)".to_owned()
                } else {
                    printable(content_type)
                };
                return Err(Refusal::ContentType(shown, method.clone()));
            }
        }
        Ok(())
    }
}

/// The refusal of a request the policy does not accept (run before
/// anything else, even the token check), logged.
pub fn refuse(policy: &HostPolicy, request: &Request) -> Option<Response> {
    let refusal = policy.check(request.method(), request.headers()).err()?;
    tracing::warn!(
        method = %request.method(),
        path = %request.uri().path(),
        "request refused: {refusal}"
    );
    Some(HttpError::new(refusal.status(), refusal.to_string()).into_response())
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// `application/json` or `application/…+json`, parameters allowed.
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| match ip {
            IpAddr::V4(v4) => v4.is_loopback(),
            IpAddr::V6(v6) => {
                v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
        })
}

/// The host part of a `Host` header value (`[::1]:8765` → `[::1]`).
fn host_of_authority(authority: &str) -> &str {
    let authority = authority.trim();
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => &authority[..=end],
            None => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

fn strip_brackets(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// A header value fit for a message: printable, at most 100 characters.
fn printable(value: &str) -> String {
    value
        .chars()
        .filter(|c| !c.is_control())
        .take(100)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn several_host_or_origin_headers_are_refused() {
        let policy = HostPolicy::default();
        let mut two_hosts = headers(&[("host", "localhost")]);
        two_hosts.append(header::HOST, HeaderValue::from_static("evil.com"));
        assert!(matches!(
            policy.check(&Method::GET, &two_hosts),
            Err(Refusal::Host(_))
        ));
        let mut two_origins = headers(&[("host", "localhost"), ("origin", "http://localhost")]);
        two_origins.append(header::ORIGIN, HeaderValue::from_static("http://evil.com"));
        assert!(matches!(
            policy.check(&Method::GET, &two_origins),
            Err(Refusal::Origin(_))
        ));
    }

    #[test]
    fn loopback_hosts_pass_and_rebound_names_do_not() {
        let policy = HostPolicy::default();
        for host in [
            "127.0.0.1:8765",
            "localhost:8765",
            "LOCALHOST",
            "[::1]:8765",
            "127.1.2.3",
            "app.localhost:1",
            "localhost.",
        ] {
            assert_eq!(
                policy.check(&Method::GET, &headers(&[("host", host)])),
                Ok(()),
                "{host}"
            );
        }
        for host in [
            "evil.com",
            "evil.com:8765",
            "127.0.0.1.evil.com",
            "localhost.evil.com",
            "[::2]:80",
            "10.0.0.1",
        ] {
            assert!(
                matches!(
                    policy.check(&Method::GET, &headers(&[("host", host)])),
                    Err(Refusal::Host(_))
                ),
                "{host}"
            );
        }
        assert_eq!(
            policy.check(&Method::GET, &HeaderMap::new()),
            Err(Refusal::MissingHost)
        );
    }

    #[test]
    fn allowed_hosts_are_added_and_star_allows_any() {
        let policy = HostPolicy::new(["Box.LAN".to_owned(), "[fd00::1]".to_owned()]);
        assert!(policy.allows_host("box.lan"));
        assert!(policy.allows_host("[fd00::1]"));
        assert!(!policy.allows_host("other.lan"));
        assert!(HostPolicy::new(["*".to_owned()]).allows_host("anything.example"));
    }

    #[test]
    fn origins_must_be_loopback_or_allowed_and_never_null() {
        let policy = HostPolicy::default();
        let check = |origin: &str| {
            policy.check(
                &Method::GET,
                &headers(&[("host", "127.0.0.1:8765"), ("origin", origin)]),
            )
        };
        assert_eq!(check("http://localhost:6274"), Ok(()));
        assert_eq!(check("https://127.0.0.1"), Ok(()));
        for origin in [
            "null",
            "http://evil.com",
            "file://",
            "chrome-extension://abc",
            "",
        ] {
            assert!(matches!(check(origin), Err(Refusal::Origin(_))), "{origin}");
        }
    }

    #[test]
    fn state_changes_with_a_body_must_be_json() {
        let policy = HostPolicy::default();
        let post = |extra: &[(&'static str, &str)]| {
            let mut pairs = vec![("host", "127.0.0.1")];
            pairs.extend_from_slice(extra);
            policy.check(&Method::POST, &headers(&pairs))
        };
        assert_eq!(
            post(&[
                ("content-type", "application/json"),
                ("content-length", "2")
            ]),
            Ok(())
        );
        assert_eq!(
            post(&[
                ("content-type", "Application/JSON; charset=utf-8"),
                ("content-length", "2")
            ]),
            Ok(())
        );
        assert_eq!(post(&[]), Ok(()), "an empty POST (connect) needs no type");
        assert_eq!(post(&[("content-length", "0")]), Ok(()));
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            assert!(
                matches!(
                    post(&[("content-type", bad), ("content-length", "5")]),
                    Err(Refusal::ContentType(..))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            post(&[("content-length", "5")]),
            Err(Refusal::ContentType(..))
        ));
        assert!(matches!(
            post(&[("transfer-encoding", "chunked")]),
            Err(Refusal::ContentType(..))
        ));
        // Reads are never refused for their type.
        assert_eq!(
            policy.check(
                &Method::GET,
                &headers(&[("host", "localhost"), ("content-type", "text/plain")])
            ),
            Ok(())
        );
    }
}
