//! Outgoing HTTP: how the process builds every client it sends requests
//! with (rustls with the `ring` provider, installed once; redirects
//! followed only within the origin a request was addressed to), and the
//! bounded body read every caller shares. A configured header, a token or
//! a body never leaves the origin it was configured for: a redirect to
//! another origin is an error naming the target, not a hop.

use bytes::Bytes;
use std::time::Duration;

/// Redirects followed at most within one origin.
const MAX_REDIRECTS: usize = 10;

/// Installs the process-wide crypto provider; safe to call many times.
pub fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// How long an idle pooled connection is kept. Below Node's default
/// keep-alive timeout (5 s): a connection the server is about to close is
/// never reused, so a request does not race the server's FIN and fail with
/// "connection closed before message completed" (seen against the
/// reference servers on a busy machine).
const POOL_IDLE: Duration = Duration::from_secs(4);

/// A client builder with the process's TLS set-up, the same-origin
/// redirect rule and the pool's idle bound; callers add their timeouts.
pub fn builder() -> reqwest::ClientBuilder {
    init();
    reqwest::Client::builder()
        .redirect(same_origin_redirects())
        .pool_idle_timeout(POOL_IDLE)
}

/// A client that gives up connecting after `connect_timeout`. Only a
/// broken TLS set-up makes building fail; the fallback then follows no
/// redirect at all (never reqwest's default, which follows any).
pub fn client(connect_timeout: Duration) -> reqwest::Client {
    match builder().connect_timeout(connect_timeout).build() {
        Ok(client) => client,
        Err(err) => {
            tracing::error!("cannot build an HTTP client: {err}");
            let fallback = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(connect_timeout)
                .build();
            match fallback {
                Ok(client) => client,
                // Not reached: the same builder without our policy failed
                // too, and nothing else is left to try.
                Err(_) => reqwest::Client::new(),
            }
        }
    }
}

/// Follows a redirect only to the origin (scheme, host, port) the request
/// was first sent to: reqwest alone drops `Authorization` on another host
/// but keeps every other header (`X-Api-Key`, `Private-Token`) and re-sends
/// a 307's body.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let Some(first) = attempt.previous().first() else {
            return attempt.follow();
        };
        if first.origin() != attempt.url().origin() {
            let error = CrossOriginRedirect {
                from: first.origin().ascii_serialization(),
                to: shown(attempt.url()),
            };
            return attempt.error(error);
        }
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        attempt.follow()
    })
}

/// A redirect that was not followed because it leads to another origin.
#[derive(Debug, thiserror::Error)]
#[error(
    "redirected to {to}, another origin than {from}; not followed (headers and bodies never leave their origin)"
)]
pub struct CrossOriginRedirect {
    pub from: String,
    pub to: String,
}

/// Whether two URLs share an origin (scheme, host and port).
pub fn same_origin(a: &url::Url, b: &url::Url) -> bool {
    a.origin() == b.origin()
}

/// A URL as it may be shown: origin and path, without userinfo, query or
/// fragment (a hostile target may carry anything there).
pub fn shown(url: &url::Url) -> String {
    format!("{}{}", url.origin().ascii_serialization(), url.path())
}

/// Reads a response body of at most `max` bytes; a longer one is an error
/// as soon as it passes the limit (never held whole).
pub async fn bounded_body(mut response: reqwest::Response, max: usize) -> Result<Bytes, String> {
    if response
        .content_length()
        .is_some_and(|len| len > max as u64)
    {
        return Err(format!("the body is larger than the {max} byte limit"));
    }
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(|err| root_cause(&err))? {
        if body.len() + chunk.len() > max {
            return Err(format!("the body is larger than the {max} byte limit"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The innermost cause of an error: what reqwest wraps in "error sending
/// request" is the part worth showing.
pub fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
