//! The MCP front door: one MCP server offering every connected server's
//! tools, resources and prompts. `handler` is the protocol logic, shared by
//! the two transports: `stdio` (Claude Desktop, IDEs) and `http` (Streamable
//! HTTP at `/mcp`). Messages stay raw JSON.

pub mod bridge;
pub mod handler;
pub mod http;
pub mod meta;
pub mod outbound;
mod requests;
pub mod session_table;
pub mod stdio;

pub use handler::{ClientConnection, McpServer};
