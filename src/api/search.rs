//! `POST /api/v1/search` (docs/rules.md, Search contract), the index's
//! progress, and a
//! full rebuild on request.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::extract::JsonBody;
use crate::http_error::{ErrorBody, HttpError};
use crate::index::query::{QueryError, SearchQuery, SearchResponse};

/// Find tools by what they do: keyword and meaning, ranked together.
#[utoipa::path(
    post,
    path = "/api/v1/search",
    tag = "search",
    request_body = SearchQuery,
    responses(
        (status = 200, description = "Tools ranked by relevance (never grouped by server)", body = SearchResponse),
        (status = 404, description = "A server in `server_filter` is not registered", body = ErrorBody),
        (status = 422, description = "Empty or over-long query, a limit outside 1–100, or an unknown skill in `skill_filter`", body = ErrorBody),
        (status = 503, description = "Search is off (`--search off`)", body = ErrorBody),
    )
)]
pub async fn search(
    State(state): State<AppState>,
    JsonBody(query): JsonBody<SearchQuery>,
) -> Response {
    if let Some(skills) = &query.skill_filter {
        match state.skills.unknown(skills).await {
            Ok(unknown) if !unknown.is_empty() => {
                return HttpError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "unknown skill in skill_filter: {}",
                        crate::model::printable::quoted_names(
                            &unknown.iter().map(String::as_str).collect::<Vec<_>>()
                        )
                    ),
                )
                .into_response();
            }
            Ok(_) => {}
            Err(err) => return HttpError::from(err).into_response(),
        }
    }
    let servers = state.router.table().search_view();
    let index = state.search.clone();
    let answered = tokio::task::spawn_blocking(move || index.answer(&query, &servers, false)).await;
    match answered {
        Ok(Ok(response)) => Json(response).into_response(),
        Ok(Err(err)) => query_error(err).into_response(),
        Err(err) => HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the search task failed: {err}"),
        )
        .into_response(),
    }
}

pub fn query_error(err: QueryError) -> HttpError {
    let status = match &err {
        QueryError::EmptyQuery | QueryError::QueryTooLong(_) | QueryError::BadLimit(_) => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        QueryError::UnknownServer(_) => StatusCode::NOT_FOUND,
        QueryError::Index(crate::index::IndexError::Off) => StatusCode::SERVICE_UNAVAILABLE,
        QueryError::Index(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    HttpError::new(status, err.to_string())
}

/// How far indexing has come.
#[derive(Debug, Serialize, ToSchema)]
pub struct IndexStatus {
    /// Tools findable (by keyword, and by meaning through their first
    /// vector).
    pub indexed_tools: usize,
    pub total_tools: usize,
    /// Tools still waiting for their second vector (the text with
    /// parameter names), embedded after every tool has its first.
    pub refining_tools: usize,
    /// The store's catalog generation the index reflects (or is moving to).
    pub generation: u64,
    /// A sync is running.
    pub syncing: bool,
    /// Semantic search is available (the model is loaded, or loads when
    /// first needed).
    pub semantic: bool,
    /// The model is in memory (it loads when a tool needs embedding or a
    /// query needs meaning, not at start).
    pub model_loaded: bool,
    /// Why semantic search is unavailable, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// What answers the vector side: an exact scan, or an HNSW graph past
    /// `--graph-from` vectors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_index: Option<crate::index::VectorShape>,
}

fn status_of(state: &AppState) -> IndexStatus {
    let progress = state.search.progress().borrow().clone();
    IndexStatus {
        indexed_tools: progress.indexed_tools,
        total_tools: progress.total_tools,
        refining_tools: progress.refining_tools,
        generation: progress.generation,
        syncing: progress.syncing,
        semantic: state.search.semantic_available(),
        model_loaded: state.search.model_loaded(),
        warning: state.search.model_warning(),
        vector_index: state.search.vector_shape(),
    }
}

/// The search index's progress and whether semantic search is available.
#[utoipa::path(
    get,
    path = "/api/v1/search/status",
    tag = "search",
    responses((status = 200, description = "Indexing progress", body = IndexStatus))
)]
pub async fn index_status(State(state): State<AppState>) -> Json<IndexStatus> {
    Json(status_of(&state))
}

/// Rebuild both indexes from the store (embeddings come from the cache).
/// Answers at once; follow `GET /api/v1/search/status`.
#[utoipa::path(
    post,
    path = "/api/v1/search/reindex",
    tag = "search",
    responses((status = 202, description = "Rebuild started", body = IndexStatus))
)]
pub async fn reindex(State(state): State<AppState>) -> Response {
    let index = state.search.clone();
    // The daemon's maintenance task runs it (and tries again if it fails).
    if !index.request_rebuild() {
        tokio::spawn(async move {
            match tokio::task::spawn_blocking(move || index.sync(true)).await {
                Ok(Ok(count)) => tracing::info!(tools = count, "search index rebuilt"),
                Ok(Err(err)) => tracing::error!("search index rebuild failed: {err}"),
                Err(err) => tracing::error!("search index rebuild task failed: {err}"),
            }
        });
    }
    let mut status = status_of(&state);
    status.syncing = true;
    (StatusCode::ACCEPTED, Json(status)).into_response()
}
