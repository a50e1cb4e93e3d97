//! Encryption at rest for the secret-bearing fields of a registration (`env`
//! and `headers` values). ChaCha20-Poly1305 with a random key kept in the data
//! dir (mode 0600), so copying the store file alone does not leak tokens.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use std::path::Path;

use crate::model::server::SEALED_PREFIX;
const NONCE_LEN: usize = 12;
const KEY_LEN: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read or create the secret key {path}: {source}")]
    KeyFile {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the secret key {path} is not {KEY_LEN} bytes; restore it from a backup or remove it (stored secrets will then have to be re-entered)"
    )]
    BadKey { path: String },
    #[error(
        "the secret key {path} is not the one the shared store's secrets were sealed with: every replica needs the same key; copy secret.key from a replica that runs into this data dir"
    )]
    OtherReplicasKey { path: String },
}

/// Seals and opens secret strings.
pub struct Cipher {
    aead: ChaCha20Poly1305,
}

impl Cipher {
    /// Loads the key at `path`, creating it (mode 0600) on first use.
    pub fn load_or_create(path: &Path) -> Result<Cipher, SecretError> {
        let shown = path.display().to_string();
        let key_err = |source| SecretError::KeyFile {
            path: shown.clone(),
            source,
        };
        let key = crate::paths::private_key(path)
            .map_err(key_err)?
            .ok_or(SecretError::BadKey { path: shown })?;
        Ok(Cipher {
            aead: ChaCha20Poly1305::new(Key::from_slice(&key)),
        })
    }

    /// Encrypts `plain`; a value that is already sealed is returned unchanged,
    /// so a value that could not be opened is never sealed twice or lost.
    pub fn seal(&self, plain: &str) -> String {
        if plain.starts_with(SEALED_PREFIX) {
            return plain.to_owned();
        }
        let nonce = ChaCha20Poly1305::generate_nonce(&mut OsRng);
        match self.aead.encrypt(&nonce, plain.as_bytes()) {
            Ok(cipher_text) => {
                let mut blob = nonce.to_vec();
                blob.extend_from_slice(&cipher_text);
                format!("{SEALED_PREFIX}{}", STANDARD_NO_PAD.encode(blob))
            }
            // ChaCha20-Poly1305 only fails on inputs larger than 256 GiB,
            // which the request size bounds exclude.
            Err(_) => plain.to_owned(),
        }
    }

    /// Decrypts a sealed value. Plain values (written before sealing existed)
    /// pass through; a value that fails to open is returned as `None`.
    pub fn open(&self, stored: &str) -> Option<String> {
        let Some(encoded) = stored.strip_prefix(SEALED_PREFIX) else {
            return Some(stored.to_owned());
        };
        let blob = STANDARD_NO_PAD.decode(encoded).ok()?;
        if blob.len() < NONCE_LEN {
            return None;
        }
        let (nonce, cipher_text) = blob.split_at(NONCE_LEN);
        let plain = self
            .aead
            .decrypt(Nonce::from_slice(nonce), cipher_text)
            .ok()?;
        String::from_utf8(plain).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_then_open_round_trips_and_hides_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let cipher = Cipher::load_or_create(&dir.path().join("k")).unwrap();
        let sealed = cipher.seal("Bearer hunter2");
        assert!(sealed.starts_with(SEALED_PREFIX));
        assert!(!sealed.contains("hunter2"));
        assert_eq!(cipher.open(&sealed).as_deref(), Some("Bearer hunter2"));
        assert_eq!(cipher.seal(&sealed), sealed, "sealing twice must not nest");
    }

    #[test]
    fn key_is_private_and_reused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let sealed = Cipher::load_or_create(&path).unwrap().seal("x");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Cipher::load_or_create(&path).unwrap();
        assert_eq!(again.open(&sealed).as_deref(), Some("x"));
    }

    #[test]
    fn a_different_key_cannot_open_and_a_bad_key_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let sealed = Cipher::load_or_create(&dir.path().join("a"))
            .unwrap()
            .seal("x");
        let other = Cipher::load_or_create(&dir.path().join("b")).unwrap();
        assert_eq!(other.open(&sealed), None);
        std::fs::write(dir.path().join("c"), b"short").unwrap();
        assert!(matches!(
            Cipher::load_or_create(&dir.path().join("c")),
            Err(SecretError::BadKey { .. })
        ));
    }
}
