//! Profiles (views) in the store, by name.

use super::codec::{all_decoded, decode, encode};
use super::tables::{Reads as _, Table};
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

    /// Removes a profile unless a token is bound to it (they would reach
    /// nothing): checked in the write itself, so a token made meanwhile
    /// is seen. The one removed, if there was one.
    pub fn remove_unbound_profile(&self, name: &str) -> Result<Option<Profile>, StoreError> {
        self.write(|txn| {
            let mut bound = Vec::new();
            txn.for_each(
                super::tokens::TOKENS,
                std::ops::Bound::Unbounded,
                std::ops::Bound::Unbounded,
                super::tables::Order::Ascending,
                |token_name, bytes: Vec<u8>| {
                    let token: crate::model::NamedToken = decode(&bytes)?;
                    if token.profile.as_deref() == Some(name) {
                        bound.push(token_name);
                    }
                    Ok(true)
                },
            )?;
            if !bound.is_empty() {
                return Err(StoreError::Stale(format!(
                    "the view {name} is the one the token(s) {} reach: revoke them first \
                     (`mcp-aggregator tokens revoke NAME`)",
                    bound.join(", ")
                )));
            }
            txn.remove(PROFILES, &name.to_owned())?
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
