//! The index's life beside the daemon: the maintenance task syncs at start
//! and after each burst of tool changes, on a thread of lower priority so
//! embedding never takes the cores from calls being routed; at shutdown a
//! sync stops at its next batch and what the index holds is let go.

use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::{IndexError, SearchIndex, SearchSetting};
use crate::catalog::CatalogChanged;
use crate::registry::RegistryEvent;

/// After a failed sync, the next try comes this much later, doubling up
/// to `RETRY_MAX` while it keeps failing (a full disk, say).
const RETRY_FIRST: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);

impl SearchIndex {
    /// Keeps the index in line with the catalog until
    /// `shutdown`: one sync at start, then one after each burst of tool
    /// changes (a discovery that changed a list, a server removed).
    pub fn spawn_maintenance(
        &self,
        mut catalog: broadcast::Receiver<CatalogChanged>,
        mut registry: broadcast::Receiver<RegistryEvent>,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let index = self.clone();
        tokio::spawn(async move {
            if index.inner.setting == SearchSetting::Off {
                index.inner.progress.send_modify(|p| p.synced = true);
                return;
            }
            // A keyword index found damaged while running is started over
            // once, at once; a second failure is tried again later (a full
            // disk frees up), sooner if the tools change.
            let mut rebuild = false;
            let mut retry: Option<Duration> = None;
            index.inner.maintained.store(true, Ordering::SeqCst);
            loop {
                let syncing = index.clone();
                let starting_over = std::mem::take(&mut rebuild)
                    | index.inner.rebuild_wanted.swap(false, Ordering::SeqCst);
                let mut running =
                    in_background("search-index", move || syncing.sync(starting_over));
                let result = tokio::select! {
                    result = &mut running => result,
                    () = shutdown.cancelled() => {
                        index.stop();
                        let_go(running).await;
                        return;
                    }
                };
                // Also when the sync failed part way, which leaves its
                // last progress saying it still runs.
                index.inner.progress.send_modify(|p| {
                    p.syncing = false;
                    p.synced = true;
                });
                // The sync's transient copies of the catalog are freed; hand
                // the pages back rather than keep the peak for good.
                crate::memory::release_freed();
                let failed_after = |retry: Option<Duration>| {
                    Some(retry.map_or(RETRY_FIRST, |after| (after * 2).min(RETRY_MAX)))
                };
                match result {
                    Ok(Ok(changed)) => {
                        if changed > 0 {
                            tracing::info!(changed, "search index updated");
                        }
                        retry = None;
                    }
                    Ok(Err(IndexError::Keyword(err))) if !starting_over => {
                        tracing::warn!(
                            "the keyword index failed ({err}); rebuilding it from the store"
                        );
                        rebuild = true;
                        continue;
                    }
                    Ok(Err(err)) => {
                        retry = failed_after(retry);
                        // What the keyword index holds is unknown after a
                        // failed write: the next try starts it over.
                        rebuild = matches!(err, IndexError::Keyword(_));
                        tracing::error!(
                            "search indexing failed: {err}; trying again in {} s, or at the next change",
                            retry.unwrap_or_default().as_secs()
                        );
                    }
                    Err(err) => {
                        retry = failed_after(retry);
                        tracing::error!("search indexing task failed: {err}");
                    }
                }
                // Wait for a change that touches tools; a lagging receiver
                // means changes were missed, which a sync covers too.
                let retry_at = retry.map(|after| tokio::time::Instant::now() + after);
                loop {
                    let tools_changed = tokio::select! {
                        event = catalog.recv() => match event {
                            Ok(change) => change.kind.is_none(),
                            Err(broadcast::error::RecvError::Lagged(_)) => true,
                            Err(broadcast::error::RecvError::Closed) => return,
                        },
                        event = registry.recv() => match event {
                            Ok(RegistryEvent::Removed { .. } | RegistryEvent::TrustDecided { .. }) => true,
                            Ok(_) => false,
                            Err(broadcast::error::RecvError::Lagged(_)) => true,
                            Err(broadcast::error::RecvError::Closed) => return,
                        },
                        () = tokio::time::sleep_until(retry_at.unwrap_or_else(tokio::time::Instant::now)), if retry_at.is_some() => true,
                        () = index.inner.rebuild_asked.notified() => true,
                        () = shutdown.cancelled() => return,
                    };
                    if tools_changed {
                        break;
                    }
                }
                // One sync covers every change queued so far.
                while catalog.try_recv().is_ok() {}
                while registry.try_recv().is_ok() {}
            }
        })
    }

    /// Asks the maintenance task to rebuild both indexes from the store
    /// (after the sync running now, if any); false when no task runs.
    pub fn request_rebuild(&self) -> bool {
        if !self.inner.maintained.load(Ordering::SeqCst) {
            return false;
        }
        self.inner.rebuild_wanted.store(true, Ordering::SeqCst);
        self.inner.rebuild_asked.notify_one();
        true
    }

    /// Stops a running sync at its next batch (shutdown must not wait for
    /// a long first indexing).
    pub fn stop(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
    }

    /// For a process about to exit: lets go of the vectors and result
    /// records without freeing them one by one (at 100,000 tools a graph
    /// of 200,000 points and the records take four seconds to free, most
    /// of a SIGTERM's budget). Skipped for what a sync holds.
    pub fn abandon_at_exit(&self) {
        if let Ok(mut docs) = self.inner.docs.try_write() {
            std::mem::forget(std::mem::take(&mut *docs));
        }
        if let Ok(mut vectors) = self.inner.vectors.try_write() {
            std::mem::forget(std::mem::take(&mut *vectors));
        }
    }
}

/// The most a shutdown waits for background work to end (it stops at its
/// next batch: well under a second).
pub const LET_GO_WAIT: Duration = Duration::from_secs(3);

/// Waits (at most `LET_GO_WAIT`) for background work told to stop. Its
/// thread holds the store, which closes cleanly only once nothing holds
/// it: a process that exits first leaves the file marked open, and the
/// next start checks and repairs all of it (seconds at 100,000 tools).
pub async fn let_go<T>(running: tokio::sync::oneshot::Receiver<T>) {
    if tokio::time::timeout(LET_GO_WAIT, running).await.is_err() {
        tracing::warn!(
            "background work did not stop within {LET_GO_WAIT:?}; exiting without it (the next start checks the store)"
        );
    }
}

/// Runs `job` on a thread of its own at a lower CPU priority (nice 10), so
/// embedding never takes the cores from calls being routed. ONNX Runtime's
/// worker threads, created when the model loads there, inherit it.
pub fn in_background<T: Send + 'static>(
    name: &str,
    job: impl FnOnce() -> T + Send + 'static,
) -> tokio::sync::oneshot::Receiver<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            lower_priority();
            let _ = tx.send(job());
        });
    if let Err(err) = spawned {
        tracing::error!("cannot start the {name} thread: {err}");
    }
    rx
}

fn lower_priority() {
    // setpriority(PRIO_PROCESS, tid): on Linux a thread id names that
    // thread alone.
    #[cfg(target_os = "linux")]
    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 10);
}
