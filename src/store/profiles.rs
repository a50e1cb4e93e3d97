//! Profiles (views) in the store, by name.

use super::codec::{all_decoded, decode, encode};
use super::tables::Table;
use super::{Store, StoreError};
use crate::model::Profile;

pub(super) const PROFILES: Table<String, Vec<u8>> = Table::new("profiles");

impl Store {
    /// Every stored profile, by name.
    pub fn profiles(&self) -> Result<Vec<Profile>, StoreError> {
        self.read(|txn| all_decoded(txn, PROFILES))
    }

    /// Stores a profile; the one it replaced, if any.
    pub fn put_profile(&self, profile: &Profile) -> Result<Option<Profile>, StoreError> {
        let bytes = encode(profile)?;
        // Decoded inside the transaction: a replaced record that does not
        // read is an error that writes nothing.
        self.write(|txn| {
            txn.insert(PROFILES, &profile.name, &bytes)?
                .map(|bytes| decode(&bytes))
                .transpose()
        })
    }

    /// Removes a profile; the one removed, if there was one.
    pub fn remove_profile(&self, name: &str) -> Result<Option<Profile>, StoreError> {
        self.write(|txn| {
            txn.remove(PROFILES, &name.to_owned())?
                .map(|bytes| decode(&bytes))
                .transpose()
        })
    }
}
