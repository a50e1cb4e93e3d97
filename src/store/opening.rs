//! Opening the store: the data dir made private, a zero-length file in a
//! used data dir refused, the file checked page by page when of ordinary
//! size, any redb panic on a damaged page turned into `Damaged`, and the
//! layout migrated. Everything that can go wrong at start is said here,
//! never by a panic later.

use redb::{Database, ReadableTable as _};
use std::path::Path;
use std::sync::{Arc, RwLock};

use super::audit::{AUDIT, AUDIT_MAX_BYTES};
use super::history::HISTORY;
use super::meta::{META, META_SCHEMA_VERSION, SCHEMA_VERSION};
use super::secrets::Cipher;
use super::servers::{SERVER_NAMES, SERVERS};
use super::{
    KEY_FILE, STORE_FILE, Store, StoreError, backend, catalog, embeddings, grants, health,
    profiles, skills,
};

/// redb's page cache. Its default (1 GiB) lets a daemon that read its whole
/// catalog and embedding cache once keep hundreds of MB; nothing on the hot
/// path reads the store, so a small cache costs nothing there.
const STORE_CACHE_BYTES: usize = 32 * 1024 * 1024;

/// Texts sealed by the first replica of a shared store, which the others
/// must open: a known text (is this replica's key the same?) and the key
/// sealing clients' states.
#[cfg(feature = "postgres")]
const KEY_CHECK: super::tables::Table<String, String> = super::tables::Table::new("key_check");

impl Store {
    /// Opens (creating if needed) the store in `data_dir`. Fails with
    /// `AlreadyOpen` when another process holds it, `Emptied` when it was
    /// truncated to nothing in a data dir that was in use, `Damaged` when
    /// its file does not read as a redb store — never with a panic.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        create_private_dir(data_dir)?;
        let path = data_dir.join(STORE_FILE);
        refuse_emptied(data_dir, &path)?;
        remove_abandoned_copies(data_dir);
        let creating = std::fs::symlink_metadata(&path).is_err();
        let opened = Store::open_file(data_dir, path.clone());
        if creating && opened.is_err() {
            // A store this start created and could not make whole (a full
            // disk) holds nothing: left behind, its zeros would read as a
            // damaged store at every later start.
            let _ = std::fs::remove_file(&path);
        }
        opened
    }

    fn open_file(data_dir: &Path, path: std::path::PathBuf) -> Result<Store, StoreError> {
        let health = Arc::new(health::Health::new(&path));
        // A full check of a store of ordinary size: a file damaged while
        // the daemon was stopped is found here, not by a read that panics
        // later. Beyond the size, a check would add a second per start;
        // damage is then found by the start's own reads.
        let check = std::fs::metadata(&path).is_ok_and(|m| m.len() <= CHECK_AT_OPEN_BYTES);
        let (db, _) = open_database(&path, &health, check, false)?;
        // Only the owner may read the store, whatever the umask.
        restrict_to_owner(&path, 0o600).map_err(|source| StoreError::DataDir {
            path: path.clone(),
            source,
        })?;
        let cipher = Cipher::load_or_create(&data_dir.join(KEY_FILE))?;
        let store = Store {
            db: RwLock::new(Some(Arc::new(db))),
            health,
            reopening: std::sync::Mutex::new(()),
            cipher,
            path,
            audit_max_bytes: AUDIT_MAX_BYTES,
            #[cfg(feature = "postgres")]
            shared: None,
            #[cfg(feature = "postgres")]
            mirrored: std::sync::Mutex::new(None),
        };
        guard_damage(&store.path, || store.migrate())?;
        Ok(store)
    }

    /// `open`, with the tables replicas share on `shared` (a PostgreSQL
    /// store, its schema already brought up to date); the file in
    /// `data_dir` keeps what this replica derives for itself, and the key
    /// that seals secrets, which every replica must share.
    #[cfg(feature = "postgres")]
    pub fn open_shared(
        data_dir: &Path,
        shared: super::postgres::PgTables,
    ) -> Result<Store, StoreError> {
        let mut store = Store::open(data_dir)?;
        store.shared = Some(shared);
        store.check_shared_key(&data_dir.join(KEY_FILE))?;
        Ok(store)
    }

    /// Refuses a replica whose key cannot open what the others sealed (it
    /// would serve registrations it cannot connect): a known text sealed
    /// by the first replica is opened by every later one.
    #[cfg(feature = "postgres")]
    fn check_shared_key(&self, key_file: &Path) -> Result<(), StoreError> {
        use super::tables::Reads as _;
        const SEALED_TEXT: &str = "mcp-aggregator replicas share this key";
        let name = "sealed".to_owned();
        let sealed = self.write(|txn| match txn.get(KEY_CHECK, &name)? {
            Some(sealed) => Ok(sealed),
            None => {
                let sealed = self.cipher.seal(SEALED_TEXT);
                txn.insert(KEY_CHECK, &name, &sealed)?;
                Ok(sealed)
            }
        })?;
        if self.cipher.open(&sealed).as_deref() == Some(SEALED_TEXT) {
            Ok(())
        } else {
            Err(super::secrets::SecretError::OtherReplicasKey {
                path: key_file.display().to_string(),
            }
            .into())
        }
    }

    /// The key that seals the states handed to clients (input-required
    /// retries): with shared tables, the first replica's for all of them,
    /// kept sealed in the shared store, so a client's retry may reach any
    /// replica and only `secret.key` has to be copied; `local` (this data
    /// dir's) otherwise.
    pub fn shared_state_key(&self, local: [u8; 32]) -> Result<[u8; 32], StoreError> {
        #[cfg(feature = "postgres")]
        if self.is_shared() {
            use super::tables::Reads as _;
            use base64::Engine as _;
            let engine = base64::engine::general_purpose::STANDARD;
            let name = "state_key".to_owned();
            let sealed = self.write(|txn| match txn.get(KEY_CHECK, &name)? {
                Some(sealed) => Ok(sealed),
                None => {
                    let sealed = self.cipher.seal(&engine.encode(local));
                    txn.insert(KEY_CHECK, &name, &sealed)?;
                    Ok(sealed)
                }
            })?;
            let shared = self
                .cipher
                .open(&sealed)
                .and_then(|text| engine.decode(text).ok())
                .and_then(|bytes| <[u8; 32]>::try_from(bytes.as_slice()).ok());
            return shared.ok_or_else(|| {
                StoreError::Corrupt("the shared state key cannot be opened".to_owned())
            });
        }
        Ok(local)
    }

    /// Brings an older layout up to `SCHEMA_VERSION`, one step at a time.
    fn migrate(&self) -> Result<(), StoreError> {
        // A store already at this version is not written to (a start on a
        // full disk serves what is stored).
        if self.schema_version()? == SCHEMA_VERSION {
            return Ok(());
        }
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let found = txn
            .open_table(META.redb())?
            .get(META_SCHEMA_VERSION)?
            .map(|v| v.value());
        let mut version = found.unwrap_or(0);
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: self.path.clone(),
                found: version,
            });
        }
        while version < SCHEMA_VERSION {
            match version {
                // 0 -> 1: a fresh store; create every table so readers never
                // meet a missing one.
                0 => {
                    txn.open_table(SERVERS.redb())?;
                    txn.open_table(SERVER_NAMES.redb())?;
                    txn.open_table(HISTORY.redb())?;
                    txn.open_table(AUDIT.redb())?;
                    txn.open_table(catalog::TOOLS.redb())?;
                    txn.open_table(catalog::WIRE_NAMES.redb())?;
                    txn.open_table(catalog::RESOURCES.redb())?;
                    txn.open_table(catalog::RESOURCE_TEMPLATES.redb())?;
                    txn.open_table(catalog::PROMPTS.redb())?;
                }
                // 1 -> 2: the embedding cache of the search index.
                1 => {
                    txn.open_table(embeddings::EMBEDDINGS)?;
                }
                // 2 -> 3: skills users added or edited, and suggestions.
                2 => {
                    txn.open_table(skills::SKILLS.redb())?;
                    txn.open_table(skills::SUGGESTIONS.redb())?;
                }
                // 3 -> 4: profiles (views).
                3 => {
                    txn.open_table(profiles::PROFILES.redb())?;
                }
                // 4 -> 5: what logins to servers left (OAuth grants).
                4 => {
                    txn.open_table(grants::GRANTS.redb())?;
                }
                // 5 -> 6: the definitions approved (pins), named API tokens.
                5 => {
                    txn.open_table(super::pins::PINS.redb())?;
                    txn.open_table(super::tokens::TOKENS.redb())?;
                }
                _ => unreachable!("every version below SCHEMA_VERSION has a step"),
            }
            version += 1;
        }
        txn.open_table(META.redb())?
            .insert(META_SCHEMA_VERSION, SCHEMA_VERSION)?;
        txn.commit()?;
        Ok(())
    }
}

/// A store file beyond this size is not checked whole at every open
/// (~0.4 s per 500 MB on the 2-core machine this was measured on).
const CHECK_AT_OPEN_BYTES: u64 = 256 * 1024 * 1024;

/// Opens the file through the watched backend, a panic in redb (its
/// answer to some damage) taken as `Damaged`; and whether it is open for
/// reading only (reopened after a failed write on a filesystem that has
/// turned read-only since).
pub(super) fn open_database(
    path: &Path,
    health: &Arc<health::Health>,
    check: bool,
    after_failed_write: bool,
) -> Result<(Database, bool), StoreError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let writable = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        // Private from its first byte, whatever the umask.
        .mode(0o600)
        .open(path);
    let read_only = after_failed_write
        && writable
            .as_ref()
            .is_err_and(|err| err.raw_os_error() == Some(rustix::io::Errno::ROFS.raw_os_error()));
    let backend = if read_only {
        // Its filesystem turned read-only under the daemon: what is
        // stored is still served.
        std::fs::File::open(path)
            .map(|file| backend::WatchedFile::read_only(file, Arc::clone(health)))
    } else {
        writable.map(|file| backend::WatchedFile::new(file, Arc::clone(health)))
    }
    .map_err(|source| StoreError::DataDir {
        path: path.to_path_buf(),
        source,
    })?
    .map_err(|err| StoreError::from(redb::Error::from(err)))?;
    let warned = std::sync::atomic::AtomicBool::new(false);
    let opened = guard_damage(path, || {
        let mut db = redb::Builder::new()
            .set_cache_size(STORE_CACHE_BYTES)
            .set_repair_callback(move |_| {
                // A full check of the file: seconds for a large catalog.
                if after_failed_write || warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                tracing::warn!(
                    "the store was not closed cleanly last time (the process was killed, or the machine lost power); checking and repairing it"
                );
            })
            .create_with_backend(backend)
            .map_err(|err| match err {
                redb::DatabaseError::DatabaseAlreadyOpen => StoreError::AlreadyOpen {
                    path: path.parent().unwrap_or(path).to_path_buf(),
                },
                err => StoreError::from(redb::Error::from(err)),
            })?;
        // Every page against its checksum (the open above trusts a file
        // that was closed cleanly).
        if check && !db.check_integrity().map_err(redb::Error::from)? {
            // Its last commit did not check out, and redb went back to
            // the one before: said loudly; the rest is served.
            tracing::error!(
                store = %path.display(),
                "the store file was damaged and redb repaired it by going back to its last sound commit: the last change made before this start may be lost"
            );
        }
        Ok((db, read_only))
    });
    match opened {
        Err(StoreError::Db(redb::Error::Corrupted(detail))) => Err(StoreError::Damaged {
            path: path.to_path_buf(),
            detail,
        }),
        Err(StoreError::Disk { reason, .. }) if reason.contains("invalid data") => {
            Err(StoreError::Damaged {
                path: path.to_path_buf(),
                detail: reason,
            })
        }
        other => other,
    }
}

/// Runs `work` on the store's file; a panic inside redb (how it meets some
/// damage) becomes `Damaged` instead of unwinding further.
pub(crate) fn guard_damage<T>(
    path: &Path,
    work: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
        Ok(Err(StoreError::Db(redb::Error::Corrupted(detail)))) => Err(StoreError::Damaged {
            path: path.to_path_buf(),
            detail,
        }),
        Ok(outcome) => outcome,
        Err(panic) => Err(StoreError::Damaged {
            path: path.to_path_buf(),
            detail: panic_message(panic.as_ref()),
        }),
    }
}

/// What a panic said (its payload is a `String` or a `&str` in practice).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "an internal check failed".to_owned())
}

/// A store file of 0 bytes in a data dir whose other files show it was in
/// use: its registrations are gone, and starting on it would say nothing.
fn refuse_emptied(data_dir: &Path, path: &Path) -> Result<(), StoreError> {
    if !std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
        return Ok(());
    }
    let evidence: Vec<&str> = [
        KEY_FILE,
        crate::paths::STATE_KEY_FILE,
        crate::paths::TOKEN_FILE,
        "index",
    ]
    .into_iter()
    .filter(|name| data_dir.join(name).exists())
    .collect();
    if evidence.is_empty() {
        return Ok(());
    }
    Err(StoreError::Emptied {
        path: path.to_path_buf(),
        evidence: evidence.join(", "),
    })
}

/// Creates the data dir, or tightens an existing one, to 0700: it holds the
/// store, the key that seals secrets, and the admin token.
fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    crate::paths::create_private_dir(dir).map_err(|source| StoreError::DataDir {
        path: dir.to_path_buf(),
        source,
    })
}

/// Sets `mode` unless the permissions already are no wider.
pub(crate) fn restrict_to_owner(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let current = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if current & !mode != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Removes the copies beside the store that checks killed part way left
/// (`store.redb.check-<pid>-<tag>` of a process that is gone): each is as large
/// as the store.
pub(super) fn remove_abandoned_copies(data_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    let prefix = format!("{STORE_FILE}.check-");
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(&prefix))
            .and_then(|tail| tail.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let gone = rustix::process::Pid::from_raw(pid).is_none_or(|pid| {
            rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH)
        });
        // A process gone here may live in another pid namespace.
        if gone && !in_use(&entry.path()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// How old a check's copy must be before it counts as abandoned when its
/// process is gone here: that process may live in another pid namespace
/// (a daemon in a container beside a check on the host), and no check runs
/// this long.
const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Whether a check's copy may still be in use: written to lately, or not
/// a plain file (not ours to remove).
fn in_use(copy: &Path) -> bool {
    !std::fs::symlink_metadata(copy).is_ok_and(|m| {
        m.is_file()
            && m.modified()
                .ok()
                .and_then(|at| at.elapsed().ok())
                .is_some_and(|age| age >= ABANDONED_AFTER)
    })
}
