//! The meta table: the schema version, and the counters that tell the
//! derived indexes whether they are current (generation, catalog
//! generation, last catalog sync).

use super::tables::{Reads as _, Table, Writer};
use super::{Store, StoreError};

/// The schema this build writes. Bump it and add a step to `migrate` when the
/// layout changes.
pub const SCHEMA_VERSION: u64 = 6;

pub(super) const META: Table<String, u64> = Table::new("meta");

pub(super) const META_SCHEMA_VERSION: &str = "schema_version";
pub(super) const META_GENERATION: &str = "generation";
pub(super) const META_CATALOG_GENERATION: &str = "catalog_generation";
pub(super) const META_LAST_SYNC_MS: &str = "last_sync_ms";
/// The last skill suggestion id handed out: ids are never reused, so a
/// dismissed or accepted suggestion's id cannot name a new one.
pub(super) const META_LAST_SUGGESTION_ID: &str = "last_suggestion_id";

impl Store {
    /// The schema version on disk.
    pub fn schema_version(&self) -> Result<u64, StoreError> {
        self.meta(META_SCHEMA_VERSION)
    }

    /// A counter bumped by every write that changes what the derived indexes
    /// reflect; they record it to know when to rebuild.
    /// Shared: the shared counter plus this replica's own (its statuses
    /// move it), so it moves when either does.
    pub fn generation(&self) -> Result<u64, StoreError> {
        let generation = self.meta(META_GENERATION)?;
        if !self.is_shared() {
            return Ok(generation);
        }
        let own = self.read_file(|txn| txn.get(META, &META_GENERATION.to_owned()))?;
        Ok(generation + own.unwrap_or(0))
    }

    /// A counter bumped by every write that changes the tools table: what
    /// the search indexes reflect. Status changes do not move it, so a
    /// restart finds the indexes current.
    pub fn catalog_generation(&self) -> Result<u64, StoreError> {
        self.meta(META_CATALOG_GENERATION)
    }

    /// When tool discovery last changed the catalog (milliseconds since the
    /// epoch), if ever.
    pub fn last_sync_ms(&self) -> Result<Option<u64>, StoreError> {
        let value = self.meta(META_LAST_SYNC_MS)?;
        Ok((value > 0).then_some(value))
    }

    /// A counter of the meta table; 0 when unset (a new store, before
    /// its first migration, has no table at all).
    pub(super) fn meta(&self, key: &str) -> Result<u64, StoreError> {
        self.read(|txn| Ok(txn.get(META, &key.to_owned())?.unwrap_or(0)))
    }
}

/// A counter of the meta table in the write transaction; 0 when unset.
pub(super) fn meta_in(txn: &Writer<'_>, key: &str) -> Result<u64, StoreError> {
    Ok(txn.get(META, &key.to_owned())?.unwrap_or(0))
}

pub(super) fn set_meta(txn: &Writer<'_>, key: &str, value: u64) -> Result<(), StoreError> {
    txn.insert(META, &key.to_owned(), &value)?;
    Ok(())
}

pub(super) fn bump_catalog_generation(txn: &Writer<'_>) -> Result<(), StoreError> {
    let next = meta_in(txn, META_CATALOG_GENERATION)? + 1;
    set_meta(txn, META_CATALOG_GENERATION, next)
}

pub(super) fn bump_generation(txn: &Writer<'_>) -> Result<(), StoreError> {
    let next = meta_in(txn, META_GENERATION)? + 1;
    set_meta(txn, META_GENERATION, next)
}
