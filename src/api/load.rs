//! What named tokens may hold of the listener at once. Every request a
//! named token makes counts against it until its answer has been sent
//! whole, event streams (`subscriptions/listen`, a session's GET stream, a
//! call's progress) until they close: one token may hold a quarter of
//! `--max-connections`, all named tokens together three quarters. So a
//! client given a low-privilege token cannot fill the listener with
//! streams that never end and lock out the owner (the admin token, which
//! is never counted) or the other tokens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The counts, shared by every request.
#[derive(Debug, Clone)]
pub struct TokenLoad {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    per_token: usize,
    all_tokens: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    by_token: HashMap<Arc<str>, usize>,
    total: usize,
}

/// Why a request was not let in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Crowded {
    #[error(
        "token `{token}` has {open} requests and streams open, the most one token may hold (a quarter of --max-connections); close some and try again"
    )]
    Token { token: String, open: usize },
    #[error(
        "named tokens hold {open} requests and streams open, the most they may hold together (three quarters of --max-connections); try again later"
    )]
    AllTokens { open: usize },
}

impl TokenLoad {
    /// The bounds for a listener of `max_connections`.
    pub fn for_listener(max_connections: usize) -> TokenLoad {
        let max = max_connections.max(1);
        TokenLoad {
            inner: Arc::new(Inner {
                per_token: (max / 4).max(1),
                all_tokens: (max * 3 / 4).max(1),
                open: Mutex::new(Open::default()),
            }),
        }
    }

    /// Counts one more open request of `token`; it ends when the guard is
    /// dropped.
    pub fn enter(&self, token: &Arc<str>) -> Result<LoadGuard, Crowded> {
        let mut open = self.lock();
        let of_token = open.by_token.get(token).copied().unwrap_or(0);
        if of_token >= self.inner.per_token {
            return Err(Crowded::Token {
                token: token.to_string(),
                open: of_token,
            });
        }
        if open.total >= self.inner.all_tokens {
            return Err(Crowded::AllTokens { open: open.total });
        }
        *open.by_token.entry(Arc::clone(token)).or_insert(0) += 1;
        open.total += 1;
        Ok(LoadGuard {
            load: self.clone(),
            token: Arc::clone(token),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        match self.inner.open.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// One open request of a token.
#[derive(Debug)]
pub struct LoadGuard {
    load: TokenLoad,
    token: Arc<str>,
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        let mut open = self.load.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(count) = open.by_token.get_mut(&self.token) {
            *count -= 1;
            if *count == 0 {
                open.by_token.remove(&self.token);
            }
        }
    }
}

/// An answer's body that holds its request's place until it is sent
/// whole or dropped (the client went away).
pub struct HeldBody {
    body: axum::body::Body,
    _held: LoadGuard,
}

impl HeldBody {
    pub fn new(body: axum::body::Body, held: LoadGuard) -> HeldBody {
        HeldBody { body, _held: held }
    }
}

impl axum::body::HttpBody for HeldBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_token_holds_a_quarter_and_all_tokens_three_quarters() {
        let load = TokenLoad::for_listener(16);
        let (a, b, c, d): (Arc<str>, Arc<str>, Arc<str>, Arc<str>) =
            ("a".into(), "b".into(), "c".into(), "d".into());
        let held_a: Vec<_> = (0..4).map(|_| load.enter(&a).unwrap()).collect();
        assert!(matches!(
            load.enter(&a),
            Err(Crowded::Token { open: 4, .. })
        ));
        let _held_b: Vec<_> = (0..4).map(|_| load.enter(&b).unwrap()).collect();
        let _held_c: Vec<_> = (0..4).map(|_| load.enter(&c).unwrap()).collect();
        assert_eq!(load.enter(&d).err(), Some(Crowded::AllTokens { open: 12 }));
        drop(held_a);
        let again = load.enter(&a);
        assert!(again.is_ok(), "closing gives the room back");
        assert!(load.enter(&d).is_ok());
    }
}
