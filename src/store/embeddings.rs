//! The embedding cache: vectors keyed by SHA-256 of (model id, text), so a
//! restart, a reconnect or a rebuilt index never embeds the same text twice.

use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition};
use sha2::{Digest, Sha256};
use std::collections::HashSet;

use super::{Store, StoreError};

pub(crate) const EMBEDDINGS: TableDefinition<&[u8; 32], &[u8]> = TableDefinition::new("embeddings");

/// The cache key of `text` embedded by `model`.
pub fn embedding_key(model: &str, text: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(model.as_bytes());
    hasher.update([0u8]);
    hasher.update(text.as_bytes());
    hasher.finalize().into()
}

impl Store {
    /// The cached vector of each key, `None` where there is none.
    pub fn embeddings(&self, keys: &[[u8; 32]]) -> Result<Vec<Option<Vec<f32>>>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(EMBEDDINGS)?;
        keys.iter()
            .map(|key| {
                Ok(table.get(key)?.map(|bytes| {
                    bytes
                        .value()
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect()
                }))
            })
            .collect()
    }

    /// Stores vectors in one durable commit.
    pub fn put_embeddings(&self, entries: &[([u8; 32], &[f32])]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        {
            let mut table = txn.open_table(EMBEDDINGS)?;
            let mut bytes = Vec::new();
            for (key, vector) in entries {
                bytes.clear();
                bytes.extend(vector.iter().flat_map(|x| x.to_le_bytes()));
                table.insert(key, bytes.as_slice())?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Drops cached vectors no current text uses; returns how many.
    pub fn retain_embeddings(&self, keep: &HashSet<[u8; 32]>) -> Result<u64, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let before;
        let after;
        {
            let mut table = txn.open_table(EMBEDDINGS)?;
            before = table.len()?;
            table.retain(|key, _| keep.contains(key))?;
            after = table.len()?;
        }
        txn.commit()?;
        Ok(before - after)
    }
}

#[cfg(test)]
impl Store {
    pub(crate) fn retain_embeddings_count(&self) -> Result<u64, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        Ok(txn.open_table(EMBEDDINGS)?.len()?)
    }
}
