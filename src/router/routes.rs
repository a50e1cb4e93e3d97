//! What a name resolves to: a tool's route (its server and the name the
//! server knows it by), a namespaced resource's or prompt's, and a server
//! as the router sees it. Shared by the table and the conflict strategies.

use std::sync::Arc;

use crate::model::param_headers::HeaderParam;
use crate::model::{ServerId, ServerStatus};

/// Where a tool call goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub server_id: ServerId,
    pub server_name: Arc<str>,
    /// The name the server knows the tool by.
    pub original_name: Arc<str>,
    /// `server.tool`.
    pub tool_id: Arc<str>,
    pub wire_name: Option<Arc<str>>,
    /// Arguments the tool's schema asks to be mirrored into HTTP headers
    /// (`x-mcp-header`), checked on 2026-07-28 calls over HTTP.
    pub header_params: Arc<[HeaderParam]>,
}

/// A server as the router sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerEntry {
    pub id: ServerId,
    pub name: Arc<str>,
    pub status: ServerStatus,
    pub priority: i32,
    pub registered_at: chrono::DateTime<chrono::Utc>,
    /// Its call limits (`trust.limits`).
    pub limits: Arc<crate::model::CallLimits>,
    /// Whether its calls' arguments are checked (`trust.validate_arguments`;
    /// unset: the daemon's default).
    pub validate_arguments: Option<bool>,
}

/// Where a namespaced resource URI or prompt name goes.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemRoute {
    pub server_id: ServerId,
    pub original: Arc<str>,
}

/// Separator between server and item in resource URIs (`server:uri`).
pub const RESOURCE_SEPARATOR: char = ':';
/// Separator between server and prompt name (`server.prompt`).
pub const PROMPT_SEPARATOR: char = '.';
