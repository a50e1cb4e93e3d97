//! Validation of a registration: name format, transport fields, URLs,
//! header names, size bounds. One function serves the admin API, the CLI and
//! config files, so every front door accepts and refuses the same things.

use serde::Deserialize;
use std::collections::BTreeMap;

use crate::model::{ServerSource, Transport, TransportType};

pub const MAX_NAME_LEN: usize = 255;
pub const MAX_DESCRIPTION_LEN: usize = 1000;
pub const MAX_COMMAND_LEN: usize = 4096;
pub const MAX_ARGS: usize = 1024;
pub const MAX_ARG_LEN: usize = 32 * 1024;
pub const MAX_MAP_ENTRIES: usize = 512;
pub const MAX_URL_LEN: usize = 8192;
/// Longest wire name most MCP clients accept (Claude Desktop drops the whole
/// tool list over one longer name).
pub const CLIENT_TOOL_NAME_LIMIT: usize = 64;

/// A registration that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    pub name: String,
    pub description: Option<String>,
    pub transport: Transport,
    pub health_check_url: Option<String>,
    /// Seconds between health checks, overriding the daemon's interval.
    pub health_check_interval_secs: Option<u32>,
    pub auto_connect: bool,
    pub priority: i32,
    pub source: ServerSource,
    pub oauth: Option<crate::model::OAuthClientSettings>,
    pub trust: crate::model::TrustSettings,
}

/// Bounds of a per-server health-check interval, in seconds.
pub const HEALTH_INTERVAL_SECS: std::ops::RangeInclusive<u32> = 1..=86_400;

/// What is wrong with a registration, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ValidationError {
    /// The field, as a JSON path relative to the registration (`name`,
    /// `connection_config.args[2]`).
    pub path: String,
    pub message: String,
}

impl ValidationError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> ValidationError {
        ValidationError {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// `connection_config` of a STDIO registration, as the API receives it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StdioConfig {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<String>,
}

/// `connection_config` of an SSE registration.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SseConfig {
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// `connection_config` of an HTTP (Streamable HTTP) registration.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpConfig {
    base_url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// Reads the transport-specific `connection_config` object of the API's
/// registration contract.
pub fn parse_connection_config(
    transport_type: TransportType,
    config: serde_json::Value,
) -> Result<Transport, ValidationError> {
    fn typed<T: serde::de::DeserializeOwned>(
        transport_type: TransportType,
        config: serde_json::Value,
    ) -> Result<T, ValidationError> {
        if !config.is_object() {
            return Err(ValidationError::new(
                "connection_config",
                format!("must be an object with the {transport_type} transport's fields"),
            ));
        }
        serde_path_to_error::deserialize(config).map_err(|err| {
            let inner = err.path().to_string();
            let path = if inner == "." {
                "connection_config".to_owned()
            } else {
                format!("connection_config.{inner}")
            };
            let mut message = err.into_inner().to_string();
            if transport_type == TransportType::Http && message.contains("`url`") {
                message.push_str(" (an HTTP server takes `base_url`)");
            }
            if transport_type != TransportType::Http && message.contains("`base_url`") {
                message.push_str(&format!(" (an {transport_type} server takes `url`)"));
            }
            ValidationError::new(path, message)
        })
    }
    Ok(match transport_type {
        TransportType::Stdio => {
            let c: StdioConfig = typed(transport_type, config)?;
            Transport::Stdio {
                command: c.command,
                args: c.args,
                env: c.env,
                cwd: c.cwd,
            }
        }
        TransportType::Sse => {
            let c: SseConfig = typed(transport_type, config)?;
            Transport::Sse {
                url: c.url,
                headers: c.headers,
            }
        }
        TransportType::Http => {
            let c: HttpConfig = typed(transport_type, config)?;
            Transport::Http {
                base_url: c.base_url,
                headers: c.headers,
            }
        }
    })
}

/// Checks every registration rule and input bound on a spec (docs/rules.md,
/// Registration validation and Input bounds).
pub fn validate(spec: &ServerSpec) -> Result<(), ValidationError> {
    validate_name(&spec.name)?;
    if let Some(description) = &spec.description
        && description.chars().count() > MAX_DESCRIPTION_LEN
    {
        return Err(ValidationError::new(
            "description",
            format!("must be at most {MAX_DESCRIPTION_LEN} characters"),
        ));
    }
    if let Some(url) = &spec.health_check_url {
        validate_http_url("health_check_url", url)?;
    }
    if let Some(secs) = spec.health_check_interval_secs
        && !HEALTH_INTERVAL_SECS.contains(&secs)
    {
        return Err(ValidationError::new(
            "health_check_interval_secs",
            format!(
                "must be between {} and {} seconds, not {secs}",
                HEALTH_INTERVAL_SECS.start(),
                HEALTH_INTERVAL_SECS.end()
            ),
        ));
    }
    if let Some((field, message)) = spec.trust.limits.problem() {
        return Err(ValidationError::new(
            format!("trust.limits.{field}"),
            message,
        ));
    }
    if let Some(oauth) = &spec.oauth {
        validate_oauth(oauth, &spec.transport)?;
    }
    match &spec.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let path = "connection_config.command";
            if command.trim().is_empty() {
                return Err(ValidationError::new(path, "must not be empty"));
            }
            check_len(path, command, MAX_COMMAND_LEN)?;
            check_no_nul(path, command)?;
            if args.len() > MAX_ARGS {
                return Err(ValidationError::new(
                    "connection_config.args",
                    format!("at most {MAX_ARGS} arguments"),
                ));
            }
            for (i, arg) in args.iter().enumerate() {
                let path = format!("connection_config.args[{i}]");
                check_len(&path, arg, MAX_ARG_LEN)?;
                check_no_nul(&path, arg)?;
            }
            check_map_size("connection_config.env", env)?;
            for (key, value) in env {
                let path = format!("connection_config.env.{key}");
                if key.is_empty() || key.contains('=') || key.contains('\0') {
                    return Err(ValidationError::new(
                        path,
                        "environment variable names must be non-empty and contain no '=' or NUL",
                    ));
                }
                check_len(&path, value, MAX_ARG_LEN)?;
                check_no_nul(&path, value)?;
            }
            if let Some(cwd) = cwd {
                let path = "connection_config.cwd";
                check_no_nul(path, cwd)?;
                if !std::path::Path::new(cwd).is_absolute() {
                    return Err(ValidationError::new(path, "must be an absolute path"));
                }
            }
        }
        Transport::Sse { url, headers } => {
            validate_http_url("connection_config.url", url)?;
            validate_headers(headers)?;
        }
        Transport::Http { base_url, headers } => {
            validate_http_url("connection_config.base_url", base_url)?;
            validate_headers(headers)?;
        }
    }
    Ok(())
}

/// `^[a-z][a-z0-9_-]*$`, at most 255 characters.
pub fn validate_name(name: &str) -> Result<(), ValidationError> {
    let fail = |message: &str| Err(ValidationError::new("name", message));
    if name.is_empty() {
        return fail("is required and must not be empty");
    }
    if name.len() > MAX_NAME_LEN {
        return fail("must be at most 255 characters");
    }
    let mut chars = name.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_lowercase()) {
        return fail("must start with a lowercase letter (a-z); format ^[a-z][a-z0-9_-]*$");
    }
    if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-') {
        return fail("may contain only a-z, 0-9, '_' and '-'; format ^[a-z][a-z0-9_-]*$");
    }
    Ok(())
}

/// Turns a config-file key such as `GitHub` or `my.server` into a valid
/// name (`github`, `my-server`), or `None` when nothing usable is left.
pub fn normalize_name(key: &str) -> Option<String> {
    let mapped: String = key
        .trim()
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '_' | '-') => c,
            _ => '-',
        })
        .collect();
    let trimmed = mapped.trim_start_matches(|c: char| !c.is_ascii_lowercase());
    let trimmed = trimmed.trim_end_matches('-');
    let name: String = trimmed.chars().take(MAX_NAME_LEN).collect();
    validate_name(&name).is_ok().then_some(name)
}

fn validate_http_url(path: &str, raw: &str) -> Result<(), ValidationError> {
    check_len(path, raw, MAX_URL_LEN)?;
    let url = url::Url::parse(raw).map_err(|err| {
        ValidationError::new(path, format!("is not a valid URL ({err}): {raw:?}"))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ValidationError::new(
            path,
            format!(
                "must be an http:// or https:// URL, not {}://",
                url.scheme()
            ),
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ValidationError::new(path, "must name a host"));
    }
    Ok(())
}

fn validate_headers(headers: &BTreeMap<String, String>) -> Result<(), ValidationError> {
    check_map_size("connection_config.headers", headers)?;
    for (name, value) in headers {
        let path = format!("connection_config.headers.{name}");
        if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(ValidationError::new(
                path,
                "is not a valid HTTP header name",
            ));
        }
        if axum::http::HeaderValue::from_str(value).is_err() {
            return Err(ValidationError::new(
                path,
                "is not a valid HTTP header value (no control characters or newlines)",
            ));
        }
    }
    Ok(())
}

fn check_map_size(path: &str, map: &BTreeMap<String, String>) -> Result<(), ValidationError> {
    if map.len() > MAX_MAP_ENTRIES {
        return Err(ValidationError::new(
            path,
            format!("at most {MAX_MAP_ENTRIES} entries"),
        ));
    }
    Ok(())
}

/// A server's OAuth client settings: for an HTTP server, bounded, a
/// secret only with an id, a metadata document only at an HTTPS URL.
fn validate_oauth(
    oauth: &crate::model::OAuthClientSettings,
    transport: &Transport,
) -> Result<(), ValidationError> {
    if !matches!(transport, Transport::Http { .. }) {
        return Err(ValidationError::new(
            "oauth",
            "a login (OAuth) is for HTTP servers only",
        ));
    }
    for (path, value) in [
        ("oauth.client_id", &oauth.client_id),
        ("oauth.client_secret", &oauth.client_secret),
        ("oauth.issuer", &oauth.issuer),
        ("oauth.client_metadata_url", &oauth.client_metadata_url),
    ] {
        if let Some(value) = value {
            if value.is_empty() {
                return Err(ValidationError::new(path, "must not be empty"));
            }
            check_len(path, value, MAX_URL_LEN)?;
            check_no_nul(path, value)?;
        }
    }
    if oauth.client_secret.is_some() && oauth.client_id.is_none() {
        return Err(ValidationError::new(
            "oauth.client_secret",
            "a client secret needs its client_id",
        ));
    }
    if let Some(issuer) = &oauth.issuer {
        if oauth.client_id.is_none() {
            return Err(ValidationError::new(
                "oauth.issuer",
                "names the authorization server of a pre-registered client: it needs its client_id",
            ));
        }
        if !matches!(url::Url::parse(issuer), Ok(u) if matches!(u.scheme(), "https" | "http")) {
            return Err(ValidationError::new(
                "oauth.issuer",
                "must be the authorization server's issuer, an https:// URL",
            ));
        }
    }
    if let Some(url) = &oauth.client_metadata_url
        && !url.starts_with("https://")
    {
        return Err(ValidationError::new(
            "oauth.client_metadata_url",
            "must be an https:// URL (authorization servers fetch it)",
        ));
    }
    if let Some(scopes) = &oauth.scopes {
        if scopes.len() > MAX_ARGS {
            return Err(ValidationError::new(
                "oauth.scopes",
                format!("at most {MAX_ARGS} scopes"),
            ));
        }
        for (i, scope) in scopes.iter().enumerate() {
            let path = format!("oauth.scopes[{i}]");
            if scope.is_empty() || scope.contains([' ', '"', '\\']) {
                return Err(ValidationError::new(
                    path,
                    "a scope is one non-empty word without quotes",
                ));
            }
            check_len(&path, scope, MAX_ARG_LEN)?;
        }
    }
    Ok(())
}

fn check_len(path: &str, value: &str, max: usize) -> Result<(), ValidationError> {
    if value.len() > max {
        return Err(ValidationError::new(
            path,
            format!("must be at most {max} bytes"),
        ));
    }
    Ok(())
}

fn check_no_nul(path: &str, value: &str) -> Result<(), ValidationError> {
    if value.contains('\0') {
        return Err(ValidationError::new(
            path,
            "must not contain NUL characters",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(transport: Transport) -> ServerSpec {
        ServerSpec {
            name: "ok".into(),
            description: None,
            transport,
            health_check_url: None,
            health_check_interval_secs: None,
            auto_connect: true,
            priority: 0,
            source: ServerSource::Api,
            oauth: None,
            trust: Default::default(),
        }
    }

    fn stdio() -> Transport {
        Transport::Stdio {
            command: "npx".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        }
    }

    #[test]
    fn names_follow_the_specified_pattern() {
        for good in ["a", "github-mcp", "my_server2", "x-1_2"] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        assert!(validate_name(&"a".repeat(255)).is_ok());
        for bad in [
            "", "GitHub", "1abc", "-a", "_a", "a.b", "a b", "ünï", "a/b", "aB",
        ] {
            let err = validate_name(bad).unwrap_err();
            assert_eq!(err.path, "name", "{bad}");
        }
        assert!(
            validate_name(&"a".repeat(256))
                .unwrap_err()
                .message
                .contains("255")
        );
    }

    #[test]
    fn config_keys_are_normalised_into_names() {
        assert_eq!(normalize_name("GitHub").as_deref(), Some("github"));
        assert_eq!(normalize_name("my.server").as_deref(), Some("my-server"));
        assert_eq!(normalize_name("123abc").as_deref(), Some("abc"));
        assert_eq!(
            normalize_name("Brave Search!").as_deref(),
            Some("brave-search")
        );
        assert_eq!(normalize_name("---"), None);
        assert_eq!(normalize_name("日本"), None);
    }

    #[test]
    fn connection_config_is_read_per_transport_with_paths() {
        let t =
            parse_connection_config(TransportType::Stdio, json!({"command": "x", "args": ["a"]}))
                .unwrap();
        assert!(matches!(t, Transport::Stdio { ref args, .. } if args == &["a"]));

        let err = parse_connection_config(TransportType::Stdio, json!({"args": []})).unwrap_err();
        assert_eq!(err.path, "connection_config");
        assert!(err.message.contains("missing field `command`"), "{err}");

        let err = parse_connection_config(
            TransportType::Stdio,
            json!({"command": "x", "args": ["a", 5]}),
        )
        .unwrap_err();
        assert_eq!(err.path, "connection_config.args[1]");

        let err =
            parse_connection_config(TransportType::Http, json!({"url": "http://h"})).unwrap_err();
        assert!(err.message.contains("base_url"), "{err}");

        let err =
            parse_connection_config(TransportType::Sse, json!({"url": "http://h", "extra": 1}))
                .unwrap_err();
        assert!(err.message.contains("unknown field `extra`"), "{err}");

        let err = parse_connection_config(TransportType::Sse, json!("http://h")).unwrap_err();
        assert_eq!(err.path, "connection_config");
    }

    #[test]
    fn urls_must_be_http_with_a_host() {
        let sse = |url: &str| {
            spec(Transport::Sse {
                url: url.into(),
                headers: BTreeMap::new(),
            })
        };
        assert!(validate(&sse("https://example.com/sse")).is_ok());
        assert!(validate(&sse("http://127.0.0.1:3001/sse")).is_ok());
        for bad in [
            "example.com/sse",
            "ftp://example.com",
            "not a url",
            "http://",
        ] {
            let err = validate(&sse(bad)).unwrap_err();
            assert_eq!(err.path, "connection_config.url", "{bad}");
        }
        let mut with_health = spec(stdio());
        with_health.health_check_url = Some("mailto:x@y".into());
        assert_eq!(validate(&with_health).unwrap_err().path, "health_check_url");
    }

    #[test]
    fn headers_env_and_bounds_are_checked() {
        let http = |name: &str, value: &str| {
            spec(Transport::Http {
                base_url: "http://h/mcp".into(),
                headers: BTreeMap::from([(name.to_owned(), value.to_owned())]),
            })
        };
        assert!(validate(&http("Authorization", "Bearer x")).is_ok());
        assert!(validate(&http("Bad Header", "x")).is_err());
        assert!(validate(&http("X-Ok", "line\nbreak")).is_err());

        let mut s = spec(Transport::Stdio {
            command: "x".into(),
            args: vec![],
            env: BTreeMap::from([("A=B".to_owned(), "v".to_owned())]),
            cwd: None,
        });
        assert_eq!(validate(&s).unwrap_err().path, "connection_config.env.A=B");
        s.transport = Transport::Stdio {
            command: "  ".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        };
        assert_eq!(validate(&s).unwrap_err().path, "connection_config.command");
        s.transport = Transport::Stdio {
            command: "x".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: Some("relative/dir".into()),
        };
        assert_eq!(validate(&s).unwrap_err().path, "connection_config.cwd");

        let mut long = spec(stdio());
        long.description = Some("d".repeat(1001));
        assert_eq!(validate(&long).unwrap_err().path, "description");
        long.description = Some("é".repeat(1000));
        assert!(
            validate(&long).is_ok(),
            "the limit counts characters, not bytes"
        );
    }
}
