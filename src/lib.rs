//! mcp-aggregator: one binary that aggregates many MCP servers into one.
//!
//! The module tree follows the architecture in `ARCHITECTURE.md`: the store is
//! the source of truth, the registry validates and owns registrations, and the
//! front doors (admin API, CLI) sit on top.

pub mod api;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod eval;
pub mod http_client;
pub mod http_error;
pub mod index;
pub mod jsonrpc;
pub mod limits;
pub mod listener;
pub mod logging;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod oauth;
pub mod paths;
pub mod reaper;
pub mod registry;
pub mod relay;
pub mod router;
pub mod sessions;
pub mod skills;
pub mod store;
pub mod trust;
