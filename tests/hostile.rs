//! The aggregator against a hostile server and careless clients, on the
//! real binary: memory stays bounded when nobody reads, no process outlives
//! its server, downstream servers inherit none of our descriptors, slow
//! headers cannot take the listener down, oversized messages are refused
//! without being held, credentials in URLs never show, and a server's
//! request outside a call reaches nobody.

mod common;

use common::*;
use serde_json::{Value, json};
use std::io::{Read as _, Write as _};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt as _;

const UP: Duration = Duration::from_secs(30);
/// Growth of the aggregator's memory that counts as bounded in these tests
/// (each sends at least twice as much, and unbounded queues held more than
/// twice what was sent). Generous: a debug build on a busy machine grows
/// new allocator arenas as threads come and go.
const BOUNDED_GROWTH_KIB: u64 = 120 * 1024;

/// Waits until a fixture's flood is written whole (its done file exists).
fn wait_file(path: &std::path::Path) {
    assert!(
        wait_for(Duration::from_secs(120), || path.exists().then_some(())).is_some(),
        "{} never appeared",
        path.display()
    );
}

async fn initialize_http(d: &Daemon) -> String {
    mcp_session_with(d, json!({"sampling": {}})).await
}

/// Resolves once the process logs that the search model is in (or that it
/// gave up on it): memory measured after that is not the model loading.
fn model_loaded(stderr: tokio::process::ChildStderr) -> tokio::sync::oneshot::Receiver<()> {
    use tokio::io::AsyncBufReadExt as _;
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut tx = Some(tx);
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if (line.contains("search model loaded") || line.contains("keywords only"))
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
        }
    });
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_do_not_read_cost_bounded_memory() {
    let d = Daemon::start();
    register(&d, hostile_server("flood", &[])).await;
    wait_status(&d, "flood", "CONNECTED", UP).await;
    wait_background_settled(&d).await;
    let pid = d.pid() as u32;

    // 1. An HTTP client that never opens its GET stream: the progress of
    // its call has nowhere to go.
    let session = initialize_http(&d).await;
    let flood = |id: u64, count: u64, done: &std::path::Path| {
        let request = http()
            .post(d.api("/mcp"))
            .header("mcp-session-id", &session)
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "flood__flood", "arguments": {"count": count, "size": 8000, "logs": false, "done_file": done}, "_meta": {"progressToken": id}}}))
            .timeout(Duration::from_secs(300));
        async move {
            let answer: Value = request.send().await.unwrap().json().await.unwrap();
            assert_eq!(
                answer["result"]["content"][0]["text"],
                format!("sent {count}"),
                "{answer}"
            );
        }
    };
    // A small flood first, so the threads and allocator arenas it takes
    // exist before the baseline.
    flood(2, 2000, &d.data_dir.with_extension("warm")).await;
    let before = rss_kib(pid);
    flood(3, 40000, &d.data_dir.with_extension("flood1")).await;
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(
        grown < BOUNDED_GROWTH_KIB,
        "320 MB of progress for a client without a stream grew the daemon by {grown} KiB"
    );

    // 2. A client whose SSE response is never read.
    let done = d.data_dir.with_extension("flood2");
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "flood__flood", "arguments": {"count": 40000, "size": 8000, "logs": false, "done_file": done}, "_meta": {"progressToken": "p2"}}}).to_string();
    let mut unread = std::net::TcpStream::connect(d.url.trim_start_matches("http://")).unwrap();
    unread
        .write_all(
            raw_request(
                "POST",
                "/mcp",
                &[
                    ("Host", "127.0.0.1"),
                    ("Content-Type", "application/json"),
                    ("Accept", "application/json, text/event-stream"),
                    ("Mcp-Session-Id", &session),
                ],
                &body,
            )
            .as_bytes(),
        )
        .unwrap();
    wait_file(&done);
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(
        grown < BOUNDED_GROWTH_KIB,
        "an unread SSE response grew the daemon by {grown} KiB"
    );
    // Other clients are served meanwhile.
    let health = http().get(d.api("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    drop(unread);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_client_that_never_reads_is_disconnected_with_bounded_memory() {
    let temp = tempfile::tempdir().unwrap();
    let done = temp.path().join("done");
    let config = temp.path().join("servers.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"flood": {"command": "python3", "args": [hostile_py()]}}})
            .to_string(),
    )
    .unwrap();
    let (mut child, mut stdin, mut stdout) =
        spawn_stdio(&config, &temp.path().join("data"), Stdio::piped());
    let pid = child.id().unwrap();
    let model = model_loaded(child.stderr.take().unwrap());
    let send = |message: Value| format!("{message}\n");
    stdin
        .write_all(send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})).as_bytes())
        .await
        .unwrap();
    stdout.next_line().await.unwrap();
    stdin
        .write_all(
            send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).as_bytes(),
        )
        .await
        .unwrap();
    // Wait until the server is there, reading while we do.
    let end = Instant::now() + UP;
    let mut id = 10;
    loop {
        id += 1;
        stdin
            .write_all(send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})).as_bytes())
            .await
            .unwrap();
        let mut listed = false;
        while let Some(line) = stdout.next_line().await.unwrap() {
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                listed = message.to_string().contains("flood__flood");
                break;
            }
        }
        if listed {
            break;
        }
        assert!(Instant::now() < end, "the server never showed up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::timeout(Duration::from_secs(120), model)
        .await
        .expect("the model loaded (or was given up)")
        .unwrap();
    // A small flood read to the end first, so the threads and allocator
    // arenas it takes exist before the baseline.
    stdin
        .write_all(send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "flood__flood", "arguments": {"count": 2000, "size": 8000, "logs": false}, "_meta": {"progressToken": 3}}})).as_bytes())
        .await
        .unwrap();
    while let Some(line) = stdout.next_line().await.unwrap() {
        if serde_json::from_str::<Value>(&line).unwrap()["id"] == 3 {
            break;
        }
    }
    let before = rss_kib(pid);
    // From now on stdout is never read.
    stdin
        .write_all(send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "flood__flood", "arguments": {"count": 40000, "size": 8000, "logs": false, "done_file": done}, "_meta": {"progressToken": 7}}})).as_bytes())
        .await
        .unwrap();
    wait_file(&done);
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(
        grown < BOUNDED_GROWTH_KIB,
        "a client that never reads grew the front door by {grown} KiB"
    );
    // Its answer cannot be delivered: it is disconnected, and the process
    // (with its server) ends on its own.
    let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
        .await
        .expect("the stdio front door kept a client that does not read")
        .unwrap();
    assert!(status.success() || status.code().is_some(), "{status:?}");
    drop(stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_child_process_outlives_its_server() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &["--connect-timeout", "1"]);

    // A server that never answers initialize: every timed-out attempt ends
    // its process; removing it while it connects ends the last one.
    let silent_pids = temp.path().join("silent.pids");
    register(
        &d,
        hostile_server(
            "silent",
            &["--silent", "--pid-file", silent_pids.to_str().unwrap()],
        ),
    )
    .await;
    wait_for(Duration::from_secs(60), || {
        (pids_in(&silent_pids).len() >= 3).then_some(())
    })
    .expect("three connect attempts");
    let alive = |pids: &[u32]| {
        pids.iter()
            .copied()
            .filter(|p| process_alive(*p))
            .collect::<Vec<_>>()
    };
    let live = wait_for(UP, || {
        let live = alive(&pids_in(&silent_pids));
        (live.len() <= 1).then_some(live)
    });
    assert!(
        live.is_some(),
        "timed-out attempts left processes: {:?}",
        alive(&pids_in(&silent_pids))
    );
    assert_eq!(remove(&d, "silent").await, 204);
    assert!(
        wait_for(UP, || alive(&pids_in(&silent_pids))
            .is_empty()
            .then_some(()))
        .is_some(),
        "removal left {:?} alive",
        alive(&pids_in(&silent_pids))
    );

    // A grandchild that ignores SIGTERM dies with its server's group.
    let pids = temp.path().join("forks.pids");
    register(
        &d,
        hostile_server("forks", &["--pid-file", pids.to_str().unwrap()]),
    )
    .await;
    wait_status(&d, "forks", "CONNECTED", UP).await;
    let (status, body) = rest_call(&d, "forks.grandchild", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let grandchild: u32 = body["content"][0]["text"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{body}"));
    assert!(process_alive(grandchild));
    let status = http()
        .post(d.api("/api/v1/aggregator/servers/forks/disconnect"))
        .send()
        .await
        .unwrap()
        .status();
    assert!(status.is_success(), "{status}");
    assert!(
        wait_for(UP, || alive(&pids_in(&pids)).is_empty().then_some(())).is_some(),
        "left alive after disconnect: {:?}",
        alive(&pids_in(&pids))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downstream_servers_inherit_none_of_our_descriptors() {
    let temp = tempfile::tempdir().unwrap();
    let config = temp.path().join("servers.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"h": {"command": "python3", "args": [hostile_py()]}}}).to_string(),
    )
    .unwrap();
    let (mut child, mut stdin, mut stdout) =
        spawn_stdio(&config, &temp.path().join("data"), Stdio::null());
    let mut send = async |message: Value| {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    };
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})).await;
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    let end = Instant::now() + UP;
    let mut id = 100;
    let descriptors = loop {
        id += 1;
        send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "h__fds", "arguments": {}}})).await;
        let answer = loop {
            let line = tokio::time::timeout(UP, stdout.next_line())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                break message;
            }
        };
        if let Some(text) = answer["result"]["content"][0]["text"].as_str()
            && answer["result"]["isError"] != true
        {
            break serde_json::from_str::<Vec<Value>>(text).unwrap();
        }
        assert!(Instant::now() < end, "the server never connected: {answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let foreign: Vec<&Value> = descriptors
        .iter()
        .filter(|d| d["fd"].as_u64().unwrap_or(0) > 2)
        .collect();
    assert!(
        foreign.is_empty(),
        "the downstream server inherited descriptors: {foreign:?}"
    );
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_headers_cannot_exhaust_the_listener() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(
        &temp.path().join("data"),
        &["--header-timeout", "1", "--max-connections", "32"],
    );
    let addr = d.url.trim_start_matches("http://").to_owned();
    // Far more slow connections than the cap, each sending half a request.
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
        slow.push(stream);
    }
    // The daemon answers again as the header timeout frees the slots.
    let healthy = wait_for(Duration::from_secs(60), || {
        let (status, _) = raw_http(
            &d.url,
            &raw_request("GET", "/healthz", &[("Host", "127.0.0.1")], ""),
        );
        (status == 200).then_some(())
    });
    assert!(healthy.is_some(), "/healthz stopped answering");
    // The slow connections were cut, not kept.
    let mut first = slow.remove(0);
    first
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buffer = [0u8; 256];
    match first.read(&mut buffer) {
        // Closed, or answered 408: either way the slot is free again.
        Ok(_) => {}
        Err(err) => assert!(
            !matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "a connection trickling its headers was kept open: {err}"
        ),
    }
    let log = std::fs::read_to_string(log_path(&d.data_dir)).unwrap_or_default();
    assert!(log.contains("connection cap reached"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_messages_are_refused_without_being_held() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(
        &temp.path().join("data"),
        &["--max-message-bytes", "1048576", "--request-timeout", "5"],
    );
    let pid = d.pid() as u32;
    register(&d, hostile_server("big", &[])).await;
    let (_http_server, port) = common::hostile_listening(&[], "--http");
    register(&d, http_server("bighttp", port)).await;
    wait_status(&d, "big", "CONNECTED", UP).await;
    wait_status(&d, "bighttp", "CONNECTED", UP).await;
    wait_background_settled(&d).await;
    let before = rss_kib(pid);

    // A server line of 200 MB: dropped as it streams, and the answer after
    // it still arrives.
    let (status, body) = rest_call(&d, "big.huge_line", json!({"mb": 200})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["content"][0]["text"], "after the huge line", "{body}");
    // A 200 MB HTTP body and an SSE event that never ends: refused.
    for tool in ["bighttp.huge_body", "bighttp.endless_event"] {
        let (status, body) = rest_call(&d, tool, json!({"mb": 200})).await;
        assert_ne!(status, 200, "{tool}: {body}");
    }
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(
        grown < BOUNDED_GROWTH_KIB,
        "oversized messages grew the daemon by {grown} KiB"
    );
    let health = http().get(d.api("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

/// A list page over the limit ends the listing at once (it used to wait
/// for the request timeout, an hour here), with its reason shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_page_over_the_limit_ends_the_listing_at_once() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(
        &temp.path().join("data"),
        &[
            "--max-message-bytes",
            "1048576",
            "--request-timeout",
            "3600",
        ],
    );
    register(
        &d,
        hostile_server("pages", &["--huge-pages", "2", "--huge-mb", "2"]),
    )
    .await;
    wait_status(&d, "pages", "CONNECTED", UP).await;
    let end = Instant::now() + UP;
    let server = loop {
        let server: Value = get_json(&d.api("/api/v1/aggregator/servers/pages")).await;
        if server["discovering"] != true {
            break server;
        }
        assert!(Instant::now() < end, "still listing: {server}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Its reason is shown; nothing was half-stored.
    let reason = server["health"]["list_error"].as_str().unwrap_or_default();
    assert!(
        reason.contains("tools/list failed") && reason.contains("larger than"),
        "{server}"
    );
    assert_eq!(server["status"], "CONNECTED", "{server}");
    assert_eq!(server["tool_count"], 0, "{server}");
    let (_, shown, _) = cli(&d.data_dir, &["servers", "show", "pages"]);
    assert!(shown.contains("list_error"), "{shown}");
}

/// An HTTP answer that holds no answer (a login page, an event stream
/// that ends without one and cannot be resumed) fails its request at
/// once, not at its timeout: the connect of a server behind a portal, and
/// a call, are told why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_answer_without_an_answer_fails_at_once() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(
        &temp.path().join("data"),
        &["--request-timeout", "3600", "--connect-timeout", "3600"],
    );
    let (_portal, portal_port) = common::hostile_listening(&["--html"], "--http");
    register(&d, http_server("portal", portal_port)).await;
    let (_server, port) = common::hostile_listening(&[], "--http");
    register(&d, http_server("web", port)).await;
    let portal = wait_status(&d, "portal", "ERROR", UP).await;
    assert!(
        portal.to_string().contains("text/html"),
        "the reason names what came back: {portal}"
    );
    wait_status(&d, "web", "CONNECTED", UP).await;
    for (tool, why) in [
        ("web.html_answer", "not JSON-RPC"),
        ("web.empty_stream", "without the answer"),
    ] {
        let (status, body) = rest_call(&d, tool, json!({})).await;
        assert_ne!(status, 200, "{tool}: {body}");
        assert!(body.to_string().contains(why), "{tool}: {body}");
    }
    let (status, body) = rest_call(&d, "web.echo", json!({"after": 1})).await;
    assert_eq!(status, 200, "{body}");
}

/// Messages a legacy SSE server sends before naming its endpoint answer
/// nothing (no request could have been sent): they are dropped, not taken
/// for the answers to the handshake that follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_before_the_sse_endpoint_are_not_taken_for_the_handshakes() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &[]);
    let (_server, port) = common::hostile_listening(&["--early-answers"], "--sse");
    register(
        &d,
        json!({"name": "early", "transport_type": "SSE",
               "connection_config": {"url": format!("http://127.0.0.1:{port}/sse")}, "auto_connect": true}),
    )
    .await;
    wait_status(&d, "early", "CONNECTED", UP).await;
    let (status, body) = rest_call(&d, "early.echo", json!({"x": 1})).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.to_string().contains("hijack"), "{body}");
}

/// An empty 200 is taken as the 202 it should have been (some servers
/// send the answer on the listening stream): the request waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_http_answer_leaves_the_request_waiting() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &["--request-timeout", "2"]);
    let (_server, port) = common::hostile_listening(&[], "--http");
    register(&d, http_server("web", port)).await;
    wait_status(&d, "web", "CONNECTED", UP).await;
    let (status, body) = rest_call(&d, "web.empty_answer", json!({})).await;
    assert_ne!(status, 200, "{body}");
    assert!(body.to_string().contains("did not answer within"), "{body}");
    // A POST that never gets its response headers times out the same way
    // (it used to hold the call until the client gave up).
    let (status, body) = rest_call(&d, "web.hang_post", json!({})).await;
    assert_ne!(status, 200, "{body}");
    assert!(body.to_string().contains("did not answer within"), "{body}");
}

/// An answer's body that trickles on after its call timed out is not read
/// for ever: the connection is let go (it used to stay, one per call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_answer_is_let_go_after_its_call_timed_out() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(
        &temp.path().join("data"),
        &["--request-timeout", "2", "--connect-timeout", "2"],
    );
    let (_server, port) = common::hostile_listening(&[], "--http");
    register(&d, http_server("web", port)).await;
    wait_status(&d, "web", "CONNECTED", UP).await;
    let (status, body) = rest_call(&d, "web.trickle", json!({})).await;
    assert_ne!(status, 200, "{body}");
    let end = Instant::now() + UP;
    loop {
        let (_, state) = rest_call(&d, "web.trickle_state", json!({})).await;
        if state["content"][0]["text"] == "true" {
            break;
        }
        assert!(Instant::now() < end, "the trickle was still read: {state}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A server's answer over the limit is dropped, but the call it answers
/// fails at once, not at its timeout (an hour here), wherever the answer
/// puts its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_answer_is_too_large_fails_at_once() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(
        &temp.path().join("data"),
        &[
            "--max-message-bytes",
            "1048576",
            "--request-timeout",
            "3600",
        ],
    );
    register(&d, hostile_server("big", &[])).await;
    wait_status(&d, "big", "CONNECTED", UP).await;
    for arguments in [json!({"mb": 2}), json!({"mb": 2, "id_first": true})] {
        let (status, body) = rest_call(&d, "big.huge_answer", arguments.clone()).await;
        assert_ne!(status, 200, "{arguments}: {body}");
        let detail = body.to_string();
        assert!(detail.contains("larger than"), "{arguments}: {detail}");
    }
    // The session goes on.
    let (status, body) = rest_call(&d, "big.echo", json!({"after": 1})).await;
    assert_eq!(status, 200, "{body}");
    wait_status(&d, "big", "CONNECTED", UP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_line_without_end_is_cut_at_the_limit() {
    let temp = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(BIN)
        .args([
            "stdio",
            "--in-process",
            "--max-message-bytes",
            "1048576",
            "--data-dir",
        ])
        .arg(temp.path().join("data"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    // Nothing loads in the background (the search model loads on first
    // need, and nothing here needs it): memory is measured once the front
    // door has answered.
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for _ in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {}
    });
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    stdin
        .write_all(b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}\n")
        .unwrap();
    let answered = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(answered.contains("\"id\":1"), "{answered}");
    let baseline = rss_kib(pid);
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while let Some(Ok(line)) = lines.next() {
            let done = line.contains("\"id\":9");
            seen.push(line);
            if done {
                break;
            }
        }
        (seen, lines)
    });
    let chunk = vec![b'x'; 1024 * 1024];
    let mut peak = 0;
    for _ in 0..300 {
        stdin.write_all(&chunk).unwrap();
        peak = peak.max(rss_kib(pid));
    }
    stdin
        .write_all(b"\n{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": \"ping\"}\n")
        .unwrap();
    let (seen, mut lines) = reader.join().unwrap();
    assert!(
        seen.iter()
            .any(|l| l.contains("-32700") && l.contains("limit")),
        "{seen:?}"
    );
    assert!(seen.last().unwrap().contains("\"result\""), "{seen:?}");
    // A request too large whose id comes first: its error names it, so
    // the client stops waiting for an answer.
    stdin
        .write_all(br#"{"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {"name": "x", "arguments": {"a": ""#)
        .unwrap();
    stdin.write_all(&vec![b'y'; 2 * 1024 * 1024]).unwrap();
    stdin.write_all(b"\"}}}\n").unwrap();
    let answer = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(
        answer.contains("\"id\":77") && answer.contains("-32600") && answer.contains("limit"),
        "{answer}"
    );
    // And one whose id comes last, as the TypeScript SDK writes it.
    stdin
        .write_all(br#"{"method": "tools/call", "params": {"name": "x", "arguments": {"a": ""#)
        .unwrap();
    stdin.write_all(&vec![b'y'; 2 * 1024 * 1024]).unwrap();
    stdin
        .write_all(b"\"}}, \"jsonrpc\": \"2.0\", \"id\": 78}\n")
        .unwrap();
    let answer = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(
        answer.contains("\"id\":78") && answer.contains("-32600") && answer.contains("limit"),
        "{answer}"
    );
    let grown = peak.saturating_sub(baseline);
    assert!(
        grown < BOUNDED_GROWTH_KIB,
        "a 300 MB line grew the front door by {grown} KiB"
    );
    drop(stdin);
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_urls_never_show_and_are_sealed_at_rest() {
    let d = Daemon::start();
    let port = free_port();
    let url =
        format!("http://alice:hunter2secret@127.0.0.1:{port}/sse?token=t0psecretvalue&page=1");
    register(
        &d,
        json!({"name": "leaky", "transport_type": "SSE", "connection_config": {"url": url}, "auto_connect": true,
            "health_check_url": format!("http://probe:healthsecret9@127.0.0.1:{port}/health?api_key=healthkey9")}),
    )
    .await;
    let server = wait_status(&d, "leaky", "ERROR", UP).await;
    let history: Value = get_json(&d.api("/api/v1/aggregator/servers/leaky/history")).await;
    let (_, shown, _) = cli(&d.data_dir, &["servers", "show", "leaky"]);
    let log = std::fs::read_to_string(log_path(&d.data_dir)).unwrap_or_default();
    let store = std::fs::read(d.data_dir.join("store.redb")).unwrap();
    let store = String::from_utf8_lossy(&store);
    for (place, text) in [
        ("the server's JSON", server.to_string()),
        ("the history", history.to_string()),
        ("servers show", shown),
        ("the log", log),
        ("the store file", store.into_owned()),
    ] {
        assert!(
            ![
                "hunter2secret",
                "t0psecretvalue",
                "healthsecret9",
                "healthkey9"
            ]
            .iter()
            .any(|secret| text.contains(secret)),
            "a credential shows in {place}"
        );
    }
    assert!(
        server["error_message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{server}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_request_outside_a_call_reaches_no_client() {
    let d = Daemon::start();
    register(&d, hostile_server("asker", &[])).await;
    wait_status(&d, "asker", "CONNECTED", UP).await;
    // Two clients that both accept sampling, with their streams open.
    let mut streams = Vec::new();
    for _ in 0..2 {
        let session = initialize_http(&d).await;
        let stream = http()
            .get(d.api("/mcp"))
            .header("mcp-session-id", &session)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        streams.push((session, stream));
    }
    let (status, body) = rest_call(&d, "asker.ask_later", json!({"delay_ms": 300})).await;
    assert_eq!(status, 200, "{body}");
    // The request comes after the call ended: whoever it reached would
    // have to answer; it must be refused at once instead.
    let end = Instant::now() + UP;
    let outcome = loop {
        let (_, body) = rest_call(&d, "asker.last_ask", json!({})).await;
        let text = body["content"][0]["text"]
            .as_str()
            .unwrap_or("null")
            .to_owned();
        if text != "null" {
            break text;
        }
        assert!(Instant::now() < end, "the server's request got no answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        outcome.contains("error") && outcome.contains("during a tool call"),
        "{outcome}"
    );
    drop(streams);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_misbehaviour_leaves_the_aggregator_responsive_and_bounded() {
    const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &["--request-timeout", "3"]);
    let pids = temp.path().join("bad.pids");
    let escaped = temp.path().join("escaped.pids");
    // A huge list (1,000 tools, one of them nested 10,000 levels deep) from
    // the hostile server, and a well-behaved server beside it.
    register(
        &d,
        hostile_server(
            "bad",
            &[
                "--tools",
                "1000",
                "--deep",
                "10000",
                "--pid-file",
                pids.to_str().unwrap(),
                "--escape-pids",
                escaped.to_str().unwrap(),
            ],
        ),
    )
    .await;
    // And one whose pages of 20 MB definitions end past the discovery
    // budget.
    register(
        &d,
        hostile_server("lists", &["--huge-pages", "30", "--huge-mb", "20"]),
    )
    .await;
    register(
        &d,
        json!({"name": "good", "transport_type": "STDIO", "connection_config": {"command": FIXTURE}, "auto_connect": true}),
    )
    .await;
    wait_status(&d, "good", "CONNECTED", UP).await;
    wait_status(&d, "lists", "CONNECTED", UP).await;
    let end = Instant::now() + UP;
    loop {
        let bad = wait_status(&d, "bad", "CONNECTED", UP).await;
        if bad["tool_count"].as_u64().unwrap_or(0) >= 1000 {
            break;
        }
        assert!(Instant::now() < end, "the huge list never arrived: {bad}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Routable once the routing table has caught up with the store.
    let end = Instant::now() + UP;
    while rest_call(&d, "bad.echo", json!({})).await.0 != 200 {
        assert!(Instant::now() < end, "bad.echo never became callable");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_background_settled(&d).await;
    // The deep tool and the huge ones are refused alone, with their reasons.
    let tools: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers/bad/tools")).await;
    let deep = tools.iter().find(|t| t["original_name"] == "deep");
    assert!(
        deep.is_some_and(|t| t["rejected_reason"].as_str().is_some()),
        "{deep:?}"
    );
    let end = Instant::now() + UP;
    loop {
        let tools: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers/lists/tools")).await;
        let huge = tools.iter().find(|t| t["original_name"] == "huge_0");
        if huge.is_some_and(|t| t["rejected_reason"].as_str().is_some()) {
            assert!(tools.len() < 30, "past the budget nothing is read");
            break;
        }
        assert!(Instant::now() < end, "the huge list was never discovered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Warm up what every call takes (threads, allocator arenas) before the
    // baseline.
    for _ in 0..3 {
        rest_call(&d, "good.echo", json!({})).await;
        rest_call(&d, "bad.flood", json!({"count": 500, "size": 2000})).await;
    }
    let before = rss_kib(d.pid() as u32);

    for (tool, arguments) in [
        ("malformed", json!({})),
        ("wrong_id", json!({})),
        ("hang", json!({})),
        ("huge_line", json!({"mb": 64})),
        ("flood", json!({"count": 5000, "size": 2000})),
        ("grandchild", json!({})),
        ("escape", json!({})),
        ("exit", json!({})),
    ] {
        let (status, body) = rest_call(&d, &format!("bad.{tool}"), arguments).await;
        assert!(
            [200, 502, 503, 504].contains(&status),
            "bad.{tool}: {status} {body}"
        );
        // Everyone else is still served.
        let (status, body) = rest_call(&d, "good.echo", json!({"after": tool})).await;
        assert_eq!(status, 200, "good.echo after bad.{tool}: {body}");
        let health = http().get(d.api("/healthz")).send().await.unwrap();
        assert_eq!(health.status(), 200, "after bad.{tool}");
        let grown = rss_kib(d.pid() as u32).saturating_sub(before);
        assert!(
            grown < BOUNDED_GROWTH_KIB,
            "after bad.{tool} the daemon grew by {grown} KiB"
        );
    }
    // What the server wrote went into the log escaped: it drove no
    // terminal and forged no line of ours.
    let log = std::fs::read_to_string(log_path(&d.data_dir)).unwrap_or_default();
    assert!(
        log.contains("\\u{1b}[2K2026-01-01"),
        "the junk line was logged"
    );
    assert!(
        !log.contains('\u{1b}') && !log.contains('\r'),
        "a server's bytes reached the log raw"
    );
    // No process of the hostile server (nor its grandchild) outlives it.
    assert_eq!(remove(&d, "bad").await, 204);
    let alive = || {
        pids_in(&pids)
            .into_iter()
            .chain(pids_in(&escaped))
            .filter(|p| process_alive(*p))
            .collect::<Vec<_>>()
    };
    assert!(
        wait_for(UP, || alive().is_empty().then_some(())).is_some(),
        "left alive: {:?}",
        alive()
    );
}

/// A 2025 server that never answers a method it does not know (here
/// `server/discover`, the 2026-07-28 probe) is taken for a 2025 server
/// once the probe's share of the connect timeout passes, and connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_silent_on_the_revision_probe_connects_as_a_2025_server() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(&temp.path().join("data"), &["--connect-timeout", "6"]);
    register(&d, hostile_server("quiet", &["--silent-unknown"])).await;
    let server = wait_status(&d, "quiet", "CONNECTED", UP).await;
    assert_eq!(server["protocol_version"], "2025-06-18", "{server}");
    let (status, body) = rest_call(&d, "quiet.echo", json!({"said": "hi"})).await;
    assert_eq!(status, 200, "{body}");
}

/// A server's error text reaches the terminal through `call` escaped: its
/// newlines cannot forge lines, its escape sequences cannot drive the
/// terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_error_text_cannot_drive_the_terminal_through_call() {
    let d = Daemon::start();
    register(&d, hostile_server("h", &[])).await;
    wait_status(&d, "h", "CONNECTED", UP).await;
    let (code, out, err) = cli(&d.data_dir, &["call", "h.error_text", "{}"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("it failed"), "{err}");
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
    assert!(!err.lines().any(|l| l.starts_with("FAKE LINE")), "{err:?}");
}
