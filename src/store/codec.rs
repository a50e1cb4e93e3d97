//! How records are kept in the tables: JSON bytes, and a registration's
//! secrets (and URLs that carry a credential) sealed on the way in and
//! opened on the way out, so no table ever holds one in the clear.

use std::ops::Bound;

use super::tables::{Field, Order, Reader, Reads as _, Table};
use super::{KEY_FILE, Store, StoreError};
use crate::model::ServerRecord;

pub(super) fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|err| StoreError::Corrupt(err.to_string()))
}

/// `decode`, borrowing what it can from `bytes`.
pub(super) fn decode_borrowed<'a, T: serde::Deserialize<'a>>(
    bytes: &'a [u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|err| StoreError::Corrupt(err.to_string()))
}

pub(super) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    decode_borrowed(bytes)
}

/// Every record of a table keyed by name or number, decoded, in key order.
pub(super) fn all_decoded<K: Field, T: serde::de::DeserializeOwned>(
    txn: &Reader<'_>,
    table: Table<K, Vec<u8>>,
) -> Result<Vec<T>, StoreError> {
    decoded_between(txn, table, Bound::Unbounded, Bound::Unbounded)
}

/// The records of a table with keys between the bounds, decoded, in key
/// order.
pub(super) fn decoded_between<K: Field, T: serde::de::DeserializeOwned>(
    txn: &Reader<'_>,
    table: Table<K, Vec<u8>>,
    from: Bound<&K>,
    to: Bound<&K>,
) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::new();
    txn.for_each(table, from, to, Order::Ascending, |_, bytes| {
        out.push(decode(&bytes)?);
        Ok(true)
    })?;
    Ok(out)
}

impl Store {
    /// A registration as stored: its secrets sealed, and its URLs too when
    /// they carry a credential.
    pub(super) fn encode_server(&self, record: &ServerRecord) -> Result<Vec<u8>, StoreError> {
        let mut sealed = record.clone();
        for value in sealed.transport.secrets_mut().values_mut() {
            *value = self.cipher.seal(value);
        }
        if let Some(secret) = sealed.oauth.as_mut().and_then(|o| o.client_secret.as_mut()) {
            *secret = self.cipher.seal(secret);
        }
        // A URL with a credential in it is sealed whole.
        for url in [sealed.transport.url_mut(), sealed.health_check_url.as_mut()]
            .into_iter()
            .flatten()
        {
            if crate::model::redact::url_has_secrets(url) {
                *url = self.cipher.seal(url);
            }
        }
        encode(&sealed)
    }

    pub(super) fn decode_server(&self, bytes: &[u8]) -> Result<ServerRecord, StoreError> {
        let mut record: ServerRecord = decode(bytes)?;
        let name = record.name.clone();
        for url in [record.transport.url_mut(), record.health_check_url.as_mut()]
            .into_iter()
            .flatten()
        {
            match self.cipher.open(url) {
                Some(plain) => *url = plain,
                None => tracing::error!(
                    server = %name,
                    "cannot decrypt the stored URL (was {KEY_FILE} replaced?)"
                ),
            }
        }
        if let Some(secret) = record.oauth.as_mut().and_then(|o| o.client_secret.as_mut()) {
            match self.cipher.open(secret) {
                Some(plain) => *secret = plain,
                None => tracing::error!(
                    server = %name,
                    "cannot decrypt the stored OAuth client secret (was {KEY_FILE} replaced?)"
                ),
            }
        }
        for (key, value) in record.transport.secrets_mut().iter_mut() {
            match self.cipher.open(value) {
                Some(plain) => *value = plain,
                // Kept sealed rather than dropped: re-saving keeps it as it was.
                None => tracing::error!(
                    server = %record.name,
                    key = %key,
                    "cannot decrypt a stored secret (was {KEY_FILE} replaced?)"
                ),
            }
        }
        Ok(record)
    }
}
