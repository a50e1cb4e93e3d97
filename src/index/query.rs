//! A search as the front doors ask it: filters by server (name or
//! id), by availability (only CONNECTED and DEGRADED servers' tools) and by
//! origin, then answers in the search contract's shape. Shared by `POST
//! /api/v1/search`, the CLI and the MCP `search_tools` meta-tool.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;
use utoipa::ToSchema;

use super::{IndexError, SearchIndex, SearchMode, SearchRequest};
use crate::model::{ServerId, ServerStatus};

/// Results per search unless asked otherwise, and the most one may ask.
pub const DEFAULT_LIMIT: usize = 10;
pub const MAX_LIMIT: usize = 100;
/// Longer queries are refused: nobody types this much, and embedding cost
/// grows with length.
pub const MAX_QUERY_CHARS: usize = 2_000;

/// A server as search sees it: who it is and whether it is available.
#[derive(Debug, Clone)]
pub struct ServerView {
    pub id: ServerId,
    pub name: String,
    pub status: ServerStatus,
}

/// `POST /api/v1/search`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchQuery {
    /// What the tool should do, in words or by name.
    pub query: String,
    /// Include tools of aggregated (external) servers; every tool here is
    /// one, so `false` finds nothing.
    #[serde(default = "yes")]
    pub include_external: bool,
    /// Only these servers (names or ids); empty: every server, as absent.
    #[serde(default)]
    pub server_filter: Option<Vec<String>>,
    /// Only tools classified into at least one of these skills (ids);
    /// empty: any tool, as absent.
    #[serde(default)]
    pub skill_filter: Option<Vec<String>>,
    /// At most this many results (1–100, default 10).
    #[serde(default, deserialize_with = "whole_limit_field")]
    #[schema(value_type = Option<usize>)]
    pub limit: Option<usize>,
    /// `hybrid` (default), `keyword` or `semantic`.
    #[serde(default)]
    pub mode: SearchMode,
    /// Only these tools (a client's view: `search_tools` through a
    /// profile); never read from a request.
    #[serde(skip)]
    pub only_tools: Option<Arc<HashSet<Arc<str>>>>,
}

fn yes() -> bool {
    true
}

/// A limit as a whole number: `5` or `5.0` (some clients send every number
/// as a float); `None` for a fraction or a negative number.
pub fn whole_limit(number: &serde_json::Number) -> Option<usize> {
    if let Some(whole) = number.as_u64() {
        return usize::try_from(whole).ok();
    }
    number
        .as_f64()
        .filter(|n| n.fract() == 0.0 && *n >= 0.0 && *n <= u32::MAX as f64)
        .map(|n| n as usize)
}

fn whole_limit_field<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<usize>, D::Error> {
    use serde::de::Error as _;
    match Option::<serde_json::Number>::deserialize(deserializer)? {
        None => Ok(None),
        Some(number) => whole_limit(&number)
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("limit must be a whole number, not {number}"))),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SourceServer {
    pub id: String,
    pub name: String,
    pub status: ServerStatus,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FoundTool {
    /// The tool id, `server.tool`.
    pub id: String,
    /// The tool id again (the API's `name`): what the REST call and CLI take.
    pub name: String,
    pub original_name: String,
    /// The name on the MCP endpoint (`server__tool`); absent when the tool
    /// was refused a name (collision).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wire_name: Option<String>,
    pub description: Option<String>,
    /// Relevance: higher is better; in hybrid mode within 0–1.
    pub score: f32,
    pub source_server: SourceServer,
    pub skill_ids: Vec<String>,
    pub primary_skill_id: Option<String>,
    /// The tool's input schema, when the caller asked for it (MCP
    /// `search_tools`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub input_schema: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchMetadata {
    pub servers_searched: usize,
    pub total_tools_searched: usize,
    pub mode: SearchMode,
    /// Why results are by keyword only, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    pub took_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchResponse {
    pub query: String,
    pub tools: Vec<FoundTool>,
    pub metadata: SearchMetadata,
}

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("query must not be empty")]
    EmptyQuery,
    #[error("query is {0} characters long; at most {MAX_QUERY_CHARS} are searched")]
    QueryTooLong(usize),
    #[error("limit must be between 1 and {MAX_LIMIT}, got {0}")]
    BadLimit(usize),
    /// A server filter names a server nobody registered (or outside the
    /// caller's view). The message names no field: REST calls it
    /// `server_filter`, `search_tools` `servers`.
    #[error("unknown server: '{0}'")]
    UnknownServer(String),
    #[error(transparent)]
    Index(#[from] IndexError),
}

impl SearchQuery {
    pub fn new(query: impl Into<String>) -> SearchQuery {
        SearchQuery {
            query: query.into(),
            include_external: true,
            server_filter: None,
            skill_filter: None,
            limit: None,
            mode: SearchMode::Hybrid,
            only_tools: None,
        }
    }
}

impl SearchIndex {
    /// Runs `query` against the servers as they are now. Blocking (the
    /// query's embedding): call from a blocking thread.
    pub fn answer(
        &self,
        query: &SearchQuery,
        servers: &[ServerView],
        with_schemas: bool,
    ) -> Result<SearchResponse, QueryError> {
        let started = Instant::now();
        let text = query.query.trim();
        if text.is_empty() {
            return Err(QueryError::EmptyQuery);
        }
        let length = text.chars().count();
        if length > MAX_QUERY_CHARS {
            return Err(QueryError::QueryTooLong(length));
        }
        let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(QueryError::BadLimit(limit));
        }
        let mut wanted: Vec<&ServerView> =
            servers.iter().filter(|s| s.status.is_available()).collect();
        // An empty list filters nothing, as in `search_tools` (a model
        // often fills an optional list with `[]`).
        if let Some(filter) = query.server_filter.as_ref().filter(|f| !f.is_empty()) {
            let mut chosen = HashSet::new();
            for item in filter {
                let server = servers
                    .iter()
                    .find(|s| s.name == *item || s.id.to_string() == *item)
                    .ok_or_else(|| QueryError::UnknownServer(item.clone()))?;
                chosen.insert(server.id);
            }
            wanted.retain(|s| chosen.contains(&s.id));
        }
        // Every server wanted: no filter at all (a filter of hundreds of
        // servers costs a keyword query term each).
        // (A view's search names its servers: its few tools are then
        // looked for among theirs, not after the whole catalog's best.)
        let ids: Option<HashSet<ServerId>> = (wanted.len() < servers.len()
            || query.only_tools.is_some())
        .then(|| wanted.iter().map(|s| s.id).collect());
        let outcome = self.search(&SearchRequest {
            query: text.to_owned(),
            limit,
            mode: query.mode,
            servers: ids,
            skills: query
                .skill_filter
                .as_ref()
                .filter(|skills| !skills.is_empty())
                .map(|skills| skills.iter().cloned().collect()),
            tools: query.only_tools.clone(),
            include_external: query.include_external,
        })?;
        // Descriptions and schemas of the hits, in one read (a tool removed
        // since has neither).
        let records = self
            .inner
            .store
            .tools_named(
                outcome
                    .hits
                    .iter()
                    .map(|hit| (hit.doc.server_id, hit.doc.original_name.as_str())),
            )
            .unwrap_or_else(|err| {
                tracing::warn!("search results read without descriptions: {err}");
                Vec::new()
            });
        let tools = outcome
            .hits
            .into_iter()
            .zip(records.into_iter().chain(std::iter::repeat_with(|| None)))
            .filter_map(|(hit, record)| {
                let server = wanted.iter().find(|s| s.id == hit.doc.server_id)?;
                let doc = &hit.doc;
                let description = record.as_ref().and_then(|r| r.description.clone());
                let input_schema = with_schemas.then(|| {
                    record
                        .as_ref()
                        .and_then(|r| r.definition.field("inputSchema"))
                        .unwrap_or_else(|| serde_json::json!({"type": "object"}))
                });
                Some(FoundTool {
                    id: doc.tool_id.to_string(),
                    name: doc.tool_id.to_string(),
                    original_name: doc.original_name.clone(),
                    wire_name: doc.wire_name.clone(),
                    description,
                    score: hit.score,
                    source_server: SourceServer {
                        id: server.id.to_string(),
                        name: server.name.clone(),
                        status: server.status,
                    },
                    skill_ids: doc.skill_ids.clone(),
                    primary_skill_id: doc.primary_skill_id.clone(),
                    input_schema,
                })
            })
            .collect();
        Ok(SearchResponse {
            query: query.query.clone(),
            tools,
            metadata: SearchMetadata {
                servers_searched: wanted.len(),
                total_tools_searched: outcome.tools_searched,
                mode: outcome.mode,
                warning: outcome.warning,
                took_ms: started.elapsed().as_secs_f64() * 1000.0,
            },
        })
    }
}
