//! One daemon for every client on the machine (issue 29): desktop clients
//! launch `mcp-aggregator stdio --config FILE` — the official Python SDK
//! 2.x and TypeScript SDK v2 clients here, as a client config does — and
//! each relays to the one daemon that owns the data dir, started by
//! whichever came first. Servers start once; the daemon leaves by itself
//! once the last client has gone and its idle time passed, with nothing
//! left behind; a crashed daemon and its stale socket are recovered from.

mod common;

use common::{BIN, pids_in, process_alive, wait_for};
use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
/// Generous: a busy 2-core machine starts a daemon, a Node and a Python
/// interpreter at once.
const UP: Duration = Duration::from_secs(90);

/// Which SDK a held client is.
#[derive(Clone, Copy, Debug)]
enum Sdk {
    Python,
    TypeScript,
}

/// A desktop client that stays connected and takes commands.
struct Held {
    child: Child,
    stdin: ChildStdin,
    lines: std::io::Lines<BufReader<ChildStdout>>,
    sdk: Sdk,
}

impl Held {
    /// Launches the client, which launches `mcp-aggregator <args>`; does
    /// not wait for it to be ready (see `ready`).
    fn launch(sdk: Sdk, args: &[&str], home: Option<&Path>) -> Held {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut command = match sdk {
            Sdk::Python => {
                let python = root.join("tests/.venv-v2/bin/python");
                assert!(
                    python.exists(),
                    "{} is missing: run scripts/setup.sh",
                    python.display()
                );
                let mut command = Command::new(python);
                command.arg(root.join("tests/python/held_client.py"));
                command
            }
            Sdk::TypeScript => {
                let mut command = Command::new(common::node22());
                command.arg(root.join("tests/conformance/held_client_v2.mjs"));
                command
            }
        };
        command.arg(BIN).args(args);
        if let Some(home) = home {
            // The SDKs hand the aggregator HOME (and PATH), not XDG_*.
            command.env("HOME", home).env_remove("XDG_DATA_HOME");
        }
        let mut child = command
            .env_remove("MCP_AGGREGATOR_DATA_DIR")
            .env_remove("MCP_AGGREGATOR_IDLE_EXIT")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Held {
            child,
            stdin,
            lines,
            sdk,
        }
    }

    fn next(&mut self) -> Value {
        let line = self
            .lines
            .next()
            .unwrap_or_else(|| panic!("{:?} client ended", self.sdk))
            .unwrap();
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("{:?}: {line}", self.sdk))
    }

    fn ready(&mut self) {
        assert_eq!(self.next(), json!({"ready": true}), "{:?}", self.sdk);
    }

    fn command(&mut self, line: &str) -> Value {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        self.next()
    }

    fn tools(&mut self) -> Vec<String> {
        serde_json::from_value(self.command("tools")["tools"].clone()).unwrap()
    }

    /// Lists until `tool` is offered (servers join as they connect).
    fn wait_tool(&mut self, tool: &str) -> Vec<String> {
        wait_for(UP, || {
            let tools = self.tools();
            tools.iter().any(|t| t == tool).then_some(tools)
        })
        .unwrap_or_else(|| panic!("{:?}: {tool} never listed", self.sdk))
    }

    fn echo(&mut self, from: &str) -> Value {
        let answer = self.command(&format!("call fx__echo {}", json!({"from": from})));
        assert_eq!(answer["is_error"], false, "{:?}: {answer}", self.sdk);
        answer
    }

    fn quit(mut self) {
        assert_eq!(
            self.command("quit"),
            json!({"closed": true}),
            "{:?}",
            self.sdk
        );
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{:?}: {status}", self.sdk);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config with the fixture server `fx`, which appends its pid to
/// `pids` each time it starts.
fn config_with_fixture(dir: &Path, pids: &Path) -> PathBuf {
    let config = dir.join("servers.json");
    let servers = json!({"mcpServers": {"fx": {
        "command": FIXTURE,
        "args": ["--pid-file", pids.to_str().unwrap()],
    }}});
    std::fs::write(&config, servers.to_string()).unwrap();
    config
}

/// Pids of the `serve` daemons running for `data_dir`.
fn daemons_of(data_dir: &Path) -> Vec<u32> {
    let wanted = data_dir.to_str().unwrap();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_ours = args.first().is_some_and(|a| *a == BIN.as_bytes())
            && args.iter().any(|a| *a == b"serve")
            && args.contains(&wanted.as_bytes());
        if is_ours && process_alive(pid) {
            found.push(pid);
        }
    }
    // A daemon's child between its fork and its exec (a server being
    // started) still shows the daemon's command line: not a daemon.
    let parents = found.clone();
    found.retain(|pid| !parent_of(*pid).is_some_and(|parent| parents.contains(&parent)));
    found
}

/// A process's parent, from `/proc/PID/stat` (after the command's closing
/// parenthesis: state, then the parent's pid).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

fn assert_gone(pids: &[u32], what: &str) {
    let gone = wait_for(UP, || pids.iter().all(|p| !process_alive(*p)).then_some(()));
    assert!(gone.is_some(), "{what} still running: {pids:?}");
}

/// Two, then three clients of two SDKs at once on one data dir, given
/// with --data-dir and left to the default: one daemon, the server started
/// once; the first client leaves and the others go on; a client joins
/// later; once all have gone the daemon leaves after its idle time, and no
/// server process is left.
#[test]
fn clients_of_both_sdks_share_one_daemon_that_leaves_after_the_last() {
    for default_dir in [false, true] {
        let temp = tempfile::tempdir().unwrap();
        let pids = temp.path().join("fx.pids");
        let config = config_with_fixture(temp.path(), &pids);
        let home = temp.path().join("home");
        let data_dir = if default_dir {
            home.join(".local/share/mcp-aggregator")
        } else {
            temp.path().join("data")
        };
        let config_arg = config.to_str().unwrap().to_owned();
        let data_arg = data_dir.to_str().unwrap().to_owned();
        let mut args = vec!["stdio", "--config", &config_arg, "--idle-exit", "2s"];
        if !default_dir {
            args.extend(["--data-dir", &data_arg]);
        }
        let home = default_dir.then_some(home.as_path());

        // Three clients starting at the same moment.
        let mut clients: Vec<Held> = [Sdk::Python, Sdk::TypeScript, Sdk::Python]
            .into_iter()
            .map(|sdk| Held::launch(sdk, &args, home))
            .collect();
        for client in &mut clients {
            client.ready();
        }
        for client in &mut clients {
            client.wait_tool("fx__echo");
            client.echo(&format!("{:?}", client.sdk));
        }
        let daemons = daemons_of(&data_dir);
        assert_eq!(daemons.len(), 1, "one daemon for the data dir: {daemons:?}");
        assert_eq!(pids_in(&pids).len(), 1, "the server started once");
        let server = pids_in(&pids)[0];

        // The first leaves; the others go on.
        clients.remove(0).quit();
        for client in &mut clients {
            client.echo("still here");
        }
        // One joins later.
        let mut late = Held::launch(Sdk::TypeScript, &args, home);
        late.ready();
        late.wait_tool("fx__echo");
        late.echo("late");
        clients.push(late);
        assert_eq!(daemons_of(&data_dir), daemons, "the same daemon");
        assert_eq!(pids_in(&pids), [server], "the server was not started again");

        for client in clients {
            client.quit();
        }
        // The daemon leaves after its idle time, and its server with it.
        assert_gone(&daemons, "the daemon");
        assert_gone(&[server], "the server");
    }
}

/// A daemon a `stdio` client started also serves `/mcp`: once that client
/// has gone, a client of `/mcp` keeps it (its idle time counts from the
/// last of them), and it leaves after its idle time once that one has gone
/// too.
#[test]
fn a_client_of_mcp_over_http_keeps_a_daemon_its_stdio_client_left() {
    let temp = tempfile::tempdir().unwrap();
    let pids = temp.path().join("fx.pids");
    let config = config_with_fixture(temp.path(), &pids);
    let data_dir = temp.path().join("data");
    let args = [
        "stdio",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--idle-exit",
        "1s",
    ];
    let mut relay = Raw::start(&args);
    relay.wait_tools("fx__echo", |t| has(t, "fx__echo"));
    let daemons = daemons_of(&data_dir);
    assert_eq!(daemons.len(), 1, "{daemons:?}");
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(data_dir.join("daemon.json")).unwrap())
            .unwrap();
    let mcp = format!("{}/mcp", info["url"].as_str().unwrap());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let http = common::http();
    let post = |session: Option<&str>, body: Value| {
        let mut request = http
            .post(&mcp)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        runtime.block_on(request.send()).unwrap()
    };
    let opened = post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "http", "version": "1"}}}),
    );
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    post(
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );

    assert!(relay.close().success());
    let log = common::log_path(&data_dir);
    wait_for(UP, || {
        std::fs::read_to_string(&log)
            .ok()?
            .contains("staying for the clients of /mcp")
            .then_some(())
    })
    .expect("the daemon stays for its client of /mcp");
    assert!(
        daemons.iter().all(|p| process_alive(*p)),
        "the daemon left with a client of /mcp"
    );
    let called = post(
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "fx__echo", "arguments": {"text": "still here"}}}),
    );
    assert!(
        runtime
            .block_on(called.text())
            .unwrap()
            .contains("still here")
    );

    // The session ends: the daemon leaves after its idle time.
    let ended = runtime
        .block_on(http.delete(&mcp).header("mcp-session-id", &session).send())
        .unwrap();
    assert!(ended.status().is_success(), "{}", ended.status());
    assert_gone(&daemons, "the daemon");
    assert_gone(&pids_in(&pids), "its server");
}

/// A server that asks for roots as it starts (and keeps them, as the
/// reference server does) is not handed the roots of the one client
/// attached then: the shared daemon serves every later client with that
/// server, and they would all be served with that client's roots.
#[test]
fn a_server_starting_under_a_shared_daemon_is_given_no_clients_roots() {
    let temp = tempfile::tempdir().unwrap();
    let pids = temp.path().join("fx.pids");
    let config = config_with_fixture(temp.path(), &pids);
    let data_dir = temp.path().join("data");
    let data_arg = data_dir.to_str().unwrap();
    let args = [
        "stdio",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data_arg,
        "--idle-exit",
        "0s",
    ];
    let mut only = Raw::start_with_roots(
        &args,
        Some(json!([{"uri": "file:///only/client/project", "name": "only"}])),
    );
    only.wait_tools("fx__echo", |t| has(t, "fx__echo"));
    // Started while this client is the only one attached, and reading
    // (answering any roots request) until the new server's tools are in.
    let asked = temp.path().join("roots-at-start");
    let added = Command::new(BIN)
        .args([
            "servers",
            "add",
            "starter",
            "--data-dir",
            data_arg,
            "--",
            FIXTURE,
        ])
        .args(["--legacy-only", "--roots-at-start"])
        .arg(&asked)
        .output()
        .unwrap();
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    only.wait_tools("starter__echo", |t| has(t, "starter__echo"));
    let answer = wait_for(UP, || {
        only.tools();
        std::fs::read_to_string(&asked).ok()
    })
    .expect("the server's roots request was answered");
    assert_eq!(answer, r#"{"roots":[]}"#);
    assert!(only.close().success());
}

/// Daemon settings on a `stdio` command line (`--expose search`) are the
/// daemon's: one already running keeps its own, and the client is told.
#[test]
fn daemon_settings_given_to_a_client_of_a_running_daemon_are_said_to_be_unused() {
    let temp = tempfile::tempdir().unwrap();
    let pids = temp.path().join("fx.pids");
    let config = config_with_fixture(temp.path(), &pids);
    let data_dir = temp.path().join("data");
    let base = [
        "stdio",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--idle-exit",
        "0s",
    ];
    let mut first = Raw::start(&base);
    first.wait_tools("fx__echo", |t| has(t, "fx__echo"));
    let second = Command::new(BIN)
        .args(base)
        .args(["--expose", "search"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{said}");
    assert!(
        said.contains("was running already") && said.contains("`--expose search`"),
        "{said}"
    );
    // Its own daemon's settings are not said to be unused.
    assert!(first.close().success());
    assert_gone(&daemons_of(&data_dir), "the daemon");
    let own = Command::new(BIN)
        .args(base)
        .args(["--expose", "search"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&own.stderr);
    assert!(own.status.success(), "{said}");
    assert!(!said.contains("was running already"), "{said}");
}

/// A raw line client on `mcp-aggregator stdio` (pipes), for what the SDKs
/// hide: the process's own exit, and the notifications it was sent.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::io::Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// Methods of the notifications seen so far.
    notified: Vec<String>,
    /// The roots it answers `roots/list` with (then it declares roots).
    roots: Option<Value>,
}

impl Raw {
    /// Starts the client and initializes.
    fn start(args: &[&str]) -> Raw {
        Raw::start_with_roots(args, None)
    }

    /// Starts a client that has `roots` (and answers `roots/list` with
    /// them whenever it reads), and initializes.
    fn start_with_roots(args: &[&str], roots: Option<Value>) -> Raw {
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut raw = Raw {
            child,
            stdin,
            lines,
            next_id: 0,
            notified: Vec::new(),
            roots,
        };
        let capabilities = if raw.roots.is_some() {
            json!({"roots": {"listChanged": false}})
        } else {
            json!({})
        };
        let answer = raw.ask(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": capabilities, "clientInfo": {"name": "raw", "version": "1"}}),
        );
        assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
        raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        raw
    }

    fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("input open");
        writeln!(stdin, "{message}").unwrap();
    }

    fn ask(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self.lines.next().expect("an answer").unwrap();
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["method"] == "roots/list"
                && let Some(roots) = self.roots.clone()
            {
                self.send(
                    json!({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": roots}}),
                );
                continue;
            }
            if message["id"] == json!(id) {
                return message;
            }
            if let Some(method) = message["method"].as_str() {
                self.notified.push(method.to_owned());
            }
        }
    }

    fn tools(&mut self) -> Vec<String> {
        let list = self.ask("tools/list", json!({}));
        list["result"]["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Lists until `check` holds for the names.
    fn wait_tools(&mut self, what: &str, check: impl Fn(&[String]) -> bool) -> Vec<String> {
        wait_for(UP, || {
            let tools = self.tools();
            check(&tools).then_some(tools)
        })
        .unwrap_or_else(|| panic!("never listed: {what}"))
    }

    /// Waits until a notification of `method` has come (pinging to read).
    fn wait_notified(&mut self, method: &str) {
        let seen = wait_for(UP, || {
            self.ask("ping", json!({}));
            self.notified.iter().any(|m| m == method).then_some(())
        });
        assert!(seen.is_some(), "no {method}: {:?}", self.notified);
    }

    /// Closes the input and waits for the exit.
    fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        wait_for(UP, || self.child.try_wait().unwrap()).expect("the relay ends with its input")
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn has(tools: &[String], name: &str) -> bool {
    tools.iter().any(|t| t == name)
}

/// A daemon killed under its clients: their relays end (the client sees
/// its server gone, not a hang), and the next client starts a new daemon
/// over the dead one's socket and daemon file.
#[test]
fn a_crashed_daemon_is_replaced_by_the_next_client() {
    let temp = tempfile::tempdir().unwrap();
    let pids = temp.path().join("fx.pids");
    let config = config_with_fixture(temp.path(), &pids);
    let data_dir = temp.path().join("data");
    let args = [
        "stdio",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--idle-exit",
        "0s",
    ];
    let mut first = Raw::start(&args);
    let daemons = daemons_of(&data_dir);
    assert_eq!(daemons.len(), 1, "{daemons:?}");
    common::signal(daemons[0] as i32, libc::SIGKILL);
    // Ended (with a word on stderr when the daemon's end cut a message
    // short, and its status then says so too).
    let status =
        wait_for(UP, || first.child.try_wait().unwrap()).expect("the relay ends with its daemon");
    assert_eq!(
        status.code(),
        Some(1),
        "the client's host is told its server failed: {status}"
    );
    assert!(
        data_dir.join("mcp.sock").exists(),
        "the dead daemon's socket is left (what this test recovers from)"
    );
    // Its server is not left running either (it belonged to the daemon).
    assert_gone(&pids_in(&pids), "the dead daemon's server");

    let mut second = Raw::start(&args);
    second.wait_tools("fx__echo", |t| has(t, "fx__echo"));
    let fresh = daemons_of(&data_dir);
    assert_eq!(fresh.len(), 1);
    assert_ne!(fresh, daemons, "a new daemon");
    let status = second.close();
    assert!(status.success(), "{status}");
    assert_gone(&fresh, "the daemon (idle exit 0s)");
}

/// A `stdio` client bringing `config`, on the daemon of `data_dir` (which
/// leaves as soon as its last client does).
fn client_with_config(config: &Path, data_dir: &Path) -> Raw {
    Raw::start(&[
        "stdio",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--idle-exit",
        "0s",
    ])
}

/// A client's config file is applied to the daemon another client
/// started: its servers join, the first client is told (list_changed),
/// and a file that does not parse stops that client alone.
#[test]
fn a_joining_clients_config_is_applied_to_the_running_daemon() {
    let temp = tempfile::tempdir().unwrap();
    let pids = temp.path().join("fx.pids");
    let first = config_with_fixture(temp.path(), &pids);
    let second = temp.path().join("more.json");
    std::fs::write(
        &second,
        json!({"mcpServers": {"fy": {"command": FIXTURE}}}).to_string(),
    )
    .unwrap();
    let data_dir = temp.path().join("data");
    let with_config = |config: &Path| client_with_config(config, &data_dir);
    let mut a = with_config(&first);
    a.wait_tools("fx__echo", |t| has(t, "fx__echo"));

    let mut b = with_config(&second);
    b.wait_tools("both files' servers", |t| {
        has(t, "fx__echo") && has(t, "fy__echo")
    });
    // The first client was told its list changed, and sees fy too.
    a.wait_tools("fy__echo for the first client", |t| has(t, "fy__echo"));
    a.wait_notified("notifications/tools/list_changed");
    assert_eq!(daemons_of(&data_dir).len(), 1);

    // A broken file: the relay says so and exits 2; the daemon is untouched.
    let broken = temp.path().join("broken.json");
    std::fs::write(&broken, "{\"mcpServers\": {").unwrap();
    let output = Command::new(BIN)
        .args([
            "stdio",
            "--config",
            broken.to_str().unwrap(),
            "--data-dir",
            data_dir.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("Invalid JSON"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let echoed = a.ask(
        "tools/call",
        json!({"name": "fy__echo", "arguments": {"x": 1}}),
    );
    assert!(echoed["result"]["content"].is_array(), "{echoed}");
    assert_ne!(echoed["result"]["isError"], true, "{echoed}");
    assert!(b.close().success());
}

/// Two clients' files name one server (and one profile): the file applied
/// last owns it, and its edit dropping the server hands it to the other
/// file (which still names it) instead of removing it, with that file's
/// settings, while what the edited file still names keeps its own; the
/// other's edit then removes it.
#[test]
fn a_server_two_files_name_outlives_one_files_edit() {
    let temp = tempfile::tempdir().unwrap();
    let (first, second) = (temp.path().join("a.json"), temp.path().join("b.json"));
    let write = |path: &Path, servers: &[&str], profile: Option<&str>| {
        let tag = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let entries: serde_json::Map<String, Value> = servers
            .iter()
            .map(|name| {
                let pids = temp.path().join(format!("{name}-{tag}.pids"));
                (
                    (*name).to_owned(),
                    json!({"command": FIXTURE, "args": ["--pid-file", pids.to_str().unwrap()]}),
                )
            })
            .collect();
        let mut config = json!({"mcpServers": entries});
        if let Some(servers) = profile {
            config["profiles"] = json!({"view": {"servers": [servers]}});
        }
        std::fs::write(path, config.to_string()).unwrap();
    };
    write(&first, &["fx", "shared", "both"], Some("fx"));
    write(&second, &["shared", "both"], Some("shared"));
    let data_dir = temp.path().join("data");
    let with_config = |config: &Path| client_with_config(config, &data_dir);
    let mut a = with_config(&first);
    a.wait_tools("fx and shared", |t| {
        has(t, "fx__echo") && has(t, "shared__echo")
    });
    let mut b = with_config(&second);
    b.wait_tools("shared", |t| has(t, "shared__echo"));
    let server = |name: &str| daemon_get(&data_dir, &format!("/api/v1/aggregator/servers/{name}"));
    assert!(server("shared")["source"].to_string().contains("b.json"));
    assert!(
        server("both")["connection_config"]
            .to_string()
            .contains("both-b.pids")
    );

    // b drops shared and the view (and adds fy, to see the edit applied):
    // a takes them over; `both`, which b still names, stays b's.
    write(&second, &["both", "fy"], None);
    b.wait_tools("fy after b's edit", |t| has(t, "fy__echo"));
    let owned_by_a = wait_for(UP, || {
        server("shared")["source"]
            .to_string()
            .contains("a.json")
            .then_some(())
    });
    assert!(owned_by_a.is_some(), "{}", server("shared"));
    let shared = server("shared");
    assert!(
        shared["connection_config"]
            .to_string()
            .contains("shared-a.pids"),
        "{shared}"
    );
    let both = server("both");
    assert!(both["source"].to_string().contains("b.json"), "{both}");
    assert!(
        both["connection_config"]
            .to_string()
            .contains("both-b.pids"),
        "{both}"
    );
    let view = daemon_get(&data_dir, "/api/v1/profiles/view");
    assert_eq!(view["servers"], json!(["fx"]), "{view}");
    assert!(view["source"].to_string().contains("a.json"), "{view}");
    let tools = a.tools();
    assert!(has(&tools, "shared__echo"), "{tools:?}");

    // a drops it too: gone.
    write(&first, &["fx", "both"], Some("fx"));
    a.wait_tools("shared gone", |t| {
        has(t, "fx__echo") && !has(t, "shared__echo")
    });
    assert!(b.close().success());
    assert!(a.close().success());
}

/// The file a daemon was started with (`serve --config`) hands a server
/// over like any other: when a client's file drops a server both name
/// while the start file's own edit does not load, what the start file
/// applied keeps the server.
#[test]
fn the_start_files_server_outlives_a_client_files_edit_while_it_does_not_load() {
    let temp = tempfile::tempdir().unwrap();
    let (first, second) = (temp.path().join("a.json"), temp.path().join("b.json"));
    let write = |path: &Path, servers: &[&str]| {
        let entries: serde_json::Map<String, Value> = servers
            .iter()
            .map(|name| ((*name).to_owned(), json!({"command": FIXTURE})))
            .collect();
        std::fs::write(path, json!({"mcpServers": entries}).to_string()).unwrap();
    };
    write(&first, &["shared"]);
    write(&second, &["shared", "fy"]);
    let data_dir = temp.path().join("data");
    let _daemon = common::Daemon::start_in(
        &data_dir,
        &["--config", first.to_str().unwrap(), "--search", "off"],
    );
    let mut b = client_with_config(&second, &data_dir);
    b.wait_tools("shared and fy", |t| {
        has(t, "shared__echo") && has(t, "fy__echo")
    });
    let server = |name: &str| daemon_get(&data_dir, &format!("/api/v1/aggregator/servers/{name}"));

    // The start file's edit does not load…
    std::fs::write(&first, "{ not json").unwrap();
    let refused = wait_for(UP, || {
        daemon_state(&data_dir)["config_files"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| f["path"].as_str() == first.to_str() && !f["error"].is_null())
            .then_some(())
    });
    assert!(refused.is_some(), "{}", daemon_state(&data_dir));
    // …when b drops the server: what the start file applied keeps it.
    write(&second, &["fy", "fz"]);
    b.wait_tools("fz after b's edit", |t| has(t, "fz__echo"));
    let owned_by_a = wait_for(UP, || {
        server("shared")["source"]
            .to_string()
            .contains("a.json")
            .then_some(())
    });
    assert!(owned_by_a.is_some(), "{}", server("shared"));
    assert!(has(&b.tools(), "shared__echo"));
    assert!(b.close().success());
}

/// A GET of the admin API of the daemon of `data_dir`, found through its
/// daemon file.
fn daemon_get(data_dir: &Path, path: &str) -> Value {
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(data_dir.join("daemon.json")).unwrap())
            .unwrap();
    let url = info["url"].as_str().unwrap();
    let host = url.trim_start_matches("http://");
    let (status, body) = common::raw_http(
        url,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The aggregator's state as the daemon of `data_dir` reports it.
fn daemon_state(data_dir: &Path) -> Value {
    daemon_get(data_dir, "/api/v1/aggregator/state")
}

/// Each tool call is in the audit log: the client (its clientInfo name),
/// the server, the tool, how long, ok or the error; never its arguments or
/// result.
#[test]
fn tool_calls_are_in_the_audit_log_without_their_arguments() {
    let temp = tempfile::tempdir().unwrap();
    let pids = temp.path().join("fx.pids");
    let config = config_with_fixture(temp.path(), &pids);
    let data_dir = temp.path().join("data");
    let mut client = Raw::start(&[
        "stdio",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--idle-exit",
        "0s",
    ]);
    client.wait_tools("fx__echo", |t| has(t, "fx__echo"));
    let secret = "do-not-log-this-argument";
    let echoed = client.ask(
        "tools/call",
        json!({"name": "fx__echo", "arguments": {"secret": secret}}),
    );
    assert!(echoed["result"]["content"].is_array(), "{echoed}");
    let failed = client.ask("tools/call", json!({"name": "fx__fail", "arguments": {}}));
    assert!(failed["error"].is_object(), "{failed}");
    let calls = wait_for(UP, || {
        let calls = daemon_get(&data_dir, "/api/v1/aggregator/audit?action=call&limit=10");
        (calls.as_array()?.len() >= 2).then_some(calls)
    })
    .expect("both calls are in the audit log");
    let text = calls.to_string();
    assert!(!text.contains(secret), "arguments are never logged: {text}");
    assert!(!text.contains("\"secret\""), "{text}");
    let entries = calls.as_array().unwrap();
    let echo = entries
        .iter()
        .find(|e| {
            e["details"]
                .as_str()
                .is_some_and(|d| d.contains("tool fx.echo"))
        })
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(echo["actor"], "mcp:raw", "{echo}");
    assert_eq!(echo["server"], "fx", "{echo}");
    assert_eq!(echo["result"], "ok", "{echo}");
    assert!(echo["details"].as_str().unwrap().ends_with(" ms"), "{echo}");
    let fail = entries
        .iter()
        .find(|e| e["details"].as_str().is_some_and(|d| d.contains("fail")))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        fail["result"].as_str().unwrap().starts_with("error: "),
        "{fail}"
    );
    assert!(client.close().success());
}

/// A config file edited while clients are attached is applied (they are
/// told); an edit that does not load changes nothing and says why, in the
/// state; the next good edit is applied again, removals included.
#[test]
fn a_config_edit_is_applied_while_clients_are_attached() {
    let temp = tempfile::tempdir().unwrap();
    let pids = temp.path().join("fx.pids");
    let config = config_with_fixture(temp.path(), &pids);
    let data_dir = temp.path().join("data");
    let mut client = Raw::start(&[
        "stdio",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--idle-exit",
        "0s",
    ]);
    client.wait_tools("fx__echo", |t| has(t, "fx__echo"));
    let fixture = json!({"command": FIXTURE, "args": ["--pid-file", pids.to_str().unwrap()]});

    // fy added by an edit that also changes fx's call limits only (read
    // per call: fx keeps running). A stopped fx would be listed again only
    // once restarted, under another pid.
    let fx_pid = pids_in(&pids);
    assert_eq!(fx_pid.len(), 1, "{fx_pid:?}");
    client.notified.clear();
    let mut limited = fixture.clone();
    limited["trust"] = json!({"limits": {"max_concurrent": 3}, "validate_arguments": true});
    std::fs::write(
        &config,
        json!({"mcpServers": {"fx": limited, "fy": {"command": FIXTURE}}}).to_string(),
    )
    .unwrap();
    client.wait_tools("fy__echo after the edit", |t| {
        has(t, "fy__echo") && has(t, "fx__echo")
    });
    assert!(
        client
            .notified
            .iter()
            .any(|m| m == "notifications/tools/list_changed"),
        "{:?}",
        client.notified
    );
    assert_eq!(
        pids_in(&pids),
        fx_pid,
        "fx, with only its limits changed, was not restarted"
    );

    // A broken edit: nothing changes, and the state says why.
    std::fs::write(&config, "{\"mcpServers\": {\"fx\": ").unwrap();
    let reason = wait_for(UP, || {
        let state = daemon_state(&data_dir);
        state["config_files"][0]["error"]
            .as_str()
            .map(str::to_owned)
    })
    .expect("the broken edit is reported in the state");
    assert!(reason.contains("Invalid JSON"), "{reason}");
    let tools = client.tools();
    assert!(
        has(&tools, "fx__echo") && has(&tools, "fy__echo"),
        "{tools:?}"
    );

    // The next good edit drops fy.
    std::fs::write(&config, json!({"mcpServers": {"fx": fixture}}).to_string()).unwrap();
    client.wait_tools("fy gone", |t| has(t, "fx__echo") && !has(t, "fy__echo"));
    // Recorded once the apply is over (a moment after the lists show it).
    let state = wait_for(UP, || {
        let state = daemon_state(&data_dir);
        state["config_files"][0]["error"].is_null().then_some(state)
    })
    .expect("the good edit clears the error");
    assert_eq!(state["config_files"][0]["servers"], 1, "{state}");
    assert!(client.close().success());
}

/// `serve` on a port in use fails before touching the store, says how to
/// pick another, and the next start finds the store closed cleanly.
#[test]
fn serve_on_a_taken_port_fails_before_touching_anything() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            &addr,
            "--data-dir",
            data_dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--listen"), "{stderr}");
    assert_eq!(
        stderr.matches("cannot listen").count(),
        1,
        "said once: {stderr}"
    );
    assert!(
        !data_dir.join("store.redb").exists(),
        "the store was not touched"
    );
    drop(taken);
    let mut d = common::Daemon::start_in(&data_dir, &[]);
    let log = std::fs::read_to_string(common::log_path(&data_dir)).unwrap_or_default();
    assert!(!log.contains("not closed cleanly"), "{log}");
    let _ = d.child.kill();
}

/// The relay keeps no state of its own: a Unix socket in the data dir,
/// owner-only.
#[test]
fn the_socket_is_owner_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let client = Raw::start(&[
        "stdio",
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--idle-exit",
        "0s",
    ]);
    let mode = std::fs::metadata(data_dir.join("mcp.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let dir_mode = std::fs::metadata(&data_dir).unwrap().permissions().mode();
    assert_eq!(dir_mode & 0o777, 0o700, "{dir_mode:o}");
    assert!(client.close().success());
}

/// A client stops its server by killing it: the relay killed with the
/// client's pipes still open ends that client's session in the daemon
/// (the daemon talks to the client on the descriptors the relay handed
/// over), and a daemon with no client left leaves.
#[test]
fn a_killed_relay_ends_its_session() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut client = Raw::start(&[
        "stdio",
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--idle-exit",
        "0s",
    ]);
    let daemons = daemons_of(&data_dir);
    assert_eq!(daemons.len(), 1, "{daemons:?}");
    // Served: the handed-over descriptors work.
    assert!(client.ask("ping", json!({}))["result"].is_object());
    client.child.kill().unwrap();
    client.child.wait().unwrap();
    // The pipes stay open on this side (`client.stdin` is held), so only
    // the relay's end tells the daemon.
    assert!(client.stdin.is_some());
    assert_gone(&daemons, "the daemon, its last session ended");
}

fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A config with the fixture servers `fx` and `fy` and two profiles:
/// `fx-only` (fx's tools but `fail`) and `echoes` as given.
fn config_with_profiles(dir: &Path, echoes: Value) -> PathBuf {
    let config = dir.join("servers.json");
    let text = json!({
        "mcpServers": {"fx": {"command": FIXTURE}, "fy": {"command": FIXTURE}},
        "profiles": {
            "fx-only": {"servers": ["fx"], "exclude_tools": ["fx.fail"]},
            "echoes": echoes,
        },
    });
    std::fs::write(&config, text.to_string()).unwrap();
    config
}

/// A client that picked a profile sees that view only, with both SDKs:
/// tools outside it are neither listed nor callable (directly or through
/// `call_tool`), and `search_tools` finds nothing outside it; a client
/// without one sees everything.
#[test]
fn a_profile_hides_and_refuses_tools_outside_its_view() {
    let temp = tempfile::tempdir().unwrap();
    let config = config_with_profiles(temp.path(), json!({"tools": ["*__echo"]}));
    let data_dir = temp.path().join("data");
    let args = |profile: &'static str| {
        let mut args = vec![
            "stdio",
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--idle-exit",
            "0s",
        ];
        if !profile.is_empty() {
            args.extend(["--profile", profile]);
        }
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let everything_args = args("");
    let mut everything = Raw::start(&refs(&everything_args));
    everything.wait_tools("fx and fy", |t| has(t, "fx__echo") && has(t, "fy__fail"));

    let python_args = args("fx-only");
    let mut python = Held::launch(Sdk::Python, &refs(&python_args), None);
    python.ready();
    let tools = python.wait_tool("fx__echo");
    assert!(has(&tools, "fx__sleep"), "{tools:?}");
    assert!(!has(&tools, "fx__fail"), "excluded: {tools:?}");
    assert!(!tools.iter().any(|t| t.starts_with("fy__")), "{tools:?}");
    python.echo("python in fx-only");
    for hidden in ["fy__echo", "fx__fail", "fx.fail"] {
        let refused = python.command(&format!("call {hidden} {{}}"));
        let error = refused["error"].as_str().unwrap_or_default();
        assert!(error.contains("Tool not found"), "{hidden}: {refused}");
    }
    let through_meta = python.command(&format!(
        "call call_tool {}",
        json!({"name": "fy__echo", "arguments": {}})
    ));
    assert!(
        through_meta["error"]
            .as_str()
            .is_some_and(|e| e.contains("Tool not found")),
        "{through_meta}"
    );

    let typescript_args = args("echoes");
    let mut typescript = Held::launch(Sdk::TypeScript, &refs(&typescript_args), None);
    typescript.ready();
    let tools = typescript.wait_tool("fy__echo");
    let own: Vec<&String> = tools.iter().filter(|t| t.contains("__")).collect();
    assert_eq!(own, ["fx__echo", "fy__echo"], "{tools:?}");
    let refused = typescript.command("call fx__sleep {}");
    assert!(refused["error"].is_string(), "{refused}");
    typescript.echo("typescript in echoes");

    // search_tools looks only among the view's tools.
    let searcher_args = args("fx-only");
    let mut searcher = Raw::start(&refs(&searcher_args));
    searcher.wait_tools("fx__echo", |t| has(t, "fx__echo"));
    // The index follows the catalog in the background: wait until the
    // view's echo is found, then check nothing outside the view is.
    let mut last = Value::Null;
    let names: Vec<String> = wait_for(UP, || {
        last = searcher.ask(
            "tools/call",
            json!({"name": "search_tools", "arguments": {"query": "fail with an internal error echo", "limit": 20}}),
        );
        let names: Vec<String> = last["result"]["structuredContent"]["tools"]
            .as_array()?
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        names.iter().any(|n| n == "fx__echo").then_some(names)
    })
    .unwrap_or_else(|| panic!("fx__echo never found: {last}"));
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("fx__") && *n != "fx__fail"),
        "{names:?}"
    );
    // The client without a profile still has everything.
    let all = everything.tools();
    assert!(has(&all, "fx__fail") && has(&all, "fy__echo"), "{all:?}");

    // What the API shows of a view.
    let view = daemon_get(&data_dir, "/api/v1/profiles/echoes");
    assert_eq!(
        view["visible_tools"],
        json!(["fx.echo", "fy.echo"]),
        "{view}"
    );
    assert_eq!(view["mcp_path"], "/mcp/echoes", "{view}");

    python.quit();
    typescript.quit();
    assert!(searcher.close().success());
    assert!(everything.close().success());
}

/// A profile edited in the config file changes its clients' view while
/// they are attached, and they are told (list_changed).
#[test]
fn a_profile_edit_reaches_its_clients() {
    let temp = tempfile::tempdir().unwrap();
    let config = config_with_profiles(temp.path(), json!({"tools": ["*__echo"]}));
    let data_dir = temp.path().join("data");
    let mut client = Raw::start(&[
        "stdio",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--idle-exit",
        "0s",
        "--profile",
        "echoes",
    ]);
    client.wait_tools("both echoes", |t| has(t, "fx__echo") && has(t, "fy__echo"));
    client.notified.clear();
    config_with_profiles(
        temp.path(),
        json!({"servers": ["fy"], "tools": ["*__echo"]}),
    );
    let tools = client.wait_tools("fy's echo only", |t| {
        has(t, "fy__echo") && !has(t, "fx__echo")
    });
    assert!(!has(&tools, "fy__fail"), "{tools:?}");
    client.wait_notified("notifications/tools/list_changed");
    let refused = client.ask("tools/call", json!({"name": "fx__echo", "arguments": {}}));
    assert!(refused["error"].is_object(), "{refused}");
    assert!(client.close().success());
}

/// A profile nobody defined: the client is told which exist (exit 2),
/// and `/mcp/NAME` answers 404.
#[test]
fn an_unknown_profile_is_refused_with_the_known_ones() {
    let temp = tempfile::tempdir().unwrap();
    let config = config_with_profiles(temp.path(), json!({"tools": ["*__echo"]}));
    let data_dir = temp.path().join("data");
    let held = Raw::start(&[
        "stdio",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--idle-exit",
        "0s",
    ]);
    let refused = Command::new(BIN)
        .args([
            "stdio",
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--profile",
            "nope",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Profile not found: nope"), "{stderr}");
    assert!(
        stderr.contains("echoes") && stderr.contains("fx-only"),
        "{stderr}"
    );

    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(data_dir.join("daemon.json")).unwrap())
            .unwrap();
    let url = info["url"].as_str().unwrap();
    let host = url.trim_start_matches("http://");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}).to_string();
    let request = |path: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let (status, answer) = common::raw_http(url, &request("/mcp/nope"));
    assert_eq!(status, 404, "{answer}");
    assert!(answer.contains("Profile not found: nope"), "{answer}");
    let (status, answer) = common::raw_http(url, &request("/mcp/echoes"));
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = common::raw_http(url, &request("/mcp?profile=nope"));
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = common::raw_http(url, &request("/mcp/c%6Fding"));
    assert_eq!(status, 400, "not a profile name: {answer}");
    let (status, answer) = common::raw_http(url, &request("/mcp/echoes?profile=fx-only"));
    assert_eq!(status, 400, "two profiles named: {answer}");
    let (status, answer) = common::raw_http(url, &request("/mcp?profile=echoes&profile=fx-only"));
    assert_eq!(status, 400, "two profiles named: {answer}");
    let (status, answer) = common::raw_http(url, &request("/mcp/echoes?profile=echoes"));
    assert_eq!(status, 200, "the same one twice: {answer}");
    assert!(held.close().success());
}

/// The user's move, as the README gives it: `client setup claude-desktop
/// --move-servers` turns a Claude Desktop file with a server into one
/// entry, the aggregator; the official Python SDK launching exactly that
/// entry (command and args) sees the moved server's tools through the one
/// daemon and calls one.
#[test]
fn a_client_set_up_by_the_cli_reaches_its_moved_servers_through_the_aggregator() {
    let temp = tempfile::tempdir().unwrap();
    let home = temp.path().join("home");
    let pids = temp.path().join("fx.pids");
    let claude = home.join(".config/Claude/claude_desktop_config.json");
    std::fs::create_dir_all(claude.parent().unwrap()).unwrap();
    let servers = json!({"mcpServers": {"fx": {
        "command": FIXTURE,
        "args": ["--pid-file", pids.to_str().unwrap()],
    }}});
    std::fs::write(&claude, servers.to_string()).unwrap();
    let setup = Command::new(BIN)
        .args([
            "client",
            "setup",
            "claude-desktop",
            "--move-servers",
            "--yes",
        ])
        .env("HOME", &home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("MCP_AGGREGATOR_DATA_DIR")
        .output()
        .unwrap();
    assert!(
        setup.status.success(),
        "{}",
        String::from_utf8_lossy(&setup.stderr)
    );

    let written: Value = serde_json::from_str(&std::fs::read_to_string(&claude).unwrap()).unwrap();
    let entry = &written["mcpServers"]["aggregator"];
    assert_eq!(
        std::fs::canonicalize(entry["command"].as_str().unwrap()).unwrap(),
        std::fs::canonicalize(BIN).unwrap()
    );
    let args: Vec<String> = serde_json::from_value(entry["args"].clone()).unwrap();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut client = Held::launch(Sdk::Python, &args, Some(&home));
    client.ready();
    client.wait_tool("fx__echo");
    client.echo("set up by the cli");
    client.quit();

    let data_dir = home.join(".local/share/mcp-aggregator");
    let daemons = daemons_of(&data_dir);
    assert_eq!(daemons.len(), 1, "{daemons:?}");
    common::signal(daemons[0] as i32, libc::SIGTERM);
    assert_gone(&daemons, "the daemon");
    assert_gone(&pids_in(&pids), "the server");
}
