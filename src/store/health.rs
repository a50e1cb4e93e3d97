//! How the store's disk is doing, for the front doors to show (`/healthz`,
//! `/metrics`): whether writes fail (a full disk, an I/O error) — said once
//! at ERROR when they start failing and once when they work again — and
//! whether the file was found damaged (a read that made no sense to redb),
//! which stops the daemon rather than let it write to a damaged file.

use crate::model::StorageStatus;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a store whose writes failed tries its file again.
pub const REOPEN_EVERY: Duration = Duration::from_secs(1);
/// A new failure this soon after the last one was said is not said again
/// at ERROR (a disk at the edge of full fails, recovers, fails…).
const SAY_AGAIN_AFTER: Duration = Duration::from_secs(300);

/// The store's disk, as its writes found it.
#[derive(Debug)]
pub struct Health {
    path: PathBuf,
    failing: AtomicBool,
    /// A reopen is under way: its repair's syncs prove nothing yet.
    held: AtomicBool,
    /// The open file met a failed write: redb refuses everything on it
    /// until it is reopened.
    latched: AtomicBool,
    /// The file is open for reading only (its filesystem turned
    /// read-only): nothing written reaches it.
    read_only: AtomicBool,
    write_errors: AtomicU64,
    state: Mutex<State>,
    /// Counts the times writes came back after failing: whoever could not
    /// store something meanwhile (a server's status, its tools) does it
    /// again.
    recoveries: tokio::sync::watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    error: Option<String>,
    full: bool,
    since: Option<Instant>,
    said_at: Option<Instant>,
    last_reopen: Option<Instant>,
}

/// Whether an I/O error means the disk has no room.
pub fn is_disk_full(err: &std::io::Error) -> bool {
    err.kind() == std::io::ErrorKind::StorageFull
        || matches!(err.raw_os_error(), Some(code) if code == rustix::io::Errno::NOSPC.raw_os_error() || code == rustix::io::Errno::DQUOT.raw_os_error())
}

impl Health {
    pub fn new(path: &Path) -> Health {
        Health {
            path: path.to_path_buf(),
            failing: AtomicBool::new(false),
            held: AtomicBool::new(false),
            latched: AtomicBool::new(false),
            read_only: AtomicBool::new(false),
            write_errors: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            recoveries: tokio::sync::watch::channel(0).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A write to the file failed (the backend saw it before redb did).
    pub fn write_failed(&self, err: &std::io::Error) {
        self.latched.store(true, Ordering::SeqCst);
        self.write_refused(err);
    }

    /// A write was refused before it reached the file, for `err`: writes
    /// fail, but redb still takes reads on the open file.
    pub fn write_refused(&self, err: &std::io::Error) {
        self.write_errors.fetch_add(1, Ordering::Relaxed);
        let full = is_disk_full(err);
        let now = Instant::now();
        let mut state = self.lock();
        state.error = Some(err.to_string());
        state.full = full;
        if self.failing.swap(true, Ordering::SeqCst) {
            return;
        }
        state.since = Some(now);
        let say = state
            .said_at
            .is_none_or(|at| now.duration_since(at) >= SAY_AGAIN_AFTER);
        if say {
            state.said_at = Some(now);
            let hint = if full {
                "the disk holding it is full: free space there; writes resume by themselves"
            } else if err.raw_os_error() == Some(rustix::io::Errno::ROFS.raw_os_error()) {
                "its filesystem is read-only (mounted so, or after an I/O error): check the disk and mount it read-write; writes resume by themselves"
            } else {
                "check the disk; writes are tried again every second"
            };
            tracing::error!(
                store = %self.path.display(),
                "the store cannot be written ({err}); {hint}. Nothing already stored is lost; changes are refused until then"
            );
        } else {
            tracing::warn!(store = %self.path.display(), "the store cannot be written again ({err})");
        }
    }

    /// While held, a sync that goes through does not end a failure.
    pub fn hold_recovery(&self, held: bool) {
        self.held.store(held, Ordering::SeqCst);
    }

    /// A write went through after failures (the file's sync did).
    pub fn synced(&self) {
        if !self.held.load(Ordering::SeqCst) {
            self.writes_work();
        }
    }

    /// A write went through after failures.
    pub fn writes_work(&self) {
        if self.failing.swap(false, Ordering::SeqCst) {
            let mut state = self.lock();
            let after = state.since.map(|s| s.elapsed().as_secs()).unwrap_or(0);
            state.error = None;
            state.full = false;
            state.since = None;
            tracing::info!(
                store = %self.path.display(),
                failing_secs = after,
                "the store accepts writes again"
            );
            drop(state);
            self.recoveries.send_modify(|count| *count += 1);
        }
    }

    /// Moves on each time writes come back after failing.
    pub fn recoveries(&self) -> tokio::sync::watch::Receiver<u64> {
        self.recoveries.subscribe()
    }

    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::SeqCst)
    }

    /// Whether the open file met a failed write since it was opened.
    pub fn is_latched(&self) -> bool {
        self.latched.load(Ordering::SeqCst)
    }

    /// The file was opened again: redb takes requests on it (only reads,
    /// when `read_only`).
    pub fn reopened(&self, read_only: bool) {
        self.read_only.store(read_only, Ordering::SeqCst);
        self.latched.store(false, Ordering::SeqCst);
    }

    /// Whether the file is open for reading only.
    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::SeqCst)
    }

    /// The last write error and whether the disk is full, while failing.
    pub fn failure(&self) -> Option<(String, bool)> {
        if !self.is_failing() {
            return None;
        }
        let state = self.lock();
        Some((
            state
                .error
                .clone()
                .unwrap_or_else(|| "a write failed".to_owned()),
            state.full,
        ))
    }

    /// Whether it is time to try the file again (at most every
    /// `REOPEN_EVERY`); counts this as the try.
    pub fn reopen_due(&self) -> bool {
        let mut state = self.lock();
        let due = state
            .last_reopen
            .is_none_or(|at| at.elapsed() >= REOPEN_EVERY);
        if due {
            state.last_reopen = Some(Instant::now());
        }
        due
    }

    pub fn status(&self) -> StorageStatus {
        let state = self.lock();
        let failing = self.is_failing();
        StorageStatus {
            status: if failing { "failing" } else { "ok" },
            path: self.path.display().to_string(),
            error: if failing { state.error.clone() } else { None },
            disk_full: failing && state.full,
            failing_for_secs: if failing {
                state.since.map(|s| s.elapsed().as_secs())
            } else {
                None
            },
            write_errors: self.write_errors.load(Ordering::Relaxed),
        }
    }
}

/// Damage found in the store's file while running (a redb panic caught by
/// the process's panic hook), for the daemon to stop on. Process-wide: a
/// panic hook has no store to tell.
static DAMAGE: Mutex<Option<String>> = Mutex::new(None);
static DAMAGE_FOUND: tokio::sync::Notify = tokio::sync::Notify::const_new();
/// This process reads a damaged store on purpose (`store check`).
static EXPECTED: AtomicBool = AtomicBool::new(false);

/// Damage is what this process looks for (`store check`, `store recover`):
/// meeting it is no news.
pub fn expect_damage() {
    EXPECTED.store(true, Ordering::SeqCst);
}

/// Whether damage met now is news (not what `expect_damage` looks for).
pub fn damage_is_news() -> bool {
    !EXPECTED.load(Ordering::SeqCst)
}

/// Records that the store's file is damaged (the first report is kept).
pub fn report_damage(detail: String) {
    let mut damage = match DAMAGE.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    if damage.is_none() {
        *damage = Some(detail);
        DAMAGE_FOUND.notify_waiters();
        DAMAGE_FOUND.notify_one();
    }
}

/// The damage reported, if any.
pub fn damage() -> Option<String> {
    match DAMAGE.lock() {
        Ok(guard) => guard.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

/// Resolves once damage is reported.
pub async fn damage_found() -> String {
    loop {
        let notified = DAMAGE_FOUND.notified();
        if let Some(detail) = damage() {
            return detail;
        }
        notified.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_writes_are_shown_until_one_works() {
        let health = Health::new(Path::new("/data/store.redb"));
        assert_eq!(health.status().status, "ok");
        let full = std::io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error());
        health.write_failed(&full);
        health.write_failed(&full);
        let status = health.status();
        assert_eq!(
            (status.status, status.disk_full, status.write_errors),
            ("failing", true, 2)
        );
        assert!(status.error.unwrap().contains("space"));
        assert!(health.failure().is_some());
        health.writes_work();
        let status = health.status();
        assert_eq!((status.status, status.error), ("ok", None));
        assert!(
            health.reopen_due() && !health.reopen_due(),
            "at most every second"
        );
    }
}
