//! The meta-tools every client gets: `search_tools` (find tools by what they
//! do, with their schemas) and `call_tool` (call one by name), and the
//! `expose` setting that decides whether `tools/list` also carries every
//! server's tools. With thousands of tools behind it, a client in `search`
//! mode starts with two tools in its context instead of all of them.

use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::sync::LazyLock;

use crate::index::SearchIndex;
use crate::index::query::{DEFAULT_LIMIT, MAX_LIMIT, SearchQuery};
use crate::model::pinned_tools::PinnedTools;
use crate::router::table::RouteTable;

pub const SEARCH_TOOLS: &str = "search_tools";
pub const CALL_TOOL: &str = "call_tool";
/// `auto` lists every tool up to this many, the meta-tools alone above.
pub const DEFAULT_EXPOSE_THRESHOLD: usize = 40;

/// What `tools/list` offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExposeMode {
    /// Every server's tools, plus the meta-tools.
    #[default]
    All,
    /// Only `search_tools` and `call_tool`.
    Search,
    /// `all` up to the threshold, `search` above it.
    Auto,
}

#[derive(Debug, Clone)]
pub struct Expose {
    pub mode: ExposeMode,
    pub threshold: usize,
    /// Tools listed beside the meta-tools whatever the mode (`--pin`).
    pub pins: std::sync::Arc<PinnedTools>,
}

impl Default for Expose {
    fn default() -> Self {
        Expose {
            mode: ExposeMode::All,
            threshold: DEFAULT_EXPOSE_THRESHOLD,
            pins: std::sync::Arc::default(),
        }
    }
}

impl Expose {
    /// Whether a list of `tools` server tools is offered in full.
    pub fn lists_all(&self, tools: usize) -> bool {
        match self.mode {
            ExposeMode::All => true,
            ExposeMode::Search => false,
            ExposeMode::Auto => tools <= self.threshold,
        }
    }
}

/// Skills named in `search_tools`'s description, at most: the largest
/// first (a catalog of many small skills would otherwise fill the
/// client's context with their names).
const SKILLS_NAMED: usize = 24;

/// `search_tools` as `tools/list` shows it, naming the skills present
/// (id and how many tools, largest first) so a model knows what is there
/// to find and can filter by skill.
pub fn search_tools_definition(skills: &[(String, usize)]) -> Box<RawValue> {
    let mut description = "Find tools of the connected MCP servers by what they do. Describe the task in plain words (or give part of a tool's name); you get the best-matching tools, best first, each with the `name` to pass to call_tool and its input schema. Ask for several things at once (\"read the file and post it to Slack\"): each is searched for.".to_owned();
    if !skills.is_empty() {
        let mut largest: Vec<&(String, usize)> = skills.iter().collect();
        largest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let named: Vec<String> = largest
            .iter()
            .take(SKILLS_NAMED)
            .map(|(id, n)| format!("{id} ({n})"))
            .collect();
        description.push_str(" Skills present (tools): ");
        description.push_str(&named.join(", "));
        if largest.len() > SKILLS_NAMED {
            description.push_str(&format!(", and {} more", largest.len() - SKILLS_NAMED));
        }
        description.push('.');
    }
    let definition = json!({
        "name": SEARCH_TOOLS,
        "title": "Search tools",
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What the tool should do, e.g. 'create an issue in GitHub' or 'read a file'"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT, "description": "How many tools to return"},
                "servers": {"type": "array", "items": {"type": "string"}, "description": "Only tools of these servers (names)"},
                "skills": {"type": "array", "items": {"type": "string"}, "description": "Only tools of these skills (ids, as named in this description)"}
            },
            "required": ["query"]
        },
        "annotations": {"readOnlyHint": true, "openWorldHint": false}
    });
    crate::jsonrpc::to_raw(&definition)
        .unwrap_or_else(|_| unreachable!("a JSON value always writes"))
}

static CALL_TOOL_DEFINITION: LazyLock<Box<RawValue>> = LazyLock::new(|| {
    let definition = json!({
        "name": CALL_TOOL,
        "title": "Call a tool",
        "description": "Call a tool found with search_tools: pass its `name` and the `arguments` its input schema asks for. The tool's own result comes back unchanged.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The tool's name as search_tools returned it (e.g. github__create_issue)"},
                "arguments": {"type": "object", "description": "Arguments for the tool, as its input schema describes"}
            },
            "required": ["name"]
        }
    });
    crate::jsonrpc::to_raw(&definition)
        .unwrap_or_else(|_| unreachable!("a JSON value always writes"))
});

/// `call_tool` as `tools/list` shows it.
pub fn call_tool_definition() -> &'static RawValue {
    &CALL_TOOL_DEFINITION
}

/// A tool result that reports a mistake the model can correct.
pub fn tool_error(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}], "isError": true})
}

/// Runs `search_tools` with the client's arguments. Blocking (the query's
/// embedding): call from a blocking thread.
/// The tools and servers of a client's view.
pub type ViewScope = (
    std::sync::Arc<std::collections::HashSet<std::sync::Arc<str>>>,
    std::collections::HashSet<crate::model::ServerId>,
);

/// A list-of-strings argument (none when absent, null or empty), or the
/// tool error that says what it must be.
fn string_list(
    arguments: Option<&Value>,
    key: &str,
    what: &str,
) -> Result<Option<Vec<String>>, Value> {
    let mistake = || tool_error(format!("`{key}` must be a list of {what}"));
    match arguments.and_then(|a| a.get(key)) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| i.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
            .map(|list| (!list.is_empty()).then_some(list))
            .ok_or_else(mistake),
        Some(_) => Err(mistake()),
    }
}

/// `only`: the client's view (none: everything). A server outside it is
/// as unknown as one nobody registered. `skills_present`: the skills of
/// the tools in that view (needed when the search filters by skill).
pub fn search_tools(
    index: &SearchIndex,
    table: &RouteTable,
    arguments: Option<&Value>,
    only: Option<ViewScope>,
    skills_present: Option<&[(String, usize)]>,
) -> Value {
    let Some(query) = arguments
        .and_then(|a| a.get("query"))
        .and_then(Value::as_str)
    else {
        return tool_error("search_tools needs `query`: a string saying what the tool should do");
    };
    let limit = match arguments.and_then(|a| a.get("limit")) {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(value) => match value.as_number().and_then(crate::index::query::whole_limit) {
            Some(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => return tool_error(format!("`limit` must be an integer from 1 to {MAX_LIMIT}")),
        },
    };
    let servers = match string_list(arguments, "servers", "server names") {
        Ok(servers) => servers,
        Err(error) => return error,
    };
    let skills = match string_list(arguments, "skills", "skill ids") {
        Ok(skills) => skills,
        Err(error) => return error,
    };
    // A skill no tool here has would only find nothing: the agent is told
    // which skills there are instead.
    if let (Some(skills), Some(present)) = (&skills, skills_present) {
        let absent: Vec<&str> = skills
            .iter()
            .filter(|skill| !present.iter().any(|(id, _)| id == *skill))
            .map(String::as_str)
            .collect();
        if !absent.is_empty() {
            let named: Vec<&str> = present.iter().map(|(id, _)| id.as_str()).collect();
            return tool_error(format!(
                "no tool here has the skill {}; the skills present are: {} (or search without `skills`)",
                crate::model::printable::quoted_names(&absent),
                if named.is_empty() {
                    "none yet".to_owned()
                } else {
                    named.join(", ")
                }
            ));
        }
    }
    let mut known = table.search_view();
    let only_tools = only.map(|(tools, servers)| {
        known.retain(|server| servers.contains(&server.id));
        tools
    });
    let request = SearchQuery {
        limit: Some(limit),
        server_filter: servers,
        skill_filter: skills,
        only_tools,
        ..SearchQuery::new(query)
    };
    let answer = match index.answer(&request, &known, true) {
        Ok(answer) => answer,
        Err(err) => return tool_error(err.to_string()),
    };
    search_result(answer)
}

/// `search_tools`'s answer to a search: each tool's wire name, server,
/// description, score and input schema, as text (what most clients give
/// the model; compact JSON) and as structured content.
pub fn search_result(answer: crate::index::query::SearchResponse) -> Value {
    let tools: Vec<Value> = answer
        .tools
        .into_iter()
        .filter(|t| t.wire_name.is_some())
        .map(|t| {
            json!({
                "name": t.wire_name,
                "server": t.source_server.name,
                "description": t.description,
                "score": (f64::from(t.score) * 1000.0).round() / 1000.0,
                "inputSchema": t.input_schema,
            })
        })
        .collect();
    let mut structured = json!({"tools": tools});
    if let Some(warning) = answer.metadata.warning {
        structured["warning"] = json!(warning);
    }
    let text = if structured["tools"].as_array().is_some_and(Vec::is_empty) {
        format!(
            "No tools match among {} tool(s) of {} available server(s).",
            answer.metadata.total_tools_searched, answer.metadata.servers_searched
        )
    } else {
        // Compact: a pretty-printed answer costs the model ~55 % more
        // tokens for the same content (`search_eval -- --tokens`).
        structured.to_string()
    };
    json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_lists_everything_up_to_the_threshold() {
        let auto = Expose {
            mode: ExposeMode::Auto,
            threshold: 40,
            ..Expose::default()
        };
        assert!(auto.lists_all(40));
        assert!(!auto.lists_all(41));
        assert!(Expose::default().lists_all(10_000));
        let search = Expose {
            mode: ExposeMode::Search,
            threshold: 40,
            ..Expose::default()
        };
        assert!(!search.lists_all(1));
    }

    #[test]
    fn meta_tools_have_valid_names_and_schemas() {
        let skills: Vec<(String, usize)> = (0..30).map(|n| (format!("skill_{n:02}"), n)).collect();
        for tool in [
            search_tools_definition(&[]),
            search_tools_definition(&skills),
            call_tool_definition().to_owned(),
        ] {
            let tool: Value = serde_json::from_str(tool.get()).unwrap();
            let name = tool["name"].as_str().unwrap();
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            assert_eq!(tool["inputSchema"]["type"], "object");
        }
        // The largest skills are named first, the rest counted.
        let tool: Value = serde_json::from_str(search_tools_definition(&skills).get()).unwrap();
        let description = tool["description"].as_str().unwrap();
        assert!(
            description.contains("Skills present (tools): skill_29 (29), skill_28 (28)"),
            "{description}"
        );
        assert!(description.ends_with("and 6 more."), "{description}");
        assert!(!description.contains("skill_05"), "{description}");
    }
}
