//! A request's failure as its client is told it (a JSON-RPC error: code,
//! message, data), and how the router's failures become one.

use serde_json::{Value, json};

use crate::jsonrpc::{self, INTERNAL_ERROR, INVALID_PARAMS, Json, Outgoing};
use crate::router::CallError;

/// A JSON-RPC error on its way to a client.
#[derive(Debug)]
pub(super) struct RpcFailure {
    pub(super) code: i64,
    pub(super) message: String,
    pub(super) data: Option<Value>,
}

impl RpcFailure {
    pub(super) fn new(code: i64, message: impl Into<String>) -> RpcFailure {
        RpcFailure {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub(super) fn with_data(code: i64, message: impl Into<String>, data: Value) -> RpcFailure {
        RpcFailure {
            code,
            message: message.into(),
            data: Some(data),
        }
    }

    /// Params the method cannot take.
    pub(super) fn invalid(message: impl Into<String>) -> RpcFailure {
        RpcFailure::new(INVALID_PARAMS, message)
    }

    /// The error answer to request `id`.
    pub(super) fn answer(self, id: Value) -> Outgoing {
        jsonrpc::error_answer(
            id,
            jsonrpc::error_object(self.code, &self.message, self.data),
        )
        .into()
    }
}

/// A result as a tree (a passed-through result that is not JSON after
/// all is the server's fault).
pub(super) fn tree(payload: Json) -> Result<Value, RpcFailure> {
    payload.into_tree().map_err(|err| {
        RpcFailure::new(
            INTERNAL_ERROR,
            format!("the server's result cannot be read: {err}"),
        )
    })
}

/// Routing failures the model can act on come back as a tool result with
/// `isError` (it can read it and pick another tool); an unknown tool is a
/// protocol error, as the spec asks.
pub(super) fn tool_call_error(err: CallError) -> Result<Value, RpcFailure> {
    match err {
        CallError::Unavailable { .. }
        | CallError::Interrupted { .. }
        | CallError::NeedsLogin { .. }
        | CallError::Limited { .. }
        | CallError::TimedOut { .. } => Ok(json!({
            "content": [{"type": "text", "text": err.to_string()}],
            "isError": true
        })),
        other => Err(other.into()),
    }
}

impl From<CallError> for RpcFailure {
    fn from(err: CallError) -> RpcFailure {
        match err {
            // The server's error object, passed on as it is.
            CallError::Server { error, .. } => RpcFailure {
                code: error
                    .get("code")
                    .and_then(Value::as_i64)
                    .unwrap_or(INTERNAL_ERROR),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                data: error.get("data").cloned(),
            },
            CallError::UnknownResource(ref uri) => {
                let data = json!({"uri": uri});
                RpcFailure::with_data(INVALID_PARAMS, err.to_string(), data)
            }
            CallError::UnknownTool(_)
            | CallError::Withheld { .. }
            | CallError::UnknownServer(_)
            | CallError::UnknownPrompt(_)
            | CallError::UnknownProfile(_)
            | CallError::UnknownReference
            | CallError::ForeignState => RpcFailure::invalid(err.to_string()),
            CallError::InvalidArguments {
                ref tool,
                ref server,
                ref problems,
            } => {
                let data = json!({"tool": tool, "server": server, "problems": problems});
                RpcFailure::with_data(INVALID_PARAMS, err.to_caller(), data)
            }
            CallError::Ambiguous { ref candidates, .. } => {
                let data = json!({"candidates": candidates});
                RpcFailure::with_data(INVALID_PARAMS, err.to_string(), data)
            }
            other => RpcFailure::new(INTERNAL_ERROR, other.to_string()),
        }
    }
}
