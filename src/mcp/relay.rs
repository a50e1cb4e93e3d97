//! Input-required relay across eras (multi round-trip requests,
//! 2026-07-28): when a server asks the calling client for something during
//! a request (sampling, elicitation, roots, the 2025 way) and that client
//! speaks 2026-07-28 — which is never sent requests — the request is parked
//! and the client gets an `InputRequiredResult` carrying the server's
//! questions and a sealed `requestState`. Its retry with `inputResponses`
//! and that state hands the answers to the waiting server, and the request
//! goes on: to its result, or to the next round of questions.
//!
//! A state is sealed with ChaCha20-Poly1305 under the data dir's key and
//! bound to what it was issued for: a parked request's state holds this
//! process's instance (drawn at start) and the request's number, so it
//! opens for that one request only — not after a restart, when numbers
//! start again — and only for the client it was handed to (its token and
//! view); a downstream server's own state holds the request it came with
//! (method and target) and the server that issued it, so it goes back
//! only to that tool or prompt of that server, never to another. An
//! altered or forged state does not open; one already used, or parked
//! longer than `PARK_TTL`, finds nothing.

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

use super::failure::RpcFailure;

/// How long a parked request waits for the client's retry.
pub const PARK_TTL: Duration = Duration::from_secs(600);
/// At most this many requests parked at once; the oldest goes first.
const MAX_PARKED: usize = 1024;
/// At most this many parked for one client (token and view); its own
/// oldest goes first, so one client cannot push out everyone else's, nor
/// take all of a server's requests that may wait on clients (64).
const MAX_PARKED_PER_OWNER: usize = 16;

/// What a running request reports to whoever waits for it.
pub(super) enum Step {
    /// The server asks the client something; the answer goes to `reply`
    /// (`Err` is a JSON-RPC error object).
    Ask {
        method: String,
        params: Option<Value>,
        reply: oneshot::Sender<Result<Value, Value>>,
    },
    /// The request's outcome.
    Done(Result<Value, RpcFailure>),
}

/// A question the client has not answered yet.
struct Question {
    request: Value,
    reply: oneshot::Sender<Result<Value, Value>>,
}

/// A request waiting for the client's answers.
struct Parked {
    /// What the retry must be: the same method on the same target.
    target: String,
    /// Who may retry: the client it was handed to.
    owner: Owner,
    questions: HashMap<String, Question>,
    steps: mpsc::Receiver<Step>,
    /// Ends the request if it is never resumed.
    running: AbortOnDrop,
    parked_at: Instant,
}

const PARKED: u8 = 0;
const DOWNSTREAM: u8 = 1;

/// What a `requestState` we issued stands for.
pub(super) enum State {
    /// A request parked here, waiting for the client's answers.
    Parked(u64),
    /// A downstream server's own state, for the request it came with
    /// (`target`), issued by `server`.
    Downstream {
        target: String,
        server: crate::model::ServerId,
        state: String,
    },
}

/// Who a parked request waits for: the token the client came with and
/// the view it works in (another client of the same view and token could
/// have been handed the questions as well).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Owner {
    pub token: Option<std::sync::Arc<str>>,
    pub profile: Option<std::sync::Arc<str>>,
}

/// What a request is, for binding a state to it: its method and the name
/// or URI it is for, as the client wrote them, and the tool a `call_tool`
/// meta-call names.
pub(super) fn target(method: &str, name: &str, inner: Option<&str>) -> String {
    match inner {
        Some(inner) => format!("{method} {name} {inner}"),
        None => format!("{method} {name}"),
    }
}

pub(super) struct Relay {
    cipher: ChaCha20Poly1305,
    /// Drawn at start: a parked request's state names the process that
    /// parked it (request numbers start again with each process).
    instance: [u8; 16],
    parked: Mutex<HashMap<u64, Parked>>,
    next_id: AtomicU64,
    next_question: AtomicU64,
}

impl Default for Relay {
    /// A relay whose states die with the process (a key drawn now).
    fn default() -> Self {
        Relay::with_key(&ChaCha20Poly1305::generate_key(&mut OsRng).into())
    }
}

impl Relay {
    /// Whether a request is parked, waiting for a client's retry (and not
    /// past the time it waits).
    pub(super) fn has_parked(&self) -> bool {
        self.parked
            .lock()
            .is_ok_and(|parked| parked.values().any(|p| p.parked_at.elapsed() < PARK_TTL))
    }

    /// A relay sealing its states with `key` (kept in the data dir, so a
    /// server's own state handed to a client still opens after a restart).
    pub(super) fn with_key(key: &[u8; 32]) -> Relay {
        use chacha20poly1305::aead::rand_core::RngCore as _;
        let mut instance = [0u8; 16];
        OsRng.fill_bytes(&mut instance);
        Relay {
            cipher: ChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(key)),
            instance,
            parked: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            next_question: AtomicU64::new(1),
        }
    }
}

/// Aborts the request's task if its waiter goes away before parking it.
pub(super) struct AbortOnDrop(pub Option<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

impl Relay {
    /// Waits for the request's next step: its result, or the questions it
    /// needs answered — then it is parked and the client gets them.
    pub(super) async fn next(
        &self,
        target: String,
        owner: Owner,
        first: Option<Step>,
        steps: mpsc::Receiver<Step>,
        running: AbortOnDrop,
    ) -> Result<Value, RpcFailure> {
        self.wait(target, owner, first, steps, HashMap::new(), running)
            .await
    }

    async fn wait(
        &self,
        target: String,
        owner: Owner,
        first: Option<Step>,
        mut steps: mpsc::Receiver<Step>,
        mut questions: HashMap<String, Question>,
        running: AbortOnDrop,
    ) -> Result<Value, RpcFailure> {
        match first {
            Some(Step::Done(outcome)) => return outcome,
            Some(Step::Ask {
                method,
                params,
                reply,
            }) => self.add_question(&mut questions, method, params, reply),
            None => {}
        }
        if questions.is_empty() {
            match steps.recv().await {
                Some(Step::Done(outcome)) => return outcome,
                Some(Step::Ask {
                    method,
                    params,
                    reply,
                }) => {
                    self.add_question(&mut questions, method, params, reply);
                }
                None => {
                    return Err(RpcFailure::new(
                        crate::jsonrpc::INTERNAL_ERROR,
                        "the request ended without an answer",
                    ));
                }
            }
        }
        // Questions asked together go out together.
        while let Ok(step) = steps.try_recv() {
            match step {
                Step::Ask {
                    method,
                    params,
                    reply,
                } => self.add_question(&mut questions, method, params, reply),
                Step::Done(outcome) => return outcome,
            }
        }
        let requests: Map<String, Value> = questions
            .iter()
            .map(|(key, question)| (key.clone(), question.request.clone()))
            .collect();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let parked = Parked {
            target,
            owner,
            questions,
            steps,
            running,
            parked_at: Instant::now(),
        };
        if let Ok(mut all) = self.parked.lock() {
            all.retain(|_, p| p.parked_at.elapsed() < PARK_TTL);
            let of_owner = all.values().filter(|p| p.owner == parked.owner).count();
            if of_owner >= MAX_PARKED_PER_OWNER
                && let Some(oldest) = all
                    .iter()
                    .filter(|(_, p)| p.owner == parked.owner)
                    .min_by_key(|(_, p)| p.parked_at)
                    .map(|(k, _)| *k)
            {
                all.remove(&oldest);
            }
            if all.len() >= MAX_PARKED
                && let Some(oldest) = all.iter().min_by_key(|(_, p)| p.parked_at).map(|(k, _)| *k)
            {
                all.remove(&oldest);
            }
            all.insert(id, parked);
        }
        Ok(json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": self.seal(id),
        }))
    }

    /// A retry: the client's answers go to the parked request, which goes
    /// on. Answers to questions not asked are ignored; a question left
    /// unanswered is asked again.
    pub(super) async fn resume(
        &self,
        target: &str,
        owner: &Owner,
        state: &str,
        responses: Option<&Value>,
    ) -> Result<Value, RpcFailure> {
        let refused = |why: &str| RpcFailure::invalid(format!("requestState refused: {why}"));
        let id = self
            .open(state)
            .ok_or_else(|| refused("it was not issued by this aggregator, or was altered"))?;
        // Checked before it is taken: a wrong retry must not use up the
        // state its owner's right one needs.
        let parked = {
            let mut all = self
                .parked
                .lock()
                .map_err(|_| refused("it was already used, or expired"))?;
            let waiting = all
                .get(&id)
                .ok_or_else(|| refused("it was already used, or expired"))?;
            if waiting.target != target {
                return Err(refused("it belongs to another request"));
            }
            if waiting.owner != *owner {
                return Err(refused("it was handed to another client"));
            }
            all.remove(&id)
                .ok_or_else(|| refused("it was already used, or expired"))?
        };
        let Parked {
            target: parked_for,
            owner: parked_by,
            questions,
            steps,
            running,
            parked_at,
        } = parked;
        if parked_at.elapsed() >= PARK_TTL {
            return Err(refused("it expired"));
        }
        let mut unanswered = HashMap::new();
        for (key, question) in questions {
            match responses.and_then(|r| r.get(&key)) {
                Some(answer) => {
                    let _ = question.reply.send(Ok(answer.clone()));
                }
                None => {
                    unanswered.insert(key, question);
                }
            }
        }
        self.wait(parked_for, parked_by, None, steps, unanswered, running)
            .await
    }

    fn add_question(
        &self,
        questions: &mut HashMap<String, Question>,
        method: String,
        params: Option<Value>,
        reply: oneshot::Sender<Result<Value, Value>>,
    ) {
        let kind = match method.as_str() {
            "sampling/createMessage" => "sampling",
            "elicitation/create" => "elicitation",
            "roots/list" => "roots",
            _ => "input",
        };
        let n = self.next_question.fetch_add(1, Ordering::Relaxed);
        let mut request = json!({"method": method});
        if let Some(params) = params {
            request["params"] = params;
        }
        questions.insert(format!("{kind}-{n}"), Question { request, reply });
    }

    /// A state for a request parked here by this process.
    fn seal(&self, id: u64) -> String {
        let mut payload = vec![PARKED];
        payload.extend(self.instance);
        payload.extend(id.to_be_bytes());
        self.seal_bytes(&payload)
    }

    /// A downstream server's own state, sealed in ours with the request it
    /// came with (`target`): the client's retry is checked like any state
    /// we issue, then the server gets its own — only for that request.
    pub(super) fn wrap_downstream(
        &self,
        target: &str,
        server: crate::model::ServerId,
        state: &str,
    ) -> String {
        let mut payload = vec![DOWNSTREAM];
        payload.extend(server.as_bytes());
        payload.extend((target.len() as u32).to_be_bytes());
        payload.extend(target.as_bytes());
        payload.extend(state.as_bytes());
        self.seal_bytes(&payload)
    }

    /// What a state a client brought back stands for; `None` if we did not
    /// issue it (or it was altered), or it names a request parked by an
    /// earlier process.
    pub(super) fn open_state(&self, state: &str) -> Option<State> {
        let payload = self.open_bytes(state)?;
        let (kind, body) = payload.split_first()?;
        match *kind {
            PARKED => {
                let (instance, id) = body.split_at_checked(self.instance.len())?;
                if instance != self.instance {
                    return None;
                }
                Some(State::Parked(u64::from_be_bytes(id.try_into().ok()?)))
            }
            DOWNSTREAM => {
                let (server, body) = body.split_at_checked(16)?;
                let (length, rest) = body.split_at_checked(4)?;
                let length = u32::from_be_bytes(length.try_into().ok()?) as usize;
                let (target, state) = rest.split_at_checked(length)?;
                Some(State::Downstream {
                    target: String::from_utf8(target.to_vec()).ok()?,
                    server: crate::model::ServerId::from_slice(server).ok()?,
                    state: String::from_utf8(state.to_vec()).ok()?,
                })
            }
            _ => None,
        }
    }

    fn open(&self, state: &str) -> Option<u64> {
        match self.open_state(state)? {
            State::Parked(id) => Some(id),
            State::Downstream { .. } => None,
        }
    }

    fn seal_bytes(&self, payload: &[u8]) -> String {
        use base64::Engine as _;
        let nonce = ChaCha20Poly1305::generate_nonce(&mut OsRng);
        let mut sealed = nonce.to_vec();
        if let Ok(body) = self.cipher.encrypt(&nonce, payload) {
            sealed.extend(body);
        }
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed)
    }

    fn open_bytes(&self, state: &str) -> Option<Vec<u8>> {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(state)
            .ok()?;
        if bytes.len() < 12 {
            return None;
        }
        let (nonce, body) = bytes.split_at(12);
        self.cipher.decrypt(Nonce::from_slice(nonce), body).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_opens_only_unaltered_and_only_here() {
        let relay = Relay::default();
        let state = relay.seal(42);
        assert_eq!(relay.open(&state), Some(42));
        let mut altered = state.clone().into_bytes();
        let last = altered.len() - 1;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(relay.open(std::str::from_utf8(&altered).unwrap()), None);
        assert_eq!(Relay::default().open(&state), None, "another process's key");
        assert_eq!(relay.open("not base64 at all!"), None);
        let server = crate::model::ServerId::new_v4();
        let wrapped = relay.wrap_downstream("tools/call a__t", server, "server-state");
        assert!(matches!(
            relay.open_state(&wrapped),
            Some(State::Downstream { target, server: issued_by, state })
                if target == "tools/call a__t" && issued_by == server && state == "server-state"
        ));
        assert_eq!(
            relay.open(&wrapped),
            None,
            "a server's state is not a parked request"
        );
    }

    #[test]
    fn a_parked_state_does_not_open_in_another_process_with_the_same_key() {
        let key = [7u8; 32];
        let before = Relay::with_key(&key);
        let state = before.seal(1);
        assert_eq!(before.open(&state), Some(1));
        // A restart: the same key from the data dir, numbers from 1 again.
        let after = Relay::with_key(&key);
        assert_eq!(after.open(&state), None);
        // A server's own state still opens after a restart.
        let wrapped = before.wrap_downstream("tools/call a__t", crate::model::ServerId::nil(), "s");
        assert!(matches!(
            after.open_state(&wrapped),
            Some(State::Downstream { .. })
        ));
    }
}
