//! What a login to a server left behind (its OAuth client registration and
//! tokens), by server id, sealed at rest as a whole: the grant is the
//! server's credential and nothing of it is stored in plain text.

use super::tables::{Reads as _, Table};
use super::{Store, StoreError};
use crate::model::ServerId;

pub(super) const GRANTS: Table<u128, String> = Table::new("oauth_grants");

impl Store {
    /// A server's grant as the text it was stored from; `None` when there is
    /// none, or when it cannot be opened (another key): a login then starts
    /// afresh instead of failing.
    pub fn oauth_grant(&self, id: ServerId) -> Result<Option<String>, StoreError> {
        let found = self.read(|txn| txn.get(GRANTS, &id.as_u128()))?;
        Ok(found.and_then(|sealed| self.cipher.open(&sealed)))
    }

    /// Stores (replaces) a server's grant.
    pub fn put_oauth_grant(&self, id: ServerId, grant: &str) -> Result<(), StoreError> {
        let sealed = self.cipher.seal(grant);
        self.write(|txn| txn.insert(GRANTS, &id.as_u128(), &sealed))?;
        Ok(())
    }

    /// Forgets a server's grant; whether there was one.
    pub fn remove_oauth_grant(&self, id: ServerId) -> Result<bool, StoreError> {
        let removed = self.write(|txn| txn.remove(GRANTS, &id.as_u128()))?;
        Ok(removed.is_some())
    }
}
