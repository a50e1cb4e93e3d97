//! The MCP front door: one MCP server offering every connected server's
//! tools, resources and prompts. `handler` is the protocol logic, shared by
//! the two transports: `stdio` (Claude Desktop, IDEs) and `http` (Streamable
//! HTTP at `/mcp`); `modern` adapts it to the 2026-07-28 revision, served
//! beside the 2025 revisions by the same process. Messages stay raw JSON.

mod client;
pub mod handler;
pub mod http;
pub mod incoming;
mod input;
pub mod meta;
pub mod modern;
pub mod outbound;
mod relay;
mod requests;
pub mod session_table;
pub mod stdio;
mod subscriptions;

pub use handler::{ClientConnection, McpServer};
