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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expose {
    pub mode: ExposeMode,
    pub threshold: usize,
}

impl Default for Expose {
    fn default() -> Self {
        Expose {
            mode: ExposeMode::All,
            threshold: DEFAULT_EXPOSE_THRESHOLD,
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

static META_TOOLS: LazyLock<Vec<Box<RawValue>>> = LazyLock::new(|| {
    [
        json!({
            "name": SEARCH_TOOLS,
            "title": "Search tools",
            "description": "Find tools of the connected MCP servers by what they do. Describe the task in plain words (or give part of a tool's name); you get the best-matching tools, best first, each with the `name` to pass to call_tool and its input schema.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What the tool should do, e.g. 'create an issue in GitHub' or 'read a file'"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT, "description": "How many tools to return"},
                    "servers": {"type": "array", "items": {"type": "string"}, "description": "Only tools of these servers (names)"}
                },
                "required": ["query"]
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }),
        json!({
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
        }),
    ]
    .iter()
    .filter_map(|tool| crate::jsonrpc::to_raw(tool).ok())
    .collect()
});

/// The definitions of the meta-tools, as `tools/list` shows them.
pub fn meta_tools() -> &'static [Box<RawValue>] {
    &META_TOOLS
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

/// `only`: the client's view (none: everything). A server outside it is
/// as unknown as one nobody registered.
pub fn search_tools(
    index: &SearchIndex,
    table: &RouteTable,
    arguments: Option<&Value>,
    only: Option<ViewScope>,
) -> Value {
    let Some(query) = arguments
        .and_then(|a| a.get("query"))
        .and_then(Value::as_str)
    else {
        return tool_error("search_tools needs `query`: a string saying what the tool should do");
    };
    let limit = match arguments.and_then(|a| a.get("limit")) {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(value) => match value.as_u64() {
            Some(n) if (1..=MAX_LIMIT as u64).contains(&n) => n as usize,
            _ => return tool_error(format!("`limit` must be an integer from 1 to {MAX_LIMIT}")),
        },
    };
    let servers = match arguments.and_then(|a| a.get("servers")) {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => {
            let names: Option<Vec<String>> = items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect();
            match names {
                Some(names) if !names.is_empty() => Some(names),
                Some(_) => None,
                None => return tool_error("`servers` must be a list of server names"),
            }
        }
        Some(_) => return tool_error("`servers` must be a list of server names"),
    };
    let mut known = table.search_view();
    let only_tools = only.map(|(tools, servers)| {
        known.retain(|server| servers.contains(&server.id));
        tools
    });
    let request = SearchQuery {
        limit: Some(limit),
        server_filter: servers,
        only_tools,
        ..SearchQuery::new(query)
    };
    let answer = match index.answer(&request, &known, true) {
        Ok(answer) => answer,
        Err(err) => return tool_error(err.to_string()),
    };
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
        serde_json::to_string_pretty(&structured).unwrap_or_default()
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
        };
        assert!(auto.lists_all(40));
        assert!(!auto.lists_all(41));
        assert!(Expose::default().lists_all(10_000));
        let search = Expose {
            mode: ExposeMode::Search,
            threshold: 40,
        };
        assert!(!search.lists_all(1));
    }

    #[test]
    fn meta_tools_have_valid_names_and_schemas() {
        assert_eq!(meta_tools().len(), 2);
        for tool in meta_tools() {
            let tool: Value = serde_json::from_str(tool.get()).unwrap();
            let name = tool["name"].as_str().unwrap();
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            assert_eq!(tool["inputSchema"]["type"], "object");
        }
    }
}
