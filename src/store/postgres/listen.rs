//! Commits announced by every replica: a connection of its own that
//! LISTENs on the changes channel, so a replica learns of another's write
//! when it is committed, without polling the tables.

use std::time::Duration;

use fallible_iterator::FallibleIterator as _;
use postgres::NoTls;

use super::{CHANGES_CHANNEL, PgError, PgTarget};

/// One commit: who made it and which tables it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The origin the writing `PgTables` was connected with.
    pub origin: String,
    pub tables: Vec<String>,
}

impl Change {
    /// The payload `commit` sends: the origin, a newline, the tables
    /// joined by commas.
    pub(super) fn payload(origin: &str, tables: &[&str]) -> String {
        format!("{origin}\n{}", tables.join(","))
    }

    fn parse(payload: &str) -> Change {
        let (origin, tables) = payload.split_once('\n').unwrap_or(("", payload));
        Change {
            origin: origin.to_owned(),
            tables: tables
                .split(',')
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect(),
        }
    }
}

/// The commits announced since `PgTables::listen`.
pub struct Changes {
    client: postgres::Client,
}

impl std::fmt::Debug for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Changes")
    }
}

impl Changes {
    pub(super) fn start(target: &PgTarget) -> Result<Changes, PgError> {
        let mut client = target
            .config
            .connect(NoTls)
            .map_err(|err| target.unreachable(super::describe(&err)))?;
        client.batch_execute(&format!("LISTEN {CHANGES_CHANNEL}"))?;
        Ok(Changes { client })
    }

    /// The next commit announced, waiting at most `timeout`; `None` if none
    /// came. A lost connection is an error: commits announced while no
    /// one listened are not replayed, so the caller reloads what it keeps
    /// once it listens again.
    pub fn next_within(&mut self, timeout: Duration) -> Result<Option<Change>, PgError> {
        let next = self.client.notifications().timeout_iter(timeout).next()?;
        match next {
            Some(notification) => Ok(Some(Change::parse(notification.payload()))),
            None if self.client.is_closed() => Err(PgError::Unreachable {
                target: "the changes channel".to_owned(),
                detail: "the connection was closed".to_owned(),
            }),
            None => Ok(None),
        }
    }
}
