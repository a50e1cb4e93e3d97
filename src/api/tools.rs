//! `POST /api/v1/tools/call`: a tool call over plain
//! HTTP, routed like an MCP call, with where it went and how long it took.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::AppState;
use super::extract::JsonBody;
use crate::http_error::ErrorBody;
use crate::router::CallError;

/// The call to make.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallToolRequest {
    /// A tool id (`server.tool`), a wire name (`server__tool`), or an
    /// original name that only one server has (or any, with `server_id`).
    pub name: String,
    /// Passed to the server unchanged.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub arguments: Option<Value>,
    /// Route to this server (id or name) explicitly.
    #[serde(default)]
    pub server_id: Option<String>,
}

/// Where the call went and how long each part took.
#[derive(Debug, Serialize, ToSchema)]
pub struct CallMetadata {
    pub routed_to: String,
    pub tool_id: String,
    pub routing_time_ms: f64,
    pub execution_time_ms: f64,
}

/// Call a tool on whichever server owns it.
#[utoipa::path(
    post,
    path = "/api/v1/tools/call",
    tag = "tools",
    request_body = CallToolRequest,
    responses(
        (status = 200, description = "The server's result, unchanged, plus `metadata`", body = Object),
        (status = 404, description = "Tool or server not found", body = ErrorBody),
        (status = 409, description = "The original name is ambiguous; `candidates` lists the tool ids", body = ErrorBody),
        (status = 422, description = "Invalid request", body = ErrorBody),
        (status = 502, description = "The server answered with an error; `error` is its JSON-RPC error", body = ErrorBody),
        (status = 503, description = "The server is unavailable; `server` names it and its status", body = ErrorBody),
    )
)]
pub async fn call_tool(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<CallToolRequest>,
) -> Response {
    use tracing::Instrument as _;
    // Exported only when traces are on (`logging::TRACE_TARGET`).
    let span = tracing::trace_span!(
        target: "mcp_aggregator::otel",
        "rest tools/call",
        otel.kind = "server",
        tool = %request.name,
    );
    let outcome = state
        .router
        .call_tool(crate::router::ToolCall {
            name: &request.name,
            arguments: request.arguments.map(crate::jsonrpc::Json::Tree),
            meta: None,
            server: request.server_id.as_deref(),
            sink: None,
            input: None,
            // A REST caller can answer no questions and hears no logs.
            caller: &crate::model::Caller {
                capabilities: Some(std::sync::Arc::new(serde_json::json!({}))),
                log_level: None,
                who: Some(std::sync::Arc::from("api")),
                profile: None,
                in_session: false,
            },
        })
        .instrument(span)
        .await;
    match outcome {
        Ok(outcome) => {
            let metadata = CallMetadata {
                routed_to: outcome.route.server_name.to_string(),
                tool_id: outcome.route.tool_id.to_string(),
                routing_time_ms: outcome.routing.as_secs_f64() * 1000.0,
                execution_time_ms: outcome.execution.as_secs_f64() * 1000.0,
            };
            let body = with_metadata(outcome.result.get(), &json!(metadata));
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response()
        }
        Err(err) => call_error(&state, err).await,
    }
}

/// The server's result with `metadata` added. A result too deeply
/// nested to read as a tree (serde_json stops at 128 levels) still goes
/// out whole: the field is written into its text.
fn with_metadata(result: &str, metadata: &Value) -> String {
    if let Ok(mut body) = serde_json::from_str::<Value>(result) {
        if let Value::Object(map) = &mut body {
            map.insert("metadata".to_owned(), metadata.clone());
        }
        return body.to_string();
    }
    match result.trim_start().strip_prefix('{') {
        Some(rest) if rest.trim_start().starts_with('}') => format!("{{\"metadata\":{metadata}}}"),
        Some(rest) => format!("{{\"metadata\":{metadata},{rest}"),
        None => result.to_owned(),
    }
}

async fn call_error(state: &AppState, err: CallError) -> Response {
    let detail = err.to_caller();
    let (status, extra) = match &err {
        CallError::UnknownTool(_) | CallError::UnknownServer(_) | CallError::UnknownProfile(_) => {
            (StatusCode::NOT_FOUND, json!({}))
        }
        CallError::UnknownReference | CallError::ForeignState => {
            (StatusCode::UNPROCESSABLE_ENTITY, json!({}))
        }
        CallError::Withheld { .. } => (StatusCode::FORBIDDEN, json!({})),
        CallError::Ambiguous { candidates, .. } => {
            (StatusCode::CONFLICT, json!({"candidates": candidates}))
        }
        CallError::Unavailable { server, status, .. } => {
            let id = state
                .registry
                .get(server)
                .await
                .map(|r| r.id.to_string())
                .ok();
            (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"server": {"id": id, "name": server, "status": status}}),
            )
        }
        CallError::Interrupted { server, reason } => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"server": {"name": server}, "in_progress": "tools/call", "reason": reason}),
        ),
        CallError::NeedsLogin { server, .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"server": {"name": server}, "needs_login": true}),
        ),
        CallError::InvalidArguments {
            tool,
            server,
            problems,
        } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"tool": tool, "server": {"name": server}, "problems": problems}),
        ),
        CallError::Limited { server, limit } => (
            StatusCode::TOO_MANY_REQUESTS,
            json!({"server": {"name": server}, "limit": limit}),
        ),
        CallError::TimedOut { server, after } => (
            StatusCode::GATEWAY_TIMEOUT,
            json!({"server": {"name": server}, "timeout_seconds": after.as_secs_f64()}),
        ),
        CallError::Server { error, .. } => (StatusCode::BAD_GATEWAY, json!({"error": error})),
        CallError::UnknownResource(_) | CallError::UnknownPrompt(_) => {
            (StatusCode::NOT_FOUND, json!({}))
        }
        CallError::Catalog(_) => (StatusCode::INTERNAL_SERVER_ERROR, json!({})),
    };
    let mut body = json!({"detail": detail});
    if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
        body.extend(extra);
    }
    (status, Json(body)).into_response()
}

/// The current conflict strategy and every name several servers offer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConflictsView {
    pub strategy: crate::router::ConflictStrategy,
    pub conflicts: Vec<crate::router::Conflict>,
}

/// Names several servers offer, and what each bare name reaches.
#[utoipa::path(
    get,
    path = "/api/v1/aggregator/conflicts",
    tag = "tools",
    responses((status = 200, body = ConflictsView))
)]
pub async fn conflicts(State(state): State<AppState>) -> Json<ConflictsView> {
    let table = state.router.table();
    Json(ConflictsView {
        strategy: table.strategy,
        conflicts: table.conflicts.clone(),
    })
}

/// The resource cache's size and counters.
#[utoipa::path(
    get,
    path = "/api/v1/aggregator/cache",
    tag = "tools",
    responses((status = 200, body = crate::router::cache::CacheStats))
)]
pub async fn cache_stats(State(state): State<AppState>) -> Json<crate::router::cache::CacheStats> {
    Json(state.router.cache_stats())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_joins_any_result_even_one_too_deep_to_read() {
        let metadata = json!({"routed_to": "s"});
        let plain: Value =
            serde_json::from_str(&with_metadata(r#"{"content": []}"#, &metadata)).unwrap();
        assert_eq!(
            plain,
            json!({"content": [], "metadata": {"routed_to": "s"}})
        );
        let empty: Value = serde_json::from_str(&with_metadata(" { } ", &metadata)).unwrap();
        assert_eq!(empty, json!({"metadata": {"routed_to": "s"}}));
        // 300 levels: more than serde_json reads as a tree.
        let deep = format!(
            r#"{{"structuredContent": {}1{}}}"#,
            r#"{"a":"#.repeat(300),
            "}".repeat(300)
        );
        assert!(serde_json::from_str::<Value>(&deep).is_err());
        let out = with_metadata(&deep, &metadata);
        assert!(out.starts_with(r#"{"metadata":{"routed_to":"s"},"structuredContent""#));
        assert!(out.ends_with(&format!("1{}}}", "}".repeat(300))));
    }
}
