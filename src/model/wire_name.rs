//! Wire names: the tool names clients see on the MCP endpoint. Every popular
//! client accepts `^[A-Za-z][A-Za-z0-9_-]*$` within a length budget, so the
//! tool id `server.tool` becomes `server__tool`, sanitised, and shortened
//! deterministically (readable prefix + short hash) when too long.

use sha2::{Digest as _, Sha256};

/// What joins a server's name to its tool's in a wire name by default.
pub const WIRE_SEPARATOR: &str = "__";

/// How wire names are formed: separator and length budget are settings (by
/// default `__` and 48 characters; clients refuse names past 64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireNameRules {
    pub separator: String,
    pub budget: usize,
}

impl Default for WireNameRules {
    fn default() -> Self {
        WireNameRules {
            separator: WIRE_SEPARATOR.to_owned(),
            budget: 48,
        }
    }
}

/// Hex characters of the hash kept in a shortened name.
const HASH_LEN: usize = 8;

impl WireNameRules {
    /// The wire name for `server`'s tool `tool`. Pure: the same input always
    /// gives the same name, whatever the connect order.
    pub fn wire_name(&self, server: &str, tool: &str) -> String {
        let raw = format!("{server}{}{tool}", self.separator);
        let mut name: String = raw
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
            name.insert(0, 't');
        }
        let budget = self.budget.max(HASH_LEN + 2);
        if name.len() <= budget {
            return name;
        }
        let digest = Sha256::digest(raw.as_bytes());
        let hash: String = digest
            .iter()
            .take(HASH_LEN / 2)
            .map(|b| format!("{b:02x}"))
            .collect();
        // The name is ASCII by construction, so byte slicing is safe.
        let keep = budget - HASH_LEN - 1;
        format!("{}_{hash}", name[..keep].trim_end_matches(['_', '-']))
    }
}

/// Whether `name` is acceptable to every client we know.
pub fn is_valid_wire_name(name: &str, budget: usize) -> bool {
    !name.is_empty()
        && name.len() <= budget
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_join_with_the_separator() {
        let rules = WireNameRules::default();
        assert_eq!(
            rules.wire_name("github", "create_issue"),
            "github__create_issue"
        );
        assert_eq!(
            rules.wire_name("server-a", "api.v2.create"),
            "server-a__api_v2_create"
        );
        assert_eq!(rules.wire_name("fs", "read file/ü"), "fs__read_file__");
    }

    #[test]
    fn long_names_are_shortened_deterministically_within_budget() {
        let rules = WireNameRules::default();
        let long = "x".repeat(200);
        let a = rules.wire_name("srv", &long);
        assert_eq!(a.len(), 48);
        assert!(a.starts_with("srv__xxxx"));
        assert_eq!(a, rules.wire_name("srv", &long), "deterministic");
        let b = rules.wire_name("srv", &format!("{long}y"));
        assert_ne!(a, b, "different tools, different names");
        assert!(is_valid_wire_name(&a, 48) && is_valid_wire_name(&b, 48));
    }

    #[test]
    fn every_name_passes_the_strictest_client_pattern() {
        let rules = WireNameRules {
            separator: "__".into(),
            budget: 64,
        };
        for (server, tool) in [
            ("a", "日本語"),
            ("a", ""),
            ("b", "-x"),
            ("c", &"é".repeat(100)),
            ("d", "a b\tc"),
        ] {
            let name = rules.wire_name(server, tool);
            assert!(is_valid_wire_name(&name, 64), "{server}.{tool} -> {name}");
        }
    }

    #[test]
    fn custom_separator_and_budget() {
        let rules = WireNameRules {
            separator: "-".into(),
            budget: 20,
        };
        assert_eq!(rules.wire_name("gh", "list"), "gh-list");
        assert_eq!(
            rules
                .wire_name("github", "create_pull_request_review")
                .len(),
            20
        );
    }
}
