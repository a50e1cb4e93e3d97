//! Profiles (views) in the store, by name.

use redb::{ReadableDatabase as _, TableDefinition};

use super::codec::{decode, encode};
use super::{Store, StoreError};
use crate::model::Profile;

pub(super) const PROFILES: TableDefinition<&str, &[u8]> = TableDefinition::new("profiles");

impl Store {
    /// Every stored profile, by name.
    pub fn profiles(&self) -> Result<Vec<Profile>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(PROFILES)?;
        let mut out = Vec::new();
        for entry in redb::ReadableTable::iter(&table)? {
            let (_, bytes) = entry?;
            out.push(decode(bytes.value())?);
        }
        Ok(out)
    }

    /// Stores a profile; the one it replaced, if any.
    pub fn put_profile(&self, profile: &Profile) -> Result<Option<Profile>, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let previous = txn
            .open_table(PROFILES)?
            .insert(profile.name.as_str(), encode(profile)?.as_slice())?
            .map(|bytes| decode(bytes.value()))
            .transpose()?;
        txn.commit()?;
        Ok(previous)
    }

    /// Removes a profile; the one removed, if there was one.
    pub fn remove_profile(&self, name: &str) -> Result<Option<Profile>, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let removed = txn
            .open_table(PROFILES)?
            .remove(name)?
            .map(|bytes| decode(bytes.value()))
            .transpose()?;
        txn.commit()?;
        Ok(removed)
    }
}
