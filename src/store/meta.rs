//! The meta table: the schema version, and the counters that tell the
//! derived indexes whether they are current (generation, catalog
//! generation, last catalog sync).

use redb::{ReadableDatabase as _, ReadableTable as _, TableDefinition, WriteTransaction};

use super::{Store, StoreError};

/// The schema this build writes. Bump it and add a step to `migrate` when the
/// layout changes.
pub const SCHEMA_VERSION: u64 = 6;

pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

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
    pub fn generation(&self) -> Result<u64, StoreError> {
        self.meta(META_GENERATION)
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

    pub(super) fn meta(&self, key: &str) -> Result<u64, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = match txn.open_table(META) {
            Ok(table) => table,
            // A new store, before its first migration.
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
            Err(err) => return Err(err.into()),
        };
        Ok(table.get(key)?.map(|v| v.value()).unwrap_or(0))
    }
}

pub(super) fn bump_catalog_generation(txn: &WriteTransaction) -> Result<(), StoreError> {
    let mut meta = txn.open_table(META)?;
    let next = meta
        .get(META_CATALOG_GENERATION)?
        .map(|v| v.value())
        .unwrap_or(0)
        + 1;
    meta.insert(META_CATALOG_GENERATION, next)?;
    Ok(())
}

pub(super) fn bump_generation(txn: &WriteTransaction) -> Result<(), StoreError> {
    let mut meta = txn.open_table(META)?;
    let next = meta.get(META_GENERATION)?.map(|v| v.value()).unwrap_or(0) + 1;
    meta.insert(META_GENERATION, next)?;
    Ok(())
}
