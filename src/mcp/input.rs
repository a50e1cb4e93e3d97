//! Multi-round-trip requests (2026-07-28 `input_required`) for the
//! clients of every revision: a 2026-07-28 client gets a server's questions as
//! they are (the server's state sealed in ours); a 2025 client is asked
//! them as its own sampling, elicitation and roots requests, and the
//! request made again with its answers.

use serde_json::{Value, json};
use std::sync::Arc;

use super::FrontDoor;
use super::client::ClientConnection;
use super::failure::{RpcFailure, tree};
use crate::jsonrpc::Json;
use crate::jsonrpc::METHOD_NOT_FOUND;

/// How many input-required rounds a 2025 client's call may go through.
const MAX_INPUT_ROUNDS: usize = 10;

impl FrontDoor {
    /// Runs a request a 2026-07-28 server may answer with an input-required
    /// result. A client that takes them in results (2026-07-28) gets the questions as they are, with the
    /// server's state sealed in ours (so every state a client brings back
    /// is checked, and opens only for `target`, this request); a 2025
    /// client is asked the 2025 way, and the request
    /// made again (when `retries`) with its answers.
    pub(super) async fn with_input_rounds<F, Fut>(
        &self,
        client: &Arc<ClientConnection>,
        target: &str,
        server: Option<crate::model::ServerId>,
        first: Option<crate::router::InputRound>,
        retries: bool,
        mut attempt: F,
    ) -> Result<Json, RpcFailure>
    where
        F: FnMut(Option<crate::router::InputRound>) -> Fut,
        Fut: std::future::Future<Output = Result<Json, RpcFailure>>,
    {
        let mut input = first;
        let mut rounds = 0;
        loop {
            let result = attempt(input.take()).await?;
            // Read no further than this member unless it asks for input.
            if result.result_type().as_deref() != Some("input_required") {
                return Ok(result);
            }
            let mut result = tree(result)?;
            if client.takes_input_results() {
                if let Some(state) = result.get("requestState").and_then(Value::as_str) {
                    // Bound to the server that issued it (a server we could
                    // not name binds it to none: it opens for no retry).
                    let server = server.unwrap_or_default();
                    result["requestState"] =
                        Value::String(self.relay.wrap_downstream(target, server, state));
                }
                return Ok(result.into());
            }
            if !retries {
                return Ok(result.into());
            }
            rounds += 1;
            if rounds > MAX_INPUT_ROUNDS {
                return Err(RpcFailure::new(
                    crate::jsonrpc::INTERNAL_ERROR,
                    format!("the server asked for input more than {MAX_INPUT_ROUNDS} times"),
                ));
            }
            input = Some(self.answer_input_requests(client, &result).await);
        }
    }

    /// Asks a 2025 client each question of a server's input-required
    /// result (sampling, elicitation, roots — as that client's own
    /// requests), and returns the answers for the retry. A question the
    /// client cannot answer gets its JSON-RPC error as the answer.
    async fn answer_input_requests(
        &self,
        client: &Arc<ClientConnection>,
        asked: &Value,
    ) -> crate::router::InputRound {
        let mut responses = serde_json::Map::new();
        if let Some(requests) = asked.get("inputRequests").and_then(Value::as_object) {
            for (key, request) in requests {
                let Some(method) = request.get("method").and_then(Value::as_str) else {
                    continue;
                };
                let capability = match method {
                    "sampling/createMessage" => "sampling",
                    "elicitation/create" => "elicitation",
                    "roots/list" => "roots",
                    _ => "",
                };
                let answer = if client.supports(capability) {
                    client
                        .ask(method, request.get("params").cloned())
                        .await
                        .unwrap_or_else(|error| json!({"error": error}))
                } else if capability == "roots" {
                    // A client with no roots shares none.
                    json!({"roots": []})
                } else {
                    json!({"error": {"code": METHOD_NOT_FOUND, "message": format!("the client does not support {method}")}})
                };
                responses.insert(key.clone(), answer);
            }
        }
        crate::router::InputRound {
            responses: Value::Object(responses),
            state: asked.get("requestState").cloned(),
            // Our own retry: the state just came from the server it goes to.
            issued_by: None,
        }
    }

    /// The answers and state a client's retry of `target` carries, taken
    /// out of its params — the one place a state from a client is let
    /// through: it must be one we handed out, for this request, and it
    /// goes on as the server's own state, bound to the server that issued
    /// it (checked once the request is routed). A 2025 session is never
    /// handed questions, so it has nothing to answer.
    pub(super) fn take_input_round(
        &self,
        client: &ClientConnection,
        params: &mut Value,
        target: &str,
    ) -> Result<Option<crate::router::InputRound>, RpcFailure> {
        let state = params.get_mut("requestState").map(Value::take);
        let refused = |why: &str| RpcFailure::invalid(format!("requestState refused: {why}"));
        if state
            .as_ref()
            .is_some_and(|s| !matches!(s, Value::String(_) | Value::Null))
        {
            return Err(refused("it must be the string this aggregator handed out"));
        }
        let Some(responses) = params.get_mut("inputResponses").map(Value::take) else {
            return Ok(None);
        };
        if !client.takes_input_results() {
            return Err(RpcFailure::invalid(
                "inputResponses answer an input-required result, which a session of this revision is never sent",
            ));
        }
        let (state, issued_by) = match state {
            None | Some(Value::Null) => (None, None),
            Some(Value::String(state)) => match self.relay.open_state(&state) {
                Some(super::relay::State::Downstream {
                    target: issued_for,
                    server,
                    state,
                }) if issued_for == target => (Some(Value::String(state)), Some(server)),
                Some(_) => return Err(refused("it belongs to another request")),
                None => {
                    return Err(refused(
                        "it was not issued by this aggregator, or was altered",
                    ));
                }
            },
            Some(_) => return Err(refused("it must be the string this aggregator handed out")),
        };
        Ok(Some(crate::router::InputRound {
            responses,
            state,
            issued_by,
        }))
    }
}
