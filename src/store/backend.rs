//! The store's file as redb sees it: redb's own file backend, watched. A
//! write, a resize or a sync that fails (a full disk, an I/O error) is
//! recorded in the store's `Health` before redb gets the error, so the
//! store knows its file needs reopening — redb refuses every later
//! operation with "previous I/O error" until it is — and can say which
//! error it was.
//!
//! On a filesystem that turned read-only under the daemon, the file is
//! reopened for reading with what redb writes while opening it (the repair
//! after the failed write) kept in memory: what is stored is still read,
//! and the store refuses writes until the file can be opened for writing.

use redb::{BackendError, StorageBackend, backends::FileBackend};
use std::collections::HashMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use super::health::Health;

#[derive(Debug)]
pub(super) struct WatchedFile {
    file: FileBackend,
    health: Arc<Health>,
    /// Set when the file is open for reading only.
    in_memory: Option<Mutex<Overlay>>,
}

/// Writes to a file that cannot be written, kept in memory by block.
#[derive(Debug)]
struct Overlay {
    blocks: HashMap<u64, Box<[u8]>>,
    /// How much of the file underneath is still part of it.
    file_len: u64,
    len: u64,
}

const BLOCK: u64 = 4096;

impl WatchedFile {
    pub(super) fn new(
        file: std::fs::File,
        health: Arc<Health>,
    ) -> Result<WatchedFile, redb::DatabaseError> {
        Ok(WatchedFile {
            file: FileBackend::new(file)?,
            health,
            in_memory: None,
        })
    }

    /// Over a file opened for reading only: nothing reaches it.
    pub(super) fn read_only(
        file: std::fs::File,
        health: Arc<Health>,
    ) -> Result<WatchedFile, redb::DatabaseError> {
        let len = file.metadata()?.len();
        Ok(WatchedFile {
            file: FileBackend::new(file)?,
            health,
            in_memory: Some(Mutex::new(Overlay {
                blocks: HashMap::new(),
                file_len: len,
                len,
            })),
        })
    }

    fn watched<T>(&self, result: Result<T, std::io::Error>) -> Result<T, std::io::Error> {
        if let Err(err) = &result {
            self.health.write_failed(err);
        }
        result
    }

    fn overlay(&self) -> Option<std::sync::MutexGuard<'_, Overlay>> {
        self.in_memory.as_ref().map(|overlay| match overlay.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        })
    }

    /// Reads what the file underneath holds at `offset` (zeros past what
    /// is still part of it).
    fn read_beneath(&self, file_len: u64, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let from_file = file_len.saturating_sub(offset).min(out.len() as u64) as usize;
        let (head, tail) = out.split_at_mut(from_file);
        if !head.is_empty() {
            self.file.read(offset, head)?;
        }
        tail.fill(0);
        Ok(())
    }
}

impl StorageBackend for WatchedFile {
    fn len(&self) -> Result<u64, std::io::Error> {
        match self.overlay() {
            Some(overlay) => Ok(overlay.len),
            None => self.file.len(),
        }
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let Some(overlay) = self.overlay() else {
            return self.file.read(offset, out);
        };
        let mut done = 0;
        while done < out.len() {
            let at = offset + done as u64;
            let in_block = (at % BLOCK) as usize;
            let take = (BLOCK as usize - in_block).min(out.len() - done);
            let part = &mut out[done..done + take];
            match overlay.blocks.get(&(at / BLOCK)) {
                Some(block) => part.copy_from_slice(&block[in_block..in_block + take]),
                None => self.read_beneath(overlay.file_len, at, part)?,
            }
            done += take;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let Some(mut overlay) = self.overlay() else {
            return self.watched(self.file.set_len(len));
        };
        if len < overlay.len {
            let last = len.div_ceil(BLOCK);
            overlay.blocks.retain(|index, _| *index < last);
            if let Some(block) = overlay.blocks.get_mut(&(len / BLOCK)) {
                block[(len % BLOCK) as usize..].fill(0);
            }
            overlay.file_len = overlay.file_len.min(len);
        }
        overlay.len = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        if self.in_memory.is_some() {
            // Nothing reached the disk: this proves nothing about writes.
            return Ok(());
        }
        let synced = self.watched(self.file.sync_data());
        // What was written is on the disk: writes work (again).
        if synced.is_ok() {
            self.health.synced();
        }
        synced
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let Some(mut overlay) = self.overlay() else {
            return self.watched(self.file.write(offset, data));
        };
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let index = at / BLOCK;
            let in_block = (at % BLOCK) as usize;
            let take = (BLOCK as usize - in_block).min(data.len() - done);
            if !overlay.blocks.contains_key(&index) {
                let mut block = vec![0u8; BLOCK as usize].into_boxed_slice();
                self.read_beneath(overlay.file_len, index * BLOCK, &mut block)?;
                overlay.blocks.insert(index, block);
            }
            if let Some(block) = overlay.blocks.get_mut(&index) {
                block[in_block..in_block + take].copy_from_slice(&data[done..done + take]);
            }
            done += take;
        }
        overlay.len = overlay.len.max(offset + data.len() as u64);
        Ok(())
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        // A file open for reading only takes no write lock (EBADF): a
        // shared one still keeps writers out.
        if self.in_memory.is_some() {
            return self.file.try_lock_shared_range(start, end);
        }
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
        if self.in_memory.is_some() {
            return self.file.lock_shared_range(start, end);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use redb::{ReadableDatabase as _, TableDefinition};

    const TABLE: TableDefinition<&str, &str> = TableDefinition::new("t");

    /// A file left unclosed (as a failed write leaves it) opened for reading
    /// only: redb repairs it in memory, reads what it holds, even takes a
    /// write in memory, and the file is not changed by a byte.
    #[test]
    fn a_file_open_for_reading_only_is_read_and_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let health = Arc::new(Health::new(&dir.path().join("store.redb")));
        let open = |file: std::fs::File| WatchedFile::new(file, Arc::clone(&health)).unwrap();
        let path = dir.path().join("store.redb");
        let db = redb::Builder::new()
            .create_with_backend(open(
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .unwrap(),
            ))
            .unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(TABLE).unwrap();
            for n in 0..500 {
                table.insert(format!("key{n}").as_str(), "kept").unwrap();
            }
        }
        txn.commit().unwrap();
        // Copied while open: not closed cleanly, so opening it repairs it.
        let unclean = dir.path().join("unclean.redb");
        std::fs::copy(&path, &unclean).unwrap();
        drop(db);
        let before = std::fs::read(&unclean).unwrap();

        let backend =
            WatchedFile::read_only(std::fs::File::open(&unclean).unwrap(), health.clone()).unwrap();
        let db = redb::Builder::new().create_with_backend(backend).unwrap();
        let read = db.begin_read().unwrap();
        let table = read.open_table(TABLE).unwrap();
        assert_eq!(table.get("key0").unwrap().unwrap().value(), "kept");
        assert_eq!(table.get("key499").unwrap().unwrap().value(), "kept");
        drop((table, read));
        let txn = db.begin_write().unwrap();
        txn.open_table(TABLE)
            .unwrap()
            .insert("in memory", "only")
            .unwrap();
        txn.commit().unwrap();
        let read = db.begin_read().unwrap();
        let table = read.open_table(TABLE).unwrap();
        assert_eq!(table.get("in memory").unwrap().unwrap().value(), "only");
        assert_eq!(table.get("key250").unwrap().unwrap().value(), "kept");
        drop((table, read, db));
        assert!(
            std::fs::read(&unclean).unwrap() == before,
            "the file was written"
        );
        assert!(!health.is_failing(), "{:?}", health.failure());
    }
}
