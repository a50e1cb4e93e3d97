//! The store's tables on a shared PostgreSQL (cargo feature `postgres`),
//! for replicas that share one catalog. The embedded store keeps ordered
//! key-value tables in redb; here the same tables are rows of one
//! relation (table name, key, value), so every rule written over them
//! (names unique, history and audit trimmed, generations bumped) stays one
//! piece of code whichever engine holds the bytes.
//!
//! PostgreSQL gives what redb gives one process: a read sees one snapshot,
//! one writer at a time (a transaction-scoped advisory lock, taken by every
//! write transaction of every replica), and a commit that is durable when
//! it returns. And what redb cannot: several processes on one database,
//! each told of every commit (NOTIFY, with the tables it wrote) without
//! polling. Keys are compared as bytes (`bytea` compares like `memcmp`), as
//! redb compares its encoded keys, so ranges come back in the same order.
//!
//! Schema changes are numbered migrations, run at connect under an
//! advisory lock so replicas starting together apply each exactly once; a
//! database migrated by a newer build is refused, not written.

mod listen;
#[cfg(any(test, feature = "fixture"))]
pub mod test_cluster;

use std::collections::BTreeSet;
use std::ops::Bound;
use std::path::Path;
use std::str::FromStr as _;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use postgres::NoTls;
use postgres::types::ToSql;
use r2d2_postgres::PostgresConnectionManager;

pub use listen::{Change, Changes};

/// The NOTIFY channel every commit is announced on.
pub const CHANGES_CHANNEL: &str = "mcp_aggregator_changes";

/// The advisory lock held while migrations run (any 64-bit number of our
/// own; the text is "mcpa-mig").
const MIGRATION_LOCK: i64 = 0x6d63_7061_2d6d_6967;
/// The advisory lock every write transaction holds until it ends: one
/// writer at a time across all replicas ("mcpa-wrt").
const WRITER_LOCK: i64 = 0x6d63_7061_2d77_7274;

/// Connections each replica keeps at most; the store's methods run on
/// blocking threads, and reads do not wait for the writer.
const POOL_SIZE: u32 = 4;
/// How long a caller waits for a connection before the store answers
/// that the database cannot be reached.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema, one step per version; never edited once shipped, only
/// appended to.
const MIGRATIONS: &[&str] = &[
    // 1: the tables.
    "CREATE TABLE mcp_aggregator_kv (
        tbl text NOT NULL,
        k bytea NOT NULL,
        v bytea NOT NULL,
        PRIMARY KEY (tbl, k)
    )",
    // 2: the replicas seen, for `cluster status`.
    "CREATE TABLE mcp_aggregator_replicas (
        id text PRIMARY KEY,
        address text NOT NULL,
        version text NOT NULL,
        started_at timestamptz NOT NULL,
        seen_at timestamptz NOT NULL
    )",
];

/// The schema version this build writes.
pub const PG_SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("the store address is not a PostgreSQL URL: {0}")]
    BadUrl(String),
    #[error(
        "the store URL carries a password, which any user of this machine could read in the process list: put it in the PGPASSWORD environment variable or in a file named by --store-password-file"
    )]
    PasswordInUrl,
    #[error("cannot read the PostgreSQL password file {path}: {source}")]
    PasswordFile {
        path: String,
        source: std::io::Error,
    },
    #[error("PostgreSQL at {target} cannot be reached: {detail}")]
    Unreachable { target: String, detail: String },
    #[error(
        "the PostgreSQL store has schema version {found}, newer than this build understands ({PG_SCHEMA_VERSION}); upgrade mcp-aggregator on this replica"
    )]
    NewerSchema { found: i32 },
    #[error("PostgreSQL: {}", describe(.0))]
    Db(#[from] postgres::Error),
}

/// The server's own message when there is one (the client's `Display`
/// says only "db error").
fn describe(err: &postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        // "error connecting to server" alone hides why: the causes follow.
        None => {
            let mut text = err.to_string();
            let mut cause = std::error::Error::source(err);
            while let Some(inner) = cause {
                text.push_str(": ");
                text.push_str(&inner.to_string());
                cause = inner.source();
            }
            text
        }
    }
}

impl PgError {
    /// A mistake in how the store was named (its URL, the password's
    /// source): the command line is to be fixed, trying again will not do.
    pub fn is_bad_setting(&self) -> bool {
        matches!(
            self,
            PgError::BadUrl(_) | PgError::PasswordInUrl | PgError::PasswordFile { .. }
        )
    }

    /// The database is not there (down, unreachable, the connection lost):
    /// reads can go on from what a replica has, writes must wait.
    pub fn is_unavailable(&self) -> bool {
        match self {
            PgError::Unreachable { .. } => true,
            PgError::Db(err) => match err.as_db_error() {
                // Class 08, the connection; class 57, the server shutting
                // down or starting up.
                Some(db) => ["08", "57"]
                    .iter()
                    .any(|class| db.code().code().starts_with(class)),
                None => true,
            },
            _ => false,
        }
    }
}

/// How to reach the database: the URL without a password, the password
/// from a file or the environment.
#[derive(Clone)]
pub struct PgTarget {
    config: postgres::Config,
    /// The URL as given (it holds no password), for messages.
    shown: String,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl PgTarget {
    /// `url` (a `postgres://` URL or `key=value` pairs) must not carry a
    /// password; it is read from `password_file` if given (its first line),
    /// else from `PGPASSWORD` if set.
    pub fn new(url: &str, password_file: Option<&Path>) -> Result<PgTarget, PgError> {
        let from_env = std::env::var("PGPASSWORD").ok();
        PgTarget::with_password_from(url, password_file, from_env)
    }

    fn with_password_from(
        url: &str,
        password_file: Option<&Path>,
        from_env: Option<String>,
    ) -> Result<PgTarget, PgError> {
        let mut config =
            postgres::Config::from_str(url).map_err(|err| PgError::BadUrl(err.to_string()))?;
        if config.get_password().is_some() {
            return Err(PgError::PasswordInUrl);
        }
        let password = match password_file {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| PgError::PasswordFile {
                        path: path.display().to_string(),
                        source,
                    })?;
                Some(text.lines().next().unwrap_or_default().to_owned())
            }
            None => from_env.filter(|p| !p.is_empty()),
        };
        if let Some(password) = password {
            config.password(password);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // The server's notices (a table that already exists) are not the
        // daemon's news.
        if config.get_options().is_none() {
            config.options("-c client_min_messages=warning");
        }
        if config.get_application_name().is_none() {
            config.application_name("mcp-aggregator");
        }
        Ok(PgTarget {
            config,
            shown: url.to_owned(),
        })
    }

    fn unreachable(&self, detail: impl std::fmt::Display) -> PgError {
        PgError::Unreachable {
            target: self.shown.clone(),
            detail: detail.to_string(),
        }
    }
}

type Pool = r2d2::Pool<PostgresConnectionManager<NoTls>>;
type Connection = r2d2::PooledConnection<PostgresConnectionManager<NoTls>>;

/// Since when the database could not be reached, and when it was last
/// tried.
#[derive(Debug, Clone, Copy)]
struct Outage {
    since: std::time::Instant,
    probed: std::time::Instant,
}

/// How often, during an outage, a request tries the database again.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long that try waits for a connection.
const PROBE_WAIT: Duration = Duration::from_millis(500);

/// Tables no replica follows: a commit that wrote only these (a batch of
/// calls' audit entries and its counters, once a second per replica) is
/// not announced, so the announcements grow with the replicas, not with
/// their square.
const UNFOLLOWED: [&str; 2] = ["audit_log", "meta"];

/// The tables on one PostgreSQL database.
pub struct PgTables {
    /// `None` only while it is dropped (see `Drop`).
    pool: Option<Pool>,
    target: PgTarget,
    writers: Arc<WriterGate>,
    /// `Some` while the database cannot be reached.
    outage: Mutex<Option<Outage>>,
    /// Who this is in the changes announced (a replica's id), so a replica
    /// can tell its own commits from the others'.
    origin: String,
}

impl std::fmt::Debug for PgTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTables")
            .field("target", &self.target)
            .finish()
    }
}

impl PgTables {
    /// Connects and brings the schema to this build's version; `origin`
    /// names this process in the changes it announces. Blocking.
    pub fn connect(target: PgTarget, origin: &str) -> Result<PgTables, PgError> {
        // One connection first, for its own error: the pool's says only
        // that it timed out.
        target
            .config
            .connect(NoTls)
            .map_err(|err| target.unreachable(describe(&err)))?;
        let manager = PostgresConnectionManager::new(target.config.clone(), NoTls);
        let pool = r2d2::Pool::builder()
            .max_size(POOL_SIZE)
            // One connection is kept; the others open when reads overlap.
            .min_idle(Some(1))
            .connection_timeout(CONNECT_TIMEOUT)
            // Its failures reach the caller as errors; logged as well, an
            // outage would print one line per attempt.
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build(manager)
            .map_err(|err| target.unreachable(err))?;
        let tables = PgTables {
            pool: Some(pool),
            target,
            writers: Arc::default(),
            outage: Mutex::default(),
            origin: origin.to_owned(),
        };
        tables.migrate()?;
        Ok(tables)
    }

    /// Who this is in the changes announced.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn target(&self) -> &PgTarget {
        &self.target
    }

    /// A pooled connection. While the database is known to be down, a
    /// request fails at once instead of waiting out the pool's timeout;
    /// one every `PROBE_EVERY` tries again, briefly, and finds it back.
    fn connection(&self) -> Result<Connection, PgError> {
        let wait = {
            let mut outage = self.outage.lock().unwrap_or_else(PoisonError::into_inner);
            match outage.as_mut() {
                None => CONNECT_TIMEOUT,
                Some(outage) if outage.probed.elapsed() < PROBE_EVERY => {
                    return Err(self.target.unreachable(format!(
                        "down since {} s ago (tried again every {PROBE_EVERY:?})",
                        outage.since.elapsed().as_secs()
                    )));
                }
                Some(outage) => {
                    outage.probed = std::time::Instant::now();
                    PROBE_WAIT
                }
            }
        };
        let Some(pool) = &self.pool else {
            return Err(self.target.unreachable("the store is closed"));
        };
        match pool.get_timeout(wait) {
            Ok(conn) => {
                let ended = self
                    .outage
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                if let Some(outage) = ended {
                    tracing::info!(
                        "PostgreSQL is back after {} s",
                        outage.since.elapsed().as_secs()
                    );
                }
                Ok(conn)
            }
            Err(err) => {
                let mut outage = self.outage.lock().unwrap_or_else(PoisonError::into_inner);
                if outage.is_none() {
                    tracing::warn!(
                        "PostgreSQL cannot be reached ({err}); writes are refused until it is back"
                    );
                    let now = std::time::Instant::now();
                    *outage = Some(Outage {
                        since: now,
                        probed: now,
                    });
                }
                Err(self.target.unreachable(err))
            }
        }
    }

    /// Applies the migrations this database lacks, one at a time in one
    /// transaction, under the migration lock.
    fn migrate(&self) -> Result<(), PgError> {
        let mut conn = self.connection()?;
        let mut txn = conn.transaction()?;
        txn.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
        txn.batch_execute(
            "CREATE TABLE IF NOT EXISTS mcp_aggregator_schema (
                version integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        )?;
        let found: i32 = txn
            .query_one(
                "SELECT COALESCE(max(version), 0) FROM mcp_aggregator_schema",
                &[],
            )?
            .get(0);
        if found > PG_SCHEMA_VERSION {
            return Err(PgError::NewerSchema { found });
        }
        for (version, step) in (1..).zip(MIGRATIONS).skip(found as usize) {
            txn.batch_execute(step)?;
            txn.execute(
                "INSERT INTO mcp_aggregator_schema (version) VALUES ($1)",
                &[&version],
            )?;
            tracing::info!(version, "PostgreSQL store migrated");
        }
        txn.commit()?;
        Ok(())
    }

    /// The schema version the database is at.
    pub fn schema_version(&self) -> Result<i32, PgError> {
        let mut conn = self.connection()?;
        Ok(conn
            .query_one(
                "SELECT COALESCE(max(version), 0) FROM mcp_aggregator_schema",
                &[],
            )?
            .get(0))
    }

    /// A read transaction: every read in it sees the database as it was
    /// when it began.
    pub fn begin_read(&self) -> Result<PgTxn, PgError> {
        let mut conn = self.connection()?;
        conn.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
        Ok(PgTxn {
            conn,
            written: None,
            origin: String::new(),
            open: true,
            _turn: None,
        })
    }

    /// A write transaction; it waits while another replica's (or this
    /// one's) write transaction is open, and then sees every commit before
    /// it.
    pub fn begin_write(&self) -> Result<PgTxn, PgError> {
        let turn = self.writers.enter();
        let mut conn = self.connection()?;
        conn.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")?;
        let mut txn = PgTxn {
            conn,
            written: Some(BTreeSet::new()),
            origin: self.origin.clone(),
            open: true,
            _turn: Some(turn),
        };
        txn.conn
            .execute("SELECT pg_advisory_xact_lock($1)", &[&WRITER_LOCK])?;
        Ok(txn)
    }

    /// Commits announced from now on (each with the tables it wrote), on
    /// a connection of its own.
    pub fn listen(&self) -> Result<Changes, PgError> {
        let changes = Changes::start(&self.target)?;
        // The database is back: requests need not wait for their probe.
        self.outage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        Ok(changes)
    }

    /// Records that replica `id` (reachable at `address`) is alive now.
    pub fn heartbeat(&self, id: &str, address: &str, version: &str) -> Result<(), PgError> {
        let mut conn = self.connection()?;
        conn.execute(
            "INSERT INTO mcp_aggregator_replicas (id, address, version, started_at, seen_at)
             VALUES ($1, $2, $3, now(), now())
             ON CONFLICT (id) DO UPDATE
             SET address = EXCLUDED.address, version = EXCLUDED.version, seen_at = now()",
            &[&id, &address, &version],
        )?;
        Ok(())
    }

    /// Replicas whose last heartbeat is at most `within` old, by id.
    pub fn replicas_seen(&self, within: Duration) -> Result<Vec<ReplicaSeen>, PgError> {
        let mut conn = self.connection()?;
        let seconds = within.as_secs_f64();
        let rows = conn.query(
            "SELECT id, address, version,
                    (extract(epoch from now() - started_at) * 1000)::bigint,
                    (extract(epoch from now() - seen_at) * 1000)::bigint
             FROM mcp_aggregator_replicas
             WHERE seen_at >= now() - make_interval(secs => $1)
             ORDER BY id",
            &[&seconds],
        )?;
        Ok(rows
            .iter()
            .map(|row| ReplicaSeen {
                id: row.get(0),
                address: row.get(1),
                version: row.get(2),
                up_ms: row.get::<_, i64>(3).max(0) as u64,
                seen_ms_ago: row.get::<_, i64>(4).max(0) as u64,
            })
            .collect())
    }
}

impl Drop for PgTables {
    /// The blocking client closes a connection by running a small runtime
    /// of its own, which panics on a thread that drives the daemon's (the
    /// last holder of the store can be any task at shutdown): there, the
    /// pool is let go on a thread of its own.
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            let closing = std::thread::Builder::new()
                .name("pg-close".to_owned())
                .spawn(move || drop(pool));
            if let Ok(closing) = closing {
                let _ = closing.join();
            }
        }
    }
}

/// A replica as `cluster status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReplicaSeen {
    pub id: String,
    pub address: String,
    pub version: String,
    pub up_ms: u64,
    pub seen_ms_ago: u64,
}

/// A key and its value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// Which way a range is walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Ascending,
    Descending,
}

/// A transaction on the tables: read-only, or the one write transaction.
/// Dropped without `commit`, it is rolled back.
pub struct PgTxn {
    conn: Connection,
    /// The tables written so far; `None` for a read.
    written: Option<BTreeSet<String>>,
    origin: String,
    open: bool,
    /// A write transaction's turn among this process's writers.
    _turn: Option<WriterTurn>,
}

/// This process's write transactions, one at a time, before any takes a
/// connection: writers queued on the advisory lock would otherwise hold
/// every pooled connection and leave none to the reads.
#[derive(Default)]
struct WriterGate {
    busy: Mutex<bool>,
    freed: Condvar,
}

impl WriterGate {
    fn enter(self: &Arc<Self>) -> WriterTurn {
        let busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        let mut busy = self
            .freed
            .wait_while(busy, |busy| *busy)
            .unwrap_or_else(PoisonError::into_inner);
        *busy = true;
        WriterTurn(Arc::clone(self))
    }
}

/// Held by the write transaction; the next writer goes when it is dropped.
struct WriterTurn(Arc<WriterGate>);

impl Drop for WriterTurn {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.0.freed.notify_one();
    }
}

impl PgTxn {
    pub fn get(&mut self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>, PgError> {
        Ok(self
            .conn
            .query_opt(
                "SELECT v FROM mcp_aggregator_kv WHERE tbl = $1 AND k = $2",
                &[&table, &key],
            )?
            .map(|row| row.get(0)))
    }

    /// The entries of `table` with keys between the bounds, in key order
    /// (or reversed), at most `limit` of them.
    pub fn range(
        &mut self,
        table: &str,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        order: Order,
        limit: Option<usize>,
    ) -> Result<Vec<Entry>, PgError> {
        let mut sql = String::from("SELECT k, v FROM mcp_aggregator_kv WHERE tbl = $1");
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&table];
        let keys = KeyRange::new(from, to);
        keys.append(&mut sql, &mut params);
        sql.push_str(match order {
            Order::Ascending => " ORDER BY k ASC",
            Order::Descending => " ORDER BY k DESC",
        });
        let limit = limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        if let Some(limit) = &limit {
            params.push(limit);
            sql.push_str(&format!(" LIMIT ${}", params.len()));
        }
        let rows = self.conn.query(sql.as_str(), &params)?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }

    /// How many entries `table` holds.
    pub fn len(&mut self, table: &str) -> Result<u64, PgError> {
        let count: i64 = self
            .conn
            .query_one(
                "SELECT count(*) FROM mcp_aggregator_kv WHERE tbl = $1",
                &[&table],
            )?
            .get(0);
        Ok(count.max(0) as u64)
    }

    /// Sets `key` to `value`; the value it had, if any.
    pub fn insert(
        &mut self,
        table: &str,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<Vec<u8>>, PgError> {
        self.wrote(table);
        // One round trip: the statement's snapshot is from before its
        // own write, so `old` reads the value it replaces.
        let row = self.conn.query_opt(
            "WITH old AS (SELECT v FROM mcp_aggregator_kv WHERE tbl = $1 AND k = $2),
                  put AS (INSERT INTO mcp_aggregator_kv (tbl, k, v) VALUES ($1, $2, $3)
                          ON CONFLICT (tbl, k) DO UPDATE SET v = EXCLUDED.v)
             SELECT v FROM old",
            &[&table, &key, &value],
        )?;
        Ok(row.map(|row| row.get(0)))
    }

    /// Inserts (or replaces) every key and value, in one statement: a
    /// batch of audit entries costs one round trip, not one per entry.
    pub fn insert_all(&mut self, table: &str, entries: &[Entry]) -> Result<(), PgError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.wrote(table);
        let (keys, values): (Vec<&[u8]>, Vec<&[u8]>) = entries
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .unzip();
        self.conn.execute(
            "INSERT INTO mcp_aggregator_kv (tbl, k, v)
             SELECT $1, k, v FROM unnest($2::bytea[], $3::bytea[]) AS entry(k, v)
             ON CONFLICT (tbl, k) DO UPDATE SET v = EXCLUDED.v",
            &[&table, &keys, &values],
        )?;
        Ok(())
    }

    /// Removes `key`; the value it had, if any.
    pub fn remove(&mut self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>, PgError> {
        self.wrote(table);
        Ok(self
            .conn
            .query_opt(
                "DELETE FROM mcp_aggregator_kv WHERE tbl = $1 AND k = $2 RETURNING v",
                &[&table, &key],
            )?
            .map(|row| row.get(0)))
    }

    /// Removes every entry with a key between the bounds; how many.
    pub fn remove_range(
        &mut self,
        table: &str,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
    ) -> Result<u64, PgError> {
        self.wrote(table);
        let mut sql = String::from("DELETE FROM mcp_aggregator_kv WHERE tbl = $1");
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&table];
        let keys = KeyRange::new(from, to);
        keys.append(&mut sql, &mut params);
        Ok(self.conn.execute(sql.as_str(), &params)?)
    }

    /// Makes the writes durable and tells every listener which tables
    /// changed (in the same transaction: a rolled-back write announces
    /// nothing, a committed one always does). A read just ends.
    pub fn commit(mut self) -> Result<(), PgError> {
        let followed = |tables: &&BTreeSet<String>| {
            tables
                .iter()
                .any(|table| !UNFOLLOWED.contains(&table.as_str()))
        };
        if let Some(tables) = self.written.as_ref().filter(followed) {
            let tables: Vec<&str> = tables.iter().map(String::as_str).collect();
            let payload = Change::payload(&self.origin, &tables);
            self.conn
                .execute("SELECT pg_notify($1, $2)", &[&CHANGES_CHANNEL, &payload])?;
        }
        self.open = false;
        self.conn.batch_execute("COMMIT")?;
        Ok(())
    }

    fn wrote(&mut self, table: &str) {
        if let Some(tables) = self.written.as_mut()
            && !tables.contains(table)
        {
            tables.insert(table.to_owned());
        }
    }
}

impl Drop for PgTxn {
    fn drop(&mut self) {
        // A rollback fails only on a lost connection, which the pool
        // drops (it checks for a closed one) instead of lending it again.
        if self.open && self.conn.batch_execute("ROLLBACK").is_err() {
            tracing::warn!("a PostgreSQL transaction could not be rolled back");
        }
    }
}

/// The key bounds of a range as SQL conditions.
struct KeyRange<'a> {
    from: Option<(&'a [u8], &'static str)>,
    to: Option<(&'a [u8], &'static str)>,
}

impl<'a> KeyRange<'a> {
    fn new(from: Bound<&'a [u8]>, to: Bound<&'a [u8]>) -> KeyRange<'a> {
        KeyRange {
            from: match from {
                Bound::Included(key) => Some((key, ">=")),
                Bound::Excluded(key) => Some((key, ">")),
                Bound::Unbounded => None,
            },
            to: match to {
                Bound::Included(key) => Some((key, "<=")),
                Bound::Excluded(key) => Some((key, "<")),
                Bound::Unbounded => None,
            },
        }
    }

    fn append<'s>(&'s self, sql: &mut String, params: &mut Vec<&'s (dyn ToSql + Sync)>) {
        for (key, op) in self.from.iter().chain(self.to.iter()) {
            params.push(key);
            sql.push_str(&format!(" AND k {op} ${}", params.len()));
        }
    }
}

#[cfg(test)]
mod tests;
