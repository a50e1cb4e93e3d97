//! The command line's shape: `Cli`, its subcommands and their help texts
//! (what clap parses; running them is `mod.rs`'s).

use clap::{Parser, Subcommand};

use super::admin_args::{
    AuditArgs, CallArgs, ClientArgs, ClientCommand, ClusterCommand, ImportArgs, ProfilesCommand,
    SearchArgs, ServersCommand, SkillsCommand, StoreCommand, TokensCommand, ToolsArgs,
};
use super::daemon_args::{ServeArgs, StdioArgs};
use crate::logging::LogFormat;

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
    pub(super) log_format: LogFormat,

    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Debug, Subcommand)]
pub(super) enum Command {
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
    /// Set up an MCP client (Claude Desktop, Claude Code, Cursor, VS Code, …) to use the
    /// aggregator.
    #[command(subcommand)]
    Client(ClientCommand),
    /// Register every server of a config file (Claude Desktop / VS Code format), or of a client's
    /// own file, with a running daemon.
    #[command(after_help = "Examples:\n  \
mcp-aggregator import claude-desktop\n  \
mcp-aggregator import vscode --project .\n  \
mcp-aggregator import ~/.config/Claude/claude_desktop_config.json\n  \
mcp-aggregator import .vscode/mcp.json --json\n\n\
The aggregator's own entry in a client's file is skipped. \
Variables ($VAR, ${VAR}, ${VAR:-default}, ${env:VAR}) expand from this shell's environment. \
Servers whose name is already registered are skipped; remove them first to replace them.")]
    Import(ImportArgs),
    /// List the tools of every server (or of one), with the names MCP clients see; review held-back ones.
    #[command(
        after_help = "Examples:\n  mcp-aggregator tools\n  mcp-aggregator tools --server github --json\n  mcp-aggregator tools held\n  mcp-aggregator tools diff github.create_issue\n  mcp-aggregator tools approve github.create_issue"
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
    Skills(SkillsCommand),
    /// Profiles (views): which servers, tools and skills a client that picks one sees.
    #[command(subcommand)]
    Profiles(ProfilesCommand),
    /// Named API tokens with scopes (read, mcp, admin): create, list, revoke.
    #[command(subcommand)]
    Tokens(TokensCommand),
    /// Check a store file for damage, and recover what can be read of a damaged one.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Replicas sharing one PostgreSQL store (`serve --store`): which are alive.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Log in to a server that asks for it (OAuth): prints the URL to open, opens a browser when
    /// there is one, and waits until the server is logged in.
    #[command(after_help = "Examples:\n  \
mcp-aggregator login github\n  \
mcp-aggregator login linear --no-browser --wait 600\n\n\
The authorization server sends the browser back to the daemon's own listener \
(http://127.0.0.1:PORT/oauth/callback): open the URL on the machine the daemon runs on, or \
forward that port (ssh -L PORT:127.0.0.1:PORT box). Tokens are kept sealed in the data dir \
and refreshed before they expire.")]
    Login(super::admin_args::LoginArgs),
    /// Forget a server's login (revoking its tokens where the authorization server offers it).
    Logout(super::admin_args::ServerNameArgs),
    /// Print a shell's completion script for this command line.
    #[command(after_help = "Examples:\n  \
mcp-aggregator completions bash > ~/.local/share/bash-completion/completions/mcp-aggregator\n  \
mcp-aggregator completions zsh > ~/.zfunc/_mcp-aggregator\n  \
mcp-aggregator completions fish > ~/.config/fish/completions/mcp-aggregator.fish\n\n\
scripts/install.sh and the .deb install them for you.")]
    Completions(CompletionsArgs),
    /// Write the man pages (one per command), or print the main one.
    #[command(after_help = "Examples:\n  \
mcp-aggregator man | man -l -\n  \
mcp-aggregator man --dir ~/.local/share/man/man1")]
    Man(ManArgs),
}

#[derive(Debug, clap::Args)]
pub(super) struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub(super) shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
pub(super) struct ManArgs {
    /// Write `mcp-aggregator.1` and a page per command (`mcp-aggregator-serve.1`, …) into this
    /// directory (created if missing) instead of printing the main page.
    #[arg(long, value_name = "DIR")]
    pub(super) dir: Option<std::path::PathBuf>,
}
