//! Why a request to a server did not get a result, and how that reads as
//! the JSON-RPC error a client is passed.

use serde_json::{Value, json};
use std::time::Duration;

use super::transport::LinkError;
use crate::jsonrpc;

/// Why a request did not get a result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RpcError {
    /// The server answered with a JSON-RPC error.
    #[error("the server answered error {code}: {message}")]
    Server {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the session closed: {0}")]
    Closed(String),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("the server's answer is malformed: {0}")]
    Malformed(String),
}

impl RpcError {
    /// The JSON-RPC error object for this error (to pass on to a client).
    pub fn to_error_object(&self) -> Value {
        match self {
            RpcError::Server {
                code,
                message,
                data,
            } => {
                let mut error = json!({"code": code, "message": message});
                if let Some(data) = data {
                    error["data"] = data.clone();
                }
                error
            }
            other => jsonrpc::error_object(jsonrpc::INTERNAL_ERROR, &other.to_string(), None),
        }
    }

    pub fn is_method_not_found(&self) -> bool {
        matches!(
            self,
            RpcError::Server {
                code: jsonrpc::METHOD_NOT_FOUND,
                ..
            }
        )
    }
}
