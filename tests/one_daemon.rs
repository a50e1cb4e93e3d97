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
    found
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

/// A raw line client on `mcp-aggregator stdio` (pipes), for what the SDKs
/// hide: the process's own exit.
fn raw_stdio(args: &[&str]) -> (Child, ChildStdin, std::io::Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, stdin, lines)
}

fn ask(
    stdin: &mut ChildStdin,
    lines: &mut std::io::Lines<BufReader<ChildStdout>>,
    id: u64,
    method: &str,
    params: Value,
) -> Value {
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    )
    .unwrap();
    loop {
        let line = lines.next().expect("an answer").unwrap();
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == json!(id) {
            return message;
        }
    }
}

fn initialize(stdin: &mut ChildStdin, lines: &mut std::io::Lines<BufReader<ChildStdout>>) {
    let answer = ask(
        stdin,
        lines,
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}),
    );
    assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
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
    let (mut relay, mut stdin, mut lines) = raw_stdio(&args);
    initialize(&mut stdin, &mut lines);
    let daemons = daemons_of(&data_dir);
    assert_eq!(daemons.len(), 1, "{daemons:?}");
    common::signal(daemons[0] as i32, libc::SIGKILL);
    // Ended, with a word on stderr when the daemon's end cut a message
    // short (its status then says so too).
    wait_for(UP, || relay.try_wait().unwrap()).expect("the relay ends with its daemon");
    assert!(
        data_dir.join("mcp.sock").exists(),
        "the dead daemon's socket is left (what this test recovers from)"
    );
    // Its server is not left running either (it belonged to the daemon).
    assert_gone(&pids_in(&pids), "the dead daemon's server");

    let (mut relay, mut stdin, mut lines) = raw_stdio(&args);
    initialize(&mut stdin, &mut lines);
    let tools = wait_for(UP, || {
        let list = ask(&mut stdin, &mut lines, 2, "tools/list", json!({}));
        let names: Vec<String> = list["result"]["tools"]
            .as_array()?
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        names.iter().any(|n| n == "fx__echo").then_some(names)
    });
    assert!(tools.is_some(), "the new daemon serves fx");
    let fresh = daemons_of(&data_dir);
    assert_eq!(fresh.len(), 1);
    assert_ne!(fresh, daemons, "a new daemon");
    drop(stdin);
    let status = wait_for(UP, || relay.try_wait().unwrap()).expect("the relay ends with its input");
    assert!(status.success(), "{status}");
    assert_gone(&fresh, "the daemon (idle exit 0s)");
}

/// A client's config file is applied to the daemon another client
/// started: its servers join, the first client is told (list_changed),
/// and a file that does not parse stops nobody.
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
    let data_arg = data_dir.to_str().unwrap();
    let (_a, mut a_in, mut a_lines) = raw_stdio(&[
        "stdio",
        "--config",
        first.to_str().unwrap(),
        "--data-dir",
        data_arg,
        "--idle-exit",
        "0s",
    ]);
    initialize(&mut a_in, &mut a_lines);
    let names = |list: &Value| -> Vec<String> {
        list["result"]["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut id = 10;
    let listed = wait_for(UP, || {
        id += 1;
        let tools = names(&ask(&mut a_in, &mut a_lines, id, "tools/list", json!({})));
        tools.iter().any(|n| n == "fx__echo").then_some(tools)
    });
    assert!(listed.is_some());

    let (mut b, mut b_in, mut b_lines) = raw_stdio(&[
        "stdio",
        "--config",
        second.to_str().unwrap(),
        "--data-dir",
        data_arg,
        "--idle-exit",
        "0s",
    ]);
    initialize(&mut b_in, &mut b_lines);
    let both = wait_for(UP, || {
        id += 1;
        let tools = names(&ask(&mut b_in, &mut b_lines, id, "tools/list", json!({})));
        (tools.iter().any(|n| n == "fx__echo") && tools.iter().any(|n| n == "fy__echo"))
            .then_some(tools)
    });
    assert!(both.is_some(), "the second client sees both files' servers");
    // The first client was told its list changed, and sees fy too.
    let told = wait_for(UP, || {
        id += 1;
        let tools = names(&ask(&mut a_in, &mut a_lines, id, "tools/list", json!({})));
        tools.iter().any(|n| n == "fy__echo").then_some(())
    });
    assert!(told.is_some(), "the first client sees fy");
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
            data_arg,
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
    let echoed = ask(
        &mut a_in,
        &mut a_lines,
        99,
        "tools/call",
        json!({"name": "fy__echo", "arguments": {"x": 1}}),
    );
    assert!(echoed["result"]["content"].is_array(), "{echoed}");
    assert_ne!(echoed["result"]["isError"], true, "{echoed}");
    drop(b_in);
    assert!(wait_for(UP, || b.try_wait().unwrap()).is_some());
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
    let (mut relay, mut stdin, mut lines) = raw_stdio(&[
        "stdio",
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--idle-exit",
        "0s",
    ]);
    initialize(&mut stdin, &mut lines);
    let mode = std::fs::metadata(data_dir.join("mcp.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let dir_mode = std::fs::metadata(&data_dir).unwrap().permissions().mode();
    assert_eq!(dir_mode & 0o777, 0o700, "{dir_mode:o}");
    drop(stdin);
    assert!(wait_for(UP, || relay.try_wait().unwrap()).is_some());
}
