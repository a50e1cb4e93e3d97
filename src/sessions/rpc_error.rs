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
    /// The request could not be written for the server (nested deeper
    /// than a message may be): never sent.
    #[error("the request cannot be sent: {0}")]
    Unsendable(String),
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
            RpcError::Unsendable(_) => {
                jsonrpc::error_object(jsonrpc::INVALID_PARAMS, &self.to_string(), None)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A request we could not write is the caller's (its arguments), not
    /// the server's: -32602, never "the server's answer is malformed".
    #[test]
    fn a_request_that_cannot_be_sent_is_the_callers_error() {
        let error = RpcError::Unsendable("recursion limit exceeded".into()).to_error_object();
        assert_eq!(error["code"], jsonrpc::INVALID_PARAMS);
        assert!(!error.to_string().contains("answer"), "{error}");
    }
}
