//! `/metrics`: the Prometheus text exposition of the process's metrics,
//! with the figures that live elsewhere (catalog, index, resource cache,
//! process) read at scrape time.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::metrics::{ProcessFigures, Snapshot};

/// The content type of the text exposition (OpenMetrics).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Metrics in the Prometheus / OpenMetrics text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "process",
    responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String))
)]
pub async fn metrics(State(state): State<AppState>) -> Response {
    let table = state.router.table();
    let cache = state.router.cache_stats();
    let index = state.search.progress().borrow().clone();
    let process = tokio::task::spawn_blocking(ProcessFigures::read)
        .await
        .unwrap_or_default();
    let storage = state.registry.storage().await;
    let snapshot = Snapshot {
        tools: table.tools.len() as u64,
        resources: table.resources.len() as u64,
        prompts: table.prompts.len() as u64,
        index_documents: index.indexed_tools as u64,
        index_pending: index.total_tools.saturating_sub(index.indexed_tools) as u64,
        cache_hits: cache.hits,
        cache_misses: cache.misses,
        cache_evictions: cache.evictions,
        cache_entries: cache.entries as u64,
        storage_ok: storage.status == "ok",
        storage_write_errors: storage.write_errors,
        process,
    };
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        crate::metrics::render(&snapshot),
    )
        .into_response()
}
