//! What a login to a server left behind (its OAuth client registration and
//! tokens), by server id, sealed at rest as a whole: the grant is the
//! server's credential and nothing of it is stored in plain text.

use redb::{ReadableDatabase as _, TableDefinition};

use super::{Store, StoreError};
use crate::model::ServerId;

pub(super) const GRANTS: TableDefinition<u128, &str> = TableDefinition::new("oauth_grants");

impl Store {
    /// A server's grant as the text it was stored from; `None` when there is
    /// none, or when it cannot be opened (another key): a login then starts
    /// afresh instead of failing.
    pub fn oauth_grant(&self, id: ServerId) -> Result<Option<String>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(GRANTS)?;
        let found = table.get(id.as_u128())?;
        Ok(found.and_then(|sealed| self.cipher.open(sealed.value())))
    }

    /// Stores (replaces) a server's grant.
    pub fn put_oauth_grant(&self, id: ServerId, grant: &str) -> Result<(), StoreError> {
        let sealed = self.cipher.seal(grant);
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        txn.open_table(GRANTS)?
            .insert(id.as_u128(), sealed.as_str())?;
        txn.commit()?;
        Ok(())
    }

    /// Forgets a server's grant; whether there was one.
    pub fn remove_oauth_grant(&self, id: ServerId) -> Result<bool, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let removed = txn.open_table(GRANTS)?.remove(id.as_u128())?.is_some();
        txn.commit()?;
        Ok(removed)
    }
}
