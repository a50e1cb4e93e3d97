//! What gets indexed for a tool, and how identifiers become words:
//! `create_issue`, `createIssue`, `create-issue` and `CreateIssue` all read
//! "create issue", so a query in plain words meets a name in any style.

use serde_json::Value;

use crate::model::ToolRecord;

/// Splits identifiers into lower-case words: separators (`_ - . / :`) and
/// case changes (`getHTTPResponse` → get http response) end a word; runs of
/// digits stay with their word (`v2`, `s3`).
pub fn split_identifier(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !out.ends_with(' ') && !out.is_empty() {
                out.push(' ');
            }
            continue;
        }
        if i > 0 && c.is_uppercase() && !out.is_empty() && !out.ends_with(' ') {
            let prev = chars[i - 1];
            let next_is_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            // aB → a B; ABc → A Bc (the last capital of a run starts a word).
            if prev.is_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_uppercase() && next_is_lower)
            {
                out.push(' ');
            }
        }
        out.extend(c.to_lowercase());
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out
}

/// Text with every identifier-looking token also split into words: keeps
/// the original token (exact-name matches) and adds its parts.
pub fn with_split_identifiers(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for token in text.split_whitespace() {
        out.push_str(token);
        out.push(' ');
        let split = split_identifier(token);
        if split.contains(' ') {
            out.push_str(&split);
            out.push(' ');
        }
    }
    out
}

/// The first sentences of a description, up to about `budget` characters:
/// MiniLM reads a short window, and the first sentences say what a tool does.
pub fn lead(description: &str, budget: usize) -> &str {
    let description = description.trim();
    if description.len() <= budget {
        return description;
    }
    let mut end = 0;
    for (i, c) in description.char_indices() {
        if i > budget {
            break;
        }
        if matches!(c, '.' | '\n' | '!' | '?') && i >= budget / 3 {
            end = i + c.len_utf8();
        }
    }
    if end == 0 {
        end = description
            .char_indices()
            .map(|(i, _)| i)
            .take_while(|i| *i <= budget)
            .last()
            .unwrap_or(0);
    }
    description[..end].trim_end()
}

/// A parameter of a tool's input schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Parameter {
    pub name: String,
    pub description: String,
}

pub fn parameters(definition: &Value) -> Vec<Parameter> {
    let Some(properties) = definition
        .get("inputSchema")
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
    else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, schema)| Parameter {
            name: name.clone(),
            description: schema
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        })
        .collect()
}

/// Everything search knows about one tool, as text.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolTexts {
    /// Name and server, split into words.
    pub name: String,
    pub server: String,
    /// Name, server, description, parameters and skills: the main keyword
    /// field.
    pub all: String,
    /// What the dense side embeds: the name, server and the description's
    /// first sentences; and the same with parameter names added. A tool
    /// scores by the better of the two.
    pub dense: Vec<String>,
}

/// Whether the dense texts carry the server's name. A server's name tells
/// its tools from other servers' ("in GitLab", "on Jira"); when the store
/// holds one server it tells nothing apart, and a word every text shares
/// only blurs what each says (BENCHMARKS.md "A fourth public set").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerNaming {
    Named,
    /// The store holds this one server: its name is left out.
    Lone,
}

impl ServerNaming {
    /// The naming for a store of `servers` servers.
    pub fn for_store_of(servers: usize) -> ServerNaming {
        if servers == 1 {
            ServerNaming::Lone
        } else {
            ServerNaming::Named
        }
    }
}

/// Characters of description the short embedding text keeps.
const DENSE_DESCRIPTION_BUDGET: usize = 240;

pub fn tool_texts(tool: &ToolRecord, skills: &[String], naming: ServerNaming) -> ToolTexts {
    let description = tool.description.as_deref().unwrap_or_default();
    let definition = tool.definition.value();
    let title = definition
        .get("title")
        .or_else(|| definition.get("annotations").and_then(|a| a.get("title")))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = split_identifier(&tool.original_name);
    let server = split_identifier(&tool.server_name);
    let parameters = parameters(&definition);
    let mut all = format!(
        "{} {name} {server} {title} {}",
        tool.original_name,
        with_split_identifiers(description)
    );
    for parameter in &parameters {
        all.push(' ');
        all.push_str(&split_identifier(&parameter.name));
        all.push(' ');
        all.push_str(&parameter.description);
    }
    for skill in skills {
        all.push(' ');
        all.push_str(&split_identifier(skill));
    }
    let titled = if title.is_empty() || title.eq_ignore_ascii_case(&name) {
        name.clone()
    } else {
        format!("{name}, {title}")
    };
    let heading = match naming {
        ServerNaming::Named => format!("{titled} ({server})"),
        ServerNaming::Lone => titled,
    };
    let short = match lead(description, DENSE_DESCRIPTION_BUDGET) {
        "" => heading,
        lead => format!("{heading}: {lead}"),
    };
    let with_parameters = if parameters.is_empty() {
        short.clone()
    } else {
        let names: Vec<String> = parameters
            .iter()
            .map(|p| split_identifier(&p.name))
            .collect();
        format!("{short} Parameters: {}.", names.join(", "))
    };
    ToolTexts {
        name,
        server,
        all,
        dense: vec![short, with_parameters],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_split_into_words_in_every_style() {
        for name in [
            "create_issue",
            "createIssue",
            "create-issue",
            "CreateIssue",
            "CREATE_ISSUE",
        ] {
            assert_eq!(split_identifier(name), "create issue", "{name}");
        }
        assert_eq!(split_identifier("getHTTPResponse"), "get http response");
        assert_eq!(split_identifier("list_s3_buckets"), "list s3 buckets");
        assert_eq!(split_identifier("browser.navigate"), "browser navigate");
        assert_eq!(split_identifier("v2Api"), "v2 api");
        assert_eq!(split_identifier("__init__"), "init");
    }

    #[test]
    fn descriptions_keep_their_tokens_and_gain_split_identifiers() {
        let text = with_split_identifiers("Calls search_code to find code.");
        assert!(text.contains("search_code"));
        assert!(text.contains("search code"));
    }

    #[test]
    fn a_lone_servers_name_is_left_out_of_the_dense_texts_only() {
        let definition = serde_json::json!({
            "name": "get_weather",
            "description": "Current weather for a city.",
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}
        });
        let tool = ToolRecord {
            id: "plugins.get_weather".into(),
            server_id: crate::model::ServerId::nil(),
            server_name: "plugins".into(),
            original_name: "get_weather".into(),
            wire_name: None,
            rejected: None,
            refused: None,
            hold: None,
            findings: Vec::new(),
            description: Some("Current weather for a city.".into()),
            definition: crate::model::tool::Definition::new(&definition),
            definition_hash: String::new(),
            is_external: true,
            is_classified: false,
            skill_ids: Vec::new(),
            primary_skill_id: None,
            classification: Default::default(),
            discovered_at: chrono::Utc::now(),
            updated_at: chrono::Utc::now(),
        };
        let named = tool_texts(&tool, &[], ServerNaming::Named);
        let lone = tool_texts(&tool, &[], ServerNaming::Lone);
        assert_eq!(
            named.dense,
            [
                "get weather (plugins): Current weather for a city.",
                "get weather (plugins): Current weather for a city. Parameters: city."
            ]
        );
        assert_eq!(
            lone.dense,
            [
                "get weather: Current weather for a city.",
                "get weather: Current weather for a city. Parameters: city."
            ]
        );
        assert_eq!(named.all, lone.all);
        assert!(lone.all.contains("plugins"));
    }

    #[test]
    fn lead_keeps_whole_first_sentences_within_budget() {
        let description = "Creates a new issue. It supports labels and assignees. Rate limits apply to every call made.";
        assert_eq!(
            lead(description, 60),
            "Creates a new issue. It supports labels and assignees."
        );
        assert_eq!(lead("short", 60), "short");
        let unbroken = "x".repeat(100);
        assert_eq!(lead(&unbroken, 10).len(), 10);
    }
}
