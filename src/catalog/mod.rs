//! The catalog: what each server offers (tools, resources, resource
//! templates, prompts), namespaced and stored. Discovery writes it; the index
//! and the front doors read it and follow its change events.

use std::sync::Arc;
use tokio::sync::broadcast;

use crate::model::wire_name::WireNameRules;
use crate::model::{CatalogDiff, CatalogKind, RefusedItem, ServerId, ToolRecord};
use crate::store::{Store, StoreError};

/// A server's catalog changed.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogChanged {
    /// `None`: another replica changed the shared catalog (which servers'
    /// entries, its announcement does not say).
    pub server_id: Option<ServerId>,
    pub kind: Option<CatalogKind>,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the store task failed: {0}")]
    Task(String),
}

/// Cheap to clone; shared by sessions (writers) and front doors (readers).
#[derive(Clone)]
pub struct Catalog {
    store: Arc<Store>,
    rules: Arc<WireNameRules>,
    events: broadcast::Sender<CatalogChanged>,
}

impl Catalog {
    pub fn new(store: Arc<Store>, rules: WireNameRules) -> Catalog {
        let (events, _) = broadcast::channel(1024);
        Catalog {
            store,
            rules: Arc::new(rules),
            events,
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<CatalogChanged> {
        self.events.subscribe()
    }

    /// Another replica wrote the shared catalog (tools, resources,
    /// prompts, or the pins that decide what is offered): whatever follows
    /// this catalog looks again.
    pub fn changed_elsewhere(&self) {
        let _ = self.events.send(CatalogChanged {
            server_id: None,
            kind: None,
        });
    }

    pub fn rules(&self) -> &WireNameRules {
        &self.rules
    }

    /// Stores a server's freshly listed tools, and those discovery refused
    /// (kept with the reason, offered to nobody). A list that is not
    /// `complete` (cut off by a bound) removes nothing it did not reach.
    pub async fn apply_tools(
        &self,
        server_id: ServerId,
        tools: Vec<serde_json::Value>,
        refused: Vec<RefusedItem>,
        complete: bool,
    ) -> Result<CatalogDiff, CatalogError> {
        let store = Arc::clone(&self.store);
        let rules = Arc::clone(&self.rules);
        let diff = tokio::task::spawn_blocking(move || {
            store.replace_listed_tools(server_id, &tools, &refused, complete, &rules)
        })
        .await
        .map_err(|err| CatalogError::Task(err.to_string()))??;
        if diff.changed() {
            let _ = self.events.send(CatalogChanged {
                server_id: Some(server_id),
                kind: None,
            });
        }
        Ok(diff)
    }

    /// Stores a server's freshly listed resources, templates or prompts
    /// (not `complete`: what the list did not reach stays).
    pub async fn apply_items(
        &self,
        server_id: ServerId,
        kind: CatalogKind,
        items: Vec<serde_json::Value>,
        complete: bool,
    ) -> Result<CatalogDiff, CatalogError> {
        let store = Arc::clone(&self.store);
        let diff = tokio::task::spawn_blocking(move || {
            store.replace_items(server_id, kind, &items, complete)
        })
        .await
        .map_err(|err| CatalogError::Task(err.to_string()))??;
        if diff.changed() {
            let _ = self.events.send(CatalogChanged {
                server_id: Some(server_id),
                kind: Some(kind),
            });
        }
        Ok(diff)
    }

    pub async fn tools(&self, server_id: ServerId) -> Result<Vec<ToolRecord>, CatalogError> {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || store.tools(server_id))
            .await
            .map_err(|err| CatalogError::Task(err.to_string()))?
            .map_err(Into::into)
    }

    pub async fn items(
        &self,
        server_id: ServerId,
        kind: CatalogKind,
    ) -> Result<Vec<serde_json::Value>, CatalogError> {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || store.items(server_id, kind))
            .await
            .map_err(|err| CatalogError::Task(err.to_string()))?
            .map_err(Into::into)
    }
}
