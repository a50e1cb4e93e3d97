//! The MCP clients the CLI knows: where each keeps its server list (per
//! platform, as each documents it) and how an entry there is written.
//! `client setup` writes the aggregator into that list; `import CLIENT`
//! reads the servers out of it.

use std::path::{Path, PathBuf};

/// One client's config file and the shape of its server entries.
pub(super) struct McpClient {
    /// What the user types (`claude-desktop`).
    pub(super) id: &'static str,
    pub(super) title: &'static str,
    /// The object that holds the servers (`mcpServers`, VS Code's `servers`).
    pub(super) section: &'static str,
    /// Whether entries carry `"type": "stdio"` (the clients that accept
    /// remote servers in the same list ask for it).
    pub(super) typed_entries: bool,
    user_file: fn() -> Option<PathBuf>,
    /// The file inside a project directory, for clients with a project scope.
    project_file: Option<&'static str>,
}

fn home(rest: &str) -> Option<PathBuf> {
    dirs::home_dir().map(|home| home.join(rest))
}

/// `dirs::config_dir()` is `~/.config` on Linux, `~/Library/Application
/// Support` on macOS and `%APPDATA%` on Windows: where Electron apps keep
/// their files on each.
fn app_config(rest: &str) -> Option<PathBuf> {
    dirs::config_dir().map(|dir| dir.join(rest))
}

pub(super) const CLIENTS: &[McpClient] = &[
    McpClient {
        id: "claude-desktop",
        title: "Claude Desktop",
        section: "mcpServers",
        typed_entries: false,
        user_file: || app_config("Claude/claude_desktop_config.json"),
        project_file: None,
    },
    McpClient {
        id: "claude-code",
        title: "Claude Code",
        section: "mcpServers",
        typed_entries: true,
        user_file: || home(".claude.json"),
        project_file: Some(".mcp.json"),
    },
    McpClient {
        id: "cursor",
        title: "Cursor",
        section: "mcpServers",
        typed_entries: false,
        user_file: || home(".cursor/mcp.json"),
        project_file: Some(".cursor/mcp.json"),
    },
    McpClient {
        id: "vscode",
        title: "VS Code",
        section: "servers",
        typed_entries: true,
        user_file: || app_config("Code/User/mcp.json"),
        project_file: Some(".vscode/mcp.json"),
    },
    McpClient {
        id: "windsurf",
        title: "Windsurf",
        section: "mcpServers",
        typed_entries: false,
        user_file: || home(".codeium/windsurf/mcp_config.json"),
        project_file: None,
    },
    McpClient {
        id: "gemini-cli",
        title: "Gemini CLI",
        section: "mcpServers",
        typed_entries: false,
        user_file: || home(".gemini/settings.json"),
        project_file: Some(".gemini/settings.json"),
    },
];

pub(super) fn client_ids() -> String {
    CLIENTS.iter().map(|c| c.id).collect::<Vec<_>>().join(", ")
}

pub(super) fn find(id: &str) -> Option<&'static McpClient> {
    let id = id.to_ascii_lowercase();
    let id = match id.as_str() {
        "claude" => "claude-desktop",
        "code" | "vs-code" | "visual-studio-code" => "vscode",
        "gemini" => "gemini-cli",
        other => other,
    };
    CLIENTS.iter().find(|c| c.id == id)
}

impl McpClient {
    /// The file this client reads: the project's (under `project`) or the
    /// user's.
    pub(super) fn config_file(&self, project: Option<&Path>) -> Result<PathBuf, String> {
        match project {
            Some(dir) => self
                .project_file
                .map(|file| dir.join(file))
                .ok_or_else(|| format!("{} has no per-project servers file", self.title)),
            None => (self.user_file)()
                .ok_or_else(|| "no home directory found (is HOME set?)".to_owned()),
        }
    }

    pub(super) fn has_project_scope(&self) -> bool {
        self.project_file.is_some()
    }
}
