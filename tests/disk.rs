//! The disk under the data dir fails, on the real binary: a full disk
//! refuses writes clearly and recovers by itself when space returns, with
//! nothing acknowledged lost; a damaged store is refused with exit 65 (no
//! panic, no restart loop) and `store check` / `store recover` read what
//! can be read without touching the original; an emptied store is not
//! started on in silence; damaged derived data (search index, vectors) is
//! rebuilt; and every other file of the data dir, damaged, is survived.

mod common;

use common::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const UP: Duration = Duration::from_secs(30);

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    mount: PathBuf,
}

impl SmallDisk {
    /// Mounts `size` of tmpfs at `mount`; `None` (with the reason printed)
    /// where this process may not mount.
    fn mount(mount: &Path, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(mount).unwrap();
        // CI runs as root and must run these; elsewhere they say why not.
        let skip = |why: String| {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI must run the full-disk tests: {why}"
            );
            eprintln!("skipped: {why}");
        };
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            skip("mounting a small filesystem needs root".to_owned());
            return None;
        }
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(mount)
            .status();
        if !mounted.as_ref().is_ok_and(|s| s.success()) {
            skip(format!("`mount -t tmpfs` failed here: {mounted:?}"));
            return None;
        }
        Some(SmallDisk {
            mount: mount.to_path_buf(),
        })
    }

    /// Fills what is left of the disk (a file written until ENOSPC).
    fn fill(&self) -> PathBuf {
        use std::io::Write as _;
        let path = self.mount.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while file.write_all(&chunk).is_ok() {}
        let small = vec![0u8; 512];
        while file.write_all(&small).is_ok() {}
        let _ = file.sync_all();
        path
    }
}

/// Fills the disk under the daemon at `url`, and the store's own free
/// pages with it (registrations until one is refused with 507); the
/// filler file, to remove for room.
async fn fill_store(disk: &SmallDisk, url: &str) -> PathBuf {
    let filler = disk.fill();
    for n in 0..200 {
        if register_at(url, &format!("pad{n}")).await.0 == 507 {
            return filler;
        }
    }
    panic!("the store never filled up");
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

/// `serve` on a known port with its log outside the data dir (a full data
/// disk must not swallow it, and `daemon.json` may not be writable).
/// Killed and reaped if a test fails before stopping it.
fn serve_on(data_dir: &Path, log: &Path, extra: &[&str]) -> (Reaped, String) {
    let port = free_port();
    let child = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data_dir)
        .args(extra)
        .env_remove("MCP_AGGREGATOR_TOKEN")
        .env("RUST_LOG", "info")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let up = wait_for(UP, || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    let child = Reaped(child);
    assert!(
        up.is_some(),
        "the daemon never listened: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    (child, url)
}

/// Calls `name` with `{"text": "hi"}` through the REST API: the status
/// and the answer.
async fn call_at(url: &str, name: &str) -> (u16, Value) {
    let response = http()
        .post(format!("{url}/api/v1/tools/call"))
        .json(&json!({"name": name, "arguments": {"text": "hi"}}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Registers the fixture server as `fx`, and waits until its `echo`
/// answers.
async fn fx_answering(url: &str) {
    const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
    let body = json!({"name": "fx", "transport_type": "STDIO",
        "connection_config": {"command": FIXTURE}, "auto_connect": true});
    let response = http()
        .post(format!("{url}/api/v1/aggregator/servers"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let end = Instant::now() + UP;
    while call_at(url, "fx.echo").await.0 != 200 {
        assert!(Instant::now() < end, "fx never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn register_at(url: &str, name: &str) -> (u16, Value) {
    let body = json!({"name": name, "transport_type": "STDIO",
        "connection_config": {"command": "true", "env": {"PAD": "p".repeat(2000)}},
        "auto_connect": false});
    let response = http()
        .post(format!("{url}/api/v1/aggregator/servers"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn names_at(url: &str) -> Vec<String> {
    let servers: Vec<Value> = get_json(&format!("{url}/api/v1/aggregator/servers")).await;
    servers
        .iter()
        .filter_map(|s| s["name"].as_str().map(str::to_owned))
        .collect()
}

fn stop(child: &mut Reaped) -> std::process::ExitStatus {
    signal(child.0.id() as i32, libc::SIGTERM);
    wait_for(UP, || child.0.try_wait().ok().flatten()).expect("the daemon stops on SIGTERM")
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.ends_with(".tmp") || name.contains(".check-"))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_clearly_and_recovers_when_space_returns() {
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&temp.path().join("disk"), "16m") else {
        return;
    };
    let data = disk.mount.join("data");
    let log = temp.path().join("daemon.log");
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    let mut acked = Vec::new();
    for n in 0..5 {
        let name = format!("before{n}");
        let (status, body) = register_at(&url, &name).await;
        assert_eq!(status, 201, "{body}");
        acked.push(name);
    }
    let filler = disk.fill();
    // Writes are refused, each with a clear answer.
    let mut refused = None;
    for n in 0..50 {
        let name = format!("during{n}");
        match register_at(&url, &name).await {
            (201, _) => acked.push(name),
            (status, body) => {
                refused = Some((status, body));
                break;
            }
        }
    }
    let (status, body) = refused.expect("a full disk refused a registration");
    assert_eq!(status, 507, "{body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("full"), "{body}");
    for n in 0..3 {
        let (status, _) = register_at(&url, &format!("again{n}")).await;
        assert_eq!(status, 507);
    }
    // What is stored is still read meanwhile.
    let end = Instant::now() + UP;
    loop {
        let response = http()
            .get(format!("{url}/api/v1/aggregator/servers"))
            .send()
            .await
            .unwrap();
        if response.status() == 200 {
            let listed: Vec<Value> = response.json().await.unwrap();
            assert_eq!(listed.len(), acked.len());
            break;
        }
        assert!(Instant::now() < end, "reads never worked on a full disk");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let health = http().get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 503);
    let health: Value = health.json().await.unwrap();
    assert_eq!(health["storage"]["status"], "failing", "{health}");
    assert_eq!(health["storage"]["disk_full"], true, "{health}");
    let metrics = http()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("mcp_aggregator_storage_healthy 0"),
        "{metrics}"
    );

    // Space returns: writes work again within seconds, no restart.
    std::fs::remove_file(filler).unwrap();
    let end = Instant::now() + UP;
    let mut n = 0;
    loop {
        n += 1;
        let name = format!("after{n}");
        if register_at(&url, &name).await.0 == 201 {
            acked.push(name);
            break;
        }
        assert!(Instant::now() < end, "writes never worked again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let health = http().get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let listed = names_at(&url).await;
    for name in &acked {
        assert!(listed.contains(name), "{name} was acknowledged and is gone");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let errors = text
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("cannot be written"))
        .count();
    assert_eq!(errors, 1, "the failure is said once at ERROR:\n{text}");
    assert!(text.contains("accepts writes again"), "{text}");

    // Nothing acknowledged is lost across a restart either.
    assert!(stop(&mut child).success());
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    let listed = names_at(&url).await;
    for name in &acked {
        assert!(listed.contains(name), "{name} is gone after a restart");
    }
    assert!(stop(&mut child).success());
    assert!(leftovers(&data).is_empty(), "{:?}", leftovers(&data));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_on_a_full_disk_serves_and_leaves_no_temporary_file() {
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&temp.path().join("disk"), "16m") else {
        return;
    };
    let data = disk.mount.join("data");
    let log = temp.path().join("daemon.log");
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    assert_eq!(register_at(&url, "kept").await.0, 201);
    assert!(stop(&mut child).success());
    let filler = disk.fill();
    // No room beside the store for the copy a check reads: it is read
    // from the temporary directory instead, and removed there too.
    let (code, out, err) = cli(&data, &["store", "check"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("the store is sound"), "{out}{err}");
    assert!(leftovers(&data).is_empty(), "{:?}", leftovers(&data));
    let in_temp = || -> Vec<String> {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("mcp-aggregator-check-"))
            .collect()
    };
    assert!(in_temp().is_empty(), "{:?}", in_temp());
    // No room for a recovered store: said so, never that the sound store
    // cannot be read (whose advice, to move it aside, would lose it).
    let (code, out, err) = cli(&data, &["store", "recover"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("the recovered store could not be written")
            || err.contains("store.recovered.redb"),
        "{out}{err}"
    );
    assert!(!out.contains("move it aside"), "{out}");
    assert!(!data.join("store.recovered.redb").exists());
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    // It serves what is stored, and says why it cannot write.
    assert!(names_at(&url).await.contains(&"kept".to_owned()));
    let (status, body) = register_at(&url, "refused").await;
    assert_eq!(status, 507, "{body}");
    assert!(leftovers(&data).is_empty(), "{:?}", leftovers(&data));
    std::fs::remove_file(filler).unwrap();
    let end = Instant::now() + UP;
    while register_at(&url, "later").await.0 != 201 {
        assert!(Instant::now() < end, "writes never worked again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(stop(&mut child).success());
    assert!(leftovers(&data).is_empty(), "{:?}", leftovers(&data));
}

/// A config file the full disk kept from being applied at start is
/// applied once the disk has room, with no edit or restart (it used to be
/// marked applied and never tried again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_a_full_disk_refused_at_start_is_applied_once_it_has_room() {
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&temp.path().join("disk"), "16m") else {
        return;
    };
    let data = disk.mount.join("data");
    let log = temp.path().join("daemon.log");
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    assert_eq!(register_at(&url, "kept").await.0, 201);
    assert!(stop(&mut child).success());
    let config = temp.path().join("servers.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {
            "from_file": {"command": "true", "auto_connect": false},
            "from_file_too": {"command": "true", "auto_connect": false}}})
        .to_string(),
    )
    .unwrap();
    let filler = disk.fill();
    let (mut child, url) = serve_on(
        &data,
        &log,
        &["--search", "off", "--config", config.to_str().unwrap()],
    );
    assert!(names_at(&url).await.contains(&"kept".to_owned()));
    assert!(!names_at(&url).await.contains(&"from_file".to_owned()));
    std::fs::remove_file(filler).unwrap();
    let end = Instant::now() + UP;
    while !names_at(&url).await.contains(&"from_file_too".to_owned()) {
        assert!(
            Instant::now() < end,
            "the config file was never applied: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(stop(&mut child).success());
}

/// A data dir with a few registrations, its daemon stopped cleanly.
async fn used_data_dir(data: &Path) {
    let mut d = Daemon::start_in(data, &["--search", "off"]);
    for n in 0..20 {
        register(&d, stdio_server(&format!("s{n}"))).await;
    }
    assert!(d.terminate(UP).is_some_and(|s| s.success()));
}

/// redb's record of free pages (saved at each clean close) damaged: the
/// store does not open, though every table is whole. `store check`
/// rebuilds the record in its copy and reads every table; `store recover`
/// brings them all back, and the daemon starts on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_record_of_free_pages_is_rebuilt_and_nothing_lost() {
    let temp = tempfile::tempdir().unwrap();
    // Which page holds the record depends on redb's layout, which differs
    // from store to store (ids, times): in each, every page in turn gets a
    // byte flipped until the record alone is hit. In a few layouts no
    // single flip does that; a new store is made then.
    let mut found = None;
    let mut data = temp.path().join("data");
    'layouts: for layout in 0..8 {
        data = temp.path().join(format!("data{layout}"));
        used_data_dir(&data).await;
        let store = data.join("store.redb");
        // Closed once more as redb closes a store cleanly: the record is
        // saved.
        drop(redb::Database::create(&store).unwrap());
        let pristine = std::fs::read(&store).unwrap();
        for page in 1..pristine.len() / 4096 {
            for at in [8, 64, 512] {
                let mut bytes = pristine.clone();
                bytes[page * 4096 + at] ^= 0xFF;
                std::fs::write(&store, &bytes).unwrap();
                if let Ok(report) = mcp_aggregator::store::check(&data)
                    && report.free_pages_rebuilt
                    && report.tables.iter().all(|t| t.damage.is_none())
                {
                    found = Some(report);
                    break 'layouts;
                }
            }
        }
    }
    let report = found.expect("no page flip hit the record of free pages alone");
    assert!(!report.sound(), "{report}");
    let servers = report.tables.iter().find(|t| t.table == "servers");
    assert_eq!(servers.map(|t| t.entries), Some(20), "{report}");
    let (code, out, err) = cli(&data, &["store", "recover", "--replace"]);
    assert_eq!(code, 0, "{out}{err}");
    let mut d = Daemon::start_in(&data, &["--search", "off"]);
    let listed: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers")).await;
    assert_eq!(listed.len(), 20);
    assert!(d.terminate(UP).is_some_and(|s| s.success()));
}

/// Runs `serve` until it exits on its own; its exit code and log.
fn serve_until_exit(data: &Path) -> (i32, String) {
    let mut child = spawn_serve_with_env(data, &[], &[("RUST_BACKTRACE", "0")]);
    let status = wait_for(UP, || child.try_wait().ok().flatten()).unwrap_or_else(|| {
        let _ = child.kill();
        panic!(
            "the daemon kept running: {}",
            std::fs::read_to_string(log_path(data)).unwrap_or_default()
        )
    });
    (
        status.code().unwrap_or(-1),
        std::fs::read_to_string(log_path(data)).unwrap_or_default(),
    )
}

/// Writes `bytes` of noise every `every` bytes of the file from `from`.
fn damage(path: &Path, from: u64, every: u64, bytes: usize) {
    use std::io::{Seek as _, SeekFrom, Write as _};
    let len = std::fs::metadata(path).unwrap().len();
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let mut offset = from;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    while offset < len {
        let noise: Vec<u8> = (0..bytes)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        file.seek(SeekFrom::Start(offset)).unwrap();
        file.write_all(&noise).unwrap();
        offset += every;
    }
}

/// Writes noise over every 4 KiB page of the file that holds `needle`.
fn damage_pages_holding(path: &Path, needle: &[u8]) {
    let mut bytes = std::fs::read(path).unwrap();
    let pages: Vec<usize> = bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(at, _)| at / 4096 * 4096)
        .collect();
    assert!(!pages.is_empty(), "nothing to damage");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let len = bytes.len();
    for page in pages {
        for byte in &mut bytes[page..(page + 4096).min(len)] {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = state as u8;
        }
    }
    std::fs::write(path, bytes).unwrap();
}

/// The damaged stores `store recover --replace` kept in `data`.
fn damaged_kept(data: &Path) -> Vec<PathBuf> {
    let mut kept: Vec<PathBuf> = std::fs::read_dir(data)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".damaged-"))
        .map(|e| e.path())
        .collect();
    kept.sort();
    kept
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_store_is_refused_without_a_panic_and_recovered_without_touching_it() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    used_data_dir(&data).await;
    let store = data.join("store.redb");
    // Noise over every page holding connection history (its entries say
    // REGISTERED): that table does not read, the others do.
    damage_pages_holding(&store, b"REGISTERED");
    // Every start: a clear message and exit 65 (the unit's
    // RestartPreventExitStatus), never a panic.
    for _ in 0..2 {
        let (code, log) = serve_until_exit(&data);
        assert_eq!(code, 65, "{log}");
        assert!(
            log.contains("is damaged") && log.contains("store recover"),
            "{log}"
        );
        assert!(!log.contains("panicked"), "{log}");
    }
    let before = sha256(&store);
    let (code, out, err) = cli(&data, &["store", "check"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("damage found"), "{out}{err}");
    assert!(out.contains("connection_history"), "{out}{err}");
    assert!(!err.contains("panicked"), "{err}");
    let (code, out, err) = cli(&data, &["store", "recover", "--replace", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let kept = PathBuf::from(report["damaged_kept"].as_str().unwrap());
    assert_eq!(sha256(&kept), before, "the damaged file was changed");
    let servers = report["tables"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["table"] == "servers"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(servers["entries"], 20, "{report}");
    // The daemon starts on what was recovered, every registration there.
    let mut d = Daemon::start_in(&data, &["--search", "off"]);
    let health = http().get(d.api("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let listed: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers")).await;
    assert_eq!(listed.len(), 20);
    assert!(d.terminate(UP).is_some_and(|s| s.success()));
    assert!(leftovers(&data).is_empty(), "{:?}", leftovers(&data));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_recovered_from_a_sound_file_keeps_every_registration() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    used_data_dir(&data).await;
    // What a check killed part way left an hour ago (its process is gone);
    // the copy of a check still running (pid 1 is alive); and a fresh one
    // of a process gone here (it may live in another pid namespace).
    let abandoned = data.join("store.redb.check-2147483646-0a1b2c3d4e5f");
    let running = data.join("store.redb.check-1");
    let elsewhere = data.join("store.redb.check-2147483645");
    std::fs::copy(data.join("store.redb"), &abandoned).unwrap();
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3700);
    std::fs::File::options()
        .write(true)
        .open(&abandoned)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    for copy in [&running, &elsewhere] {
        std::fs::write(copy, b"in use").unwrap();
        std::fs::File::options()
            .write(true)
            .open(copy)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
    }
    std::fs::write(&elsewhere, b"in use").unwrap();
    let (code, out, err) = cli(&data, &["store", "check"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("the store is sound"), "{out}");
    assert!(!abandoned.exists(), "an abandoned copy is removed");
    assert!(running.exists(), "a running check's copy is kept");
    assert!(elsewhere.exists(), "a fresh copy is kept");
    std::fs::remove_file(&running).unwrap();
    std::fs::remove_file(&elsewhere).unwrap();
    let (code, out, err) = cli(&data, &["store", "recover", "--replace"]);
    assert_eq!(code, 0, "{out}{err}");
    // Twice in one second: the first kept file is not written over.
    let kept: Vec<_> = damaged_kept(&data);
    assert_eq!(kept.len(), 1, "{kept:?}");
    let first_kept = sha256(&kept[0]);
    let (code, out, err) = cli(&data, &["store", "recover", "--replace"]);
    assert_eq!(code, 0, "{out}{err}");
    let kept = damaged_kept(&data);
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(kept.iter().any(|k| sha256(k) == first_kept), "{kept:?}");
    let d = Daemon::start_in(&data, &["--search", "off"]);
    let servers: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers")).await;
    assert_eq!(servers.len(), 20);
    // Secrets still open with the data dir's key: the registration is whole.
    let (code, out, _) = cli(&data, &["servers", "show", "s3"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("API_KEY"), "{out}");
    // A running daemon's store is not checked under its feet.
    let (code, _, err) = cli(&data, &["store", "check"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("in use"), "{err}");
}

/// A store cut short at its end (a copy or a disk that stopped part way)
/// opens nowhere, but the pages still there are whole: `store recover`
/// reads it as if the missing end were zeros and keeps every registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_cut_short_at_its_end_is_recovered() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    used_data_dir(&data).await;
    let store = data.join("store.redb");
    let sound = std::fs::read(&store).unwrap();
    std::fs::write(&store, &sound[..sound.len() - 1]).unwrap();
    let (code, log) = serve_until_exit(&data);
    assert_eq!(code, 65, "{log}");
    let (code, out, err) = cli(&data, &["store", "check"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("cut short"), "{out}{err}");
    assert!(!out.contains("the store is sound"), "{out}");
    let (code, out, err) = cli(&data, &["store", "recover", "--replace", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        report["cut_short"]["file_bytes"],
        sound.len() - 1,
        "{report}"
    );
    let d = Daemon::start_in(&data, &["--search", "off"]);
    let servers: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers")).await;
    assert_eq!(servers.len(), 20);
    drop(d);
    // Cut by half. Which pages the cut took depends on where this run's
    // store put its pages: none of its roots left to open, or every
    // registration's page gone — then no store without them is put in its
    // place — or only some of them, which are recovered, the damage said
    // and the cut file kept beside.
    std::fs::write(&store, &sound[..sound.len() / 2]).unwrap();
    let before = sha256(&store);
    let kept_before = damaged_kept(&data).len();
    let (code, out, err) = cli(&data, &["store", "recover", "--replace"]);
    if code == 0 {
        assert!(
            out.contains("servers") && out.contains("then:"),
            "{out}{err}"
        );
        let kept = damaged_kept(&data);
        assert_eq!(kept.len(), kept_before + 1, "{kept:?}");
        assert!(kept.iter().any(|k| sha256(k) == before), "{kept:?}");
    } else {
        assert_eq!(code, 1, "{out}{err}");
        assert!(
            out.contains("nothing recovered") || out.contains("nothing can be read"),
            "{out}{err}"
        );
        assert_eq!(sha256(&store), before, "the damaged store was replaced");
    }
    assert!(!data.join("store.recovered.redb").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_store_is_not_started_on_in_silence() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    used_data_dir(&data).await;
    std::fs::File::create(data.join("store.redb")).unwrap();
    let (code, log) = serve_until_exit(&data);
    assert_eq!(code, 65, "{log}");
    assert!(log.contains("empty") && log.contains("move"), "{log}");
    // Told to start fresh (the empty file moved away), it does.
    std::fs::rename(data.join("store.redb"), data.join("store.redb.empty")).unwrap();
    let d = Daemon::start_in(&data, &["--search", "off"]);
    let servers: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers")).await;
    assert!(servers.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_derived_data_is_rebuilt_never_refused() {
    const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    // A graph past 10 vectors, so every derived file exists.
    let args = ["--graph-from", "10"];
    let find = async |d: &Daemon| {
        let end = Instant::now() + Duration::from_secs(120);
        loop {
            let found: Value = post_json(
                &d.api("/api/v1/search"),
                &json!({"query": "generated tool number 7", "limit": 3}),
            )
            .await;
            if found.to_string().contains("fx.tool_0007") {
                return;
            }
            assert!(Instant::now() < end, "search never found it: {found}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    {
        let mut d = Daemon::start_in(&data, &args);
        register(
            &d,
            json!({"name": "fx", "transport_type": "STDIO", "connection_config": {"command": FIXTURE, "args": ["--tools", "40"]}, "auto_connect": true}),
        )
        .await;
        wait_status(&d, "fx", "CONNECTED", UP).await;
        wait_index_settled(&d).await;
        find(&d).await;
        assert!(d.terminate(UP).is_some_and(|s| s.success()));
    }
    let index = data.join("index");
    // Each kind of derived file damaged in turn (their names change as
    // they are rebuilt: listed afresh each round); then `index` a file.
    type Kind = (&'static str, fn(&str) -> bool);
    let kinds: [Kind; 6] = [
        ("keyword", |name| name == "meta.json"),
        ("keyword", |name| {
            [".store", ".term", ".idx", ".pos", ".fast", ".fieldnorm"]
                .iter()
                .any(|ext| name.ends_with(ext))
        }),
        ("vectors", |name| name == "meta.json"),
        ("vectors", |name| name.contains("graph")),
        ("vectors", |name| name.ends_with(".f16")),
        ("vectors", |name| name.ends_with(".i8")),
    ];
    let mut rounds = 0;
    for (dir, kind) in kinds {
        let damaged: Vec<PathBuf> = std::fs::read_dir(index.join(dir))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| kind(&e.file_name().to_string_lossy()))
                    .map(|e| e.path())
                    .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() > 0))
                    .collect()
            })
            .unwrap_or_default();
        if damaged.is_empty() {
            continue;
        }
        rounds += 1;
        for path in &damaged {
            damage(path, 0, 64, 32);
        }
        let mut d = Daemon::start_in(&data, &args);
        wait_index_settled(&d).await;
        find(&d).await;
        assert!(
            d.terminate(UP).is_some_and(|s| s.success()),
            "after damaging {damaged:?}"
        );
    }
    assert!(
        rounds >= 5,
        "only {rounds} kinds of derived files were there"
    );
    std::fs::remove_dir_all(&index).unwrap();
    std::fs::write(&index, b"not a folder").unwrap();
    let mut d = Daemon::start_in(&data, &args);
    wait_index_settled(&d).await;
    find(&d).await;
    assert!(d.terminate(UP).is_some_and(|s| s.success()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_other_file_of_the_data_dir_damaged_is_survived_or_named() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    used_data_dir(&data).await;
    // The daemon file of a daemon long gone, and a state key that is not
    // one: replaced, the daemon starts.
    std::fs::write(data.join("daemon.json"), b"{\"pid\": 1, \"url\": ").unwrap();
    std::fs::write(data.join("state.key"), b"short").unwrap();
    std::fs::write(data.join("admin.token"), b"\x00\x01 not a token \xff").unwrap();
    let mut d = Daemon::start_in(&data, &["--search", "off"]);
    let servers: Vec<Value> = get_json(&d.api("/api/v1/aggregator/servers")).await;
    assert_eq!(servers.len(), 20);
    assert!(d.terminate(UP).is_some_and(|s| s.success()));
    let log = std::fs::read_to_string(log_path(&data)).unwrap_or_default();
    assert!(log.contains("state.key"), "{log}");
    // The key that seals the registrations' secrets cannot be replaced:
    // named, and not restarted on.
    std::fs::write(data.join("secret.key"), b"short").unwrap();
    let (code, log) = serve_until_exit(&data);
    assert_eq!(code, 65, "{log}");
    assert!(log.contains("secret.key"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// A full disk while the search index is rebuilt: the rebuild fails, and
/// once space returns the index comes back by itself (tantivy's writer
/// does not survive a failed write; a new one is opened and the rebuild
/// tried again), with no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_comes_back_by_itself_after_a_full_disk_broke_a_rebuild() {
    const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&temp.path().join("disk"), "16m") else {
        return;
    };
    let data = disk.mount.join("data");
    let log = temp.path().join("daemon.log");
    let (mut child, url) = serve_on(&data, &log, &["--search", "keyword"]);
    let body = json!({"name": "fx", "transport_type": "STDIO",
        "connection_config": {"command": FIXTURE, "args": ["--tools", "40"]}});
    let response = http()
        .post(format!("{url}/api/v1/aggregator/servers"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let finds = async || {
        let found: Value = post_json(
            &format!("{url}/api/v1/search"),
            &json!({"query": "generated tool number 7", "limit": 3}),
        )
        .await;
        found.to_string().contains("fx.tool_0007")
    };
    let end = Instant::now() + UP;
    while !finds().await {
        assert!(Instant::now() < end, "search never found the tool");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let filler = disk.fill();
    let response = http()
        .post(format!("{url}/api/v1/search/reindex"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let end = Instant::now() + UP;
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("search indexing failed")
    {
        assert!(
            Instant::now() < end,
            "the rebuild did not fail on a full disk"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::fs::remove_file(filler).unwrap();
    let end = Instant::now() + Duration::from_secs(120);
    while !finds().await {
        assert!(
            Instant::now() < end,
            "search never came back: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(stop(&mut child).success());
}

/// A store file whose header is gone (zeroed) or that holds another
/// file's bytes is damage, refused with exit 65 like any other, not a
/// disk that fails to write (exit 1, restarted in a loop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_is_not_a_store_file_is_refused_as_damaged() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    used_data_dir(&data).await;
    let store = data.join("store.redb");
    let mut bytes = std::fs::read(&store).unwrap();
    bytes[..4096].fill(0);
    std::fs::write(&store, &bytes).unwrap();
    let (code, log) = serve_until_exit(&data);
    assert_eq!(code, 65, "{log}");
    assert!(log.contains("is damaged"), "{log}");
    assert!(!log.contains("cannot be written"), "{log}");
    std::fs::write(&store, b"hello, not a database\n").unwrap();
    let _ = std::fs::remove_file(log_path(&data));
    let (code, log) = serve_until_exit(&data);
    assert_eq!(code, 65, "{log}");
    assert!(log.contains("is damaged"), "{log}");
    // Cut short inside its header: damage too (it read as a disk that
    // fails to read, exit 1, and a service restarted in a loop).
    used_data_dir(&temp.path().join("sound")).await;
    let sound = std::fs::read(temp.path().join("sound").join("store.redb")).unwrap();
    std::fs::write(&store, &sound[..100]).unwrap();
    let _ = std::fs::remove_file(log_path(&data));
    let (code, log) = serve_until_exit(&data);
    assert_eq!(code, 65, "{log}");
    assert!(!log.contains("cannot be written"), "{log}");
}

/// A daemon started on a full disk cannot write its servers' status, so
/// none connects; once the disk has room they connect by themselves,
/// with their tools stored, and no restart or request is needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_a_full_disk_kept_from_connecting_connect_once_it_has_room() {
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&temp.path().join("disk"), "16m") else {
        return;
    };
    let data = disk.mount.join("data");
    let log = temp.path().join("daemon.log");
    let server = async |url: &str| -> Value {
        get_json(&format!("{url}/api/v1/aggregator/servers/fx")).await
    };
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    fx_answering(&url).await;
    // The disk fills, and the store's own free pages with it.
    let filler = fill_store(&disk, &url).await;
    // Small writes too, so none of a restart's writes finds room.
    for n in 0..500 {
        let body = json!({"name": format!("t{n}"), "transport_type": "STDIO",
            "connection_config": {"command": "true"}, "auto_connect": false});
        let response = http()
            .post(format!("{url}/api/v1/aggregator/servers"))
            .json(&body)
            .send()
            .await
            .unwrap();
        if response.status() == 507 {
            break;
        }
    }
    assert!(stop(&mut child).success());

    let log = temp.path().join("daemon-full.log");
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    let end = Instant::now() + UP;
    // Its status (CONNECTING, or CONNECTED after it) cannot be written.
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("the store cannot be written")
    {
        assert!(
            Instant::now() < end,
            "no write failed on a full disk: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::fs::remove_file(filler).unwrap();
    // Nothing is asked of the daemon meanwhile but reads.
    let end = Instant::now() + UP;
    loop {
        let seen = server(&url).await;
        if seen["status"] == "CONNECTED" && seen["tool_count"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(
            Instant::now() < end,
            "fx never connected once the disk had room: {seen}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    assert!(stop(&mut child).success());
}

/// A server whose new tool list cannot be stored (a full disk) may now run
/// changed tools that were never checked: its tools are not called until
/// the list is stored. Once the disk has room the list is stored, what it
/// added is held, and calls go through again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_new_list_cannot_be_stored_is_not_called() {
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&temp.path().join("disk"), "16m") else {
        return;
    };
    let data = disk.mount.join("data");
    let log = temp.path().join("daemon.log");
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    fx_answering(&url).await;
    let call = async |name: &str| call_at(&url, name).await;
    let filler = fill_store(&disk, &url).await;
    // The server changes its list; the new one cannot be stored.
    let (status, added) = call("fx.add_tool").await;
    assert_eq!(status, 200, "{added}");
    let end = Instant::now() + UP;
    let refusal = loop {
        let (status, answer) = call("fx.echo").await;
        if status != 200 {
            break answer;
        }
        assert!(
            Instant::now() < end,
            "fx was still called with its new list unstored: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let detail = refusal["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("could not be stored"), "{refusal}");

    std::fs::remove_file(filler).unwrap();
    let end = Instant::now() + UP;
    while call("fx.echo").await.0 != 200 {
        assert!(
            Instant::now() < end,
            "fx was never called again once the disk had room: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let held: Value = get_json(&format!("{url}/api/v1/aggregator/tools/held")).await;
    assert!(
        held.to_string().contains("new"),
        "what it added is held: {held}"
    );
    assert!(stop(&mut child).success());
}

/// Connecting and disconnecting are recorded as status changes: while the
/// disk is full they are refused (507) and the server keeps running and
/// answering, instead of being stopped unrecorded; with room they work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_a_disconnect_and_leaves_the_server_running() {
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&temp.path().join("disk"), "16m") else {
        return;
    };
    let data = disk.mount.join("data");
    let log = temp.path().join("daemon.log");
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    fx_answering(&url).await;
    let echo = async || call_at(&url, "fx.echo").await.0;
    let filler = fill_store(&disk, &url).await;
    let disconnect = async || -> (u16, Value) {
        let response = http()
            .post(format!("{url}/api/v1/aggregator/servers/fx/disconnect"))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    };
    let (status, refused) = disconnect().await;
    assert_eq!(status, 507, "{refused}");
    assert!(
        refused["detail"]
            .as_str()
            .is_some_and(|d| d.contains("left as it is")),
        "{refused}"
    );
    assert_eq!(echo().await, 200, "fx still answers");
    // Nor is a removal that cannot be recorded begun by stopping it.
    let removed = http()
        .delete(format!("{url}/api/v1/aggregator/servers/fx"))
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status().as_u16(), 507);
    assert_eq!(
        echo().await,
        200,
        "fx still answers after the refused removal"
    );
    let servers: Vec<Value> = get_json(&format!("{url}/api/v1/aggregator/servers")).await;
    assert_eq!(servers[0]["status"], "CONNECTED", "{servers:?}");

    std::fs::remove_file(filler).unwrap();
    // The store tries its disk again now and then, not at every request.
    let end = Instant::now() + UP;
    loop {
        let (status, answer) = disconnect().await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 507, "{answer}");
        assert!(Instant::now() < end, "still refused with room: {answer}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let end = Instant::now() + UP;
    loop {
        let servers: Vec<Value> = get_json(&format!("{url}/api/v1/aggregator/servers")).await;
        let fx = servers
            .iter()
            .find(|s| s["name"] == "fx")
            .cloned()
            .unwrap_or_default();
        if fx["status"] == "DISCONNECTED" {
            break;
        }
        assert!(Instant::now() < end, "fx never disconnected: {fx}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(stop(&mut child).success());
}

/// `secret.key` lost (or replaced) while the store kept secrets sealed
/// with it: the daemon starts, and a server whose secrets cannot be opened
/// is not started with the sealed text as its secret; its error says what
/// happened and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_key_cannot_open_is_never_sent() {
    const FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture-server");
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    let log = temp.path().join("daemon.log");
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    let seen = temp.path().join("env-seen");
    let body = json!({"name": "fx", "transport_type": "STDIO",
        "connection_config": {"command": "sh",
            "args": ["-c", format!("printenv MYSECRET > {}; exec {FIXTURE}", seen.display())],
            "env": {"MYSECRET": "hunter2"}},
        "auto_connect": true});
    let response = http()
        .post(format!("{url}/api/v1/aggregator/servers"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let end = Instant::now() + UP;
    while std::fs::read_to_string(&seen).unwrap_or_default().trim() != "hunter2" {
        assert!(Instant::now() < end, "fx never started with its secret");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(stop(&mut child).success());
    std::fs::remove_file(data.join("secret.key")).unwrap();
    std::fs::remove_file(&seen).unwrap();

    let log = temp.path().join("daemon-again.log");
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    let end = Instant::now() + UP;
    let record = loop {
        let record: Value = get_json(&format!("{url}/api/v1/aggregator/servers/fx")).await;
        if record["status"] == "ERROR" {
            break record;
        }
        assert!(Instant::now() < end, "fx never failed: {record}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let error = record["error_message"].as_str().unwrap_or_default();
    assert!(
        error.contains("MYSECRET") && error.contains("secret.key"),
        "{record}"
    );
    assert!(
        !seen.exists(),
        "fx was started with a secret it cannot have had"
    );
    assert!(stop(&mut child).success());
}

/// A first start on a full disk cannot make its store; it leaves none
/// behind (zeros that every later start would call a damaged store), and
/// starts once the disk has room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_start_on_a_full_disk_leaves_no_store_behind() {
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&temp.path().join("disk"), "2M") else {
        return;
    };
    let data = disk.mount.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let filler = disk.fill();
    let log = temp.path().join("first.log");
    let mut first = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let status = wait_for(UP, || first.try_wait().ok().flatten()).expect("it exits");
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!status.success(), "{said}");
    assert_ne!(status.code(), Some(65), "a full disk is no damage: {said}");
    assert!(said.contains("start again"), "{said}");
    assert!(!data.join("store.redb").exists(), "{said}");
    std::fs::remove_file(filler).unwrap();
    let (mut second, url) = serve_on(&data, &temp.path().join("second.log"), &[]);
    assert_eq!(register_at(&url, "after").await.0, 201);
    assert!(stop(&mut second).success());
    let mode = std::fs::metadata(data.join("store.redb"))
        .unwrap()
        .permissions();
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(mode.mode() & 0o777, 0o600);
}

/// A FIFO planted in place of a key or the token file is refused at once,
/// by name: reading it would block the daemon (and the CLI) for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_place_of_a_key_or_the_token_is_refused_not_waited_on() {
    let temp = tempfile::tempdir().unwrap();
    for file in ["secret.key", "state.key", "admin.token"] {
        let data = temp.path().join(file.replace('.', "-"));
        std::fs::create_dir_all(&data).unwrap();
        let planted = data.join(file);
        let made = Command::new("mkfifo").arg(&planted).status().unwrap();
        assert!(made.success());
        // The token file is read only when a token is asked for.
        let extra: &[&str] = if file == "admin.token" {
            &["--require-token"]
        } else {
            &[]
        };
        let mut child = spawn_serve_with_env(&data, extra, &[("RUST_BACKTRACE", "0")]);
        let status = wait_for(UP, || child.try_wait().ok().flatten());
        let log = std::fs::read_to_string(log_path(&data)).unwrap_or_default();
        let Some(status) = status else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{file}: the daemon kept running: {log}");
        };
        assert!(!status.success(), "{file}: {log}");
        assert!(log.contains("not a regular file"), "{file}: {log}");
        // The CLI reads the token and the daemon file too.
        if file == "admin.token" {
            let (code, _, err) = cli(&data, &["servers", "list"]);
            assert_ne!(code, 0, "{err}");
        }
    }
}

/// A store on a read-only filesystem (a mount looked at, a box in rescue
/// mode) is checked all the same: the copy goes to the temporary directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_a_read_only_filesystem_is_checked() {
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&temp.path().join("disk"), "16m") else {
        return;
    };
    let data = disk.mount.join("data");
    let log = temp.path().join("daemon.log");
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    assert_eq!(register_at(&url, "kept").await.0, 201);
    assert!(stop(&mut child).success());
    let read_only = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&disk.mount)
        .status()
        .unwrap();
    assert!(read_only.success());
    assert!(
        std::fs::write(data.join("probe"), b"x").is_err(),
        "read-only"
    );
    let (code, out, err) = cli(&data, &["store", "check"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("the store is sound"), "{out}{err}");
    assert!(out.contains("servers"), "{out}");
    // Recovering needs a new store beside the old one: that is what it
    // says, not that nothing could be read.
    let (code, out, err) = cli(&data, &["store", "recover"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("store.recovered.redb") && err.contains("Read-only"),
        "{out}{err}"
    );
    assert!(!out.contains("nothing can be read"), "{out}");
}

/// `client setup` on a full disk: refused with the reason, the client's
/// file untouched, and no empty or cut backup left beside it.
#[test]
fn client_setup_on_a_full_disk_leaves_the_file_and_no_backup() {
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&temp.path().join("home"), "1m") else {
        return;
    };
    let claude = disk.mount.join(".config/Claude/claude_desktop_config.json");
    std::fs::create_dir_all(claude.parent().unwrap()).unwrap();
    let original = format!(
        r#"{{"globalShortcut": "Ctrl+Space", "note": "{}", "mcpServers": {{}}}}"#,
        "x".repeat(8192)
    );
    std::fs::write(&claude, &original).unwrap();
    let _filler = disk.fill();
    let output = Command::new(BIN)
        .args(["client", "setup", "claude-desktop", "--yes"])
        .env("HOME", &disk.mount)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("MCP_AGGREGATOR_DATA_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No space left"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&claude).unwrap(), original);
    let beside: Vec<String> = std::fs::read_dir(claude.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".mcp-aggregator-setup.lock")
        .collect();
    assert_eq!(beside, ["claude_desktop_config.json"], "{beside:?}");
}

/// A small ext4 image mounted with `errors=remount-ro` (what many boxes
/// use), for a filesystem that turns read-only under a running daemon.
struct Ext4Disk {
    mount: PathBuf,
    image: PathBuf,
}

impl Ext4Disk {
    /// `None` (with the reason printed) where this process may not make
    /// or loop-mount one: loop devices are not everywhere CI runs.
    fn mount(dir: &Path) -> Option<Ext4Disk> {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: loop-mounting an ext4 image needs root");
            return None;
        }
        let image = dir.join("ext4.img");
        let mount = dir.join("ext4");
        std::fs::create_dir_all(&mount).unwrap();
        std::fs::File::create(&image)
            .unwrap()
            .set_len(32 << 20)
            .unwrap();
        let made = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&image)
            .status();
        if !made.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("skipped: mkfs.ext4 failed here: {made:?}");
            return None;
        }
        let mounted = Command::new("mount")
            .args(["-o", "loop,errors=remount-ro"])
            .arg(&image)
            .arg(&mount)
            .status();
        if !mounted.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("skipped: loop-mounting an ext4 image failed here: {mounted:?}");
            return None;
        }
        Some(Ext4Disk { mount, image })
    }

    /// What the kernel does on an I/O error under `errors=remount-ro`: the
    /// filesystem goes read-only, open files and all.
    fn fail(&self) {
        let source = Command::new("findmnt")
            .args(["-n", "-o", "SOURCE"])
            .arg(&self.mount)
            .output()
            .unwrap();
        let source = String::from_utf8_lossy(&source.stdout).trim().to_owned();
        let device = source.rsplit('/').next().unwrap_or_default();
        std::fs::write(format!("/sys/fs/ext4/{device}/trigger_fs_error"), "1").unwrap();
        let probe = self.mount.join("probe");
        let read_only = wait_for(UP, || std::fs::write(&probe, b"x").is_err().then_some(()));
        assert!(read_only.is_some(), "the filesystem never turned read-only");
    }

    /// Unmounts, repairs and mounts again (what an operator does).
    fn repair(&self) {
        assert!(
            Command::new("umount")
                .arg(&self.mount)
                .status()
                .unwrap()
                .success()
        );
        let _ = Command::new("e2fsck")
            .args(["-f", "-y"])
            .arg(&self.image)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let mounted = Command::new("mount")
            .args(["-o", "loop"])
            .arg(&self.image)
            .arg(&self.mount)
            .status()
            .unwrap();
        assert!(mounted.success());
    }
}

impl Drop for Ext4Disk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

/// The data dir's filesystem turns read-only under a running daemon:
/// changes are refused with the reason, and everything stored is still
/// read and called (a refused write never reaches the store file, so the
/// file is not latched shut).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filesystem_turned_read_only_refuses_changes_and_keeps_serving_reads() {
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = Ext4Disk::mount(temp.path()) else {
        return;
    };
    let data = disk.mount.join("data");
    let log = temp.path().join("daemon.log");
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    fx_answering(&url).await;
    assert_eq!(register_at(&url, "kept").await.0, 201);

    disk.fail();
    // Removing a running server as the first change: refused before the
    // server is stopped, and it goes on answering.
    let removed = http()
        .delete(format!("{url}/api/v1/aggregator/servers/fx"))
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), 503);
    let (status, body) = call_at(&url, "fx.echo").await;
    assert_eq!(status, 200, "a refused removal stopped the server: {body}");
    // Refused for as long as it lasts: through the second the file is
    // reopened for reading in (a write must not land in its memory and be
    // acknowledged), and after.
    // Several writers at once, as in use.
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let url = url.clone();
            tokio::spawn(async move {
                for n in 0..15 {
                    let (status, body) = register_at(&url, &format!("refused{writer}-{n}")).await;
                    assert_eq!(status, 503, "{body}");
                    let detail = body["detail"].as_str().unwrap_or_default();
                    assert!(detail.contains("Read-only"), "{body}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    // The file is reopened for reading within a second of the failure
    // (when no operation holds it); from then on every read works.
    let end = Instant::now() + UP;
    loop {
        let response = http()
            .get(format!("{url}/api/v1/aggregator/servers"))
            .send()
            .await
            .unwrap();
        if response.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < end,
            "reads never worked again: {}",
            response.text().await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let listed = names_at(&url).await;
    assert!(listed.contains(&"kept".to_owned()), "{listed:?}");
    assert!(
        !listed.iter().any(|n| n.starts_with("refused")),
        "{listed:?}"
    );
    for path in [
        "/api/v1/aggregator/servers/kept",
        "/api/v1/aggregator/state",
    ] {
        let response = http().get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    let (status, body) = call_at(&url, "fx.echo").await;
    assert_eq!(status, 200, "{body}");
    let health: Value = http()
        .get(format!("{url}/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["storage"]["status"], "failing", "{health}");
    assert_eq!(health["storage"]["disk_full"], false, "{health}");
    assert!(stop(&mut child).success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("read-only"), "the log says why:\n{text}");

    // Repaired and mounted again: what was acknowledged is there.
    disk.repair();
    let (mut child, url) = serve_on(&data, &log, &["--search", "off"]);
    let listed = names_at(&url).await;
    assert!(listed.contains(&"kept".to_owned()), "{listed:?}");
    assert!(listed.contains(&"fx".to_owned()), "{listed:?}");
    assert!(
        !listed.iter().any(|n| n.starts_with("refused")),
        "{listed:?}"
    );
    assert!(stop(&mut child).success());
}
