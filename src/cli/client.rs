//! The CLI's HTTP client for a running daemon's admin API. redb lets only
//! one process open the store, so administration goes through the daemon.
//! Also where a command finds that daemon (`connect`) and how it writes the
//! API's paths (`SERVERS_PATH`, `encode_segment`): every command file shares
//! them, so they sit below all of them.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

use super::admin_args::ClientArgs;
use crate::api::extract::ACTOR_HEADER;
use crate::daemon::{DEFAULT_LISTEN, LISTEN_ENV};
use crate::paths::{self, DaemonInfo};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no mcp-aggregator daemon is answering at {url} ({reason}).\nStart one with `mcp-aggregator serve`, or point --url (MCP_AGGREGATOR_URL) at a running one."
    )]
    Unreachable { url: String, reason: String },
    #[error(
        "the daemon at {url} did not answer within {} s (it is running, but busy or stuck)", after.as_secs()
    )]
    TimedOut { url: String, after: Duration },
    #[error("{detail}")]
    Api { status: StatusCode, detail: String },
    #[error("unexpected answer from {url}: {reason}")]
    Protocol { url: String, reason: String },
    #[error(
        "no mcp-aggregator daemon runs on the data dir {} (it has no daemon file of a running daemon).\nStart one with `mcp-aggregator serve --data-dir {}`, or point --url (MCP_AGGREGATOR_URL) at a running one.",
        data_dir.display(), data_dir.display()
    )]
    NoDaemonOn { data_dir: PathBuf },
}

impl ClientError {
    /// 2 for a refused request (bad input, unknown name), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Api { status, .. } if status.is_client_error() => 2,
            _ => 1,
        }
    }
}

/// A client of one daemon.
/// How long the CLI waits for an ordinary answer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long it waits for a tool call: longer than any request timeout the
/// daemon applies (`--request-timeout`), so a slow server is reported by
/// the daemon, by name, and not as a silent CLI timeout.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(3600);

pub struct AdminClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    actor: String,
    /// The data dir the user named has no daemon: every request is
    /// refused, rather than sent to whatever answers at a default address
    /// (another data dir's daemon, whose servers the command would change).
    no_daemon_on: Option<PathBuf>,
}

impl AdminClient {
    pub fn new(base: &str, token: Option<String>) -> AdminClient {
        let http = crate::http_client::client(Duration::from_secs(5));
        let user = std::env::var("USER").unwrap_or_else(|_| "unknown".to_owned());
        AdminClient {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token,
            actor: format!("cli:{user}"),
            no_daemon_on: None,
        }
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.send(Method::GET, path, None).await
    }

    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<T, ClientError> {
        self.send(Method::POST, path, Some(body)).await
    }

    /// A POST that may take as long as the daemon lets it (a tool call).
    pub async fn post_long<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<T, ClientError> {
        self.send_within(Method::POST, path, Some(body), CALL_TIMEOUT)
            .await
    }

    pub async fn put<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<T, ClientError> {
        self.send(Method::PUT, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Result<(), ClientError> {
        self.send::<Value>(Method::DELETE, path, None)
            .await
            .map(|_| ())
    }

    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, ClientError> {
        self.send_within(method, path, body, ANSWER_TIMEOUT).await
    }

    async fn send_within<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<T, ClientError> {
        if let Some(data_dir) = &self.no_daemon_on {
            return Err(ClientError::NoDaemonOn {
                data_dir: data_dir.clone(),
            });
        }
        let url = format!("{}{path}", self.base);
        let mut request = self
            .http
            .request(method, &url)
            .timeout(timeout)
            .header(ACTOR_HEADER, &self.actor);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|err| {
            if err.is_timeout() {
                ClientError::TimedOut {
                    url: self.base.clone(),
                    after: timeout,
                }
            } else {
                ClientError::Unreachable {
                    url: self.base.clone(),
                    reason: crate::http_client::root_cause(&err),
                }
            }
        })?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|err| ClientError::Protocol {
                url: url.clone(),
                reason: err.to_string(),
            })?;
        if !status.is_success() {
            let detail = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v.get("detail").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| format!("{status}: {}", String::from_utf8_lossy(&bytes)));
            // It may quote what a server said: shown, never acted on by
            // the terminal.
            let detail = crate::model::printable::printable(&detail);
            return Err(ClientError::Api { status, detail });
        }
        let bytes = if bytes.is_empty() {
            &b"null"[..]
        } else {
            &bytes[..]
        };
        serde_json::from_slice(bytes).map_err(|err| ClientError::Protocol {
            url,
            reason: err.to_string(),
        })
    }
}

/// The admin API's servers collection (the commands add a name or id).
pub(super) const SERVERS_PATH: &str = "/api/v1/aggregator/servers";

/// The client a command uses: `--url` and `--token`, else the daemon of
/// the data dir, else `MCP_AGGREGATOR_LISTEN`, else the default address.
/// A data dir named (`--data-dir`, `MCP_AGGREGATOR_DATA_DIR`) without a
/// running daemon has no fallback: what answers elsewhere is another
/// data dir's daemon.
pub(super) fn connect(args: &ClientArgs) -> AdminClient {
    let data_dir = paths::resolve_data_dir(args.data_dir.data_dir.as_deref());
    let owner = data_dir
        .as_deref()
        .and_then(DaemonInfo::read)
        .map(|info| info.url);
    let owner_missing = owner.is_none();
    // The data dir's token goes only where it was asked for (`--url`) or
    // to the daemon that wrote it: whatever else listens on a fallback
    // address (another user's process, once ours stopped) never gets it.
    let data_dir_token = (args.url.is_some() || owner.is_some())
        .then(|| data_dir.as_deref().and_then(paths::read_token))
        .flatten();
    let url = args
        .url
        .clone()
        .or(owner)
        .or_else(|| {
            std::env::var(LISTEN_ENV)
                .ok()
                .map(|addr| format!("http://{addr}"))
        })
        .unwrap_or_else(|| format!("http://{DEFAULT_LISTEN}"));
    let token = args.token.clone().or(data_dir_token);
    let mut client = AdminClient::new(&url, token);
    if args.url.is_none() && owner_missing {
        client.no_daemon_on = args.data_dir.data_dir.clone();
    }
    client
}

/// What a path segment or query value keeps as it is: ASCII letters and
/// digits and `*-._` (form encoding's unreserved set); every other byte
/// is written `%XX`, a space included.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'*')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_');

/// Percent-encodes a path segment or query value.
pub(super) fn encode_segment(raw: &str) -> String {
    utf8_percent_encode(raw, SEGMENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_is_encoded_as_form_encoding_with_spaces_as_percent_20() {
        // What encode_segment wrote before it used percent-encoding.
        let form = |raw: &str| {
            url::form_urlencoded::byte_serialize(raw.as_bytes())
                .collect::<String>()
                .replace('+', "%20")
        };
        for raw in [
            "",
            "plain-name_1.2*",
            "a b",
            "a/b",
            "100%",
            "what?",
            "#frag",
            "a+b",
            "k=v&x=y",
            "~tilde'quote\"dq",
            "ümlaut café",
            "日本語",
            "emoji 🦀",
            "tab\tnew\nline\u{0}",
            "%20 already",
            "[]{}|^`<>@!$()',;:",
        ] {
            assert_eq!(encode_segment(raw), form(raw), "{raw:?}");
        }
        assert_eq!(encode_segment("a b/c%?#ü"), "a%20b%2Fc%25%3F%23%C3%BC");
    }
}
