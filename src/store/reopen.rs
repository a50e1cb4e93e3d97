//! The open file after a failed write: redb refuses everything on it then,
//! so it is reopened (at most every second, when no operation holds it)
//! and probed with a small write when the disk has room; writes resume by
//! themselves once space returns. Until then each caller gets the error
//! that caused it, and a write is refused before it reaches redb.

use chrono::Utc;
use redb::Database;
use std::path::Path;
use std::sync::Arc;

use super::meta::META;
use super::opening::open_database;
use super::{Store, StoreError};

impl Store {
    /// The open file, for reading. After a failed write redb refuses
    /// everything on it, reads included, until it is reopened: that is
    /// done first (at most every second, when no one else is using it);
    /// until then the error that caused it is the answer.
    pub(super) fn db(&self) -> Result<Arc<Database>, StoreError> {
        if self.health.is_failing() {
            self.recover();
            if self.health.is_latched() {
                return Err(self.failure());
            }
        }
        let slot = match self.db.read() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        };
        slot.clone().ok_or_else(|| self.failure())
    }

    /// The open file, for a write. A write that fails would make redb
    /// refuse reads too, so one that cannot go through is refused before it
    /// reaches redb: on a filesystem that went read-only under us (ext4's
    /// `errors=remount-ro` after an I/O error), or while writes fail and
    /// the disk has no room.
    pub(super) fn db_for_write(&self) -> Result<Arc<Database>, StoreError> {
        let refuse = || {
            self.health
                .write_refused(&std::io::Error::from(rustix::io::Errno::ROFS));
            Err(self.failure())
        };
        if self.health.is_read_only() || is_read_only(&self.path) {
            self.recover();
            return refuse();
        }
        if self.health.is_failing() && !has_room(&self.path) {
            self.recover();
            return Err(self.failure());
        }
        let db = self.db()?;
        // `db()` may have just reopened the file for reading only: a write
        // there would go to memory, acknowledged and then lost. (The flag
        // is set before the reopened file is handed out.)
        if self.health.is_read_only() {
            return refuse();
        }
        Ok(db)
    }

    /// Why the store cannot be used right now.
    pub(super) fn failure(&self) -> StoreError {
        let (reason, full) = self
            .health
            .failure()
            .unwrap_or_else(|| ("the store file is being reopened".to_owned(), false));
        StoreError::Disk { reason, full }
    }

    /// After failed writes (at most every second, one caller at a time):
    /// reopens a file redb refuses (only when no operation holds it, so the
    /// reopen cannot fail on its lock), then, when the disk has room, tries
    /// a small write — when it goes through, the store is healthy again.
    fn recover(&self) {
        let Ok(_one) = self.reopening.try_lock() else {
            return;
        };
        // A latched file refuses reads too: a reopen skipped because the
        // file was busy does not count as the second's try, so the next
        // caller tries again at once.
        let latched = self.health.is_latched();
        if !latched && !self.health.reopen_due() {
            return;
        }
        // A file open for reading only is opened again once its filesystem
        // takes writes: until then, reopening would only repeat the repair.
        let reopen = latched || (self.health.is_read_only() && !refuses_writes(&self.path));
        if reopen {
            let old = {
                let mut slot = match self.db.write() {
                    Ok(slot) => slot,
                    Err(poisoned) => poisoned.into_inner(),
                };
                if slot.as_ref().is_some_and(|db| Arc::strong_count(db) > 1) {
                    // An operation is running on it: next time.
                    return;
                }
                if latched && !self.health.reopen_due() {
                    return;
                }
                slot.take()
            };
            drop(old);
            // The repair an open does after a failed write syncs what it
            // wrote; only the probe below says writes work again.
            self.health.hold_recovery(true);
            let reopened = open_database(&self.path, &self.health, false, true);
            self.health.hold_recovery(false);
            match reopened {
                Ok((db, read_only)) => {
                    self.health.reopened(read_only);
                    if let Ok(mut slot) = self.db.write() {
                        *slot = Some(Arc::new(db));
                    }
                }
                Err(err) => {
                    tracing::debug!(store = %self.path.display(), "reopening the store failed: {err}");
                    return;
                }
            }
        }
        // A probe into a file open for reading only would go to memory.
        if self.health.is_read_only() || !has_room(&self.path) {
            return;
        }
        let Some(db) = self.db.read().ok().and_then(|slot| slot.clone()) else {
            return;
        };
        let probe = (|| -> Result<(), StoreError> {
            let txn = db.begin_write()?;
            txn.open_table(META.redb())?
                .insert(META_DISK_PROBE, Utc::now().timestamp_millis() as u64)?;
            txn.commit()?;
            Ok(())
        })();
        match probe {
            Ok(()) => self.health.writes_work(),
            Err(err) => {
                tracing::debug!(store = %self.path.display(), "the store's probe write failed: {err}")
            }
        }
    }

    /// How the store's disk is doing for a change about to be made (a
    /// server stopped or started before its status is written): as
    /// `storage_status`, and a file its filesystem no longer lets be opened
    /// for writing counts as failing (ext4 turned read-only after an error
    /// shows nowhere else until a write fails). Blocking.
    pub fn storage_status_for_a_change(&self) -> crate::model::StorageStatus {
        if !self.health.is_failing() && refuses_writes(&self.path) {
            self.health
                .write_refused(&std::io::Error::from(rustix::io::Errno::ROFS));
        }
        self.storage_status()
    }

    /// Moves on each time the store accepts writes again after failing.
    pub fn write_recoveries(&self) -> tokio::sync::watch::Receiver<u64> {
        self.health.recoveries()
    }

    /// How the store's disk is doing, as last seen (no I/O).
    pub fn storage_status_now(&self) -> crate::model::StorageStatus {
        self.health.status()
    }

    /// How the store's disk is doing (while writes fail, asking is also
    /// what tries them again: a daemon nobody writes to still recovers).
    /// Blocking.
    pub fn storage_status(&self) -> crate::model::StorageStatus {
        if self.health.is_failing() {
            self.recover();
        }
        self.health.status()
    }
}

/// Where a reopened store's probe write goes.
const META_DISK_PROBE: &str = "disk_probe";

/// Whether the disk holding `path` takes a small write: mounted writable,
/// with room for it.
fn has_room(path: &Path) -> bool {
    // A disk we cannot ask about is given the benefit of the doubt.
    let Ok(stat) = rustix::fs::statvfs(path.parent().unwrap_or(path)) else {
        return true;
    };
    !stat.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY)
        && stat.f_bavail.saturating_mul(stat.f_frsize) >= 256 * 1024
}

/// Whether the file at `path` cannot be opened for writing because its
/// filesystem is read-only: mounted so, or turned so by ext4 after an error
/// (which `statvfs` does not show).
fn refuses_writes(path: &Path) -> bool {
    is_read_only(path)
        || std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .is_err_and(|err| err.raw_os_error() == Some(rustix::io::Errno::ROFS.raw_os_error()))
}

/// Whether the filesystem holding `path` is mounted read-only now.
fn is_read_only(path: &Path) -> bool {
    rustix::fs::statvfs(path.parent().unwrap_or(path))
        .is_ok_and(|stat| stat.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
}
