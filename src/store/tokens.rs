//! Named API tokens, by name (their secrets only as SHA-256), and the
//! one rule tying them to views: a token reaches a view that is there.

use super::audit::{append_audit, audit_entry};
use super::codec::{all_decoded, decode, encode};
use super::tables::{Reads as _, Table};
use super::{Store, StoreError};
use crate::model::{NamedToken, Profile};

pub(super) const TOKENS: Table<String, Vec<u8>> = Table::new("api_tokens");

impl Store {
    pub fn tokens(&self) -> Result<Vec<NamedToken>, StoreError> {
        self.read(|txn| all_decoded(txn, TOKENS))
    }

    /// Stores a new token; refused if the name is taken.
    pub fn add_token(&self, token: &NamedToken, actor: &str) -> Result<(), StoreError> {
        let bytes = encode(token)?;
        self.write(|txn| {
            if txn.get(TOKENS, &token.name)?.is_some() {
                return Err(StoreError::Stale(format!(
                    "a token named {} exists; revoke it first or pick another name",
                    token.name
                )));
            }
            // Checked in the write itself: a view removed meanwhile.
            if let Some(profile) = &token.profile
                && txn.get(super::profiles::PROFILES, profile)?.is_none()
            {
                return Err(StoreError::Stale(format!(
                    "there is no view named {profile} (removed meanwhile?)"
                )));
            }
            txn.insert(TOKENS, &token.name, &bytes)?;
            let mut entry = audit_entry(
                actor,
                "token_create",
                &format!("token:{}", token.name),
                "ok",
            );
            entry.details = Some(format!("scope {}", token.scope.as_str()));
            append_audit(txn, self.audit_max_bytes, entry)
        })
    }

    /// Removes a token; the one removed, if there was one.
    pub fn revoke_token(&self, name: &str, actor: &str) -> Result<Option<NamedToken>, StoreError> {
        self.write(|txn| {
            let removed = txn
                .remove(TOKENS, &name.to_owned())?
                .map(|bytes| decode(&bytes))
                .transpose()?;
            if removed.is_some() {
                append_audit(
                    txn,
                    self.audit_max_bytes,
                    audit_entry(actor, "token_revoke", &format!("token:{name}"), "ok"),
                )?;
            }
            Ok(removed)
        })
    }

    /// Removes a profile unless a token is bound to it (they would reach
    /// nothing): checked in the write itself, so a token made meanwhile
    /// is seen. The one removed, if there was one.
    pub fn remove_unbound_profile(&self, name: &str) -> Result<Option<Profile>, StoreError> {
        self.write(|txn| {
            let mut bound = Vec::new();
            txn.for_each(
                TOKENS,
                std::ops::Bound::Unbounded,
                std::ops::Bound::Unbounded,
                super::tables::Order::Ascending,
                |token_name, bytes: Vec<u8>| {
                    let token: NamedToken = decode(&bytes)?;
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
            txn.remove(super::profiles::PROFILES, &name.to_owned())?
                .map(|bytes| decode(&bytes))
                .transpose()
        })
    }
}
