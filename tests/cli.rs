//! The command line against a real daemon: every admin sub-command, its
//! JSON output, exit codes, and help text with examples.

mod common;

use common::{BIN, Daemon, cli};
use serde_json::Value;
use std::process::{Command, Stdio};

#[test]
fn help_has_examples_at_every_level() {
    for args in [
        vec!["--help"],
        vec!["serve", "--help"],
        vec!["servers", "add", "--help"],
        vec!["servers", "list", "--help"],
        vec!["servers", "show", "--help"],
        vec!["servers", "remove", "--help"],
        vec!["import", "--help"],
        vec!["servers", "connect", "--help"],
        vec!["servers", "disconnect", "--help"],
        vec!["tools", "--help"],
        vec!["profiles", "set", "--help"],
    ] {
        let output = Command::new(BIN).args(&args).output().unwrap();
        assert!(output.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains("Examples:"),
            "{args:?} has no examples:\n{text}"
        );
        assert!(text.contains("mcp-aggregator"), "{args:?}");
    }
    let output = Command::new(BIN)
        .args(["servers", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    for sub in ["add", "list", "show", "remove", "connect", "disconnect"] {
        assert!(text.contains(sub), "servers --help lists {sub}");
    }
}

#[test]
fn usage_errors_exit_2() {
    let output = Command::new(BIN)
        .args(["servers", "frobnicate"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let output = Command::new(BIN)
        .args(["serve", "--listen", "not-an-address"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    // A stdio server's command without `--` gets the hint to add it.
    let output = Command::new(BIN)
        .args(["servers", "add", "time", "uvx", "mcp-server-time"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unexpected argument") && stderr.contains("-- uvx mcp-server-time"),
        "{stderr}"
    );
    let output = Command::new(BIN)
        .args(["stdio", "--config", "/no/such/file.json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("Config file not found"));
    assert!(output.stdout.is_empty(), "stdout carries nothing but MCP");
    for bad in [
        ["--health-interval", "0"],
        ["--health-interval", "soon"],
        ["--otlp-endpoint", "collector:4318"],
    ] {
        let output = Command::new(BIN)
            .arg("serve")
            .args(bad)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{bad:?}");
        assert!(!output.stderr.is_empty(), "{bad:?} says why");
    }
}

#[test]
fn without_a_daemon_the_cli_says_so() {
    let temp = tempfile::tempdir().unwrap();
    // A port nothing listens on: bind, note it, release it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let (code, _, stderr) = cli(temp.path(), &["servers", "list", "--url", &url]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("no mcp-aggregator daemon is answering"),
        "{stderr}"
    );
    assert!(stderr.contains("mcp-aggregator serve"), "{stderr}");
    // A data dir named without a daemon: said so, and nothing is sent to
    // whatever listens at the fallback address (another data dir's
    // daemon; here a listener that never answers).
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    elsewhere.set_nonblocking(true).unwrap();
    let output = Command::new(BIN)
        .args(["servers", "remove", "github"])
        .env("MCP_AGGREGATOR_DATA_DIR", temp.path())
        .env(
            "MCP_AGGREGATOR_LISTEN",
            elsewhere.local_addr().unwrap().to_string(),
        )
        .env_remove("MCP_AGGREGATOR_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let (code, stderr) = (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    assert!(
        elsewhere.accept().is_err(),
        "the command reached the fallback address"
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("no mcp-aggregator daemon runs on the data dir")
            && stderr.contains(&temp.path().display().to_string()),
        "{stderr}"
    );
    // A --url that is no http(s) URL is a usage error, not a daemon gone.
    for wrong in ["notaurl", "ftp://127.0.0.1/", "127.0.0.1:8765"] {
        let (code, _, stderr) = cli(temp.path(), &["servers", "list", "--url", wrong]);
        assert_eq!(code, 2, "{wrong}: {stderr}");
        assert!(stderr.contains("is not an http(s) URL"), "{stderr}");
    }
}

#[test]
fn add_list_show_remove_round_trip() {
    let d = Daemon::start();
    let dir = &d.data_dir;
    let (code, stdout, stderr) = cli(
        dir,
        &[
            "servers",
            "add",
            "time",
            "--description",
            "clock",
            "--env",
            "TZ=UTC",
            "--no-auto-connect",
            "--",
            "uvx",
            "mcp-server-time",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("registered time"), "{stdout}");
    let (code, _, stderr) = cli(
        dir,
        &[
            "servers",
            "add",
            "remote",
            "--http",
            "http://127.0.0.1:9/mcp",
            "--header",
            "Authorization: Bearer sekrit",
            "--priority",
            "3",
            "--no-auto-connect",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = cli(
        dir,
        &[
            "servers",
            "add",
            "legacy",
            "--sse",
            "http://127.0.0.1:9/sse",
            "--no-auto-connect",
        ],
    );
    assert_eq!(code, 0, "{stderr}");

    let (code, stdout, _) = cli(dir, &["servers", "list"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].contains("NAME") && lines[0].contains("STATUS"),
        "{stdout}"
    );
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(stdout.contains("legacy") && stdout.contains("SSE") && stdout.contains("DISCONNECTED"));

    let (code, stdout, _) = cli(dir, &["servers", "list", "--json"]);
    assert_eq!(code, 0);
    let list: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(list.len(), 3);
    let remote = list.iter().find(|s| s["name"] == "remote").unwrap();
    assert_eq!(remote["transport_type"], "HTTP");
    assert_eq!(remote["priority"], 3);
    assert_eq!(
        remote["connection_config"]["headers"]["Authorization"],
        "***"
    );
    assert!(!stdout.contains("sekrit"));
    let legacy = list.iter().find(|s| s["name"] == "legacy").unwrap();
    assert_eq!(legacy["auto_connect"], false);

    let (code, stdout, _) = cli(dir, &["servers", "list", "--status", "ERROR", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(stdout.trim(), "[]");

    let (code, stdout, _) = cli(dir, &["servers", "show", "time"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("clock") && stdout.contains("uvx") && stdout.contains("REGISTERED"),
        "{stdout}"
    );
    let (code, stdout, _) = cli(dir, &["servers", "show", "time", "--json"]);
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(shown["connection_config"]["env"]["TZ"], "***");
    assert_eq!(shown["history"][0]["event_type"], "REGISTERED");

    let (code, stdout, _) = cli(dir, &["state", "--json"]);
    assert_eq!(code, 0);
    let state: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(state["total_servers"], 3);

    let (code, stdout, _) = cli(dir, &["servers", "remove", "time"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("removed time"));
    let (code, _, stderr) = cli(dir, &["servers", "show", "time"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("Server not found: time"), "{stderr}");

    let (code, stdout, _) = cli(dir, &["audit", "--json"]);
    assert_eq!(code, 0);
    let audit: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(audit[0]["action"], "remove");
    assert!(
        audit[0]["actor"].as_str().unwrap().starts_with("cli:"),
        "{}",
        audit[0]
    );
}

#[test]
fn refused_registrations_exit_2_with_the_reason() {
    let d = Daemon::start();
    let dir = &d.data_dir;
    let (code, _, stderr) = cli(dir, &["servers", "add", "Bad.Name", "--", "x"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("name:"), "{stderr}");
    let (code, _, _) = cli(dir, &["servers", "add", "dup", "--", "x"]);
    assert_eq!(code, 0);
    let (code, _, stderr) = cli(dir, &["servers", "add", "dup", "--", "x"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("Server already exists: dup"), "{stderr}");
    let (code, _, stderr) = cli(dir, &["servers", "add", "nothing"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--http"), "{stderr}");
    let (code, _, stderr) = cli(dir, &["servers", "add", "bad-url", "--http", "ftp://x"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("http://"), "{stderr}");
}

#[test]
fn import_registers_a_claude_desktop_file_and_skips_existing() {
    let d = Daemon::start();
    let dir = &d.data_dir;
    let file = dir.with_extension("import.json");
    std::fs::write(
        &file,
        r#"{"mcpServers": {
            "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
            "GitHub": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": {"GITHUB_TOKEN": "${MCPAGG_IMPORT_TOKEN:-none}"}}
        }}"#,
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let (code, stdout, stderr) = cli(dir, &["import", file, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let results: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(results.len(), 2);
    assert!(
        results.iter().all(|r| r["result"] == "registered"),
        "{stdout}"
    );
    assert!(
        stderr.contains("registered as \"github\""),
        "the renamed key is reported: {stderr}"
    );

    let (code, stdout, _) = cli(dir, &["import", file]);
    assert_eq!(code, 0);
    assert_eq!(stdout.matches("skipped").count(), 2, "{stdout}");

    let (code, _, stderr) = cli(dir, &["import", "/no/such/file.json"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("Config file not found"), "{stderr}");
}

/// The binary's allocator settings reach mimalloc (it reads them from the
/// environment in its constructor; `main.rs` puts them there first), and a
/// value the user set stands.
#[test]
fn the_allocator_starts_with_the_binary_settings_unless_the_user_set_them() {
    let options = |env: &[(&str, &str)]| {
        let output = Command::new(BIN)
            .arg("--version")
            .env("MIMALLOC_VERBOSE", "1")
            .env_remove("MIMALLOC_ARENA_EAGER_COMMIT")
            .env_remove("MIMALLOC_PAGE_COMMIT_ON_DEMAND")
            .envs(env.iter().copied())
            .output()
            .expect("run the binary");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let ours = options(&[]);
    assert!(ours.contains("option 'arena_eager_commit': 0"), "{ours}");
    assert!(ours.contains("option 'page_commit_on_demand': 1"), "{ours}");
    let users = options(&[("MIMALLOC_PAGE_COMMIT_ON_DEMAND", "0")]);
    assert!(
        users.contains("option 'page_commit_on_demand': 0"),
        "{users}"
    );
}

/// `profiles set|list|show|remove` through the daemon; a bad name is
/// exit 2 with the reason.
#[test]
fn profiles_round_trip() {
    let d = Daemon::start();
    let dir = &d.data_dir;
    let (code, stdout, stderr) = cli(
        dir,
        &[
            "profiles",
            "set",
            "coding",
            "--server",
            "github",
            "--exclude-tool",
            "github.delete_*",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("/mcp/coding"), "{stdout}");
    let (code, stdout, stderr) = cli(dir, &["profiles", "list"]);
    assert_eq!(code, 0, "{stderr}");
    let row = stdout
        .lines()
        .find(|l| l.contains("coding"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.contains("github") && row.contains("api"), "{row}");
    let (code, stdout, _) = cli(dir, &["profiles", "show", "coding", "--json"]);
    assert_eq!(code, 0);
    let shown: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        shown["exclude_tools"],
        serde_json::json!(["github.delete_*"])
    );
    let (code, _, stderr) = cli(dir, &["profiles", "set", "Not Valid"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("name"), "{stderr}");
    let (code, _, stderr) = cli(dir, &["profiles", "remove", "coding"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = cli(dir, &["profiles", "show", "coding"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("Profile not found: coding"), "{stderr}");
}

/// The CLI run with `home` as the user's home (where clients keep their
/// files), and no terminal: nothing is written without `--yes`.
fn cli_at_home(home: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(BIN)
        .args(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("MCP_AGGREGATOR_DATA_DIR")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the CLI");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `client setup`: shows the change, writes nothing without --yes (no
/// terminal to ask), then merges the aggregator's entry into the client's
/// own file (other keys kept, the old file backed up, its mode kept), and
/// with --move-servers moves the client's servers into the aggregator's
/// config file; a second run changes nothing.
#[test]
fn client_setup_merges_backs_up_and_moves_the_servers() {
    use std::os::unix::fs::PermissionsExt as _;
    let temp = tempfile::tempdir().unwrap();
    let home = temp.path();
    let claude = home.join(".config/Claude/claude_desktop_config.json");
    std::fs::create_dir_all(claude.parent().unwrap()).unwrap();
    let original = r#"{"globalShortcut": "Ctrl+Space", "mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}"#;
    std::fs::write(&claude, original).unwrap();
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o600)).unwrap();

    let (code, stdout, stderr) = cli_at_home(home, &["client", "setup", "claude-desktop"]);
    assert_eq!(code, 2, "no terminal, no --yes: refused\n{stdout}{stderr}");
    assert!(
        stdout.contains("+ \"aggregator\""),
        "the change is shown first: {stdout}"
    );
    assert!(stderr.contains("--yes"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&claude).unwrap(), original);

    let move_servers = [
        "client",
        "setup",
        "claude-desktop",
        "--profile",
        "coding",
        "--move-servers",
        "--yes",
    ];
    let (code, stdout, stderr) = cli_at_home(home, &move_servers);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // The profile is in no file the entry applies: said, not refused (the
    // daemon may have it).
    assert!(stderr.contains("profile \"coding\" must exist"), "{stderr}");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&claude).unwrap()).unwrap();
    assert_eq!(
        written["globalShortcut"], "Ctrl+Space",
        "other keys are kept"
    );
    let servers = written["mcpServers"].as_object().unwrap();
    assert_eq!(
        servers.keys().collect::<Vec<_>>(),
        ["aggregator"],
        "{written}"
    );
    let entry = &servers["aggregator"];
    let command = std::path::PathBuf::from(entry["command"].as_str().unwrap());
    assert!(command.is_absolute(), "{entry}");
    assert_eq!(
        std::fs::canonicalize(&command).unwrap(),
        std::fs::canonicalize(BIN).unwrap()
    );
    let ours = home.join(".config/mcp-aggregator/servers.json");
    assert_eq!(
        entry["args"],
        serde_json::json!([
            "stdio",
            "--profile",
            "coding",
            "--config",
            ours.to_str().unwrap()
        ])
    );
    let moved: Value = serde_json::from_str(&std::fs::read_to_string(&ours).unwrap()).unwrap();
    assert_eq!(
        moved["mcpServers"]["time"],
        serde_json::json!({"command": "uvx", "args": ["mcp-server-time"]})
    );
    let mode = std::fs::metadata(&claude).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the file keeps its mode");
    let backups: Vec<_> = std::fs::read_dir(claude.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".bak-"))
        .collect();
    assert_eq!(backups.len(), 1);
    assert_eq!(
        std::fs::read_to_string(backups[0].path()).unwrap(),
        original
    );

    let (code, stdout, _) = cli_at_home(home, &move_servers);
    assert_eq!(code, 0);
    assert!(stdout.contains("nothing to change"), "{stdout}");

    // VS Code's list is `servers`, its entries typed; a project's file.
    let project = temp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let (code, stdout, stderr) = cli_at_home(
        home,
        &[
            "client",
            "setup",
            "vscode",
            "--project",
            project.to_str().unwrap(),
            "--yes",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let vscode: Value =
        serde_json::from_str(&std::fs::read_to_string(project.join(".vscode/mcp.json")).unwrap())
            .unwrap();
    assert_eq!(vscode["servers"]["aggregator"]["type"], "stdio");
    // The default config exists now (--move-servers made it): applied
    // without being named, so the servers added there show.
    assert_eq!(
        vscode["servers"]["aggregator"]["args"],
        serde_json::json!(["stdio", "--config", ours.to_str().unwrap()])
    );
    assert!(stdout.contains("the default config"), "{stdout}");

    // A file with comments is not rewritten (they would be lost).
    let cursor = home.join(".cursor/mcp.json");
    std::fs::create_dir_all(cursor.parent().unwrap()).unwrap();
    std::fs::write(&cursor, "{\n  // mine\n  \"mcpServers\": {}\n}").unwrap();
    let (code, _, stderr) = cli_at_home(home, &["client", "setup", "cursor", "--yes"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not plain JSON"), "{stderr}");
    // What to add by hand is shown.
    assert!(
        stderr.contains("under `mcpServers`, add:") && stderr.contains("\"aggregator\": {"),
        "{stderr}"
    );

    // A dotfile linked from a dotfiles repository stays a link.
    let dotfiles = temp.path().join("dotfiles/gemini.json");
    std::fs::create_dir_all(dotfiles.parent().unwrap()).unwrap();
    std::fs::write(&dotfiles, r#"{"theme": "dark"}"#).unwrap();
    let gemini = home.join(".gemini/settings.json");
    std::fs::create_dir_all(gemini.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&dotfiles, &gemini).unwrap();
    let (code, stdout, stderr) = cli_at_home(home, &["client", "setup", "gemini-cli", "--yes"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        std::fs::symlink_metadata(&gemini)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let linked: Value = serde_json::from_str(&std::fs::read_to_string(&dotfiles).unwrap()).unwrap();
    assert_eq!(linked["theme"], "dark");
    assert!(linked["mcpServers"]["aggregator"].is_object(), "{linked}");

    // Not a regular file: refused before anything is read or replaced.
    let (code, _, stderr) = cli_at_home(
        home,
        &["client", "setup", "cursor", "--file", "/dev/null", "--yes"],
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("not a regular file"), "{stderr}");

    // A server under the entry's name is never replaced.
    let windsurf = home.join(".codeium/windsurf/mcp_config.json");
    std::fs::create_dir_all(windsurf.parent().unwrap()).unwrap();
    std::fs::write(
        &windsurf,
        r#"{"mcpServers": {"aggregator": {"command": "uvx", "args": ["x"]}}}"#,
    )
    .unwrap();
    let (code, _, stderr) = cli_at_home(home, &["client", "setup", "windsurf", "--yes"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("already another server"), "{stderr}");
    // Nor are the aggregator's servers put into the client's own file.
    let (code, _, stderr) = cli_at_home(
        home,
        &[
            "client",
            "setup",
            "windsurf",
            "--move-servers",
            "--config",
            windsurf.to_str().unwrap(),
            "--yes",
        ],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("file of their own"), "{stderr}");
    // Backups made within one second do not overwrite each other.
    for profile in ["p1", "p2"] {
        let (code, _, stderr) = cli_at_home(
            home,
            &[
                "client",
                "setup",
                "gemini-cli",
                "--profile",
                profile,
                "--yes",
            ],
        );
        assert_eq!(code, 0, "{stderr}");
    }
    let backups = std::fs::read_dir(dotfiles.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".bak-"))
        .count();
    assert_eq!(backups, 3, "one backup per write");

    let (code, _, stderr) = cli_at_home(home, &["client", "setup", "notepad"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("claude-desktop, claude-code"), "{stderr}");
    let (code, stdout, _) = cli_at_home(home, &["client", "list"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("set up (0 other servers)"), "{stdout}");
}

/// `import CLIENT` reads that client's own file, and skips the
/// aggregator's own entry (registering it would have the aggregator start
/// itself).
#[test]
fn import_takes_a_clients_servers_but_not_the_aggregator_itself() {
    let d = Daemon::start();
    let home = d.data_dir.with_extension("home");
    let cursor = home.join(".cursor/mcp.json");
    std::fs::create_dir_all(cursor.parent().unwrap()).unwrap();
    std::fs::write(
        &cursor,
        format!(
            r#"{{"mcpServers": {{
                "aggregator": {{"command": "{BIN}", "args": ["stdio"]}},
                "time": {{"command": "uvx", "args": ["mcp-server-time"]}}
            }}}}"#
        ),
    )
    .unwrap();
    let output = Command::new(BIN)
        .args(["import", "cursor", "--json"])
        .env("HOME", &home)
        .env("MCP_AGGREGATOR_DATA_DIR", &d.data_dir)
        .env_remove("MCP_AGGREGATOR_URL")
        .env_remove("MCP_AGGREGATOR_LISTEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    let results: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(results.len(), 1, "{stdout}");
    assert_eq!(results[0]["name"], "time");
    assert!(stderr.contains("skipped"), "{stderr}");
    let (_, listed, _) = cli(&d.data_dir, &["servers", "list", "--json"]);
    assert!(!listed.contains("\"aggregator\""), "{listed}");
}

/// `scripts/install.sh` and `uninstall.sh`, as a user runs them: the
/// binary, completions for three shells and the man pages under a prefix,
/// the default config created once and never overwritten; uninstall takes
/// exactly what was installed and leaves the config.
#[test]
fn install_and_uninstall_in_one_command_each() {
    let temp = tempfile::tempdir().unwrap();
    let prefix = temp.path().join("prefix");
    let home = temp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = |script: &str, args: &[&str]| {
        let output = Command::new(root.join("scripts").join(script))
            .args(args)
            .env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "{script} {args:?}: {text}");
    };
    let prefix_arg = prefix.to_str().unwrap();
    run("install.sh", &["--prefix", prefix_arg, "--binary", BIN]);
    let installed = prefix.join("bin/mcp-aggregator");
    let version = Command::new(&installed).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("mcp-aggregator "));
    for file in [
        "share/bash-completion/completions/mcp-aggregator",
        "share/zsh/site-functions/_mcp-aggregator",
        "share/fish/vendor_completions.d/mcp-aggregator.fish",
        "share/man/man1/mcp-aggregator.1",
        "share/man/man1/mcp-aggregator-client-setup.1",
    ] {
        assert!(prefix.join(file).is_file(), "{file} is installed");
    }
    let config = home.join(".config/mcp-aggregator/servers.json");
    let created: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(created, serde_json::json!({"mcpServers": {}}));

    // Installing again upgrades in place; the user's config stands.
    let edited = r#"{"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}"#;
    std::fs::write(&config, edited).unwrap();
    run("install.sh", &["--prefix", prefix_arg, "--binary", BIN]);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);

    run("uninstall.sh", &["--prefix", prefix_arg]);
    let left: Vec<_> = walk(&prefix);
    assert!(left.is_empty(), "nothing of the install is left: {left:?}");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        edited,
        "the config stays"
    );
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// A token set through the environment that no HTTP client could send
/// stops the daemon at start with the reason, instead of locking everyone
/// out.
#[test]
fn a_token_no_client_could_send_is_refused_at_start() {
    let temp = tempfile::tempdir().unwrap();
    let output = Command::new(BIN)
        .args([
            "serve",
            "--require-token",
            "--search",
            "off",
            "--listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(temp.path())
        .env("MCP_AGGREGATOR_TOKEN", "t\u{f6}k\u{e9}n with spaces")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot be used as a token"), "{stderr}");
}

/// Two clients moving their servers into the aggregator's one file at the
/// same moment: each run either moves its client's servers or changes
/// nothing; no server is lost.
#[test]
fn concurrent_moves_lose_no_server() {
    for _ in 0..3 {
        let temp = tempfile::tempdir().unwrap();
        let home = temp.path();
        let code_file = home.join(".claude.json");
        let cursor_file = home.join(".cursor/mcp.json");
        std::fs::create_dir_all(cursor_file.parent().unwrap()).unwrap();
        std::fs::write(
            &code_file,
            r#"{"mcpServers": {"alpha": {"command": "uvx", "args": ["alpha"]}}}"#,
        )
        .unwrap();
        std::fs::write(
            &cursor_file,
            r#"{"mcpServers": {"beta": {"command": "uvx", "args": ["beta"]}}}"#,
        )
        .unwrap();
        let spawn = |client: &str| {
            Command::new(BIN)
                .args(["client", "setup", client, "--move-servers", "--yes"])
                .env("HOME", home)
                .env_remove("XDG_CONFIG_HOME")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        };
        let mut runs = [spawn("claude-code"), spawn("cursor")];
        for run in &mut runs {
            run.wait().unwrap();
        }
        let ours = home.join(".config/mcp-aggregator/servers.json");
        let moved: Value = std::fs::read_to_string(&ours)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        for (server, file) in [("alpha", &code_file), ("beta", &cursor_file)] {
            let client: Value =
                serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
            let kept = client["mcpServers"].get(server).is_some();
            let in_ours = moved["mcpServers"].get(server).is_some();
            assert!(kept || in_ours, "{server} was lost: {client} / {moved}");
        }
    }
}

/// The default data dir, whose daemon is not running: the CLI falls back
/// to the default address (or MCP_AGGREGATOR_LISTEN), but never sends that
/// data dir's admin token to whatever listens there.
#[test]
fn a_data_dirs_token_goes_only_to_its_own_daemon() {
    use std::io::{BufRead as _, BufReader, Write as _};
    let temp = tempfile::tempdir().unwrap();
    // The default data dir (a named one without a daemon has no fallback
    // address at all: `without_a_daemon_the_cli_says_so`).
    let data = temp.path().join("mcp-aggregator");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("admin.token"), "secret-token-of-this-dir\n").unwrap();
    // Someone else's listener on the fallback address.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let seen = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let mut stream = stream;
        let _ = stream.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]",
        );
        head
    });
    let output = Command::new(BIN)
        .args(["servers", "list"])
        .env("XDG_DATA_HOME", temp.path())
        .env_remove("MCP_AGGREGATOR_DATA_DIR")
        .env("MCP_AGGREGATOR_LISTEN", address.to_string())
        .env_remove("MCP_AGGREGATOR_URL")
        .env_remove("MCP_AGGREGATOR_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let head = seen.join().unwrap();
    assert!(head.starts_with("GET /api/v1/aggregator/servers"), "{head}");
    assert!(
        !head.to_lowercase().contains("authorization"),
        "the token went to a stranger: {head}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A plain `client setup` and a `--move-servers` one on the same client's
/// file at once: each run that says it wrote has its change in the file.
#[test]
fn a_plain_and_a_moving_setup_of_one_client_lose_no_change() {
    for _ in 0..4 {
        let temp = tempfile::tempdir().unwrap();
        let home = temp.path();
        let cursor_file = home.join(".cursor/mcp.json");
        std::fs::create_dir_all(cursor_file.parent().unwrap()).unwrap();
        std::fs::write(
            &cursor_file,
            r#"{"mcpServers": {"alpha": {"command": "uvx", "args": ["alpha"]}}}"#,
        )
        .unwrap();
        let spawn = |extra: &[&str]| {
            Command::new(BIN)
                .args(["client", "setup", "cursor", "--yes"])
                .args(extra)
                .env("HOME", home)
                .env_remove("XDG_CONFIG_HOME")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        };
        let mut moving = spawn(&["--move-servers"]);
        let mut plain = spawn(&["--name", "second"]);
        let moved = moving.wait().unwrap().success();
        let added = plain.wait().unwrap().success();
        let client: Value =
            serde_json::from_str(&std::fs::read_to_string(&cursor_file).unwrap()).unwrap();
        let ours: Value = std::fs::read_to_string(home.join(".config/mcp-aggregator/servers.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        if added {
            assert!(client["mcpServers"].get("second").is_some(), "{client}");
        }
        if moved {
            assert!(client["mcpServers"].get("aggregator").is_some(), "{client}");
            assert!(ours["mcpServers"].get("alpha").is_some(), "{ours}");
        }
        let in_client = client["mcpServers"].get("alpha").is_some();
        let in_ours = ours["mcpServers"].get("alpha").is_some();
        assert!(in_client || in_ours, "alpha was lost: {client} / {ours}");
    }
}

/// Run as root in a user's home (`sudo -E`), links the user planted are
/// not followed to files the user does not own: not the client's file
/// (root's file is neither shown nor rewritten), not the set-up lock; a
/// link to the user's own file (a dotfiles repository) still is. The rest
/// of the run is the user's: what it makes (the client's directory and
/// file, the lock, backups) is the user's, not root's.
#[test]
fn root_setup_follows_no_link_a_user_planted_and_leaves_only_the_users_files() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _, chown, lchown, symlink};
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root");
        return;
    }
    const USER: u32 = 4242;
    let temp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = temp.path().join("home");
    let elsewhere = temp.path().join("root-only");
    let dotfiles = temp.path().join("dotfiles");
    for dir in [&home, &elsewhere, &dotfiles] {
        std::fs::create_dir_all(dir).unwrap();
    }
    chown(&home, Some(USER), Some(USER)).unwrap();
    chown(&dotfiles, Some(USER), Some(USER)).unwrap();

    // Nothing there yet: the directory and the file are made as the user.
    let (code, stdout, stderr) = cli_at_home(&home, &["client", "setup", "cursor", "--yes"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let cursor_dir = home.join(".cursor");
    let cursor_file = cursor_dir.join("mcp.json");
    let lock = cursor_dir.join(".mcp-aggregator-setup.lock");
    for made in [&cursor_dir, &cursor_file, &lock] {
        let owner = std::fs::metadata(made).unwrap().uid();
        assert_eq!(owner, USER, "{} is root's", made.display());
    }

    // A link the user made to root's file: refused, the file neither
    // shown nor changed.
    let roots_file = elsewhere.join("settings.json");
    let roots_text = r#"{"mcpServers": {"secret": {"command": "x", "env": {"KEY": "hush"}}}}"#;
    std::fs::write(&roots_file, roots_text).unwrap();
    std::fs::remove_file(&cursor_file).unwrap();
    symlink(&roots_file, &cursor_file).unwrap();
    lchown(&cursor_file, Some(USER), Some(USER)).unwrap();
    let (code, stdout, stderr) = cli_at_home(&home, &["client", "setup", "cursor", "--yes"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("is a link made by user 4242"), "{stderr}");
    assert!(!stdout.contains("secret"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&roots_file).unwrap(), roots_text);

    // The user's own file behind the link: followed, and stays the user's…
    let users_file = dotfiles.join("cursor.json");
    std::fs::write(&users_file, r#"{"mcpServers": {}}"#).unwrap();
    chown(&users_file, Some(USER), Some(USER)).unwrap();
    std::fs::remove_file(&cursor_file).unwrap();
    symlink(&users_file, &cursor_file).unwrap();
    lchown(&cursor_file, Some(USER), Some(USER)).unwrap();
    // …but a lock file planted as a link is not opened through.
    let planted = elsewhere.join("created-by-root");
    std::fs::remove_file(&lock).unwrap();
    symlink(&planted, &lock).unwrap();
    lchown(&lock, Some(USER), Some(USER)).unwrap();
    let (code, stdout, stderr) = cli_at_home(&home, &["client", "setup", "cursor", "--yes"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("cannot lock"), "{stderr}");
    assert!(
        !planted.exists(),
        "a file was made through the planted link"
    );
    std::fs::remove_file(&lock).unwrap();
    let (code, stdout, stderr) = cli_at_home(&home, &["client", "setup", "cursor", "--yes"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let written = std::fs::read_to_string(&users_file).unwrap();
    assert!(written.contains("mcp-aggregator"), "{written}");
    assert_eq!(std::fs::metadata(&users_file).unwrap().uid(), USER);
    assert!(
        std::fs::symlink_metadata(&cursor_file)
            .unwrap()
            .is_symlink()
    );
    let backups: Vec<_> = std::fs::read_dir(&dotfiles)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".bak-"))
        .collect();
    assert_eq!(backups.len(), 1, "{backups:?}");
    assert_eq!(backups[0].metadata().unwrap().uid(), USER);

    // A root-owned file in the user's directory (an older root run left
    // one) does not keep the run root's: the user's home decides.
    std::fs::remove_file(&cursor_file).unwrap();
    std::fs::write(&cursor_file, r#"{"mcpServers": {}}"#).unwrap();
    let (code, stdout, stderr) = cli_at_home(&home, &["client", "setup", "cursor", "--yes"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(std::fs::metadata(&cursor_file).unwrap().uid(), USER);

    // Under a directory anyone may write to (as /tmp): a file root has
    // there is root's to change; one not there yet could be made anyone's
    // first, so root does not make it.
    let shared = temp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let not_yet = shared.join("mcp.json");
    let file_arg = ["client", "setup", "cursor", "--yes", "--file"];
    let run = |file: &std::path::Path| {
        let mut args = file_arg.to_vec();
        args.push(file.to_str().unwrap());
        cli_at_home(temp.path(), &args)
    };
    let (code, stdout, stderr) = run(&not_yet);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("anyone may write to"), "{stderr}");
    assert!(!not_yet.exists());
    std::fs::write(&not_yet, r#"{"mcpServers": {}}"#).unwrap();
    let (code, stdout, stderr) = run(&not_yet);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(std::fs::metadata(&not_yet).unwrap().uid(), 0);
}
