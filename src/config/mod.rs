//! Config files: the Claude Desktop `mcpServers` format and the extensions
//! other clients use (VS Code's `servers`, `type`, `url`, `headers`,
//! `disabled`), with environment-variable expansion. Produces validated
//! registrations; errors say what is wrong and where.

pub mod expand;

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::model::{Profile, ServerSource, Transport};
use crate::registry::validate::{self, ServerSpec};
use expand::ExpandError;

/// Config files larger than this are refused (they are hand-written JSON).
pub const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;

/// Configuration errors (docs/rules.md, Config file errors); each names the
/// problem and where it is.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("Config file not found: {path}")]
    FileNotFound { path: PathBuf },
    #[error("Cannot read config file {path}: {message}")]
    Unreadable { path: PathBuf, message: String },
    #[error("Invalid JSON in {path} at line {line}, column {column}: {message}")]
    InvalidJson {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("Invalid config in {path} at {location}: {message}")]
    InvalidSchema {
        path: PathBuf,
        location: String,
        message: String,
    },
    #[error("Missing environment variable: {variable} (used at {location} in {path})")]
    MissingEnvVar {
        path: PathBuf,
        variable: String,
        location: String,
    },
}

impl ConfigError {
    /// The error's kind as a stable code (`file_not_found`, `invalid_json`,
    /// `invalid_schema`, `missing_env_var`).
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::FileNotFound { .. } => "file_not_found",
            ConfigError::Unreadable { .. } => "file_not_found",
            ConfigError::InvalidJson { .. } => "invalid_json",
            ConfigError::InvalidSchema { .. } => "invalid_schema",
            ConfigError::MissingEnvVar { .. } => "missing_env_var",
        }
    }
}

/// The servers a config file declares, ready for the registry.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedConfig {
    pub servers: Vec<ServerSpec>,
    /// Its `profiles` (views), checked; their `source` is set by whoever
    /// applies the file.
    pub profiles: Vec<Profile>,
    /// Things worth telling the user that are not errors (ignored keys,
    /// renamed servers, inferred transports).
    pub warnings: Vec<String>,
}

/// Reads, expands and validates a config file using the process environment.
pub fn load(path: &Path) -> Result<LoadedConfig, ConfigError> {
    load_with_env(path, &|name| std::env::var(name).ok())
}

/// The path servers from `path` record as their source: absolute, its
/// folder canonical, so the same file is recognised however it is named
/// on the command line. The file's own name is kept as given: a config
/// that is a symlink (a dotfile manager's, `ln -sfn` to a new generation)
/// is the link, and re-pointing it removes what the new target dropped.
pub fn source_path(path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let canonical = match (absolute.parent(), absolute.file_name()) {
        (Some(folder), Some(name)) => std::fs::canonicalize(folder)
            .map(|folder| folder.join(name))
            .unwrap_or_else(|_| absolute.clone()),
        _ => absolute,
    };
    canonical.display().to_string()
}

/// As `load`, with an explicit variable lookup (for tests and the CLI).
pub fn load_with_env(
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<LoadedConfig, ConfigError> {
    let text = read(path)?;
    parse(&text, path, lookup)
}

fn read(path: &Path) -> Result<String, ConfigError> {
    let unreadable = |message: String| ConfigError::Unreadable {
        path: path.to_path_buf(),
        message,
    };
    let metadata = std::fs::metadata(path).map_err(|err| match err.kind() {
        std::io::ErrorKind::NotFound => ConfigError::FileNotFound {
            path: path.to_path_buf(),
        },
        _ => unreadable(err.to_string()),
    })?;
    if metadata.is_dir() {
        return Err(unreadable("it is a directory".into()));
    }
    if metadata.len() > MAX_CONFIG_BYTES {
        return Err(unreadable(format!("larger than {MAX_CONFIG_BYTES} bytes")));
    }
    // Bounded as it is read too: a device or a pipe (`/dev/zero`,
    // `<(…)`) has no length to check first.
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|err| unreadable(err.to_string()))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(unreadable(format!("larger than {MAX_CONFIG_BYTES} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|_| unreadable("it is not UTF-8 text".into()))?;
    // Some editors on Windows start a file with a byte-order mark.
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    })
}

/// Parses config text; `path` is used for messages and to resolve relative
/// `cwd` values.
pub fn parse(
    text: &str,
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<LoadedConfig, ConfigError> {
    let root: Value = serde_json::from_str(text).map_err(|err| ConfigError::InvalidJson {
        path: path.to_path_buf(),
        line: err.line(),
        column: err.column(),
        message: json_error_message(&err),
    })?;
    let mut parser = Parser {
        file: path,
        lookup,
        warnings: Vec::new(),
    };
    let servers = parser.root(&root)?;
    let profiles = parser.profiles(&root)?;
    Ok(LoadedConfig {
        servers,
        profiles,
        warnings: parser.warnings,
    })
}

/// Whether a server entry launches mcp-aggregator: a client's file lists
/// the aggregator beside the servers it used to have, and registering
/// that entry would have the aggregator start itself, again and again.
/// Wrappers count too (`sh -c "mcp-aggregator stdio"`, `env
/// mcp-aggregator`, `npx mcp-aggregator`): any word of the command or its
/// arguments that names the binary.
pub fn launches_aggregator(entry: &Value) -> bool {
    let Some(command) = entry.get("command").and_then(Value::as_str) else {
        return false;
    };
    let args = entry
        .get("args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str);
    std::iter::once(command)
        .chain(args)
        .flat_map(|text| {
            text.split(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '\'' | '"'))
        })
        .any(names_aggregator)
}

/// `mcp-aggregator`, `/usr/bin/mcp-aggregator`, `C:\\…\\mcp-aggregator.exe`.
fn names_aggregator(word: &str) -> bool {
    // Split by hand: a Windows path's `\` is not a separator to `Path` here.
    let file = word.rsplit(['/', '\\']).next().unwrap_or(word);
    let stem = file.strip_suffix(".exe").unwrap_or(file);
    stem.eq_ignore_ascii_case("mcp-aggregator")
}

/// A `profiles` entry as written (its name is its key).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileEntry {
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    servers: Option<Vec<String>>,
    #[serde(default)]
    tools: Option<Vec<String>>,
    #[serde(default, alias = "excludeTools")]
    exclude_tools: Vec<String>,
    #[serde(default)]
    skills: Option<Vec<String>>,
}

/// serde_json appends " at line X column Y"; we say that ourselves.
fn json_error_message(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(pos) => text[..pos].to_owned(),
        None => text,
    }
}

const KNOWN_KEYS: &[&str] = &[
    "type",
    "transport",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "disabled",
    "description",
    "priority",
    "health_check_url",
    "healthCheckUrl",
    "health_check_interval",
    "healthCheckInterval",
    "auto_connect",
    "autoConnect",
    "oauth",
    "trust",
];

struct Parser<'a> {
    file: &'a Path,
    lookup: &'a dyn Fn(&str) -> Option<String>,
    warnings: Vec<String>,
}

impl Parser<'_> {
    fn schema(&self, location: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::InvalidSchema {
            path: self.file.to_path_buf(),
            location: location.into(),
            message: message.into(),
        }
    }

    fn root(&mut self, root: &Value) -> Result<Vec<ServerSpec>, ConfigError> {
        let Some(root) = root.as_object() else {
            return Err(self.schema(
                "$",
                format!("the config must be a JSON object, not {}", kind(root)),
            ));
        };
        let sections: Vec<&str> = ["mcpServers", "servers"]
            .into_iter()
            .filter(|key| root.contains_key(*key))
            .collect();
        if sections.is_empty() {
            return Err(self.schema(
                "$.mcpServers",
                "missing required field: mcpServers (Claude Desktop format) or servers (VS Code format)",
            ));
        }
        let mut specs = Vec::new();
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for section in sections {
            let location = format!("$.{section}");
            let Some(entries) = root[section].as_object() else {
                return Err(self.schema(
                    location,
                    format!("{section} must be an object, not {}", kind(&root[section])),
                ));
            };
            for (key, value) in entries {
                let location = format!("{location}{}", key_path(key));
                if launches_aggregator(value) {
                    self.warnings.push(format!(
                        "{location} starts mcp-aggregator itself and was skipped (a client's own entry for the aggregator)"
                    ));
                    continue;
                }
                let spec = self.server(key, value, &location)?;
                if let Some(previous) = seen.insert(spec.name.clone(), location.clone()) {
                    return Err(self.schema(
                        location,
                        format!("server name {:?} is already used by {previous}", spec.name),
                    ));
                }
                specs.push(spec);
            }
        }
        Ok(specs)
    }

    /// The root's `profiles`: name -> what the view admits.
    fn profiles(&mut self, root: &Value) -> Result<Vec<Profile>, ConfigError> {
        let Some(section) = root.get("profiles") else {
            return Ok(Vec::new());
        };
        let Some(entries) = section.as_object() else {
            return Err(self.schema(
                "$.profiles",
                format!("profiles must be an object, not {}", kind(section)),
            ));
        };
        let mut profiles = Vec::with_capacity(entries.len());
        for (name, value) in entries {
            let location = format!("$.profiles{}", key_path(name));
            let entry: ProfileEntry = serde_path_to_error::deserialize(value).map_err(|err| {
                let inner = err.path().to_string();
                let at = if inner == "." {
                    location.clone()
                } else {
                    format!("{location}.{inner}")
                };
                self.schema(at, err.into_inner().to_string())
            })?;
            let profile = Profile {
                name: name.clone(),
                description: entry.description,
                servers: entry.servers,
                tools: entry.tools,
                exclude_tools: entry.exclude_tools,
                skills: entry.skills,
                source: None,
                updated_at: chrono::Utc::now(),
            };
            profile.validate().map_err(|err| {
                let at = match err.field.as_str() {
                    "name" => location.clone(),
                    field => format!("{location}.{field}"),
                };
                self.schema(at, format!("{} {}", err.field, err.message))
            })?;
            profiles.push(profile);
        }
        Ok(profiles)
    }

    fn server(
        &mut self,
        key: &str,
        value: &Value,
        location: &str,
    ) -> Result<ServerSpec, ConfigError> {
        let Some(obj) = value.as_object() else {
            return Err(self.schema(
                location,
                format!("server config must be an object, not {}", kind(value)),
            ));
        };
        let name = match validate::validate_name(key) {
            Ok(()) => key.to_owned(),
            Err(_) => {
                let name = validate::normalize_name(key).ok_or_else(|| {
                    self.schema(
                        location,
                        format!("server key {key:?} cannot be turned into a name of the form ^[a-z][a-z0-9_-]*$"),
                    )
                })?;
                self.warnings.push(format!(
                    "server {key:?} is registered as {name:?} (names are ^[a-z][a-z0-9_-]*$)"
                ));
                name
            }
        };
        let unknown: BTreeSet<&str> = obj
            .keys()
            .map(String::as_str)
            .filter(|k| !KNOWN_KEYS.contains(k))
            .collect();
        for field in unknown {
            self.warnings.push(format!(
                "{location}.{field} is not used by mcp-aggregator and was ignored"
            ));
        }

        let command = self.opt_string(obj, "command", location)?;
        let url = self.opt_string(obj, "url", location)?;
        let declared = match (
            self.opt_string(obj, "type", location)?,
            self.opt_string(obj, "transport", location)?,
        ) {
            (Some(t), _) => Some(("type", t)),
            (None, Some(t)) => Some(("transport", t)),
            (None, None) => None,
        };
        let transport_kind = match declared {
            Some((field, declared)) => match declared.to_ascii_lowercase().as_str() {
                "stdio" => TransportKind::Stdio,
                "sse" => TransportKind::Sse,
                "http" | "streamable-http" | "streamablehttp" | "streamable_http" => {
                    TransportKind::Http
                }
                _ => {
                    return Err(self.schema(
                        format!("{location}.{field}"),
                        format!("unknown transport {declared:?}; expected stdio, sse, http or streamable-http"),
                    ));
                }
            },
            None => match (&command, &url) {
                (Some(_), None) => TransportKind::Stdio,
                (None, Some(url)) => {
                    // Without a `type`, a URL ending in /sse is almost always
                    // the legacy transport; everything else is Streamable HTTP.
                    let sse = url.trim_end_matches('/').ends_with("/sse");
                    let kind = if sse {
                        TransportKind::Sse
                    } else {
                        TransportKind::Http
                    };
                    self.warnings.push(format!(
                        "{location} has no \"type\"; using {} for its url",
                        if sse { "sse" } else { "http (Streamable HTTP)" }
                    ));
                    kind
                }
                (Some(_), Some(_)) => {
                    return Err(self.schema(
                        location,
                        "has both command and url; add \"type\" to say which transport to use",
                    ));
                }
                (None, None) => {
                    return Err(self.schema(
                        format!("{location}.command"),
                        "missing required field: command (or url)",
                    ));
                }
            },
        };

        let transport = match transport_kind {
            TransportKind::Stdio => {
                let Some(command) = command else {
                    return Err(self.schema(
                        format!("{location}.command"),
                        "missing or invalid command: a stdio server needs a command",
                    ));
                };
                let args = self.string_array(obj, "args", location)?;
                let env = self.string_map(obj, "env", location)?;
                let cwd = match self.opt_string(obj, "cwd", location)? {
                    Some(cwd) => {
                        let cwd = self.expand(&cwd, &format!("{location}.cwd"))?;
                        Some(self.resolve_cwd(&cwd))
                    }
                    None => None,
                };
                Transport::Stdio {
                    command: self.expand(&command, &format!("{location}.command"))?,
                    args: args
                        .iter()
                        .enumerate()
                        .map(|(i, a)| self.expand(a, &format!("{location}.args[{i}]")))
                        .collect::<Result<_, _>>()?,
                    env: self.expand_map(env, &format!("{location}.env"))?,
                    cwd,
                }
            }
            TransportKind::Sse | TransportKind::Http => {
                let Some(url) = url else {
                    return Err(
                        self.schema(format!("{location}.url"), "missing required field: url")
                    );
                };
                let url = self.expand(&url, &format!("{location}.url"))?;
                let headers = self.string_map(obj, "headers", location)?;
                let headers = self.expand_map(headers, &format!("{location}.headers"))?;
                if transport_kind == TransportKind::Sse {
                    Transport::Sse { url, headers }
                } else {
                    Transport::Http {
                        base_url: url,
                        headers,
                    }
                }
            }
        };

        let disabled = self.opt_bool(obj, "disabled", location)?.unwrap_or(false);
        let auto_connect = match self.opt_bool(obj, "auto_connect", location)? {
            Some(v) => Some(v),
            None => self.opt_bool(obj, "autoConnect", location)?,
        };
        let health_check_url = match self.opt_string(obj, "health_check_url", location)? {
            Some(v) => Some(v),
            None => self.opt_string(obj, "healthCheckUrl", location)?,
        };
        let interval_key = if obj.contains_key("healthCheckInterval") {
            "healthCheckInterval"
        } else {
            "health_check_interval"
        };
        let health_check_interval_secs =
            match obj.get(interval_key) {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().and_then(|s| u32::try_from(s).ok()).ok_or_else(
                    || {
                        self.schema(
                            format!("{location}.{interval_key}"),
                            format!(
                                "{interval_key} must be a whole number of seconds, not {}",
                                kind(v)
                            ),
                        )
                    },
                )?),
            };
        let priority = match obj.get("priority") {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_i64()
                .and_then(|p| i32::try_from(p).ok())
                .ok_or_else(|| {
                    self.schema(
                        format!("{location}.priority"),
                        format!("priority must be an integer, not {}", kind(v)),
                    )
                })?,
        };
        let spec = ServerSpec {
            name,
            description: self.opt_string(obj, "description", location)?,
            transport,
            health_check_url,
            health_check_interval_secs,
            auto_connect: !disabled && auto_connect.unwrap_or(true),
            priority,
            source: ServerSource::ConfigFile {
                path: source_path(self.file),
            },
            oauth: self.oauth_settings(obj, location)?,
            trust: self.trust_settings(obj, location)?,
        };
        validate::validate(&spec).map_err(|err| {
            let field = err
                .path
                .strip_prefix("connection_config.")
                .unwrap_or(&err.path)
                .replace("base_url", "url");
            let at = if field == "name" {
                location.to_owned()
            } else {
                format!("{location}.{field}")
            };
            self.schema(at, err.message)
        })?;
        Ok(spec)
    }

    fn resolve_cwd(&self, cwd: &str) -> String {
        let path = Path::new(cwd);
        if path.is_absolute() {
            return cwd.to_owned();
        }
        let base = self
            .file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let joined = base.join(path);
        std::path::absolute(&joined)
            .unwrap_or(joined)
            .display()
            .to_string()
    }

    fn expand(&self, value: &str, location: &str) -> Result<String, ConfigError> {
        expand::expand(value, self.lookup).map_err(|err| match err {
            ExpandError::Missing(variable) => ConfigError::MissingEnvVar {
                path: self.file.to_path_buf(),
                variable,
                location: location.to_owned(),
            },
            ExpandError::Unsupported(reference) => self.schema(
                location,
                format!("unsupported variable reference {reference}; use $VAR, ${{VAR}}, ${{VAR:-default}} or ${{env:VAR}}"),
            ),
        })
    }

    fn expand_map(
        &self,
        map: BTreeMap<String, String>,
        location: &str,
    ) -> Result<BTreeMap<String, String>, ConfigError> {
        map.into_iter()
            .map(|(k, v)| {
                let expanded = self.expand(&v, &format!("{location}{}", key_path(&k)))?;
                Ok((k, expanded))
            })
            .collect()
    }

    fn opt_string(
        &self,
        obj: &Map<String, Value>,
        field: &str,
        location: &str,
    ) -> Result<Option<String>, ConfigError> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.schema(
                format!("{location}.{field}"),
                format!("{field} must be a string, not {}", kind(other)),
            )),
        }
    }

    fn opt_bool(
        &self,
        obj: &Map<String, Value>,
        field: &str,
        location: &str,
    ) -> Result<Option<bool>, ConfigError> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.schema(
                format!("{location}.{field}"),
                format!("{field} must be true or false, not {}", kind(other)),
            )),
        }
    }

    fn string_array(
        &self,
        obj: &Map<String, Value>,
        field: &str,
        location: &str,
    ) -> Result<Vec<String>, ConfigError> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(self.schema(
                        format!("{location}.{field}[{i}]"),
                        format!("must be a string, not {}", kind(other)),
                    )),
                })
                .collect(),
            Some(other) => Err(self.schema(
                format!("{location}.{field}"),
                format!("{field} must be an array, not {}", kind(other)),
            )),
        }
    }

    /// A server's `trust` object (model::TrustSettings): unknown fields
    /// and wrong types are named with their path.
    fn trust_settings(
        &self,
        obj: &Map<String, Value>,
        location: &str,
    ) -> Result<crate::model::TrustSettings, ConfigError> {
        let location = format!("{location}.trust");
        match obj.get("trust") {
            None | Some(Value::Null) => Ok(Default::default()),
            Some(value @ Value::Object(_)) => {
                serde_path_to_error::deserialize(value).map_err(|err| {
                    let path = err.path().to_string();
                    let at = if path == "." {
                        location.clone()
                    } else {
                        format!("{location}.{path}")
                    };
                    self.schema(at, err.inner().to_string())
                })
            }
            Some(other) => Err(self.schema(
                location,
                format!("trust must be an object, not {}", kind(other)),
            )),
        }
    }

    /// A server's `oauth` object: `client_id`, `client_secret` (variables
    /// expanded, as in `headers`), `issuer`, `scopes`, `client_metadata_url`.
    fn oauth_settings(
        &self,
        obj: &Map<String, Value>,
        location: &str,
    ) -> Result<Option<crate::model::OAuthClientSettings>, ConfigError> {
        let location = format!("{location}.oauth");
        let oauth = match obj.get("oauth") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(oauth)) => oauth,
            Some(other) => {
                return Err(self.schema(
                    location,
                    format!("oauth must be an object, not {}", kind(other)),
                ));
            }
        };
        const KNOWN: &[&str] = &[
            "client_id",
            "client_secret",
            "issuer",
            "scopes",
            "client_metadata_url",
        ];
        if let Some(unknown) = oauth.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(self.schema(
                format!("{location}{}", key_path(unknown)),
                format!(
                    "unknown field {unknown:?}; expected one of {}",
                    KNOWN.join(", ")
                ),
            ));
        }
        let expanded = |field: &str| -> Result<Option<String>, ConfigError> {
            self.opt_string(oauth, field, &location)?
                .map(|v| self.expand(&v, &format!("{location}.{field}")))
                .transpose()
        };
        let scopes = match oauth.get("scopes") {
            None | Some(Value::Null) => None,
            Some(_) => Some(self.string_array(oauth, "scopes", &location)?),
        };
        Ok(Some(crate::model::OAuthClientSettings {
            client_id: expanded("client_id")?,
            client_secret: expanded("client_secret")?,
            issuer: expanded("issuer")?,
            scopes,
            client_metadata_url: expanded("client_metadata_url")?,
        }))
    }

    fn string_map(
        &self,
        obj: &Map<String, Value>,
        field: &str,
        location: &str,
    ) -> Result<BTreeMap<String, String>, ConfigError> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(entries)) => entries
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    other => Err(self.schema(
                        format!("{location}.{field}{}", key_path(k)),
                        format!("must be a string, not {}", kind(other)),
                    )),
                })
                .collect(),
            Some(other) => Err(self.schema(
                format!("{location}.{field}"),
                format!("{field} must be an object, not {}", kind(other)),
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TransportKind {
    Stdio,
    Sse,
    Http,
}

/// `.key` for plain keys, `["odd key"]` otherwise, as JSONPath writes them.
fn key_path(key: &str) -> String {
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!(".{key}")
    } else {
        format!("[{}]", Value::String(key.to_owned()))
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
