//! The store's file as redb sees it: redb's own file backend, watched. A
//! write, a resize or a sync that fails (a full disk, an I/O error) is
//! recorded in the store's `Health` before redb gets the error, so the
//! store knows its file needs reopening — redb refuses every later
//! operation with "previous I/O error" until it is — and can say which
//! error it was.

use redb::{BackendError, StorageBackend, backends::FileBackend};
use std::ops::Bound;
use std::sync::Arc;

use super::health::Health;

#[derive(Debug)]
pub(super) struct WatchedFile {
    file: FileBackend,
    health: Arc<Health>,
}

impl WatchedFile {
    pub(super) fn new(
        file: std::fs::File,
        health: Arc<Health>,
    ) -> Result<WatchedFile, redb::DatabaseError> {
        Ok(WatchedFile {
            file: FileBackend::new(file)?,
            health,
        })
    }

    fn watched<T>(&self, result: Result<T, std::io::Error>) -> Result<T, std::io::Error> {
        if let Err(err) = &result {
            self.health.write_failed(err);
        }
        result
    }
}

impl StorageBackend for WatchedFile {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.watched(self.file.set_len(len))
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        let synced = self.watched(self.file.sync_data());
        // What was written is on the disk: writes work (again).
        if synced.is_ok() {
            self.health.synced();
        }
        synced
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.watched(self.file.write(offset, data))
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}
