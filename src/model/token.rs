//! Named API tokens: what each may reach (its scope, and for an MCP
//! token the view it is bound to). The secret itself is never kept, only
//! its SHA-256.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a named token may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TokenScope {
    /// GET requests of the admin API (and the admin page's reads).
    Read,
    /// The MCP endpoint (`/mcp`, or only `/mcp/PROFILE` when bound).
    Mcp,
    /// Everything.
    Admin,
}

impl TokenScope {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Read => "read",
            TokenScope::Mcp => "mcp",
            TokenScope::Admin => "admin",
        }
    }
}

/// A named token as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedToken {
    /// `^[a-z][a-z0-9_-]*$`, at most 64 characters; what the audit log
    /// names requests made with it by.
    pub name: String,
    pub scope: TokenScope,
    /// For an `mcp` token: the only view (profile) it reaches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Hex SHA-256 of the secret (stored; never shown by the API).
    pub hash: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub created_by: String,
}

/// The name of the token a request presented (a request extension the
/// listener's gate sets), for the audit log: `admin` (the data dir's
/// token, or a signed-in page), or a named token's.
#[derive(Debug, Clone)]
pub struct TokenName(pub std::sync::Arc<str>);

/// Whether a token name is one the store and the audit log can hold.
pub fn validate_token_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !first_ok
        || name.len() > 64
        || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    {
        return Err(format!(
            "token name {:?} must match ^[a-z][a-z0-9_-]*$ and be at most 64 characters",
            name.chars().take(80).collect::<String>()
        ));
    }
    if name == "admin" {
        return Err("\"admin\" is the name of the data dir's own token".to_owned());
    }
    Ok(())
}

/// The stored form of a secret.
pub fn token_hash(secret: &str) -> String {
    use sha2::{Digest as _, Sha256};
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_admin_is_reserved() {
        assert!(validate_token_name("ci-reader_2").is_ok());
        for bad in ["", "Reader", "2x", "a b", "admin", &"a".repeat(65)] {
            assert!(validate_token_name(bad).is_err(), "{bad}");
        }
        assert_eq!(token_hash("x").len(), 64);
        assert_ne!(token_hash("x"), token_hash("y"));
    }
}
