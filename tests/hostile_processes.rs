//! A server's processes are contained and its output bounded, on the real
//! binary: a process that leaves the server's group (setsid, a second
//! fork) and ignores SIGTERM ends when its server is removed, when its
//! server crashes and is restarted, and when the daemon stops; `/metrics`
//! counts it meanwhile; and a server flooding its stderr cannot flood the
//! daemon's log.

mod common;

use common::*;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const UP: Duration = Duration::from_secs(90);

/// Whether the pid is in `/proc` at all (a zombie not reaped still is).
fn in_proc(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The process group of a live process.
fn pgrp(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(2).unwrap().parse().unwrap()
}

async fn metric(d: &Daemon, name: &str) -> f64 {
    let text = http()
        .get(d.api("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

async fn escape(d: &Daemon, server: &str) -> u32 {
    let (status, body) = rest_call(d, &format!("{server}.escape"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    body["content"][0]["text"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{body}"))
}

/// Registers a server that, once connected, starts a process that leaves
/// its group and ignores SIGTERM; the pids of that escapee and of the
/// server's own process (both alive).
async fn start_runaway(d: &Daemon, dir: &Path, name: &str, extra: &[&str]) -> (u32, u32) {
    let escapees = dir.join(format!("{name}.escaped.pids"));
    let servers = dir.join(format!("{name}.server.pids"));
    let mut args = vec![
        "--escape-pids",
        escapees.to_str().unwrap(),
        "--pid-file",
        servers.to_str().unwrap(),
    ];
    args.extend(extra);
    register(d, hostile_server(name, &args)).await;
    wait_status(d, name, "CONNECTED", UP).await;
    let escaped = escape(d, name).await;
    let server = pids_in(&servers)[0];
    assert!(process_alive(escaped) && process_alive(server));
    (escaped, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_leaves_its_group_ends_with_its_server_and_the_daemon() {
    let temp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_in(&temp.path().join("data"), &[]);
    let (escaped, server) = start_runaway(&d, temp.path(), "runaway", &[]).await;
    assert_ne!(pgrp(escaped), pgrp(server), "it left the server's group");
    // Counted among the servers' processes: the server and the escapee.
    assert!(metric(&d, "mcp_aggregator_server_processes").await >= 2.0);

    assert_eq!(remove(&d, "runaway").await, 204);
    assert!(
        wait_for(UP, || (!in_proc(escaped)).then_some(())).is_some(),
        "removal left {escaped} (alive: {})",
        process_alive(escaped)
    );

    // Another one, and the daemon stops.
    let (escaped, _) = start_runaway(&d, temp.path(), "runaway2", &[]).await;
    let status = d.terminate(UP).expect("the daemon exits on SIGTERM");
    assert!(status.success(), "{status:?}");
    assert!(
        wait_for(UP, || (!process_alive(escaped)).then_some(())).is_some(),
        "the daemon's exit left {escaped} alive"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_server_leaves_no_process_behind() {
    let temp = tempfile::tempdir().unwrap();
    let pids = temp.path().join("escaped.pids");
    let d = Daemon::start_in(&temp.path().join("data"), &[]);
    register(
        &d,
        hostile_server(
            "crashy",
            &[
                "--escape-at-start",
                "--exit-after-ms",
                "300",
                "--escape-pids",
                pids.to_str().unwrap(),
            ],
        ),
    )
    .await;
    // Three starts, each leaving a process that escaped.
    let started = wait_for(Duration::from_secs(60), || {
        let seen = pids_in(&pids);
        (seen.len() >= 3).then_some(seen)
    })
    .expect("three starts");
    // Each crash ends its escapee: at most the running instance's lives.
    let leaked = wait_for(UP, || {
        let alive: Vec<u32> = started[..started.len() - 1]
            .iter()
            .copied()
            .filter(|p| in_proc(*p))
            .collect();
        alive.is_empty().then_some(())
    });
    assert!(
        leaked.is_some(),
        "earlier starts left {:?} (all: {started:?})",
        started.iter().filter(|p| in_proc(**p)).collect::<Vec<_>>()
    );
    // Each loss soon after connecting waits a step longer than the last
    // (it used to retry every second for ever).
    let log = std::fs::read_to_string(log_path(&d.data_dir)).unwrap_or_default();
    let steps: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("connection lost") && l.contains("crashy"))
        .filter_map(|l| l.split("backoff_step=").nth(1)?.split_whitespace().next())
        .collect();
    assert!(
        steps.len() >= 2 && steps[..2] == ["0", "1"],
        "{steps:?}\n{log}"
    );
    assert_eq!(remove(&d, "crashy").await, 204);
    assert!(
        wait_for(UP, || pids_in(&pids)
            .iter()
            .all(|p| !in_proc(*p))
            .then_some(()))
        .is_some(),
        "left after removal: {:?}",
        pids_in(&pids)
            .into_iter()
            .filter(|p| in_proc(*p))
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_flooding_stderr_cannot_flood_the_log() {
    let d = Daemon::start();
    register(&d, hostile_server("noisy", &["--stderr-flood"])).await;
    wait_status(&d, "noisy", "CONNECTED", UP).await;
    // Wait until it has written far more than the log takes: 50,000 lines
    // of 8 KB dropped is 400 MB.
    let series = "mcp_aggregator_server_stderr_lines_dropped_total{server=\"noisy\"}";
    let end = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if metric(&d, series).await >= 50_000.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "the flood was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = std::fs::read_to_string(log_path(&d.data_dir)).unwrap_or_default();
    assert!(
        log.len() < 16 * 1024 * 1024,
        "the log grew to {} bytes",
        log.len()
    );
    assert!(
        log.contains("dropping lines, counted"),
        "the drop was not said"
    );
    // The server is still served.
    let (status, body) = rest_call(&d, "noisy.echo", json!({})).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_forks_when_told_to_stop_is_ended_too() {
    let temp = tempfile::tempdir().unwrap();
    let pids = temp.path().join("escaped.pids");
    let d = Daemon::start_in(&temp.path().join("data"), &[]);
    register(
        &d,
        hostile_server(
            "hydra",
            &["--fork-on-term", "--escape-pids", pids.to_str().unwrap()],
        ),
    )
    .await;
    wait_status(&d, "hydra", "CONNECTED", UP).await;
    let escaped = escape(&d, "hydra").await;
    assert!(process_alive(escaped));
    assert_eq!(remove(&d, "hydra").await, 204);
    // The SIGTERM made it fork; what it forked is ended as well.
    let left = wait_for(UP, || {
        let seen = pids_in(&pids);
        (seen.len() >= 2 && seen.iter().all(|p| !in_proc(*p))).then_some(seen)
    });
    assert!(
        left.is_some(),
        "left alive: {:?} of {:?}",
        pids_in(&pids)
            .into_iter()
            .filter(|p| in_proc(*p))
            .collect::<Vec<_>>(),
        pids_in(&pids)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_outright_leaves_no_server_running_past_its_next_start() {
    let temp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_in(&temp.path().join("data"), &[]);
    // Its escapee forks another each time it is told to stop.
    let (escaped, server) = start_runaway(&d, temp.path(), "runaway", &["--fork-on-term"]).await;

    d.kill9();
    // The server's own process dies with the daemon (the kernel's
    // parent-death signal); nothing could end the one that left its group.
    assert!(
        wait_for(UP, || (!process_alive(server)).then_some(())).is_some(),
        "the server {server} outlived the daemon killed outright"
    );
    assert!(process_alive(escaped), "{escaped} ignores SIGTERM and left");

    // The next daemon on any data dir ends what the dead one left, and
    // what that forked when told to stop.
    let other = temp.path().join("other");
    let _next = Daemon::start_in(&other, &[]);
    let escapees = temp.path().join("runaway.escaped.pids");
    let left = wait_for(UP, || {
        let seen = pids_in(&escapees);
        (seen.len() >= 2 && seen.iter().all(|p| !process_alive(*p))).then_some(())
    });
    assert!(
        left.is_some(),
        "the next start left {:?} of {:?} alive",
        pids_in(&escapees)
            .into_iter()
            .filter(|p| process_alive(*p))
            .collect::<Vec<_>>(),
        pids_in(&escapees)
    );
    assert!(!process_alive(escaped));
}

/// The sweep at start spares this daemon's own ancestors (a shell a dead
/// aggregator's server opened, which inherited its mark, may start the
/// next daemon), while other processes with that abandoned mark end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_sweep_spares_the_daemons_own_ancestors() {
    let temp = tempfile::tempdir().unwrap();
    // A maker that is gone: a process that ran and was waited for.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let _ = gone.wait();
    let namespace = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let namespace = namespace.to_str().unwrap();
    let namespace = &namespace["pid:[".len()..namespace.len() - 1];
    let mark = format!("{}-1-{namespace}-00ff00ff00ff00ff.1", gone.id());
    let mut bystander = std::process::Command::new("sleep")
        .arg("120")
        .env("MCP_AGGREGATOR_SERVER", &mark)
        .spawn()
        .unwrap();
    // A shell carrying the mark starts the daemon (and waits for it).
    let data = temp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let log = std::fs::File::create(log_path(&data)).unwrap();
    let mut shell = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} serve --listen 127.0.0.1:0 --data-dir {}; true",
            env!("CARGO_BIN_EXE_mcp-aggregator"),
            data.display()
        ))
        .env("MCP_AGGREGATOR_SERVER", &mark)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let daemon = wait_for(UP, || {
        let text = std::fs::read_to_string(data.join("daemon.json")).ok()?;
        serde_json::from_str::<serde_json::Value>(&text).ok()?["pid"].as_i64()
    })
    .unwrap_or_else(|| {
        let shell_exit = shell.try_wait().ok().flatten();
        panic!(
            "the daemon did not start (its shell: {shell_exit:?}); its log:\n{}",
            std::fs::read_to_string(log_path(&data)).unwrap_or_default()
        )
    });
    let swept = wait_for(UP, || bystander.try_wait().ok().flatten());
    let shell_alive = shell.try_wait().ok().flatten().is_none();
    signal(daemon as i32, libc::SIGTERM);
    let _ = wait_for(UP, || (!process_alive(daemon as u32)).then_some(()));
    let _ = shell.kill();
    let _ = shell.wait();
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert!(
        swept.is_some(),
        "the bystander with the abandoned mark was left"
    );
    assert!(shell_alive, "the daemon ended its own parent");
}

/// The daemon's own settings and credentials (`MCP_AGGREGATOR_*`: the
/// admin token, the classifier's API key) never reach a server's
/// environment, where a view-bound client could read them through any
/// tool that shows it; the server's own `env` still sets what it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_never_sees_the_daemons_own_secrets() {
    let temp = tempfile::tempdir().unwrap();
    let d = Daemon::start_with_env(
        temp.path(),
        &[],
        &[("MCP_AGGREGATOR_CLASSIFIER_API_KEY", "ck-secret-7731")],
    );
    let seen = temp.path().join("seen-env.txt");
    let script = format!(
        "env > {}.part && mv {0}.part {0}; exec sleep 30",
        seen.display()
    );
    register(
        &d,
        json!({"name": "nosy", "transport_type": "STDIO",
               "connection_config": {"command": "sh", "args": ["-c", script],
                                     "env": {"OWN_SETTING": "kept", "MCP_AGGREGATOR_URL": "http://127.0.0.1:1"}}}),
    )
    .await;
    let environment = wait_for(Duration::from_secs(30), || {
        std::fs::read_to_string(&seen).ok()
    })
    .expect("the server was started");
    assert!(environment.contains("OWN_SETTING=kept"), "{environment}");
    assert!(
        environment.contains("MCP_AGGREGATOR_URL=http://127.0.0.1:1"),
        "{environment}"
    );
    assert!(!environment.contains("ck-secret-7731"), "{environment}");
    assert!(
        environment.contains("MCP_AGGREGATOR_SERVER="),
        "the reaper's mark is set: {environment}"
    );
}
