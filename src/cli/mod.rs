//! The command line: `serve` runs the daemon; `servers`, `import`, `state`
//! and `audit` administer a running daemon through its admin API.

pub mod client;
mod commands;
pub mod output;
mod skills;
mod store;

use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

use crate::config;
use crate::daemon::{self, DEFAULT_LISTEN, LISTEN_ENV, ServeOptions, TOKEN_ENV};
use crate::logging::{self, LogFormat};
use crate::mcp::meta::{DEFAULT_EXPOSE_THRESHOLD, Expose, ExposeMode};
use crate::paths::{self, DATA_DIR_ENV};
use crate::router::ConflictStrategy;
use client::ClientError;

#[derive(Debug, Parser)]
#[command(
    name = "mcp-aggregator",
    version,
    about = "Aggregates many MCP servers into one MCP server, with an admin API and CLI.",
    long_about = "Aggregates many MCP servers into one.\n\n\
`serve` runs the daemon: it keeps registrations in an embedded store (one data dir, one process) \
and serves the admin API on 127.0.0.1:8765. The other commands administer a running daemon \
through that API.",
    after_help = "Examples:\n  \
mcp-aggregator serve --config examples/servers.json\n  \
mcp-aggregator servers add time -- uvx mcp-server-time\n  \
mcp-aggregator servers add remote --http https://mcp.example.com/mcp --header 'Authorization: Bearer abc'\n  \
mcp-aggregator servers list\n  \
mcp-aggregator import ~/.config/Claude/claude_desktop_config.json"
)]
pub struct Cli {
    /// Log line format (logs go to stderr; RUST_LOG sets the level).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the aggregator daemon (admin API on --listen).
    #[command(after_help = "Examples:\n  \
mcp-aggregator serve\n  \
mcp-aggregator serve --config ~/.config/mcp-aggregator/servers.json --listen 127.0.0.1:9000\n  \
MCP_AGGREGATOR_DATA_DIR=/var/lib/mcp-aggregator mcp-aggregator serve --log-format json\n\n\
Servers named in --config are added or updated in the store at start (the file wins for the \
servers it names); servers added through the API stay. Stop with SIGINT or SIGTERM.")]
    Serve(ServeArgs),
    /// Speak MCP on stdin/stdout (what Claude Desktop, Claude Code, Cursor and VS Code launch).
    #[command(after_help = "Examples:\n  \
mcp-aggregator stdio --config ~/.config/mcp-aggregator/servers.json\n\n\
Claude Desktop (claude_desktop_config.json):\n  \
{\"mcpServers\": {\"aggregator\": {\"command\": \"mcp-aggregator\", \"args\": [\"stdio\", \"--config\", \"/home/me/.config/mcp-aggregator/servers.json\"]}}}\n\n\
Nothing but MCP is written to stdout; logs go to stderr.")]
    Stdio(StdioArgs),
    /// Add, list, show and remove servers on a running daemon.
    #[command(subcommand)]
    Servers(ServersCommand),
    /// Register every server of a config file (Claude Desktop / VS Code format) with a running daemon.
    #[command(after_help = "Examples:\n  \
mcp-aggregator import ~/.config/Claude/claude_desktop_config.json\n  \
mcp-aggregator import .vscode/mcp.json --json\n\n\
Variables ($VAR, ${VAR}, ${VAR:-default}, ${env:VAR}) expand from this shell's environment. \
Servers whose name is already registered are skipped; remove them first to replace them.")]
    Import(ImportArgs),
    /// List the tools of every server (or of one), with the names MCP clients see.
    #[command(
        after_help = "Examples:\n  mcp-aggregator tools\n  mcp-aggregator tools --server github --json"
    )]
    Tools(ToolsArgs),
    /// Call a tool through the running daemon (arguments as JSON).
    #[command(after_help = "Examples:\n  \
mcp-aggregator call everything.echo '{\"message\": \"hi\"}'\n  \
mcp-aggregator call everything__get-sum '{\"a\": 1, \"b\": 2}' --json\n  \
mcp-aggregator call echo '{}' --server everything\n\n\
NAME is a tool id (server.tool), an MCP name (server__tool), or a name only one server has. \
Exit code 1 when the tool reports an error, 2 when the call is refused.")]
    Call(CallArgs),
    /// Find tools by what they do (keywords and meaning, ranked together).
    #[command(after_help = "Examples:\n  \
mcp-aggregator search \"create an issue\"\n  \
mcp-aggregator search \"read a file\" --server filesystem --limit 3\n  \
mcp-aggregator search \"open pull request\" --mode keyword --json\n\n\
Only tools of CONNECTED or DEGRADED servers are searched. Results are ranked by relevance, \
never grouped by server; the NAME column is what `mcp-aggregator call` takes.")]
    Search(SearchArgs),
    /// Rebuild the search indexes from the store, with a progress bar.
    #[command(after_help = "Examples:\n  \
mcp-aggregator reindex\n  \
mcp-aggregator reindex --data-dir /var/lib/mcp-aggregator\n\n\
With a daemon running, it rebuilds inside the daemon; otherwise this process opens the data dir \
and rebuilds there. Cached embeddings are reused; only texts never embedded before are embedded.")]
    Reindex(ClientArgs),
    /// Show counts of servers by status and of tools.
    State(ClientArgs),
    /// Show the audit log of server operations, newest first.
    Audit(AuditArgs),
    /// Skills: the categories tools are classified into, and classification.
    #[command(subcommand)]
    Skills(skills::SkillsCommand),
    /// Check a store file for damage, and recover what can be read of a damaged one.
    #[command(subcommand)]
    Store(store::StoreCommand),
}

#[derive(Debug, Args)]
struct DataDirArg {
    /// Data directory (store, keys, token). Default: $XDG_DATA_HOME/mcp-aggregator.
    #[arg(long, env = DATA_DIR_ENV, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Config file with servers to register (Claude Desktop `mcpServers` or VS Code `servers`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    data_dir: DataDirArg,
    /// Address of the HTTP listener. Beyond loopback, a bearer token is required.
    #[arg(long, env = LISTEN_ENV, value_name = "ADDR:PORT", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Host name or address the listener accepts in `Host` and `Origin` besides loopback (repeatable;
    /// needed when clients reach the daemon by another name; `*` accepts any, for a reverse proxy).
    /// Every other name is refused, which stops DNS-rebinding attacks from web pages.
    #[arg(
        long = "allow-host",
        value_name = "HOST",
        env = "MCP_AGGREGATOR_ALLOW_HOSTS",
        value_delimiter = ','
    )]
    allow_hosts: Vec<String>,
    #[command(flatten)]
    routing: RoutingArgs,
    #[command(flatten)]
    health: HealthArgs,
    #[command(flatten)]
    search: IndexArgs,
    #[command(flatten)]
    tracing: TracingArgs,
    /// Require `Authorization: Bearer <token>` even on loopback (the token is MCP_AGGREGATOR_TOKEN, else generated into the data dir).
    #[arg(long, env = "MCP_AGGREGATOR_REQUIRE_TOKEN")]
    require_token: bool,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    listener: ListenerArgs,
}

/// Bounds on what a client or server can make the aggregator hold or wait for.
#[derive(Debug, Args)]
struct LimitArgs {
    /// Largest message accepted from anyone: a stdio line, an `/mcp` body, a server's answer or event.
    #[arg(long, env = "MCP_AGGREGATOR_MAX_MESSAGE_BYTES", value_name = "BYTES", default_value_t = crate::limits::DEFAULT_MAX_MESSAGE_BYTES)]
    max_message_bytes: usize,
    /// Most one server's discovery may send, its tools, resources, templates and prompts together;
    /// past it the rest is ignored (and logged).
    #[arg(long, env = "MCP_AGGREGATOR_MAX_CATALOG_BYTES", value_name = "BYTES", default_value_t = crate::limits::DEFAULT_MAX_CATALOG_BYTES)]
    max_catalog_bytes: usize,
    /// Largest single definition (a tool, resource, template or prompt) kept; a larger tool is
    /// shown with the reason (`rejected_reason`) and offered to nobody.
    #[arg(long, env = "MCP_AGGREGATOR_MAX_DEFINITION_BYTES", value_name = "BYTES", default_value_t = crate::limits::DEFAULT_MAX_DEFINITION_BYTES)]
    max_definition_bytes: usize,
    /// Seconds a server gets to answer `initialize` before the attempt is abandoned (and its process ended).
    #[arg(long, env = "MCP_AGGREGATOR_CONNECT_TIMEOUT", value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    connect_timeout: u64,
    /// Seconds a server gets to answer a request (a tool call) before the caller gets a timeout.
    #[arg(long, env = "MCP_AGGREGATOR_REQUEST_TIMEOUT", value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    request_timeout: u64,
    /// Seconds a client's list (or call to a tool nobody offers yet) waits, right after start, for auto-connect servers still connecting — for clients that list once and ignore list_changed. 0 answers at once.
    #[arg(long, env = "MCP_AGGREGATOR_STARTUP_WAIT", value_name = "SECONDS", default_value_t = crate::router::STARTUP_WAIT.as_secs(), value_parser = clap::value_parser!(u64).range(0..=3600))]
    startup_wait: u64,
}

/// How much of the HTTP listener one peer can hold.
#[derive(Debug, Args)]
struct ListenerArgs {
    /// Seconds a client gets to send a request's headers; also how long an idle keep-alive connection stays open.
    #[arg(long, env = "MCP_AGGREGATOR_HEADER_TIMEOUT", value_name = "SECONDS", default_value_t = crate::listener::DEFAULT_HEADER_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout: u64,
    /// Connections open at once; beyond it new connections wait (a warning is logged).
    #[arg(long, env = "MCP_AGGREGATOR_MAX_CONNECTIONS", value_name = "N", default_value_t = crate::listener::DEFAULT_MAX_CONNECTIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_connections: usize,
    /// Seconds after which an unused `/mcp` session expires.
    #[arg(long, env = "MCP_AGGREGATOR_SESSION_IDLE_TIMEOUT", value_name = "SECONDS", default_value_t = crate::mcp::session_table::DEFAULT_IDLE_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    session_idle_timeout: u64,
    /// `/mcp` sessions kept at most (idle ones of the busiest client make room).
    #[arg(long, env = "MCP_AGGREGATOR_MAX_SESSIONS", value_name = "N", default_value_t = crate::mcp::session_table::DEFAULT_MAX_SESSIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_sessions: usize,
    /// `/mcp` sessions one remote address may hold.
    #[arg(long, env = "MCP_AGGREGATOR_MAX_SESSIONS_PER_CLIENT", value_name = "N", default_value_t = crate::mcp::session_table::DEFAULT_MAX_PER_CLIENT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_sessions_per_client: usize,
}

impl ListenerArgs {
    fn listener(&self) -> crate::listener::ListenerLimits {
        crate::listener::ListenerLimits {
            header_timeout: std::time::Duration::from_secs(self.header_timeout),
            max_connections: self.max_connections,
            ..Default::default()
        }
    }

    fn sessions(&self) -> crate::mcp::session_table::SessionLimits {
        crate::mcp::session_table::SessionLimits {
            idle_timeout: std::time::Duration::from_secs(self.session_idle_timeout),
            max_sessions: self.max_sessions,
            max_per_client: self.max_sessions_per_client,
        }
    }
}

/// How calls are routed.
#[derive(Debug, Args)]
struct RoutingArgs {
    /// What a bare tool name offered by several servers reaches.
    #[arg(
        long,
        env = "MCP_AGGREGATOR_CONFLICT_STRATEGY",
        value_enum,
        default_value = "priority-based"
    )]
    conflict_strategy: ConflictStrategy,
    /// What tools/list offers: every tool (all), only the search_tools and call_tool meta-tools
    /// (search), or all up to --expose-threshold tools and search above (auto).
    #[arg(long, env = "MCP_AGGREGATOR_EXPOSE", value_enum, default_value = "all")]
    expose: ExposeMode,
    /// Tool count above which --expose auto offers only the meta-tools.
    #[arg(long, env = "MCP_AGGREGATOR_EXPOSE_THRESHOLD", value_name = "N", default_value_t = DEFAULT_EXPOSE_THRESHOLD)]
    expose_threshold: usize,
}

impl RoutingArgs {
    fn front_door(
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
            },
            connect_timeout: std::time::Duration::from_secs(limits.connect_timeout),
            request_timeout: std::time::Duration::from_secs(limits.request_timeout),
            startup_wait: std::time::Duration::from_secs(limits.startup_wait),
            call_wait: health.call_wait,
            health: health.settings(),
            skills: search.skills(),
            search: search.setting(),
            graph_from: search.graph_from,
        }
    }
}

#[derive(Debug, Args)]
struct StdioArgs {
    /// Config file with servers (Claude Desktop `mcpServers` or VS Code `servers`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    data_dir: DataDirArg,
    #[command(flatten)]
    routing: RoutingArgs,
    #[command(flatten)]
    health: HealthArgs,
    #[command(flatten)]
    search: IndexArgs,
    #[command(flatten)]
    tracing: TracingArgs,
    #[command(flatten)]
    limits: LimitArgs,
}

/// Search and skill classification.
#[derive(Debug, Args)]
struct IndexArgs {
    /// hybrid: keywords and meaning (the model, ~140 MiB with ONNX Runtime, loads when a tool
    /// first needs embedding or a query needs meaning); keyword: keywords only, the model never
    /// loads (tools are not classified unless --classifier-url is set); off: no search at all.
    #[arg(
        long,
        env = "MCP_AGGREGATOR_SEARCH",
        value_enum,
        default_value = "hybrid"
    )]
    search: SearchSettingArg,
    /// Classify tools with an OpenAI-compatible chat completions endpoint (a local model server,
    /// e.g. http://127.0.0.1:8080/v1) instead of the built-in classifier, which still answers
    /// whenever the endpoint fails or times out (those tools are tried again later).
    #[arg(long, env = "MCP_AGGREGATOR_CLASSIFIER_URL", value_name = "URL", value_parser = http_url)]
    classifier_url: Option<String>,
    /// The model name sent to --classifier-url.
    #[arg(
        long,
        env = "MCP_AGGREGATOR_CLASSIFIER_MODEL",
        value_name = "NAME",
        default_value = "default"
    )]
    classifier_model: String,
    /// Bearer token for --classifier-url, if it needs one.
    #[arg(
        long,
        env = "MCP_AGGREGATOR_CLASSIFIER_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    classifier_api_key: Option<String>,
    /// Seconds one classification request may take.
    #[arg(long, env = "MCP_AGGREGATOR_CLASSIFIER_TIMEOUT", value_name = "SECONDS", default_value = "10", value_parser = seconds)]
    classifier_timeout: std::time::Duration,
    /// Seconds before a tool the classifier failed on is tried again (doubling per failure, at most an hour).
    #[arg(long, env = "MCP_AGGREGATOR_CLASSIFIER_RETRY", value_name = "SECONDS", default_value = "30", value_parser = seconds)]
    classifier_retry: std::time::Duration,
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
    graph_from: usize,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum SearchSettingArg {
    Hybrid,
    Keyword,
    Off,
}

impl IndexArgs {
    fn setting(&self) -> crate::index::SearchSetting {
        match self.search {
            SearchSettingArg::Hybrid => crate::index::SearchSetting::Hybrid,
            SearchSettingArg::Keyword => crate::index::SearchSetting::Keyword,
            SearchSettingArg::Off => crate::index::SearchSetting::Off,
        }
    }

    fn skills(&self) -> crate::skills::SkillsSettings {
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
struct TracingArgs {
    /// OTLP/HTTP endpoint to export a trace of each call to (front door, router, server request),
    /// e.g. http://localhost:4318 (`/v1/traces` is added); JSON encoding. Off when not set.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL", value_parser = http_url)]
    otlp_endpoint: Option<String>,
}

/// An http(s) URL, as given.
fn http_url(text: &str) -> Result<String, String> {
    match url::Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {
            Ok(text.to_owned())
        }
        _ => Err(format!(
            "{text:?} is not an http(s) URL (e.g. http://localhost:4318)"
        )),
    }
}

/// Seconds as a decimal number (`0.5`, `30`), at least 10 ms.
fn seconds(text: &str) -> Result<std::time::Duration, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !value.is_finite() || !(0.01..=86_400.0).contains(&value) {
        return Err(format!("{text} s is out of range (0.01 to 86400)"));
    }
    Ok(std::time::Duration::from_secs_f64(value))
}

/// How servers' health is watched (docs/rules.md, Health monitoring).
#[derive(Debug, Args)]
struct HealthArgs {
    /// Seconds between health checks of a server (a server's own `health_check_interval_secs`
    /// wins). A server that answered anything within the interval is not asked; others get their
    /// health URL, else a ping. 2 failures in a row make it DEGRADED, 3 ERROR (reconnected).
    #[arg(long, env = "MCP_AGGREGATOR_HEALTH_INTERVAL", value_name = "SECONDS", default_value = "30", value_parser = seconds)]
    health_interval: std::time::Duration,
    /// Seconds a health check may take (the next one is due an interval after it ends).
    #[arg(long, env = "MCP_AGGREGATOR_HEALTH_TIMEOUT", value_name = "SECONDS", default_value = "5", value_parser = seconds)]
    health_timeout: std::time::Duration,
    /// Seconds a call waits for a server that is connecting (or reconnecting after an error) before it fails.
    #[arg(long, env = "MCP_AGGREGATOR_CALL_WAIT", value_name = "SECONDS", default_value = "10", value_parser = seconds)]
    call_wait: std::time::Duration,
    /// Seconds after a failed connection attempt during which calls to that server fail at once
    /// (circuit breaker) instead of asking it to reconnect.
    #[arg(long, env = "MCP_AGGREGATOR_BREAKER_COOLDOWN", value_name = "SECONDS", default_value = "5", value_parser = seconds)]
    breaker_cooldown: std::time::Duration,
}

impl HealthArgs {
    fn settings(&self) -> crate::sessions::HealthSettings {
        crate::sessions::HealthSettings {
            interval: self.health_interval,
            timeout: self.health_timeout,
            breaker_cooldown: self.breaker_cooldown,
            ..Default::default()
        }
    }
}

/// How to reach the daemon.
#[derive(Debug, Args)]
struct ClientArgs {
    /// Admin API of the daemon. Default: the daemon of --data-dir if one runs, else MCP_AGGREGATOR_LISTEN, else http://127.0.0.1:8765.
    #[arg(long, env = "MCP_AGGREGATOR_URL", value_name = "URL")]
    url: Option<String>,
    /// Bearer token (needed when the daemon listens beyond loopback). Default: the data dir's token file.
    #[arg(long, env = TOKEN_ENV, value_name = "TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(flatten)]
    data_dir: DataDirArg,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum ServersCommand {
    /// Register a server (stdio: its command after `--`; Streamable HTTP: --http URL; legacy SSE: --sse URL).
    #[command(after_help = "Examples:\n  \
mcp-aggregator servers add time -- uvx mcp-server-time\n  \
mcp-aggregator servers add fs --env LOG_LEVEL=debug -- npx -y @modelcontextprotocol/server-filesystem /srv\n  \
mcp-aggregator servers add remote --http https://mcp.example.com/mcp --header 'Authorization: Bearer abc'\n  \
mcp-aggregator servers add legacy --sse http://127.0.0.1:3001/sse\n\n\
Names are ^[a-z][a-z0-9_-]*$. Env and header values are stored encrypted and never shown again.")]
    Add(AddArgs),
    /// List registered servers.
    #[command(
        after_help = "Examples:\n  mcp-aggregator servers list\n  mcp-aggregator servers list --status ERROR --json"
    )]
    List(ListArgs),
    /// Show one server's details and recent connection history.
    #[command(
        after_help = "Examples:\n  mcp-aggregator servers show github\n  mcp-aggregator servers show 4b0e…-uuid --json"
    )]
    Show(NameArgs),
    /// Remove a server and everything that belongs to it.
    #[command(after_help = "Examples:\n  mcp-aggregator servers remove github")]
    Remove(NameArgs),
    /// Connect a server (returns at once unless --wait).
    #[command(
        after_help = "Examples:\n  mcp-aggregator servers connect github\n  mcp-aggregator servers connect github --wait"
    )]
    Connect(ConnectArgs),
    /// Disconnect a server: calls in flight finish first (up to 30 s) unless --force.
    #[command(
        after_help = "Examples:\n  mcp-aggregator servers disconnect github\n  mcp-aggregator servers disconnect github --force"
    )]
    Disconnect(DisconnectArgs),
}

#[derive(Debug, Args)]
struct ConnectArgs {
    /// Server name or id.
    name: String,
    /// Wait until the server is CONNECTED (or ERROR), up to 60 s.
    #[arg(long)]
    wait: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Args)]
struct DisconnectArgs {
    /// Server name or id.
    name: String,
    /// Cancel calls in flight instead of waiting for them.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Args)]
struct CallArgs {
    /// The tool: `server.tool`, `server__tool`, or an unambiguous original name.
    name: String,
    /// Arguments as a JSON object (default `{}`).
    #[arg(default_value = "{}")]
    arguments: String,
    /// Route to this server (name or id).
    #[arg(long)]
    server: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Args)]
struct SearchArgs {
    /// What the tool should do, in words or by name.
    query: String,
    /// Only this server's tools (name or id; repeatable).
    #[arg(long = "server", value_name = "NAME")]
    servers: Vec<String>,
    /// How many results (1-100).
    #[arg(long, default_value_t = 10)]
    limit: usize,
    /// hybrid (keywords and meaning), keyword, or semantic.
    #[arg(long, value_enum, default_value = "hybrid")]
    mode: SearchModeArg,
    /// Only tools classified into this skill (id; repeatable).
    #[arg(long = "skill", value_name = "SKILL")]
    skills: Vec<String>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum SearchModeArg {
    Hybrid,
    Keyword,
    Semantic,
}

#[derive(Debug, Args)]
struct ToolsArgs {
    /// Only this server's tools (name or id).
    #[arg(long)]
    server: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Args)]
struct AddArgs {
    /// Server name (^[a-z][a-z0-9_-]*$).
    name: String,
    /// URL of a Streamable HTTP server.
    #[arg(long = "http", value_name = "URL", conflicts_with = "sse")]
    http: Option<String>,
    /// URL of a legacy HTTP+SSE server (the event-stream endpoint).
    #[arg(long = "sse", value_name = "URL")]
    sse: Option<String>,
    /// Environment variable for a stdio server (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// HTTP header for an SSE/HTTP server (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Working directory of a stdio server (absolute).
    #[arg(long)]
    cwd: Option<PathBuf>,
    #[arg(long)]
    description: Option<String>,
    /// URL polled for health (200 = healthy).
    #[arg(long)]
    health_check_url: Option<String>,
    /// Seconds between this server's health checks (default: the daemon's
    /// --health-interval).
    #[arg(long, value_name = "SECS")]
    health_interval: Option<u32>,
    /// Higher wins when un-namespaced tool names collide.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// Register without connecting (now or at start-up).
    #[arg(long)]
    no_auto_connect: bool,
    #[command(flatten)]
    client: ClientArgs,
    /// The stdio server's command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Debug, Args)]
struct ListArgs {
    /// Only servers with this status (DISCONNECTED, CONNECTING, CONNECTED, DEGRADED, ERROR).
    #[arg(long)]
    status: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Args)]
struct NameArgs {
    /// Server name or id.
    name: String,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Args)]
struct ImportArgs {
    /// Config file (Claude Desktop `mcpServers` or VS Code `servers`).
    file: PathBuf,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Args)]
struct AuditArgs {
    /// How many entries.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Only entries older than this sequence number (the `seq` of the last entry of a page, with --json).
    #[arg(long, value_name = "SEQ")]
    before: Option<u64>,
    /// Only this server's entries (its name).
    #[arg(long, value_name = "NAME")]
    server: Option<String>,
    /// Only this action: register, update, verify, remove, connect, disconnect, status.
    #[arg(long)]
    action: Option<String>,
    /// Only actors containing this text (health-monitor, supervisor, cli:, config:, an address).
    #[arg(long)]
    actor: Option<String>,
    /// Only operations that ended this way.
    #[arg(long, value_enum)]
    result: Option<AuditResultArg>,
    /// Only entries from this time on: RFC 3339 (2026-11-26T14:00:00Z) or an age (90s, 15m, 2h, 7d).
    #[arg(long, value_name = "TIME", value_parser = point_in_time)]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only entries before this time (same forms as --since).
    #[arg(long, value_name = "TIME", value_parser = point_in_time)]
    until: Option<chrono::DateTime<chrono::Utc>>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum AuditResultArg {
    Ok,
    Error,
}

/// A time as RFC 3339, or as an age before now (`15m`).
fn point_in_time(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let text = text.trim();
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&chrono::Utc));
    }
    let split = text.len().saturating_sub(1);
    let (number, unit) = (
        text.get(..split).unwrap_or(""),
        text.get(split..).unwrap_or(""),
    );
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => 0,
    };
    match number.parse::<i64>() {
        Ok(n) if unit_secs > 0 && (0..=36_500 * 86_400 / unit_secs).contains(&n) => {
            Ok(chrono::Utc::now() - chrono::Duration::seconds(n * unit_secs))
        }
        _ => Err(format!(
            "{text:?} is neither an RFC 3339 time (2026-11-26T14:00:00Z) nor an age (90s, 15m, 2h, 7d)"
        )),
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any thread or child exists: whatever descriptors whoever
    // started us left open must not reach the servers we start.
    crate::sessions::close_inherited_on_exec();
    crate::http_client::init();
    daemon::install_panic_hook();
    // The stdio front door serves one client: a single-threaded runtime
    // keeps every hop of a call on one thread (no cross-thread wake-ups),
    // which is what per-call latency is made of. The daemon serves many
    // clients and uses every core.
    let mut builder = match &cli.command {
        Command::Stdio(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    // Run as a spawned task, not as the block_on future: on the
    // single-threaded runtime, tasks woken or spawned from the block_on
    // future go through the cross-thread queue and an eventfd write.
    let code = runtime.block_on(async move {
        match tokio::spawn(run(cli)).await {
            Ok(code) => code,
            Err(err) => {
                eprintln!("error: {err}");
                ExitCode::from(1)
            }
        }
    });
    // A blocking task still running (a batch being embedded) must not hold
    // the exit up: everything durable was committed already.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    if code == ExitCode::SUCCESS {
        // Everything is closed and committed. A thread still inside ONNX
        // Runtime (the model loading when a SIGTERM came early) would crash
        // the C library's exit-time destructors (SIGSEGV seen in CI): leave
        // without running them.
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: `_exit` ends the process at once; nothing of ours needs
        // to run after this point.
        unsafe { libc::_exit(0) }
    }
    code
}

async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve(args) => {
            let telemetry = logging::init(
                cli.log_format,
                logging::DEFAULT_FILTER,
                args.tracing.otlp_endpoint.as_deref(),
            );
            let code = serve(args).await;
            telemetry.shutdown().await;
            code
        }
        Command::Stdio(args) => {
            // stdout is the MCP channel: logs go to stderr, quietly.
            let telemetry = logging::init(
                cli.log_format,
                "warn,mcp_aggregator=info,rmcp=warn",
                args.tracing.otlp_endpoint.as_deref(),
            );
            let code = stdio(args).await;
            telemetry.shutdown().await;
            code
        }
        other => {
            logging::init(cli.log_format, "warn", None);
            match commands::admin(other).await {
                Ok(code) => code,
                Err(err) => {
                    eprintln!("error: {err}");
                    ExitCode::from(err.exit_code())
                }
            }
        }
    }
}

/// What `serve` and `stdio` both need first: the data dir and a shutdown
/// token cancelled by SIGINT/SIGTERM.
fn process_setup(data_dir: &DataDirArg) -> Result<(PathBuf, CancellationToken), ExitCode> {
    let Some(data_dir) = paths::resolve_data_dir(data_dir.data_dir.as_deref()) else {
        eprintln!(
            "error: no data dir: pass --data-dir or set {DATA_DIR_ENV} (no home directory found)"
        );
        return Err(ExitCode::from(2));
    };
    let shutdown = CancellationToken::new();
    if let Err(err) = daemon::cancel_on_signals(shutdown.clone()) {
        eprintln!("error: cannot install signal handlers: {err}");
        return Err(ExitCode::from(1));
    }
    Ok((data_dir, shutdown))
}

fn finish(result: Result<(), daemon::DaemonError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err}");
            eprintln!("error: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}

async fn stdio(args: StdioArgs) -> ExitCode {
    let (data_dir, shutdown) = match process_setup(&args.data_dir) {
        Ok(setup) => setup,
        Err(code) => return code,
    };
    let front_door = args
        .routing
        .front_door(&args.limits, &args.health, &args.search);
    finish(daemon::stdio(args.config, data_dir, front_door, shutdown).await)
}

async fn serve(args: ServeArgs) -> ExitCode {
    let (data_dir, shutdown) = match process_setup(&args.data_dir) {
        Ok(setup) => setup,
        Err(code) => return code,
    };
    let options = ServeOptions {
        config: args.config,
        data_dir,
        listen: args.listen,
        require_token: args.require_token,
        allowed_hosts: args.allow_hosts,
        front_door: args
            .routing
            .front_door(&args.limits, &args.health, &args.search),
        listener: args.listener.listener(),
        mcp_sessions: args.listener.sessions(),
    };
    finish(daemon::serve(options, shutdown).await)
}

/// A CLI failure with its exit code.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    fn exit_code(&self) -> u8 {
        match self {
            CliError::Client(err) => err.exit_code(),
            CliError::Usage(_) | CliError::Config(_) => 2,
            CliError::Failed(_) => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn add_infers_the_transport() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).unwrap();
            let Command::Servers(ServersCommand::Add(add)) = cli.command else {
                panic!()
            };
            commands::add_transport(&add)
        };
        let stdio = parse(&[
            "m",
            "servers",
            "add",
            "t",
            "--env",
            "A=b",
            "--",
            "uvx",
            "mcp-server-time",
        ])
        .unwrap();
        assert_eq!(stdio.transport_type(), crate::model::TransportType::Stdio);
        let http = parse(&[
            "m",
            "servers",
            "add",
            "r",
            "--http",
            "http://h/mcp",
            "--header",
            "X-Key: v",
        ])
        .unwrap();
        assert_eq!(http.secrets()["X-Key"], "v");
        let sse = parse(&["m", "servers", "add", "r", "--sse", "http://h/sse"]).unwrap();
        assert_eq!(sse.transport_type(), crate::model::TransportType::Sse);
        assert!(parse(&["m", "servers", "add", "r"]).is_err());
        assert!(parse(&["m", "servers", "add", "r", "--http", "http://h", "--", "x"]).is_err());
        assert!(parse(&["m", "servers", "add", "r", "--env", "novalue", "--", "x"]).is_err());
        assert!(
            Cli::try_parse_from(["m", "servers", "add", "r", "--http", "a", "--sse", "b"]).is_err()
        );
    }
}
