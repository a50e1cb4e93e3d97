//! Shared fixtures for end-to-end tests: a real `mcp-aggregator serve` on a
//! loopback port with its own temporary data dir, and a client for it.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_mcp-aggregator");
/// Tools the fixture server always offers (echo, structured, sleep,
/// add_tool, roots, crash, fail), before its generated ones (3 by default).
pub const FIXED: usize = 7;
/// The aggregator's own meta-tools (search_tools, call_tool) at the end of
/// every tools/list.
pub const META: usize = 2;

/// Polls `check` until it returns `Some` or `deadline` passes.
pub fn wait_for<T>(deadline: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + deadline;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running daemon; killed (and reaped) on drop if still running.
pub struct Daemon {
    pub child: Child,
    pub url: String,
    pub data_dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Daemon {
    /// Starts a daemon on a fresh data dir.
    pub fn start() -> Daemon {
        let temp = tempfile::tempdir().expect("temp dir");
        let mut daemon = Daemon::start_in(temp.path(), &[]);
        daemon._temp = Some(temp);
        daemon
    }

    /// Starts a daemon on `data_dir` with extra `serve` arguments, and waits
    /// until it has written its address.
    pub fn start_in(data_dir: &Path, extra: &[&str]) -> Daemon {
        Daemon::start_with_env(data_dir, extra, &[])
    }

    /// Like `start_in`, with extra environment variables for the daemon.
    pub fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut child = spawn_serve_with_env(data_dir, extra, env);
        let daemon_file = data_dir.join("daemon.json");
        let pid = child.id();
        let url = wait_for(Duration::from_secs(20), || {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(log_path(data_dir)).unwrap_or_default();
                panic!("the daemon exited early with {status}:\n{log}");
            }
            let text = std::fs::read_to_string(&daemon_file).ok()?;
            let info: Value = serde_json::from_str(&text).ok()?;
            (info["pid"] == pid).then(|| info["url"].as_str().map(str::to_owned))?
        })
        .expect("the daemon did not start within 20 s");
        Daemon {
            child,
            url,
            data_dir: data_dir.to_path_buf(),
            _temp: None,
        }
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends SIGTERM and waits up to `deadline` for the exit.
    pub fn terminate(&mut self, deadline: Duration) -> Option<ExitStatus> {
        signal(self.pid(), libc::SIGTERM);
        wait_for(deadline, || self.child.try_wait().ok().flatten())
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self) {
        signal(self.pid(), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `serve` with stderr going to `daemon.log` in the data dir (a
/// pipe nobody reads could fill up and stall the daemon; inside it, the
/// log goes when the test's temporary directory does).
pub fn spawn_serve(data_dir: &Path, extra: &[&str]) -> Child {
    spawn_serve_with_env(data_dir, extra, &[])
}

pub fn spawn_serve_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Child {
    std::fs::create_dir_all(data_dir).expect("data dir");
    let log = std::fs::File::create(log_path(data_dir)).expect("log file");
    Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .env_remove("MCP_AGGREGATOR_TOKEN")
        .env_remove("MCP_AGGREGATOR_LISTEN")
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn mcp-aggregator serve")
}

pub fn log_path(data_dir: &Path) -> PathBuf {
    data_dir.join("daemon.log")
}

pub fn signal(pid: i32, signal: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Runs the CLI against a daemon's data dir; returns (exit code, stdout, stderr).
pub fn cli(data_dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(BIN)
        .args(args)
        .env("MCP_AGGREGATOR_DATA_DIR", data_dir)
        .env_remove("MCP_AGGREGATOR_URL")
        .env_remove("MCP_AGGREGATOR_LISTEN")
        .stdin(Stdio::null())
        .output()
        .expect("run the CLI");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A valid STDIO registration body.
pub fn stdio_server(name: &str) -> Value {
    json!({
        "name": name,
        "description": "test server",
        "transport_type": "STDIO",
        "connection_config": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"], "env": {"API_KEY": "k-secret-123"}},
        "auto_connect": false
    })
}

/// GETs a URL and parses the JSON answer (whatever the status).
pub async fn get_json<T: serde::de::DeserializeOwned>(url: &str) -> T {
    http()
        .get(url)
        .send()
        .await
        .unwrap_or_else(|err| panic!("GET {url}: {err}"))
        .json()
        .await
        .unwrap_or_else(|err| panic!("GET {url}: not the JSON expected: {err}"))
}

pub fn http() -> reqwest::Client {
    mcp_aggregator::http_client::init();
    reqwest::Client::new()
}

/// POSTs `body` as JSON and reads the answer's JSON.
pub async fn post_json(url: &str, body: &Value) -> Value {
    http()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("the daemon answers")
        .json()
        .await
        .expect("a JSON answer")
}

/// Polls the admin API until `server` has `status` (or the deadline passes);
/// returns the server's last JSON.
pub async fn wait_status(d: &Daemon, server: &str, status: &str, deadline: Duration) -> Value {
    let end = Instant::now() + deadline;
    let client = http();
    let url = d.api(&format!("/api/v1/aggregator/servers/{server}"));
    loop {
        let body: Value = match client.get(&url).send().await {
            Ok(response) => response.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        if body["status"] == status {
            return body;
        }
        if Instant::now() > end {
            panic!("{server} did not reach {status} within {deadline:?}; last seen: {body}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Registers a server through the API; panics unless 201.
/// Removes a registration through the API; its HTTP status.
pub async fn remove(d: &Daemon, name: &str) -> u16 {
    http()
        .delete(d.api(&format!("/api/v1/aggregator/servers/{name}")))
        .send()
        .await
        .expect("DELETE a server")
        .status()
        .as_u16()
}

pub async fn register(d: &Daemon, body: Value) -> Value {
    let response = http()
        .post(d.api("/api/v1/aggregator/servers"))
        .json(&body)
        .send()
        .await
        .expect("POST /servers");
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 201, "registration refused: {body}");
    body
}

/// Whether a process exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state is the field after the parenthesised command name.
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            state != Some("Z") && state != Some("X")
        }
        Err(_) => false,
    }
}

/// Reads a pid a fixture wrote, waiting for the file.
pub fn read_pid(path: &Path) -> u32 {
    wait_for(Duration::from_secs(20), || {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
    .unwrap_or_else(|| panic!("no pid in {}", path.display()))
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// The reference server from npm (`@modelcontextprotocol/server-everything`),
/// installed by scripts/setup.sh.
pub fn everything_js() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        path.exists(),
        "{} is missing: run scripts/setup.sh",
        path.display()
    );
    path
}

/// server-everything serving `transport` (`sse` or `streamableHttp`) on a
/// loopback port; killed on drop.
pub struct Everything {
    pub child: Child,
    pub port: u16,
}

impl Everything {
    pub fn start(transport: &str, port: u16) -> Everything {
        let preload = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/npm/loopback.cjs");
        let child = Command::new("node")
            .arg("--require")
            .arg(preload)
            .arg(everything_js())
            .arg(transport)
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node (Node.js 20 is needed for the reference server)");
        let up = wait_for(Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        assert!(
            up.is_some(),
            "server-everything ({transport}) did not listen on {port}"
        );
        Everything { child, port }
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A child process killed and reaped when the test ends, pass or fail.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts an HTTP test server — `command` with `--http PORT` added, on a
/// free loopback port — and waits until it listens. Reaped when dropped.
pub fn http_test_server(mut command: Command) -> (Reaped, u16) {
    let port = free_port();
    let child = command
        .args(["--http", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the HTTP test server");
    let server = Reaped(child);
    wait_for(Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    })
    .expect("the HTTP test server listens");
    (server, port)
}

/// The hostile fixture server serving HTTP (`flag` `--http`) or legacy SSE
/// (`--sse`) with `args`, on a port it picks itself and announces (so
/// servers started at once never race for one). Reaped when dropped.
pub fn hostile_listening(args: &[&str], flag: &str) -> (Reaped, u16) {
    use std::io::BufRead as _;
    let mut child = Command::new("python3")
        .arg(hostile_py())
        .args(args)
        .args([flag, "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the hostile server");
    let stdout = child.stdout.take().expect("its stdout");
    let server = Reaped(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the hostile server says where it listens");
    let port = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the hostile server said {line:?}"));
    (server, port)
}

/// The hostile fixture server (stdlib Python): tools that misbehave on
/// purpose (see its docstring).
pub fn hostile_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/server.py")
}

/// A Streamable HTTP registration of a server listening on `port` at `/mcp`.
pub fn http_server(name: &str, port: u16) -> Value {
    json!({
        "name": name,
        "transport_type": "HTTP",
        "connection_config": {"base_url": format!("http://127.0.0.1:{port}/mcp")},
        "auto_connect": true
    })
}

/// A STDIO registration of the hostile server; `extra` are its flags.
pub fn hostile_server(name: &str, extra: &[&str]) -> Value {
    let mut args = vec![hostile_py().display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    json!({
        "name": name,
        "transport_type": "STDIO",
        "connection_config": {"command": "python3", "args": args},
        "auto_connect": true
    })
}

/// Resident memory of a process in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Every pid written to a fixture's pid file so far.
pub fn pids_in(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// One HTTP/1.1 exchange written by hand, exactly as given (a browser's
/// headers, a wrong Host): returns the status and the body.
pub fn raw_http(url: &str, request: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let addr = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    stream.write_all(request.as_bytes()).expect("write");
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A request with `Connection: close` and a body, for `raw_http`.
pub fn raw_request(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    request
}

/// Calls a tool through the REST API; returns the status and the JSON body.
pub async fn rest_call(d: &Daemon, name: &str, arguments: Value) -> (u16, Value) {
    let response = http()
        .post(d.api("/api/v1/tools/call"))
        .json(&json!({"name": name, "arguments": arguments}))
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .expect("POST /tools/call");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Waits until the search index is idle (model loaded or given up, every
/// tool indexed), so memory measured after it is not the model loading.
pub async fn wait_index_settled(d: &Daemon) {
    let end = Instant::now() + Duration::from_secs(120);
    loop {
        let status: Value = get_json(&d.api("/api/v1/search/status")).await;
        let model_done = status["semantic"] == true || status.get("warning").is_some();
        if model_done
            && status["syncing"] == false
            && status["indexed_tools"] == status["total_tools"]
        {
            return;
        }
        assert!(Instant::now() < end, "the index did not settle: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the index has settled and the classification that follows
/// it has classified every tool (its pass embeds the skills' texts and
/// reads the catalog: work a memory baseline must not straddle).
pub async fn wait_background_settled(d: &Daemon) {
    wait_index_settled(d).await;
    let end = Instant::now() + Duration::from_secs(120);
    loop {
        let index: Value = get_json(&d.api("/api/v1/search/status")).await;
        let skills: Value = get_json(&d.api("/api/v1/skills/status")).await;
        if skills["classified"] == index["total_tools"]
            && skills["discovered"] == 0
            && skills["classifying"] == 0
        {
            return;
        }
        assert!(
            Instant::now() < end,
            "classification did not settle: {skills} (index {index})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Opens an `/mcp` session (initialize, then initialized) with these client
/// capabilities; returns its id.
pub async fn mcp_session_with(d: &Daemon, capabilities: Value) -> String {
    let response = http()
        .post(d.api("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}}}))
        .send()
        .await
        .expect("initialize over /mcp");
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .expect("a session id")
        .to_owned();
    http()
        .post(d.api("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .expect("initialized");
    session
}

/// One message on an `/mcp` session; its answer (sent as JSON, or as the
/// last message with an id on an SSE stream).
pub async fn mcp_call(d: &Daemon, session: &str, message: Value) -> Value {
    let response = http()
        .post(d.api("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .json(&message)
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    // JSON, or an SSE stream whose last data line is the answer.
    serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("id").is_some())
            .unwrap_or(Value::Null)
    })
}

/// `mcp-aggregator stdio --in-process` on a config file: the process a
/// client talks to is the one serving it (its memory and log are what a
/// test watches); the child and a line reader on its stdout (stderr is
/// `stderr`).
pub fn spawn_stdio(
    config: &Path,
    data_dir: &Path,
    stderr: Stdio,
) -> (
    tokio::process::Child,
    tokio::process::ChildStdin,
    tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = tokio::process::Command::new(BIN)
        .args(["stdio", "--in-process", "--config"])
        .arg(config)
        .arg("--data-dir")
        .arg(data_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn mcp-aggregator stdio");
    let stdin = child.stdin.take().expect("stdin");
    let lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    (child, stdin, lines)
}

/// `tests/conformance`: the conformance runner, our conformance backends
/// and the SDK v2 packages (installed by `scripts/setup.sh`).
pub fn conformance_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

/// The Node 22 installed there (the runner needs it: Node 20 lacks
/// `fs.globSync`).
pub fn node22() -> PathBuf {
    let node = conformance_dir().join("node_modules/node/bin/node");
    assert!(
        node.exists(),
        "{} is missing: run scripts/setup.sh",
        node.display()
    );
    node
}
