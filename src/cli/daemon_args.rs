//! The options of the two commands that run the aggregator (`serve` and
//! `stdio`), and how they become the daemon's settings.

use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::parse::{duration, http_url, pin_selector, replica_id, seconds};
use crate::daemon::{self, DEFAULT_LISTEN, LISTEN_ENV};
use crate::mcp::meta::{DEFAULT_EXPOSE_THRESHOLD, Expose, ExposeMode};
use crate::model::pinned_tools::PinnedTools;
use crate::paths::DATA_DIR_ENV;
use crate::router::ConflictStrategy;

#[derive(Debug, Args)]
pub(super) struct DataDirArg {
    /// Data directory (store, keys, token). Default: $XDG_DATA_HOME/mcp-aggregator.
    #[arg(long, env = DATA_DIR_ENV, value_name = "DIR")]
    pub(super) data_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    /// Config file with servers to register (Claude Desktop `mcpServers` or VS Code `servers`).
    #[arg(long, value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    #[command(flatten)]
    pub(super) data_dir: DataDirArg,
    #[command(flatten)]
    pub(super) shared: SharedStoreArgs,
    /// Address of the HTTP listener. Beyond loopback, a bearer token is required.
    #[arg(long, env = LISTEN_ENV, value_name = "ADDR:PORT", default_value = DEFAULT_LISTEN)]
    pub(super) listen: SocketAddr,
    /// Host name or address the listener accepts in `Host` and `Origin` besides loopback (repeatable;
    /// needed when clients reach the daemon by another name; `*` accepts any, for a reverse proxy).
    /// Every other name is refused, which stops DNS-rebinding attacks from web pages.
    #[arg(
        long = "allow-host",
        value_name = "HOST",
        env = "MCP_AGGREGATOR_ALLOW_HOSTS",
        value_delimiter = ','
    )]
    pub(super) allow_hosts: Vec<String>,
    #[command(flatten)]
    pub(super) routing: RoutingArgs,
    #[command(flatten)]
    pub(super) health: HealthArgs,
    #[command(flatten)]
    pub(super) search: IndexArgs,
    #[command(flatten)]
    pub(super) tracing: TracingArgs,
    /// Require `Authorization: Bearer <token>` even on loopback (the token is MCP_AGGREGATOR_TOKEN, else generated into the data dir).
    #[arg(long, env = "MCP_AGGREGATOR_REQUIRE_TOKEN")]
    pub(super) require_token: bool,
    #[command(flatten)]
    pub(super) limits: LimitArgs,
    #[command(flatten)]
    pub(super) listener: ListenerArgs,
    /// Stop once no `stdio` client has been attached for this long (e.g. `5m`); off by default for
    /// `serve`. A daemon a `stdio` client starts runs with its `--idle-exit`.
    #[arg(long, env = "MCP_AGGREGATOR_IDLE_EXIT", value_name = "DURATION", value_parser = duration)]
    pub(super) idle_exit: Option<std::time::Duration>,
    /// Started by a `stdio` client: a taken --listen port falls back to a free loopback port.
    #[arg(long, hide = true)]
    pub(super) started_by_client: bool,
}

/// Several replicas on one PostgreSQL.
#[derive(Debug, Args)]
pub(super) struct SharedStoreArgs {
    /// Keep registrations, the catalog, skills, profiles, tokens, logins and the audit trail in a
    /// PostgreSQL database shared by several replicas, e.g. `postgres://aggregator@db/aggregator`
    /// (no password in it: PGPASSWORD or --store-password-file). The data dir still holds this
    /// replica's own state and its secret.key, which every replica must have a copy of. Needs a
    /// build with the `postgres` feature. Default: everything in the data dir.
    #[arg(long, env = "MCP_AGGREGATOR_STORE", value_name = "URL")]
    pub(super) store: Option<String>,
    /// File whose first line is the PostgreSQL password (read instead of PGPASSWORD).
    #[arg(
        long,
        env = "MCP_AGGREGATOR_STORE_PASSWORD_FILE",
        value_name = "FILE",
        requires = "store"
    )]
    pub(super) store_password_file: Option<PathBuf>,
    /// This replica's id (letters, digits, `.`, `_`, `:`, `-`; at most 64) in `cluster status`,
    /// `/healthz` and the `replica` label of `/metrics`. Default: HOST:PORT of --listen.
    #[arg(long, env = "MCP_AGGREGATOR_REPLICA_ID", value_name = "ID", requires = "store", value_parser = replica_id)]
    pub(super) replica_id: Option<String>,
}

impl SharedStoreArgs {
    pub(super) fn shared(&self, listen: SocketAddr) -> Option<daemon::SharedStore> {
        let url = self.store.clone()?;
        Some(daemon::SharedStore {
            url,
            password_file: self.store_password_file.clone(),
            replica_id: self
                .replica_id
                .clone()
                .unwrap_or_else(|| daemon::default_replica_id(listen)),
        })
    }
}

/// Bounds on what a client or server can make the aggregator hold or wait for.
#[derive(Debug, Args)]
pub(super) struct LimitArgs {
    /// Largest message accepted from anyone: a stdio line, an `/mcp` body, a server's answer or event.
    #[arg(long, env = "MCP_AGGREGATOR_MAX_MESSAGE_BYTES", value_name = "BYTES", default_value_t = crate::limits::DEFAULT_MAX_MESSAGE_BYTES)]
    pub(super) max_message_bytes: usize,
    /// Most one server's discovery may send, its tools, resources, templates and prompts together;
    /// past it the rest is ignored (and logged).
    #[arg(long, env = "MCP_AGGREGATOR_MAX_CATALOG_BYTES", value_name = "BYTES", default_value_t = crate::limits::DEFAULT_MAX_CATALOG_BYTES)]
    pub(super) max_catalog_bytes: usize,
    /// Largest single definition (a tool, resource, template or prompt) kept; a larger tool is
    /// shown with the reason (`rejected_reason`) and offered to nobody.
    #[arg(long, env = "MCP_AGGREGATOR_MAX_DEFINITION_BYTES", value_name = "BYTES", default_value_t = crate::limits::DEFAULT_MAX_DEFINITION_BYTES)]
    pub(super) max_definition_bytes: usize,
    /// Seconds a server gets to answer `initialize` before the attempt is abandoned (and its process ended).
    #[arg(long, env = "MCP_AGGREGATOR_CONNECT_TIMEOUT", value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) connect_timeout: u64,
    /// Seconds a server gets to answer a request (a tool call) before the caller gets a timeout.
    #[arg(long, env = "MCP_AGGREGATOR_REQUEST_TIMEOUT", value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) request_timeout: u64,
    /// Seconds a client's list, search_tools (or call to a tool nobody offers yet) waits, right after start, for auto-connect servers still connecting — for clients that list once and ignore list_changed. 0 answers at once.
    #[arg(long, env = "MCP_AGGREGATOR_STARTUP_WAIT", value_name = "SECONDS", default_value_t = crate::router::STARTUP_WAIT.as_secs(), value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub(super) startup_wait: u64,
}

/// How much of the HTTP listener one peer can hold.
#[derive(Debug, Args)]
pub(super) struct ListenerArgs {
    /// Seconds a client gets to send a request's headers; also how long an idle keep-alive connection stays open.
    #[arg(long, env = "MCP_AGGREGATOR_HEADER_TIMEOUT", value_name = "SECONDS", default_value_t = crate::listener::DEFAULT_HEADER_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) header_timeout: u64,
    /// Connections open at once; beyond it new connections wait (a warning is logged). One named token's requests and streams take at most a quarter of it, all named tokens three quarters (then 429).
    #[arg(long, env = "MCP_AGGREGATOR_MAX_CONNECTIONS", value_name = "N", default_value_t = crate::listener::DEFAULT_MAX_CONNECTIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(super) max_connections: usize,
    /// Seconds after which an unused `/mcp` session expires.
    #[arg(long, env = "MCP_AGGREGATOR_SESSION_IDLE_TIMEOUT", value_name = "SECONDS", default_value_t = crate::mcp::session_table::DEFAULT_IDLE_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) session_idle_timeout: u64,
    /// `/mcp` sessions kept at most (idle ones of the busiest client make room).
    #[arg(long, env = "MCP_AGGREGATOR_MAX_SESSIONS", value_name = "N", default_value_t = crate::mcp::session_table::DEFAULT_MAX_SESSIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(super) max_sessions: usize,
    /// `/mcp` sessions one remote address may hold.
    #[arg(long, env = "MCP_AGGREGATOR_MAX_SESSIONS_PER_CLIENT", value_name = "N", default_value_t = crate::mcp::session_table::DEFAULT_MAX_PER_CLIENT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(super) max_sessions_per_client: usize,
}

impl ListenerArgs {
    pub(super) fn listener(&self) -> crate::listener::ListenerLimits {
        crate::listener::ListenerLimits {
            header_timeout: std::time::Duration::from_secs(self.header_timeout),
            max_connections: self.max_connections,
            ..Default::default()
        }
    }

    pub(super) fn sessions(&self) -> crate::mcp::session_table::SessionLimits {
        crate::mcp::session_table::SessionLimits {
            idle_timeout: std::time::Duration::from_secs(self.session_idle_timeout),
            max_sessions: self.max_sessions,
            max_per_client: self.max_sessions_per_client,
        }
    }
}

/// How calls are routed.
#[derive(Debug, Args)]
pub(super) struct RoutingArgs {
    /// What a bare tool name offered by several servers reaches.
    #[arg(
        long,
        env = "MCP_AGGREGATOR_CONFLICT_STRATEGY",
        value_enum,
        default_value = "priority-based"
    )]
    pub(super) conflict_strategy: ConflictStrategy,
    /// What tools/list offers: every tool (all), only the search_tools and call_tool meta-tools
    /// (search), or all up to --expose-threshold tools and search above (auto).
    #[arg(long, env = "MCP_AGGREGATOR_EXPOSE", value_enum, default_value = "all")]
    pub(super) expose: ExposeMode,
    /// Tool count above which --expose auto offers only the meta-tools.
    #[arg(long, env = "MCP_AGGREGATOR_EXPOSE_THRESHOLD", value_name = "N", default_value_t = DEFAULT_EXPOSE_THRESHOLD)]
    pub(super) expose_threshold: usize,
    /// Tools listed beside search_tools and call_tool even when --expose offers only those
    /// (repeatable, or comma-separated): `server:NAME`, `skill:ID`, `tool:ID` or a bare tool id or
    /// wire name; `*` and `?` match any characters (e.g. `--pin server:time --pin 'github.*issue*'`).
    #[arg(
        long = "pin",
        env = "MCP_AGGREGATOR_PIN",
        value_name = "SELECTOR",
        value_delimiter = ',',
        value_parser = pin_selector
    )]
    pub(super) pins: Vec<String>,
    /// Do not record tool calls in the audit log (by default each call is: who, which tool of
    /// which server, how long, ok or the error; never arguments or results).
    #[arg(long, env = "MCP_AGGREGATOR_NO_CALL_AUDIT")]
    pub(super) no_call_audit: bool,
    /// Check each call's arguments against the tool's inputSchema before sending it; a call that
    /// does not match is refused with -32602 (422 on the admin API) naming the field. A server's
    /// own `trust.validate_arguments` overrides this either way.
    #[arg(long, env = "MCP_AGGREGATOR_VALIDATE_ARGUMENTS")]
    pub(super) validate_arguments: bool,
}

impl RoutingArgs {
    pub(super) fn front_door(
        &self,
        limits: &LimitArgs,
        health: &HealthArgs,
        search: &IndexArgs,
    ) -> daemon::FrontDoorOptions {
        // The one message limit every reader in the process shares.
        crate::limits::set_max_message_bytes(limits.max_message_bytes);
        crate::limits::set_discovery_bytes(limits.max_catalog_bytes, limits.max_definition_bytes);
        daemon::FrontDoorOptions {
            conflict_strategy: self.conflict_strategy,
            expose: Expose {
                mode: self.expose,
                threshold: self.expose_threshold,
                // Each selector was checked as it was read; together they
                // can only be too many to compile.
                pins: std::sync::Arc::new(PinnedTools::parse(&self.pins).unwrap_or_else(|err| {
                    tracing::error!("--pin: {err}; no tool is pinned");
                    PinnedTools::default()
                })),
            },
            connect_timeout: std::time::Duration::from_secs(limits.connect_timeout),
            request_timeout: std::time::Duration::from_secs(limits.request_timeout),
            startup_wait: std::time::Duration::from_secs(limits.startup_wait),
            call_wait: health.call_wait,
            health: health.settings(),
            skills: search.skills(),
            search: search.setting(),
            graph_from: search.graph_from,
            audit_calls: !self.no_call_audit,
            validate_arguments: self.validate_arguments,
        }
    }
}

/// How long a daemon started by a `stdio` client stays after the last
/// client has gone.
pub(super) const DEFAULT_IDLE_EXIT: &str = "5m";

#[derive(Debug, Args)]
pub(super) struct StdioArgs {
    /// Config file with servers (Claude Desktop `mcpServers` or VS Code `servers`), applied to the
    /// daemon: its servers are added or updated by name, and those it no longer lists removed.
    #[arg(long, value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    #[command(flatten)]
    pub(super) data_dir: DataDirArg,
    /// Show this client only a profile's view (a `profiles` entry of a config file, or one added
    /// through the API): its servers, tools and skills; nothing else is listed or callable.
    #[arg(long, env = "MCP_AGGREGATOR_PROFILE", value_name = "NAME")]
    pub(super) profile: Option<String>,
    /// How long the daemon this client starts (when none owns the data dir) stays once the last
    /// client has gone, e.g. `5m`, `30s`, `0s`. A daemon already running keeps its own.
    #[arg(long, env = "MCP_AGGREGATOR_IDLE_EXIT", value_name = "DURATION", default_value = DEFAULT_IDLE_EXIT, value_parser = duration)]
    pub(super) idle_exit: std::time::Duration,
    /// Serve this one client from this process (it owns the data dir, and its servers end with it)
    /// instead of relaying to the data dir's daemon. Fails while a daemon owns the data dir.
    #[arg(long)]
    pub(super) in_process: bool,
    #[command(flatten)]
    pub(super) routing: RoutingArgs,
    #[command(flatten)]
    pub(super) health: HealthArgs,
    #[command(flatten)]
    pub(super) search: IndexArgs,
    #[command(flatten)]
    pub(super) tracing: TracingArgs,
    #[command(flatten)]
    pub(super) limits: LimitArgs,
}

/// Search and skill classification.
#[derive(Debug, Args)]
pub(super) struct IndexArgs {
    /// hybrid: keywords and meaning (the model, ~140 MiB with ONNX Runtime, loads when a tool
    /// first needs embedding or a query needs meaning); keyword: keywords only, the model never
    /// loads (tools are not classified unless --classifier-url is set); off: no search at all.
    #[arg(
        long,
        env = "MCP_AGGREGATOR_SEARCH",
        value_enum,
        default_value = "hybrid"
    )]
    pub(super) search: SearchSettingArg,
    /// Classify tools with an OpenAI-compatible chat completions endpoint (a local model server,
    /// e.g. http://127.0.0.1:8080/v1) instead of the built-in classifier, which still answers
    /// whenever the endpoint fails or times out (those tools are tried again later).
    #[arg(long, env = "MCP_AGGREGATOR_CLASSIFIER_URL", value_name = "URL", value_parser = http_url)]
    pub(super) classifier_url: Option<String>,
    /// The model name sent to --classifier-url.
    #[arg(
        long,
        env = "MCP_AGGREGATOR_CLASSIFIER_MODEL",
        value_name = "NAME",
        default_value = "default"
    )]
    pub(super) classifier_model: String,
    /// Bearer token for --classifier-url, if it needs one.
    #[arg(
        long,
        env = "MCP_AGGREGATOR_CLASSIFIER_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub(super) classifier_api_key: Option<String>,
    /// Seconds one classification request may take.
    #[arg(long, env = "MCP_AGGREGATOR_CLASSIFIER_TIMEOUT", value_name = "SECONDS", default_value = "10", value_parser = seconds)]
    pub(super) classifier_timeout: std::time::Duration,
    /// Seconds before a tool the classifier failed on is tried again (doubling per failure, at most an hour).
    #[arg(long, env = "MCP_AGGREGATOR_CLASSIFIER_RETRY", value_name = "SECONDS", default_value = "30", value_parser = seconds)]
    pub(super) classifier_retry: std::time::Duration,
    /// Tool vectors (about two per tool) beyond which the vector index becomes an HNSW graph:
    /// searches stay in a few milliseconds at any size, for about twice the memory per vector
    /// and a build on the indexing thread; the graph is saved, so a restart does not rebuild it.
    /// Below it the exact scan answers (exact, nothing to build). It goes back to the scan
    /// under half of it.
    #[arg(
        long,
        env = "MCP_AGGREGATOR_GRAPH_FROM",
        value_name = "VECTORS",
        default_value_t = crate::index::GRAPH_FROM
    )]
    pub(super) graph_from: usize,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(super) enum SearchSettingArg {
    Hybrid,
    Keyword,
    Off,
}

impl IndexArgs {
    pub(super) fn setting(&self) -> crate::index::SearchSetting {
        match self.search {
            SearchSettingArg::Hybrid => crate::index::SearchSetting::Hybrid,
            SearchSettingArg::Keyword => crate::index::SearchSetting::Keyword,
            SearchSettingArg::Off => crate::index::SearchSetting::Off,
        }
    }

    pub(super) fn skills(&self) -> crate::skills::SkillsSettings {
        crate::skills::SkillsSettings {
            llm: self
                .classifier_url
                .as_ref()
                .map(|url| crate::skills::LlmSettings {
                    url: url.clone(),
                    model: self.classifier_model.clone(),
                    api_key: self.classifier_api_key.clone(),
                    timeout: self.classifier_timeout,
                }),
            retry: self.classifier_retry,
        }
    }
}

/// Where traces of calls go (off unless set).
#[derive(Debug, Args)]
pub(super) struct TracingArgs {
    /// OTLP/HTTP endpoint to export a trace of each call to (front door, router, server request),
    /// e.g. http://localhost:4318 (`/v1/traces` is added); JSON encoding. Off when not set.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL", value_parser = http_url)]
    pub(super) otlp_endpoint: Option<String>,
}

/// How servers' health is watched (docs/rules.md, Health monitoring).
#[derive(Debug, Args)]
pub(super) struct HealthArgs {
    /// Seconds between health checks of a server (a server's own `health_check_interval_secs`
    /// wins). A server that answered anything within the interval is not asked; others get their
    /// health URL, else a ping. 2 failures in a row make it DEGRADED, 3 ERROR (reconnected).
    #[arg(long, env = "MCP_AGGREGATOR_HEALTH_INTERVAL", value_name = "SECONDS", default_value = "30", value_parser = seconds)]
    pub(super) health_interval: std::time::Duration,
    /// Seconds a health check may take (the next one is due an interval after it ends).
    #[arg(long, env = "MCP_AGGREGATOR_HEALTH_TIMEOUT", value_name = "SECONDS", default_value = "5", value_parser = seconds)]
    pub(super) health_timeout: std::time::Duration,
    /// Seconds a call waits for a server that is connecting (or reconnecting after an error) before it fails.
    #[arg(long, env = "MCP_AGGREGATOR_CALL_WAIT", value_name = "SECONDS", default_value = "10", value_parser = seconds)]
    pub(super) call_wait: std::time::Duration,
    /// Seconds after a failed connection attempt during which calls to that server fail at once
    /// (circuit breaker) instead of asking it to reconnect.
    #[arg(long, env = "MCP_AGGREGATOR_BREAKER_COOLDOWN", value_name = "SECONDS", default_value = "5", value_parser = seconds)]
    pub(super) breaker_cooldown: std::time::Duration,
}

impl HealthArgs {
    pub(super) fn settings(&self) -> crate::sessions::HealthSettings {
        crate::sessions::HealthSettings {
            interval: self.health_interval,
            timeout: self.health_timeout,
            breaker_cooldown: self.breaker_cooldown,
            ..Default::default()
        }
    }
}
