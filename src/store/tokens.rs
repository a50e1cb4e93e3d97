//! Named API tokens, by name (their secrets only as SHA-256).

use redb::{ReadableDatabase as _, ReadableTable as _, TableDefinition};

use super::audit::{append_audit, audit_entry};
use super::codec::{decode, encode};
use super::{Store, StoreError};
use crate::model::NamedToken;

pub(super) const TOKENS: TableDefinition<&str, &[u8]> = TableDefinition::new("api_tokens");

impl Store {
    pub fn tokens(&self) -> Result<Vec<NamedToken>, StoreError> {
        let db = self.db()?;
        let txn = db.begin_read()?;
        let table = txn.open_table(TOKENS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (_, bytes) = entry?;
            out.push(decode(bytes.value())?);
        }
        Ok(out)
    }

    /// Stores a new token; refused if the name is taken.
    pub fn add_token(&self, token: &NamedToken, actor: &str) -> Result<(), StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        {
            let mut table = txn.open_table(TOKENS)?;
            if table.get(token.name.as_str())?.is_some() {
                return Err(StoreError::Stale(format!(
                    "a token named {} exists; revoke it first or pick another name",
                    token.name
                )));
            }
            table.insert(token.name.as_str(), encode(token)?.as_slice())?;
        }
        let mut entry = audit_entry(
            actor,
            "token_create",
            &format!("token:{}", token.name),
            "ok",
        );
        entry.details = Some(format!("scope {}", token.scope.as_str()));
        append_audit(&txn, self.audit_max_bytes, entry)?;
        txn.commit()?;
        Ok(())
    }

    /// Removes a token; the one removed, if there was one.
    pub fn revoke_token(&self, name: &str, actor: &str) -> Result<Option<NamedToken>, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let removed = txn
            .open_table(TOKENS)?
            .remove(name)?
            .map(|bytes| decode(bytes.value()))
            .transpose()?;
        if removed.is_some() {
            append_audit(
                &txn,
                self.audit_max_bytes,
                audit_entry(actor, "token_revoke", &format!("token:{name}"), "ok"),
            )?;
        }
        txn.commit()?;
        Ok(removed)
    }
}
