//! The arguments of the commands that administer a running daemon through
//! its admin API (servers, tools, calls, search, import, audit, skills),
//! and of `store`, which works on a stopped daemon's data dir.

use clap::{Args, Subcommand};
use std::path::PathBuf;

use super::daemon_args::DataDirArg;
use super::parse::{http_url, point_in_time};
use crate::daemon::TOKEN_ENV;

/// How to reach the daemon.
#[derive(Debug, Args)]
pub(super) struct ClientArgs {
    /// Admin API of the daemon. Default: the daemon of the data dir; when no --data-dir (MCP_AGGREGATOR_DATA_DIR) is given and none runs there, MCP_AGGREGATOR_LISTEN, else http://127.0.0.1:8765.
    #[arg(long, env = "MCP_AGGREGATOR_URL", value_name = "URL", value_parser = http_url)]
    pub(super) url: Option<String>,
    /// Bearer token (needed when the daemon listens beyond loopback). Default: the data dir's token file, sent only to that data dir's own daemon or to --url.
    #[arg(long, env = TOKEN_ENV, value_name = "TOKEN", hide_env_values = true)]
    pub(super) token: Option<String>,
    #[command(flatten)]
    pub(super) data_dir: DataDirArg,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Debug, Subcommand)]
pub(super) enum ServersCommand {
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
pub(super) struct ConnectArgs {
    /// Server name or id.
    pub(super) name: String,
    /// Wait until the server is CONNECTED with its tools listed (or ERROR), up to 60 s.
    #[arg(long)]
    pub(super) wait: bool,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct DisconnectArgs {
    /// Server name or id.
    pub(super) name: String,
    /// Cancel calls in flight instead of waiting for them.
    #[arg(long)]
    pub(super) force: bool,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct CallArgs {
    /// The tool: `server.tool`, `server__tool`, or an unambiguous original name.
    pub(super) name: String,
    /// Arguments as a JSON object (default `{}`).
    #[arg(default_value = "{}")]
    pub(super) arguments: String,
    /// Route to this server (name or id).
    #[arg(long)]
    pub(super) server: Option<String>,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct SearchArgs {
    /// What the tool should do, in words or by name.
    pub(super) query: String,
    /// Only this server's tools (name or id; repeatable).
    #[arg(long = "server", value_name = "NAME")]
    pub(super) servers: Vec<String>,
    /// How many results (1-100).
    #[arg(long, default_value_t = 10)]
    pub(super) limit: usize,
    /// hybrid (keywords and meaning), keyword, or semantic.
    #[arg(long, value_enum, default_value = "hybrid")]
    pub(super) mode: SearchModeArg,
    /// Only tools classified into this skill (id; repeatable).
    #[arg(long = "skill", value_name = "SKILL")]
    pub(super) skills: Vec<String>,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(super) enum SearchModeArg {
    Hybrid,
    Keyword,
    Semantic,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(super) struct ToolsArgs {
    /// Only this server's tools (name or id).
    #[arg(long)]
    pub(super) server: Option<String>,
    #[command(flatten)]
    pub(super) client: ClientArgs,
    #[command(subcommand)]
    pub(super) command: Option<ToolsCommand>,
}

#[derive(Debug, Subcommand)]
pub(super) enum ToolsCommand {
    /// List the tools, prompts and resource templates held back by the trust checks (changed, new, or flagged as poisoned).
    #[command(
        after_help = "Examples:\n  mcp-aggregator tools held\n  mcp-aggregator tools held --json\n\n\
Prompts are named prompt:SERVER.NAME and resource templates template:SERVER:URI_TEMPLATE; \
diff, approve and reject take those names too."
    )]
    Held(ClientArgs),
    /// Show what changed in a tool's definition since it was approved, word by word, and what the poisoning checks found.
    #[command(
        after_help = "Examples:\n  mcp-aggregator tools diff github.create_issue\n  mcp-aggregator tools diff github__create_issue --json\n  \
mcp-aggregator tools diff prompt:github.triage\n\n\
Removed words are shown as [-like this-], added ones as {+like this+}."
    )]
    Diff(ToolNameArgs),
    /// Approve a tool's current definition: it is pinned and offered to clients again.
    #[command(
        after_help = "Examples:\n  mcp-aggregator tools approve github.create_issue\n  \
mcp-aggregator tools approve github.create_issue --fingerprint sha256:…\n\n\
With --fingerprint (from `tools diff`), the approval is refused if the server changed the definition again since."
    )]
    Approve(ToolDecisionArgs),
    /// Reject a tool's current definition: it stays held until the server changes it.
    #[command(after_help = "Examples:\n  mcp-aggregator tools reject github.create_issue")]
    Reject(ToolDecisionArgs),
}

#[derive(Debug, Args)]
pub(super) struct ToolNameArgs {
    /// The tool's id (server.tool) or the name MCP clients see (server__tool); a prompt's
    /// (prompt:server.name) or a resource template's (template:server:uriTemplate).
    pub(super) name: String,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct ToolDecisionArgs {
    /// The tool's id (server.tool) or the name MCP clients see (server__tool); a prompt's
    /// (prompt:server.name) or a resource template's (template:server:uriTemplate).
    pub(super) name: String,
    /// Decide only if the definition is still this one (as `tools diff` showed it).
    #[arg(long, value_name = "FINGERPRINT")]
    pub(super) fingerprint: Option<String>,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct AddArgs {
    /// Server name (^[a-z][a-z0-9_-]*$).
    pub(super) name: String,
    /// URL of a Streamable HTTP server.
    #[arg(long = "http", value_name = "URL", conflicts_with = "sse")]
    pub(super) http: Option<String>,
    /// URL of a legacy HTTP+SSE server (the event-stream endpoint).
    #[arg(long = "sse", value_name = "URL")]
    pub(super) sse: Option<String>,
    /// Environment variable for a stdio server (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub(super) env: Vec<String>,
    /// HTTP header for an SSE/HTTP server (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub(super) headers: Vec<String>,
    /// Working directory of a stdio server (absolute).
    #[arg(long)]
    pub(super) cwd: Option<PathBuf>,
    #[arg(long)]
    pub(super) description: Option<String>,
    /// URL polled for health (200 = healthy).
    #[arg(long)]
    pub(super) health_check_url: Option<String>,
    /// Seconds between this server's health checks (default: the daemon's
    /// --health-interval).
    #[arg(long, value_name = "SECS")]
    pub(super) health_interval: Option<u32>,
    /// Higher wins when un-namespaced tool names collide.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub(super) priority: i32,
    /// Register without connecting (now or at start-up).
    #[arg(long)]
    pub(super) no_auto_connect: bool,
    #[command(flatten)]
    pub(super) client: ClientArgs,
    /// The stdio server's command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub(super) command: Vec<String>,
}

#[derive(Debug, Args)]
pub(super) struct ListArgs {
    /// Only servers with this status (DISCONNECTED, CONNECTING, CONNECTED, DEGRADED, ERROR).
    #[arg(long)]
    pub(super) status: Option<String>,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct NameArgs {
    /// Server name or id.
    pub(super) name: String,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct ImportArgs {
    /// A config file (Claude Desktop `mcpServers` or VS Code `servers`), or a client's name
    /// (claude-desktop, claude-code, cursor, vscode, windsurf, gemini-cli) to read that client's
    /// own file.
    #[arg(value_name = "FILE|CLIENT")]
    pub(super) source: String,
    /// With a client's name: its file in this project directory instead of the user's.
    #[arg(long, value_name = "DIR")]
    pub(super) project: Option<PathBuf>,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub(super) enum ClientCommand {
    /// Add the aggregator to an MCP client's config file: merged with what is there, the change
    /// shown first, the old file kept as NAME.bak-TIMESTAMP.
    #[command(after_help = "Examples:\n  \
mcp-aggregator client setup claude-desktop\n  \
mcp-aggregator client setup cursor --profile coding --dry-run\n  \
mcp-aggregator client setup vscode --project . --yes\n  \
mcp-aggregator client setup claude-code --move-servers\n\n\
CLIENT is one of claude-desktop, claude-code, cursor, vscode, windsurf, gemini-cli; each file is \
where that client documents it on this platform (`mcp-aggregator client list` shows them). \
--move-servers also moves the client's other servers into the aggregator's config file \
(~/.config/mcp-aggregator/servers.json, or --config), which the client's entry then applies: the \
client keeps one entry, the aggregator, and sees every server through it.")]
    Setup(ClientSetupArgs),
    /// The clients `setup` knows, the file each reads here, and whether the aggregator is in it.
    List,
}

#[derive(Debug, Args)]
pub(super) struct ClientSetupArgs {
    /// The client: claude-desktop, claude-code, cursor, vscode, windsurf or gemini-cli.
    pub(super) client: String,
    /// The profile (view) this client sees: only its servers, tools and skills.
    #[arg(long, value_name = "NAME")]
    pub(super) profile: Option<String>,
    /// A config file of servers the client's `stdio` applies to the daemon when it starts
    /// (`--config`); with --move-servers, where the moved servers go.
    #[arg(long, value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// Move the client's other servers into the aggregator's config file (--config, default
    /// ~/.config/mcp-aggregator/servers.json), leaving the aggregator as the client's one entry.
    #[arg(long)]
    pub(super) move_servers: bool,
    /// The entry's name in the client's list.
    #[arg(long, value_name = "NAME", default_value = "aggregator")]
    pub(super) name: String,
    /// The client's file for this project directory (e.g. DIR/.vscode/mcp.json) instead of the
    /// user's.
    #[arg(long, value_name = "DIR", conflicts_with = "file")]
    pub(super) project: Option<PathBuf>,
    /// Write this file instead of the client's usual one.
    #[arg(long, value_name = "FILE")]
    pub(super) file: Option<PathBuf>,
    /// The command the client runs. Default: this binary's absolute path (GUI clients do not see
    /// the shell's PATH).
    #[arg(long, value_name = "PATH")]
    pub(super) command: Option<String>,
    #[command(flatten)]
    pub(super) data_dir: DataDirArg,
    /// Write without asking.
    #[arg(long, short = 'y')]
    pub(super) yes: bool,
    /// Only show the change.
    #[arg(long)]
    pub(super) dry_run: bool,
}

#[derive(Debug, Args)]
pub(super) struct AuditArgs {
    /// How many entries.
    #[arg(long, default_value_t = 50)]
    pub(super) limit: usize,
    /// Only entries older than this sequence number (the `seq` of the last entry of a page, with --json).
    #[arg(long, value_name = "SEQ")]
    pub(super) before: Option<u64>,
    /// Only this server's entries (its name).
    #[arg(long, value_name = "NAME")]
    pub(super) server: Option<String>,
    /// Only this action: register, update, verify, remove, connect, disconnect, status.
    #[arg(long)]
    pub(super) action: Option<String>,
    /// Only actors containing this text (health-monitor, supervisor, cli:, config:, an address).
    #[arg(long)]
    pub(super) actor: Option<String>,
    /// Only operations that ended this way.
    #[arg(long, value_enum)]
    pub(super) result: Option<AuditResultArg>,
    /// Only entries from this time on: RFC 3339 (2026-11-26T14:00:00Z) or an age (90s, 15m, 2h, 7d).
    #[arg(long, value_name = "TIME", value_parser = point_in_time)]
    pub(super) since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only entries before this time (same forms as --since).
    #[arg(long, value_name = "TIME", value_parser = point_in_time)]
    pub(super) until: Option<chrono::DateTime<chrono::Utc>>,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(super) enum AuditResultArg {
    Ok,
    Error,
}

#[derive(Debug, Subcommand)]
pub(super) enum SkillsCommand {
    /// List skills with their tool counts (built-in and your own).
    #[command(
        after_help = "Examples:\n  mcp-aggregator skills list\n  mcp-aggregator skills list --all --json"
    )]
    List(SkillListArgs),
    /// Show one skill: description, examples, tools.
    #[command(after_help = "Examples:\n  mcp-aggregator skills show issue_tracking")]
    Show(SkillIdArgs),
    /// Add a skill; tools are classified again to consider it.
    #[command(after_help = "Examples:\n  \
mcp-aggregator skills add gardening --name Gardening --description 'Plants, watering and garden care' \\\n    \
--example 'when should I water the tomatoes' --example 'prune the roses'")]
    Add(SkillEditArgs),
    /// Replace a skill's name, description and examples (built-in ones too).
    Edit(SkillEditArgs),
    /// Delete your skill, or hide a built-in one (`skills show-again` brings it back).
    Remove(SkillIdArgs),
    /// Show a hidden built-in skill again.
    ShowAgain(SkillIdArgs),
    /// List the tools classified into a skill.
    Tools(SkillIdArgs),
    /// Classify tools again (all, or one server's).
    #[command(
        after_help = "Examples:\n  mcp-aggregator skills reclassify\n  mcp-aggregator skills reclassify --server github"
    )]
    Reclassify(ReclassifyArgs),
    /// Where classification stands (tools per state, the classifier).
    Status(ClientArgs),
    /// Skills the taxonomy seems to lack: tools that fit none, grouped by meaning into proposed skills.
    #[command(
        after_help = "Examples:\n  mcp-aggregator skills suggestions\n  mcp-aggregator skills suggestions --json\n\nAccept one with `skills accept ID`; dismiss one with the API (DELETE /api/v1/skills/suggestions/ID)."
    )]
    Suggestions(ClientArgs),
    /// Add the skill a suggestion proposes (optionally with your own id, name, description or examples).
    #[command(after_help = "Examples:\n  \
mcp-aggregator skills accept 3\n  \
mcp-aggregator skills accept 3 --id build_pipelines --name 'Build pipelines'\n\n\
The suggestion leaves the queue and every tool is classified again with the new skill.")]
    Accept(AcceptArgs),
}

#[derive(Debug, Args)]
pub(super) struct AcceptArgs {
    /// Suggestion id (from `skills suggestions`).
    pub(super) suggestion: u64,
    /// The skill's id instead of the one made from the proposed name.
    #[arg(long)]
    pub(super) id: Option<String>,
    /// Display name instead of the proposed one.
    #[arg(long)]
    pub(super) name: Option<String>,
    /// Description instead of the one drawn from the tools.
    #[arg(long)]
    pub(super) description: Option<String>,
    /// Example phrases instead of the proposed ones (repeatable).
    #[arg(long = "example", value_name = "PHRASE")]
    pub(super) examples: Vec<String>,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct SkillListArgs {
    /// Include hidden skills.
    #[arg(long)]
    pub(super) all: bool,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct SkillIdArgs {
    /// Skill id (e.g. issue_tracking).
    pub(super) id: String,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct SkillEditArgs {
    /// Skill id: lowercase letters, digits and '_', starting with a letter.
    pub(super) id: String,
    /// Display name.
    #[arg(long)]
    pub(super) name: String,
    /// What the skill's tools do (what classification compares tools with).
    #[arg(long)]
    pub(super) description: String,
    /// A phrase people use for it (repeatable).
    #[arg(long = "example", value_name = "PHRASE")]
    pub(super) examples: Vec<String>,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct ReclassifyArgs {
    /// Only this server's tools (name or id; repeatable).
    #[arg(long = "server", value_name = "NAME")]
    pub(super) servers: Vec<String>,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub(super) enum StoreCommand {
    /// Check the store file page by page and read every table (through a copy; the file is not changed).
    #[command(after_help = "Examples:\n  \
mcp-aggregator store check\n  \
mcp-aggregator store check --data-dir /var/lib/mcp-aggregator --json\n\n\
Exit code 0 when the store is sound, 1 when damage was found, 2 when it cannot be checked \
(no store there, or a daemon holds it: stop it first).")]
    Check(StoreArgs),
    /// Copy everything readable into a new store (store.recovered.redb); --replace puts it in place.
    #[command(after_help = "Examples:\n  \
mcp-aggregator store recover\n  \
mcp-aggregator store recover --replace\n\n\
The damaged file is never changed: with --replace it is kept as store.redb.damaged-<time>. \
Registrations (with their sealed secrets), history, audit, skills and the catalog are copied as far \
as they can be read; servers' tools are discovered again when they connect, and the search index \
is rebuilt.")]
    Recover(RecoverArgs),
}

#[derive(Debug, Args)]
pub(super) struct StoreArgs {
    #[command(flatten)]
    pub(super) data_dir: DataDirArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Debug, Args)]
pub(super) struct RecoverArgs {
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// Put the recovered store in place of the damaged one (kept beside it).
    #[arg(long)]
    pub(super) replace: bool,
}

/// `cluster …`: replicas sharing one PostgreSQL store.
#[derive(Debug, Subcommand)]
pub(super) enum ClusterCommand {
    /// The replicas whose heartbeat (every 5 s) the shared store saw recently.
    #[command(after_help = "Examples:\n  \
mcp-aggregator cluster status --store postgres://aggregator@db/aggregator\n  \
PGPASSWORD=… mcp-aggregator cluster status --within 60 --json\n\n\
Reads the shared store itself, so it answers while every replica is down. Exit code 0 when at \
least one replica was seen, 1 when none was, 2 when the store cannot be reached or named.")]
    Status(ClusterStatusArgs),
}

#[derive(Debug, Args)]
pub(super) struct ClusterStatusArgs {
    /// The shared store, as given to `serve --store` (no password in it).
    #[arg(long, env = "MCP_AGGREGATOR_STORE", value_name = "URL")]
    pub(super) store: String,
    /// File whose first line is the PostgreSQL password (read instead of PGPASSWORD).
    #[arg(long, env = "MCP_AGGREGATOR_STORE_PASSWORD_FILE", value_name = "FILE")]
    pub(super) store_password_file: Option<std::path::PathBuf>,
    /// Seconds since a replica's last heartbeat within which it is listed.
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub(super) within: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(super) json: bool,
}

/// `tokens …`: named API tokens with scopes.
#[derive(Debug, Subcommand)]
pub(super) enum TokensCommand {
    /// Create a token; its secret is printed once and kept nowhere.
    #[command(after_help = "Examples:\n  \
mcp-aggregator tokens create dashboard --scope read\n  \
mcp-aggregator tokens create laptop --scope mcp --profile coding\n  \
mcp-aggregator tokens create ops --scope admin\n\n\
Scopes: read = GET requests of the admin API; mcp = the MCP endpoint (with --profile: only /mcp/PROFILE); \
admin = everything. Tokens are checked whenever the daemon requires one (bound beyond loopback, or --require-token); \
the audit log names the token of every request.")]
    Create(TokenCreateArgs),
    /// List the tokens (names, scopes, when and by whom created; never secrets).
    List(ClientArgs),
    /// Revoke a token: it stops working at once.
    #[command(after_help = "Examples:\n  mcp-aggregator tokens revoke dashboard")]
    Revoke(TokenNameArgs),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(super) enum ScopeArg {
    Read,
    Mcp,
    Admin,
}

#[derive(Debug, Args)]
pub(super) struct TokenCreateArgs {
    /// The token's name (^[a-z][a-z0-9_-]*$), as the audit log will show it.
    pub(super) name: String,
    /// What it may reach.
    #[arg(long, value_enum)]
    pub(super) scope: ScopeArg,
    /// For --scope mcp: the one view (profile) it reaches, at /mcp/PROFILE.
    #[arg(long)]
    pub(super) profile: Option<String>,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct TokenNameArgs {
    pub(super) name: String,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

/// `profiles …`: views, what a client that picks one sees.
#[derive(Debug, Subcommand)]
pub(super) enum ProfilesCommand {
    /// List the profiles.
    List(ClientArgs),
    /// Show one profile and the tools its view lists now.
    #[command(after_help = "Examples:\n  mcp-aggregator profiles show coding")]
    Show(ProfileNameArgs),
    /// Add a profile, or replace the one of this name. A list left out does not restrict; a tool
    /// must pass every list given. Patterns take `*` and `?`.
    #[command(after_help = "Examples:\n  \
mcp-aggregator profiles set coding --server github --server 'fs*' --exclude-tool 'github.delete_*'\n  \
mcp-aggregator profiles set readers --tool '*__read_*' --tool '*.get_*'\n\n\
A client picks it with `mcp-aggregator stdio --profile coding`, or at /mcp/coding.")]
    Set(ProfileSetArgs),
    /// Remove a profile (clients still using it see nothing from then on).
    Remove(ProfileNameArgs),
}

#[derive(Debug, Args)]
pub(super) struct ProfileNameArgs {
    /// Profile name (e.g. coding).
    pub(super) name: String,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct ProfileSetArgs {
    /// Profile name: lowercase letters, digits, `_` and `-`, starting with a letter.
    pub(super) name: String,
    #[arg(long)]
    pub(super) description: Option<String>,
    /// Only these servers (names or globs); repeat for more.
    #[arg(long = "server", value_name = "NAME")]
    pub(super) servers: Vec<String>,
    /// Only these tools: ids (`server.tool`) or wire names (`server__tool`), or globs; repeat.
    #[arg(long = "tool", value_name = "PATTERN")]
    pub(super) tools: Vec<String>,
    /// Leave these tools out (globs); repeat.
    #[arg(long = "exclude-tool", value_name = "PATTERN")]
    pub(super) exclude_tools: Vec<String>,
    /// Only tools classified into these skills (ids or globs); repeat.
    #[arg(long = "skill", value_name = "ID")]
    pub(super) skills: Vec<String>,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct LoginArgs {
    /// Server name (as in `servers list`).
    pub(super) name: String,
    /// Only print the URL; do not try to open a browser.
    #[arg(long)]
    pub(super) no_browser: bool,
    /// A device login (for a box without a browser): open the URL shown on any device and type
    /// the code shown; needs an authorization server that offers it.
    #[arg(long)]
    pub(super) device: bool,
    /// Seconds to wait for the login to finish (0: print the URL and return).
    #[arg(long, value_name = "SECONDS", default_value_t = 900)]
    pub(super) wait: u64,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}

#[derive(Debug, Args)]
pub(super) struct ServerNameArgs {
    /// Server name (as in `servers list`).
    pub(super) name: String,
    #[command(flatten)]
    pub(super) client: ClientArgs,
}
