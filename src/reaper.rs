//! Every process a stdio server starts ends with it, including those that
//! leave its process group (`setsid`, a double fork — browsers and agents
//! do this) and ignore SIGTERM. Three things make that true on Linux
//! without privileges:
//!
//! - the aggregator is a *child subreaper* (`PR_SET_CHILD_SUBREAPER`): a
//!   server's orphaned descendant is re-parented to us, never to init, so
//!   it is ours to kill and reap;
//! - each server instance is started with a mark in its environment
//!   (`MCP_AGGREGATOR_SERVER=<process>.<instance>`), which its descendants
//!   inherit through fork and exec; when the instance ends, every process
//!   carrying its mark — and every descendant of its leader still linked to
//!   it — is terminated, then killed after a grace period;
//! - a reaper waits for re-parented orphans that exit (only those: the
//!   children tokio spawned are tokio's to wait for), so none is left a
//!   zombie.
//!
//! When the aggregator itself is killed (SIGKILL, the OOM killer) nothing
//! of the above runs. Then each server's own process gets SIGKILL from the
//! kernel (`PR_SET_PDEATHSIG`, set for the thread that starts servers,
//! which lives as long as the process), and the processes that had left
//! its group are ended by the next aggregator to start: a mark names the
//! process that made it (pid and start time), so a mark whose maker is gone
//! is an abandoned one (`sweep_abandoned`).
//!
//! What is not covered: a descendant that both clears its environment and
//! leaves the tree before its server ends is known only as an orphan of
//! ours (re-parented to us); it is killed when the aggregator exits.

use std::collections::HashSet;
use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::process::{Pid, Signal};

/// The environment variable that marks a server's processes.
pub const MARK_ENV: &str = "MCP_AGGREGATOR_SERVER";

/// The children tokio spawned and waits for itself (never reaped here).
static MANAGED: Mutex<Option<HashSet<u32>>> = Mutex::new(None);
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// This process's part of every mark: its pid and start time (who made
/// the mark, and whether it still lives) and a random tag, so marks of
/// another aggregator (or an earlier one) never match ours.
fn process_tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let me = std::process::id();
        let start = stat(me).map_or(0, |s| s.start);
        let namespace = pid_namespace("self").unwrap_or(0);
        format!("{me}-{start}-{namespace}-{:016x}", rand_u64())
    })
}

/// The pid namespace a process is in (the inode `/proc/PID/ns/pid` names):
/// a pid means the same process only within one.
fn pid_namespace(pid: &str) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    let text = link.to_str()?;
    text.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// Who made a mark (`<pid>-<start>-<pid namespace>-<random>.<instance>`).
#[derive(Debug, PartialEq, Eq)]
struct Maker {
    pid: u32,
    start: u64,
    namespace: u64,
}

/// The maker a mark names, or `None` for a mark of another shape (an older
/// aggregator's, or one made up).
fn maker_of(mark: &str) -> Option<Maker> {
    let (tag, _instance) = mark.split_once('.')?;
    let mut parts = tag.split('-');
    let pid = parts.next()?.parse().ok()?;
    let start = parts.next()?.parse().ok()?;
    let namespace = parts.next()?.parse().ok()?;
    let random = parts.next()?;
    (random.len() == 16 && parts.next().is_none()).then_some(Maker {
        pid,
        start,
        namespace,
    })
}

fn rand_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // getrandom(2) fills a buffer we own; a short read leaves zeros, and
    // the pid and time below still tell processes apart.
    let _ = rustix::rand::getrandom(&mut bytes[..], rustix::rand::GetRandomFlags::empty());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    u64::from_ne_bytes(bytes) ^ (u64::from(std::process::id()) << 32) ^ nanos
}

/// Makes this process the subreaper of everything it starts. Called once at
/// start by the commands that run servers.
pub fn become_subreaper() {
    // prctl(PR_SET_CHILD_SUBREAPER, n): any n but zero sets it; rustix
    // passes the pid given, ours.
    if let Err(err) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        tracing::warn!(
            "cannot become a child subreaper ({}); a server's process that leaves its group is only ended by its mark",
            io::Error::from(err)
        );
    }
}

/// One server instance's mark.
#[derive(Debug, Clone)]
pub struct Mark {
    value: String,
}

impl Mark {
    pub fn new() -> Mark {
        let n = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        Mark {
            value: format!("{}.{n}", process_tag()),
        }
    }

    pub fn value(&self) -> &str {
        &self.value
    }
}

impl Default for Mark {
    fn default() -> Self {
        Mark::new()
    }
}

/// Spawns `command` as a child tokio waits for (the reaper leaves it be),
/// which the kernel kills if this process dies without ending it. Must be
/// called inside a tokio runtime (the child is that runtime's to wait for).
pub fn spawn(mut command: tokio::process::Command) -> io::Result<tokio::process::Child> {
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec and makes
    // only raw system calls (prctl, getppid), which are async-signal-safe;
    // it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // The parent died between fork and prctl: the signal would
            // never come.
            if rustix::process::getppid() != Some(parent) {
                return Err(io::Error::other("the aggregator exited"));
            }
            Ok(())
        });
    }
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| io::Error::other("servers are started from within the runtime"))?;
    let (answer, answered) = std::sync::mpsc::sync_channel(1);
    let job: SpawnJob = Box::new(move || {
        let _entered = runtime.enter();
        let mut managed = lock_managed();
        let child = command.spawn();
        if let Ok(child) = &child
            && let Some(pid) = child.id()
        {
            managed.get_or_insert_with(HashSet::new).insert(pid);
        }
        drop(managed);
        let _ = answer.send(child);
    });
    spawner()
        .lock()
        .map_err(|_| io::Error::other("the thread that starts servers failed"))?
        .send(job)
        .map_err(|_| io::Error::other("the thread that starts servers is gone"))?;
    answered
        .recv()
        .map_err(|_| io::Error::other("the thread that starts servers failed"))?
}

type SpawnJob = Box<dyn FnOnce() + Send>;

/// The one thread every server is forked from. The kernel's parent-death
/// signal fires when the *thread* that forked a child ends, so servers are
/// never forked from tokio's threads, which come and go; this one lives as
/// long as the process.
fn spawner() -> &'static Mutex<std::sync::mpsc::Sender<SpawnJob>> {
    static SPAWNER: std::sync::OnceLock<Mutex<std::sync::mpsc::Sender<SpawnJob>>> =
        std::sync::OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (jobs, queue) = std::sync::mpsc::channel::<SpawnJob>();
        let started = std::thread::Builder::new()
            .name("server-spawner".to_owned())
            .spawn(move || {
                while let Ok(job) = queue.recv() {
                    // One failed start must not leave the process unable
                    // to start any server.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            });
        if let Err(err) = started {
            tracing::error!("cannot start the thread that starts servers: {err}");
        }
        Mutex::new(jobs)
    })
}

/// The child was waited for: its pid is no longer ours to spare.
pub fn forget(pid: u32) {
    if let Some(managed) = lock_managed().as_mut() {
        managed.remove(&pid);
    }
}

fn lock_managed() -> std::sync::MutexGuard<'static, Option<HashSet<u32>>> {
    match MANAGED.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A process seen in `/proc`: its pid and start time (so a pid reused by
/// another process is never signalled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Process {
    pub pid: u32,
    start: u64,
}

/// What `/proc/PID/stat` says of a process: parent, state, start time.
struct Stat {
    ppid: u32,
    state: u8,
    start: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces and parentheses: the fields after the
    // last `)` are fixed (state is the 3rd field, ppid the 4th, start the 22nd).
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: *fields.first()?.as_bytes().first()?,
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

fn all_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// One process as a scan of `/proc` saw it.
#[derive(Debug, Clone)]
struct Seen {
    pid: u32,
    ppid: u32,
    start: u64,
    /// Its `MARK_ENV` value, when it has one (readable: our user's).
    mark: Option<Box<str>>,
}

/// How long a scan of `/proc` serves later callers: at shutdown, 200
/// servers stopping at once share a few scans instead of making 400.
const SCAN_FRESH: Duration = Duration::from_millis(100);

/// Every live process (zombies left out), from a scan no older than
/// `max_age`; one scan at a time.
fn scan(max_age: Duration) -> std::sync::Arc<Vec<Seen>> {
    static LAST: Mutex<Option<(std::time::Instant, std::sync::Arc<Vec<Seen>>)>> = Mutex::new(None);
    let mut last = match LAST.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    if let Some((at, seen)) = last.as_ref()
        && at.elapsed() < max_age
    {
        return std::sync::Arc::clone(seen);
    }
    let me = std::process::id();
    let prefix = format!("{MARK_ENV}=").into_bytes();
    let seen: Vec<Seen> = all_pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let stat = stat(pid)?;
            if stat.state == b'Z' {
                return None;
            }
            let mark = std::fs::read(format!("/proc/{pid}/environ"))
                .ok()
                .and_then(|environ| {
                    environ
                        .split(|&b| b == 0)
                        .find_map(|entry| entry.strip_prefix(prefix.as_slice()))
                        .map(|value| String::from_utf8_lossy(value).into())
                });
            Some(Seen {
                pid,
                ppid: stat.ppid,
                start: stat.start,
                mark,
            })
        })
        .collect();
    let seen = std::sync::Arc::new(seen);
    *last = Some((std::time::Instant::now(), std::sync::Arc::clone(&seen)));
    seen
}

/// Live processes carrying `mark`, and the descendants of `leader` (the
/// server's own process, while it lives).
pub fn family(mark: &Mark, leader: Option<u32>) -> HashSet<Process> {
    family_in(&scan(SCAN_FRESH), mark, leader)
}

fn family_in(seen: &[Seen], mark: &Mark, leader: Option<u32>) -> HashSet<Process> {
    let mut found: HashSet<Process> = seen
        .iter()
        .filter(|p| p.mark.as_deref() == Some(mark.value()))
        .map(|p| Process {
            pid: p.pid,
            start: p.start,
        })
        .collect();
    if let Some(leader) = leader {
        // Descendants still linked to the leader, whatever their
        // environment: walked down from it.
        let mut frontier = vec![leader];
        let mut walked = HashSet::from([leader]);
        while let Some(parent) = frontier.pop() {
            for p in seen.iter().filter(|p| p.ppid == parent) {
                if walked.insert(p.pid) {
                    found.insert(Process {
                        pid: p.pid,
                        start: p.start,
                    });
                    frontier.push(p.pid);
                }
            }
        }
    }
    found
}

/// Sends `signal` to `process` if it is still the process that was seen;
/// false if it is gone.
pub fn signal(process: Process, signal: Signal) -> bool {
    let same = stat(process.pid).is_some_and(|s| s.start == process.start && s.state != b'Z');
    if same
        && let Ok(pid) = i32::try_from(process.pid)
        && let Some(pid) = Pid::from_raw(pid)
    {
        // The pid was just seen to be the same live process.
        let _ = rustix::process::kill_process(pid, signal);
    }
    same
}

/// Rounds of SIGKILL by mark after the grace: a process that forks anew
/// when it is told to stop is found again (by a fresh scan) and killed.
const KILL_ROUNDS: usize = 10;

/// Ends a server instance's processes: SIGTERM, then SIGKILL to those left
/// after `grace`, then SIGKILL to whatever carries the mark still (fresh
/// scans, until none is left or `KILL_ROUNDS`); returns how many there
/// were. `known` holds processes found earlier (while the leader lived)
/// whose link may be gone now. Blocking: reads `/proc` and waits.
pub fn end(mark: &Mark, known: HashSet<Process>, grace: Duration) -> usize {
    let mut family = family(mark, None);
    if family.is_empty() {
        // A shared scan may predate the processes of an instance that
        // lived only briefly (a server restarting in a loop): only a fresh
        // one may say none is left.
        family = family_in(&scan(Duration::ZERO), mark, None);
    }
    family.extend(known);
    terminate(family, grace, || {
        family_in(&scan(Duration::ZERO), mark, None)
    })
}

/// Ends `found`: SIGTERM, SIGKILL to those left after `grace`, then SIGKILL
/// to whatever `find` still finds (fresh scans: a process that forks when
/// told to stop is found again), until none is left or `KILL_ROUNDS`.
/// Returns how many processes there were.
fn terminate(
    found: HashSet<Process>,
    grace: Duration,
    find: impl Fn() -> HashSet<Process>,
) -> usize {
    let mut left: HashSet<Process> = found
        .into_iter()
        .filter(|p| signal(*p, Signal::TERM))
        .collect();
    if left.is_empty() {
        return 0;
    }
    let mut ended: HashSet<Process> = left.clone();
    let deadline = std::time::Instant::now() + grace;
    loop {
        reap_orphans();
        left.retain(|p| stat(p.pid).is_some_and(|s| s.start == p.start && s.state != b'Z'));
        if left.is_empty() || std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for process in &left {
        signal(*process, Signal::KILL);
    }
    for _ in 0..KILL_ROUNDS {
        let again = find();
        if again.is_empty() {
            break;
        }
        for process in &again {
            signal(*process, Signal::KILL);
        }
        ended.extend(again);
        reap_orphans();
        std::thread::sleep(Duration::from_millis(10));
    }
    reap_orphans();
    ended.len()
}

/// At exit: kills every process of every server this aggregator started
/// (by mark), and every orphan re-parented to it, then reaps them.
pub fn end_all() {
    let tag = process_tag();
    let me = std::process::id();
    let managed = lock_managed().clone().unwrap_or_default();
    let mut killed = 0usize;
    for p in scan(Duration::ZERO).iter() {
        let ours = p.mark.as_deref().is_some_and(|m| is_ours(m, tag));
        let orphan = p.ppid == me && !managed.contains(&p.pid);
        if (ours || orphan)
            && signal(
                Process {
                    pid: p.pid,
                    start: p.start,
                },
                Signal::KILL,
            )
        {
            killed += 1;
        }
    }
    if killed > 0 {
        tracing::info!(processes = killed, "ended servers' remaining processes");
    }
    let deadline = std::time::Instant::now() + Duration::from_millis(500);
    while reap_orphans() < killed && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        if !has_unmanaged_children() {
            break;
        }
    }
}

/// Ends the processes of servers whose aggregator died without ending them
/// (killed outright): every process of our user carrying a mark whose
/// maker — in our pid namespace — is no longer alive. Never this process's
/// own ancestors (a shell a dead aggregator's server opened may start the
/// next one). SIGTERM, then SIGKILL after `grace`, then SIGKILL rounds by
/// those marks, for processes that fork when told to stop. Returns how
/// many there were. Blocking: reads `/proc` and waits.
pub fn sweep_abandoned(grace: Duration) -> usize {
    let Some(namespace) = pid_namespace("self") else {
        return 0;
    };
    let me = std::process::id();
    let ancestors = ancestors_of(me);
    let abandoned = |seen: &Seen| {
        let Some(maker) = seen.mark.as_deref().and_then(maker_of) else {
            return false;
        };
        maker.namespace == namespace
            && maker.pid != me
            && !ancestors.contains(&seen.pid)
            && owned_by_me(seen.pid)
            && !stat(maker.pid).is_some_and(|s| s.start == maker.start && s.state != b'Z')
    };
    let find = || -> HashSet<Process> {
        scan(Duration::ZERO)
            .iter()
            .filter(|seen| abandoned(seen))
            .map(|seen| Process {
                pid: seen.pid,
                start: seen.start,
            })
            .collect()
    };
    terminate(find(), grace, find)
}

/// The pids of `pid`'s parent, its parent's parent, and so on.
fn ancestors_of(pid: u32) -> HashSet<u32> {
    let mut ancestors = HashSet::new();
    let mut current = pid;
    while let Some(parent) = stat(current).map(|s| s.ppid) {
        if parent == 0 || !ancestors.insert(parent) {
            break;
        }
        current = parent;
    }
    ancestors
}

/// Whether the process runs as our user: a root aggregator leaves other
/// users' servers to their own aggregators.
fn owned_by_me(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(format!("/proc/{pid}"))
        .is_ok_and(|meta| meta.uid() == rustix::process::getuid().as_raw())
}

/// Whether a mark's value was made by this process.
fn is_ours(mark: &str, tag: &str) -> bool {
    mark.strip_prefix(tag)
        .is_some_and(|rest| rest.starts_with('.'))
}

fn has_unmanaged_children() -> bool {
    let me = std::process::id();
    let managed = lock_managed().clone().unwrap_or_default();
    all_pids()
        .into_iter()
        .any(|pid| !managed.contains(&pid) && stat(pid).is_some_and(|s| s.ppid == me))
}

/// Waits for every exited orphan re-parented to us (not tokio's children);
/// returns how many were reaped.
pub fn reap_orphans() -> usize {
    let me = std::process::id();
    // Zombie children of ours, found without holding the lock; each is
    // checked again under it (tokio's children are spared) before waiting.
    let zombies: Vec<u32> = all_pids()
        .into_iter()
        .filter(|&pid| stat(pid).is_some_and(|s| s.ppid == me && s.state == b'Z'))
        .collect();
    if zombies.is_empty() {
        return 0;
    }
    let managed = lock_managed();
    let mut reaped = 0;
    for pid in zombies {
        if managed.as_ref().is_some_and(|m| m.contains(&pid)) {
            continue;
        }
        let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
            continue;
        };
        // A zombie child of ours that tokio does not manage (checked under
        // the lock its spawns take). NOHANG: never blocks.
        let waited = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
        if matches!(waited, Ok(Some((reaped_pid, _))) if reaped_pid == pid) {
            reaped += 1;
        }
    }
    reaped
}

/// Reaps orphans whenever a child exits (SIGCHLD), until the runtime ends.
pub fn spawn_orphan_reaper() {
    let Ok(mut exits) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
    else {
        return;
    };
    tokio::spawn(async move {
        while exits.recv().await.is_some() {
            let _ = tokio::task::spawn_blocking(reap_orphans).await;
        }
    });
}

/// How many live processes carry a mark of this aggregator: every server's
/// processes, those that left their group included.
pub fn marked_processes() -> usize {
    let tag = process_tag();
    scan(SCAN_FRESH)
        .iter()
        .filter(|p| p.mark.as_deref().is_some_and(|m| is_ours(m, tag)))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_names_its_maker_and_an_older_mark_names_none() {
        let mark = Mark::new();
        let me = std::process::id();
        let maker = maker_of(mark.value()).expect("a mark of ours names its maker");
        assert_eq!(maker.pid, me);
        assert_eq!(Some(maker.start), stat(me).map(|s| s.start));
        assert_eq!(Some(maker.namespace), pid_namespace("self"));
        assert!(is_ours(mark.value(), process_tag()));
        assert_eq!(
            maker_of("00ff00ff00ff00ff.3"),
            None,
            "an older aggregator's"
        );
        assert_eq!(maker_of("12-34-00ff00ff00ff00ff.1"), None, "no namespace");
        assert_eq!(maker_of("1-0-abc.1"), None, "made up");
        assert_eq!(maker_of("x-34-5-00ff00ff00ff00ff.1"), None);
        assert!(ancestors_of(me).contains(&stat(me).unwrap().ppid));
    }

    #[test]
    fn a_mark_is_found_in_a_childs_environment_and_its_descendants() {
        let mark = Mark::new();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .env(MARK_ENV, mark.value())
            .spawn()
            .unwrap();
        let pid = child.id();
        let end = std::time::Instant::now() + Duration::from_secs(10);
        let found = loop {
            let found = family(&mark, None);
            if found.len() >= 2 || std::time::Instant::now() > end {
                break found;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(found.iter().any(|p| p.pid == pid), "{found:?}");
        assert_eq!(found.len(), 2, "the shell and its sleep: {found:?}");
        assert!(family(&Mark::new(), None).is_empty(), "another mark");
        let linked = family(&Mark::new(), Some(pid));
        assert_eq!(linked.len(), 1, "the sleep, by its parent: {linked:?}");
        for p in &found {
            signal(*p, Signal::KILL);
        }
        let _ = child.wait();
    }
}
