//! `store check` and `store recover`: what can still be read of a store
//! file, and a new store made of it. Both work on a copy, so the original
//! file is never changed (redb repairs a file it opens); `recover` writes
//! `store.recovered.redb` beside it and, when asked, swaps it in with the
//! damaged file kept as `store.redb.damaged-<time>`. Registrations matter
//! most (their secrets stay sealed with the data dir's key); the catalog
//! is rediscovered and the derived indexes are rebuilt anyway.

use redb::{Database, ReadableDatabase as _, ReadableTable as _, TableDefinition};
use std::path::{Path, PathBuf};

use super::audit::AUDIT;
use super::history::HISTORY;
use super::meta::{META, META_CATALOG_GENERATION, META_GENERATION};
use super::opening::guard_damage;
use super::servers::{SERVER_NAMES, SERVERS};
use super::{STORE_FILE, StoreError, catalog, embeddings, grants, pins, profiles, skills};

/// The file `recover` writes.
pub const RECOVERED_FILE: &str = "store.recovered.redb";

/// What was read of one table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableReport {
    pub table: &'static str,
    /// Entries read whole.
    pub entries: u64,
    /// Why reading stopped early, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damage: Option<String>,
}

/// What `check` or `recover` found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub path: PathBuf,
    /// redb's own check of every page (false: it found damage, or the
    /// file could not be opened at all).
    pub integrity_ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_error: Option<String>,
    pub tables: Vec<TableReport>,
    /// Where the recovered store was written (`recover` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered: Option<PathBuf>,
    /// Where the damaged file was moved, when the recovered one replaced it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damaged_kept: Option<PathBuf>,
    /// The file is cut short: it holds fewer bytes than its header says
    /// it has; it was read as if the missing end were zeros.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut_short: Option<CutShort>,
    /// Why nothing was recovered though the store opened (`recover` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_recovered: Option<String>,
    /// redb's record of which pages are free was damaged, and rebuilt
    /// from the tables themselves (in the copy) to read them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub free_pages_rebuilt: bool,
    /// The recovered store could not be written (a full or failing disk):
    /// nothing was recovered, and the store itself says nothing of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_error: Option<String>,
}

/// How much of a store file is missing at its end.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct CutShort {
    pub file_bytes: u64,
    pub header_bytes: u64,
}

impl Report {
    /// Nothing damaged was found.
    pub fn sound(&self) -> bool {
        self.integrity_ok
            && self.cut_short.is_none()
            && !self.free_pages_rebuilt
            && self.open_error.is_none()
            && self.tables.iter().all(|t| t.damage.is_none())
    }
}

/// The report as a person reads it (`store check` / `store recover`).
impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "store: {}", self.path.display())?;
        if let Some(err) = &self.open_error {
            writeln!(f, "cannot be opened: {err}")?;
        }
        if let Some(cut) = &self.cut_short {
            writeln!(
                f,
                "cut short: {} of the {} bytes its header names; read as if the missing end were zeros",
                cut.file_bytes, cut.header_bytes
            )?;
        }
        if self.free_pages_rebuilt {
            writeln!(
                f,
                "its record of free pages is damaged: rebuilt from the tables to read them"
            )?;
        }
        writeln!(
            f,
            "page check: {}",
            if self.integrity_ok {
                "sound"
            } else {
                "damage found"
            }
        )?;
        for table in &self.tables {
            match &table.damage {
                None => writeln!(f, "  {:<20} {:>8} entries", table.table, table.entries)?,
                Some(damage) => writeln!(
                    f,
                    "  {:<20} {:>8} entries read, then: {damage}",
                    table.table, table.entries
                )?,
            }
        }
        if let Some(err) = &self.target_error {
            return write!(
                f,
                "nothing recovered: the recovered store could not be written ({err}); the store itself was not changed. Make room (or fix the data dir) and run `mcp-aggregator store recover` again"
            );
        }
        if let Some(why) = &self.not_recovered {
            return write!(f, "{why}");
        }
        match (&self.recovered, &self.damaged_kept) {
            (Some(recovered), Some(kept)) => write!(
                f,
                "recovered into {} (the damaged file is kept as {})",
                recovered.display(),
                kept.display()
            ),
            (Some(recovered), None) => write!(
                f,
                "recovered into {}; to use it, stop the daemon and move it to store.redb (or run `store recover --replace`)",
                recovered.display()
            ),
            _ if self.sound() => write!(f, "the store is sound"),
            // Nothing opens, so nothing can be copied out of it.
            _ if self.open_error.is_some() && self.tables.is_empty() => write!(
                f,
                "nothing can be read from it (not a store file, or its header is gone): put a backup of store.redb in its place, or move it aside to start with an empty store"
            ),
            _ => write!(
                f,
                "the store is damaged: `mcp-aggregator store recover` copies what can be read into a new store"
            ),
        }
    }
}

/// Reads every table of the store in `data_dir` (through a copy) and says
/// what is sound.
pub fn check(data_dir: &Path) -> Result<Report, StoreError> {
    super::health::expect_damage();
    let (path, copy) = copy_of(data_dir)?;
    let report = examine(&path, &copy.path, None);
    Ok(report)
}

/// Whether a copy of the store in `data_dir` checks out sound, taken while
/// this process still holds the file (a daemon that met a redb panic asks
/// before it calls its store damaged: a redb bug is not a damaged file).
pub fn confirmed_sound(data_dir: &Path) -> bool {
    super::health::expect_damage();
    let path = data_dir.join(STORE_FILE);
    let copy = Copy {
        path: copy_name(data_dir),
        _held: None,
        _dir: None,
    };
    if private_copy(&path, &copy.path).is_err() {
        return false;
    }
    examine(&path, &copy.path, None).sound()
}

/// Copies everything readable into `store.recovered.redb`; with `replace`,
/// puts it in the store's place and keeps the damaged file beside it.
pub fn recover(data_dir: &Path, replace: bool) -> Result<Report, StoreError> {
    super::health::expect_damage();
    let (path, copy) = copy_of(data_dir)?;
    let target = data_dir.join(RECOVERED_FILE);
    let _ = std::fs::remove_file(&target);
    // A dir where the new store cannot be made (read-only, not ours) is
    // said so, before any reading: found later it would read as a store
    // nothing can be read from.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&target)
        .and_then(|_| std::fs::remove_file(&target))
        .map_err(|source| StoreError::DataDir {
            path: target.clone(),
            source,
        })?;
    let mut report = examine(&path, &copy.path, Some(&target));
    if report.recovered.is_none() {
        // A new store left part-written (a full disk) is no store.
        if report.target_error.is_some() {
            let _ = std::fs::remove_file(&target);
        }
        return Ok(report);
    }
    // Registrations are what a store is recovered for: a new store without
    // one of them, when they could not be read, would only be put in the
    // damaged one's place and lose them for good.
    let registrations_lost = report
        .tables
        .iter()
        .any(|t| t.table == "servers" && t.entries == 0 && t.damage.is_some());
    if registrations_lost {
        let _ = std::fs::remove_file(&target);
        report.recovered = None;
        report.not_recovered = Some(
            "nothing recovered: no registration could be read (the pages that lead to them are gone), and a store without them would only lose them; the damaged file is left as it is — put a backup of store.redb in its place, or move it aside to start with an empty store".to_owned(),
        );
        return Ok(report);
    }
    // Made 0600 from its first byte (`create_private`); no chmod by path,
    // which would follow a link put in its place.
    if replace {
        let io = |source| StoreError::DataDir {
            path: path.clone(),
            source,
        };
        let kept = keep_aside(&path, data_dir).map_err(io)?;
        std::fs::rename(&target, &path).map_err(io)?;
        report.recovered = Some(path.clone());
        report.damaged_kept = Some(kept);
    }
    Ok(report)
}

/// Gives the damaged store a second name no earlier one holds
/// (`store.redb.damaged-<time>`, then `-2`, `-3`…), so that the recovered
/// one can then take the store's name in one step: killed at any point, a
/// store file is in place (two renames would leave none between them, and
/// the next start would be on an empty store). Where hard links are not
/// to be had, the store is renamed to it.
fn keep_aside(path: &Path, data_dir: &Path) -> std::io::Result<PathBuf> {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    for attempt in 1..1000 {
        let mut name = format!("{STORE_FILE}.damaged-{stamp}");
        if attempt > 1 {
            name.push_str(&format!("-{attempt}"));
        }
        let kept = data_dir.join(name);
        match std::fs::hard_link(path, &kept) {
            Ok(()) => return Ok(kept),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(_) if std::fs::symlink_metadata(&kept).is_err() => {
                std::fs::rename(path, &kept)?;
                return Ok(kept);
            }
            Err(err) => return Err(err),
        }
    }
    Err(std::io::Error::other(
        "too many damaged stores kept this second",
    ))
}

/// A copy of the store file that is removed when dropped, and the store
/// itself held open (read-only) meanwhile, when it opens.
struct Copy {
    path: PathBuf,
    _held: Option<redb::ReadOnlyDatabase>,
    /// The private directory the copy is in, when it is not beside the
    /// store; removed with it.
    _dir: Option<tempfile::TempDir>,
}

/// Copies `from` into a new file at `to`, readable by its owner only. Not
/// `fs::copy`: it follows a symlink planted at `to` (a data dir may be
/// writable by the service's servers while root runs `store check`) and
/// truncates whatever it points at; a file made here with `O_EXCL` is
/// ours, whatever was there.
/// A name for a check's copy beside the store that no other run takes:
/// the pid, and a random tag (two checks in two pid namespaces, each pid 1,
/// must not use, and remove, each other's copy).
fn copy_name(data_dir: &Path) -> PathBuf {
    let mut bytes = [0u8; 6];
    let _ = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
    let tag: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    data_dir.join(format!("{STORE_FILE}.check-{}-{tag}", std::process::id()))
}

fn private_copy(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    // Opened first: a store the caller may not read leaves no empty copy.
    let input = std::fs::File::open(from)?;
    // Removes a link, never what it points at.
    let _ = std::fs::remove_file(to);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    let copied = copy_sparse(&input, &mut out).and_then(|()| out.sync_all());
    // A disk too full for the copy leaves no part of it behind.
    if copied.is_err() {
        let _ = std::fs::remove_file(to);
    }
    copied
}

/// Opens the copy as a store, never making one: a copy gone from under
/// this process (removed by another) is an error, not an empty store that
/// checks out sound.
fn open_copy(copy: &Path) -> Result<Database, redb::Error> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(copy)
        .map_err(redb::StorageError::from)?;
    let backend = redb::backends::FileBackend::new(file).map_err(redb::Error::from)?;
    redb::Builder::new()
        .create_with_backend(backend)
        .map_err(redb::Error::from)
}

/// Copies the file's data and leaves its holes holes: a store is grown in
/// regions not yet written, and a copy that filled them would need far
/// more disk than the store takes.
fn copy_sparse(input: &std::fs::File, out: &mut std::fs::File) -> std::io::Result<()> {
    use rustix::fs::SeekFrom as Sparse;
    use std::io::{Read as _, Seek as _, SeekFrom};
    let len = input.metadata()?.len();
    let mut at = 0;
    while at < len {
        let data = match rustix::fs::seek(input, Sparse::Data(at)) {
            Ok(data) => data,
            // Nothing but a hole from `at` to the end.
            Err(rustix::io::Errno::NXIO) => break,
            Err(err) => return Err(err.into()),
        };
        let hole = rustix::fs::seek(input, Sparse::Hole(data)).map_err(std::io::Error::from)?;
        let mut from = input;
        from.seek(SeekFrom::Start(data))?;
        out.seek(SeekFrom::Start(data))?;
        std::io::copy(&mut from.take(hole - data), out)?;
        at = hole;
    }
    out.set_len(len)
}

impl Drop for Copy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether only this process's user may add or rename entries in `dir`:
/// owned by it (or by root, when root runs this) and writable by no group
/// or other.
fn dir_is_private(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(dir).is_ok_and(|metadata| {
        metadata.uid() == rustix::process::geteuid().as_raw() && metadata.mode() & 0o022 == 0
    })
}

/// The store's path and a private copy of it, once no process holds it.
fn copy_of(data_dir: &Path) -> Result<(PathBuf, Copy), StoreError> {
    let path = data_dir.join(STORE_FILE);
    match std::fs::metadata(&path) {
        Ok(metadata) if metadata.is_file() => {}
        Ok(_) => {
            return Err(StoreError::DataDir {
                path,
                source: std::io::Error::other("not a regular file"),
            });
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::DataDir {
                path,
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no store file here"),
            });
        }
        // Permission denied (another user's data dir), an I/O error: said
        // as it is, not as a missing store.
        Err(source) => return Err(StoreError::DataDir { path, source }),
    }
    // A store the caller may not read is named as such, not the copy
    // that could not be made of it.
    if let Err(source) = std::fs::File::open(&path) {
        return Err(StoreError::DataDir { path, source });
    }
    super::opening::remove_abandoned_copies(data_dir);
    // A running daemon holds the file: checking it under its feet would
    // read a moving file. Once opened here, it is held (read-only) until
    // the copy is done with — and, for `--replace`, until the recovered
    // store is in its place: a daemon starting meanwhile would write to a
    // file about to be set aside, and what it wrote would be lost.
    let held = match std::panic::catch_unwind(|| redb::ReadOnlyDatabase::open(&path)) {
        Ok(Err(redb::DatabaseError::DatabaseAlreadyOpen)) => {
            return Err(StoreError::AlreadyOpen {
                path: data_dir.to_path_buf(),
            });
        }
        Ok(Ok(database)) => Some(database),
        // Too damaged to open: no daemon can open it either.
        _ => None,
    };
    // The copy is opened by its path again and again (redb, its repair):
    // beside the store only in a dir no one else may write to. Elsewhere
    // (a service's dir that its servers may write to, a read-only mount,
    // a full disk) it is made in a private directory of the temporary one,
    // where nobody can put a link in its place.
    if dir_is_private(data_dir) {
        let beside = copy_name(data_dir);
        match private_copy(&path, &beside) {
            Ok(()) => {
                return Ok((
                    path,
                    Copy {
                        path: beside,
                        _held: held,
                        _dir: None,
                    },
                ));
            }
            Err(source) => {
                use std::io::ErrorKind::{PermissionDenied, ReadOnlyFilesystem, StorageFull};
                if !matches!(
                    source.kind(),
                    PermissionDenied | ReadOnlyFilesystem | StorageFull
                ) {
                    return Err(StoreError::DataDir {
                        path: beside,
                        source,
                    });
                }
            }
        }
    }
    let elsewhere = tempfile::Builder::new()
        .prefix("mcp-aggregator-check-")
        .tempdir()
        .map_err(|source| StoreError::DataDir {
            path: std::env::temp_dir(),
            source,
        })?;
    let copy = Copy {
        path: elsewhere.path().join(STORE_FILE),
        _held: held,
        _dir: Some(elsewhere),
    };
    private_copy(&path, &copy.path).map_err(|source| StoreError::DataDir {
        path: copy.path.clone(),
        source,
    })?;
    Ok((path, copy))
}

/// Opens the copy, checks it, reads every table; copies what it reads into
/// a new store at `into` when given.
fn examine(path: &Path, copy: &Path, into: Option<&Path>) -> Report {
    let mut report = Report {
        path: path.to_path_buf(),
        integrity_ok: false,
        open_error: None,
        tables: Vec::new(),
        recovered: None,
        damaged_kept: None,
        cut_short: None,
        not_recovered: None,
        free_pages_rebuilt: false,
        target_error: None,
    };
    // redb would take an empty file for a new store and call it sound
    // (and `--replace` would swap an empty store in): it holds nothing.
    if std::fs::metadata(copy).is_ok_and(|m| m.len() == 0) {
        report.open_error = Some("the file is empty: it holds no store".to_owned());
        return report;
    }
    report.cut_short = pad_if_cut_short(copy);
    let opens = || opens_whole(copy);
    if opens().is_err() && mark_for_full_repair(copy) {
        report.free_pages_rebuilt = opens().is_ok();
    }
    // redb's own check of every page first, then a plain open to read
    // what can be read whatever it found.
    report.integrity_ok = guard_damage(copy, || {
        let mut db = open_copy(copy)?;
        Ok(db.check_integrity().map_err(redb::Error::from)?)
    })
    .unwrap_or(false);
    let source = match guard_damage(copy, || Ok(open_copy(copy)?)) {
        Ok(db) => Examined(Some(db)),
        Err(err) => {
            report.open_error = Some(match err {
                StoreError::Damaged { detail, .. } => detail,
                other => other.to_string(),
            });
            return report;
        }
    };
    let target = match into.map(create_private).transpose() {
        Ok(target) => target,
        Err(err) => {
            report.target_error = Some(format!("cannot create it: {err}"));
            return report;
        }
    };
    let target = target.as_ref();
    let copied = [
        copy_table(&source, target, "meta", META.redb()),
        copy_table(&source, target, "servers", SERVERS.redb()),
        copy_table(&source, target, "server_names", SERVER_NAMES.redb()),
        copy_table(&source, target, "connection_history", HISTORY.redb()),
        copy_table(&source, target, "audit_log", AUDIT.redb()),
        copy_table(&source, target, "tools", catalog::TOOLS.redb()),
        copy_table(&source, target, "wire_names", catalog::WIRE_NAMES.redb()),
        copy_table(&source, target, "resources", catalog::RESOURCES.redb()),
        copy_table(
            &source,
            target,
            "resource_templates",
            catalog::RESOURCE_TEMPLATES.redb(),
        ),
        copy_table(&source, target, "prompts", catalog::PROMPTS.redb()),
        copy_table(&source, target, "embeddings", embeddings::EMBEDDINGS),
        copy_table(&source, target, "skills", skills::SKILLS.redb()),
        copy_table(
            &source,
            target,
            "skill_suggestions",
            skills::SUGGESTIONS.redb(),
        ),
        copy_table(&source, target, "profiles", profiles::PROFILES.redb()),
        copy_table(&source, target, "oauth_grants", grants::GRANTS.redb()),
        copy_table(&source, target, "pins", pins::PINS.redb()),
        copy_table(&source, target, "api_tokens", super::tokens::TOKENS.redb()),
    ];
    for (table, write_error) in copied {
        report.tables.push(table);
        if report.target_error.is_none() {
            report.target_error = write_error;
        }
    }
    if report.target_error.is_some() {
        return report;
    }
    if let (Some(target), Some(into)) = (target, into) {
        match finish(target) {
            Ok(()) => report.recovered = Some(into.to_path_buf()),
            Err(err) => report.target_error = Some(format!("cannot finish it: {err}")),
        }
    }
    report
}

/// The copy being read. Closing it commits, which can meet its damage
/// too: a panic there is not let out.
struct Examined(Option<Database>);

impl std::ops::Deref for Examined {
    type Target = Database;

    fn deref(&self) -> &Database {
        match &self.0 {
            Some(db) => db,
            None => unreachable!("taken only when dropped"),
        }
    }
}

impl Drop for Examined {
    fn drop(&mut self) {
        if let Some(db) = self.0.take() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(db)));
        }
    }
}

/// The largest length a cut-short copy is padded to (sparse: the padding
/// takes no disk); a header naming more is not believed.
const MAX_PADDED_BYTES: u64 = 64 << 30;

/// A file cut short (fewer bytes than the layout its header names: a copy
/// or a disk that stopped part way) does not open at all, though the pages
/// still there are whole. Read as if its missing end were zeros, they can
/// be copied out. Pads the copy to the header's length; returns how much
/// was missing when it did.
fn pad_if_cut_short(copy: &Path) -> Option<CutShort> {
    let refusal = match opens_whole(copy) {
        Ok(()) => return None,
        Err(StoreError::Damaged { detail, .. }) => detail,
        Err(other) => other.to_string(),
    };
    // redb says "File truncated below stored layout: file_len=…,
    // layout_len=…" and nowhere else gives the length.
    let (_, after) = refusal.split_once("truncated below stored layout")?;
    let (_, layout) = after.split_once("layout_len=")?;
    let digits: String = layout.chars().take_while(char::is_ascii_digit).collect();
    let header_bytes: u64 = digits.parse().ok()?;
    let file = std::fs::OpenOptions::new().write(true).open(copy).ok()?;
    let file_bytes = file.metadata().ok()?.len();
    if header_bytes <= file_bytes || header_bytes > MAX_PADDED_BYTES {
        return None;
    }
    file.set_len(header_bytes).ok()?;
    Some(CutShort {
        file_bytes,
        header_bytes,
    })
}

/// Whether the copy opens, and closes: closing commits (redb saves its
/// record of free pages), and on a damaged file that can panic too, so
/// the database is dropped inside the guard.
fn opens_whole(copy: &Path) -> Result<(), StoreError> {
    guard_damage(copy, || {
        let db = open_copy(copy)?;
        drop(db);
        Ok(())
    })
}

/// redb's flags byte, after its 9-byte magic number, and two of its bits.
const FLAGS_AT: u64 = 9;
const RECOVERY_REQUIRED: u8 = 2;
const TWO_PHASE_COMMIT: u8 = 4;

/// A store whose last commit saved its record of free pages (derived
/// data) opens by loading that record, and a damaged one stops the open
/// (a panic inside redb) though every table is whole. Marked as needing
/// recovery, without that commit's two-phase flag, redb rebuilds the
/// record from the tables instead. Done to the copy only; true when it
/// was marked.
fn mark_for_full_repair(copy: &Path) -> bool {
    use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
    let mark = || -> std::io::Result<bool> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(copy)?;
        let mut head = [0u8; FLAGS_AT as usize + 1];
        file.read_exact(&mut head)?;
        if head[..FLAGS_AT as usize] != *b"redb\x1a\x0a\xa9\x0d\x0a" {
            return Ok(false);
        }
        let flags = (head[FLAGS_AT as usize] & !TWO_PHASE_COMMIT) | RECOVERY_REQUIRED;
        file.seek(SeekFrom::Start(FLAGS_AT))?;
        file.write_all(&[flags])?;
        file.sync_all()?;
        Ok(true)
    };
    mark().unwrap_or(false)
}

/// Entries read before they are written to the recovered store.
const CHUNK: usize = 2048;

/// A new store file, private (0600) from its first byte.
fn create_private(path: &Path) -> Result<Database, redb::DatabaseError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    redb::Builder::new().create_with_backend(redb::backends::FileBackend::new(file)?)
}

/// Copies one table entry by entry; a panic or an error (damage) stops it
/// there, and what was read before is kept. Entries are read in chunks and
/// each chunk written in a transaction of its own, so no write is ever
/// open while a damaged page is being read. Also returns why writing the
/// copy failed, when it did.
fn copy_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    source: &Database,
    target: Option<&Database>,
    name: &'static str,
    definition: TableDefinition<K, V>,
) -> (TableReport, Option<String>) {
    let mut entries = 0u64;
    let mut chunk: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut write = |chunk: &mut Vec<(Vec<u8>, Vec<u8>)>| -> Result<(), StoreError> {
        if let Some(target) = target {
            let txn = target.begin_write()?;
            {
                let mut table = txn.open_table(definition)?;
                for (key, value) in chunk.iter() {
                    table.insert(K::from_bytes(key), V::from_bytes(value))?;
                }
            }
            txn.commit()?;
        }
        entries += chunk.len() as u64;
        chunk.clear();
        Ok(())
    };
    // A write that fails is the new store's trouble (a full disk), not
    // damage of the one read: it stops the reading and is told apart.
    let mut write_error: Option<String> = None;
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(
        || -> Result<(), StoreError> {
            let txn = source.begin_read()?;
            let table = match txn.open_table(definition) {
                Ok(table) => table,
                // An older store without this table has nothing to copy.
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
                Err(err) => return Err(err.into()),
            };
            for entry in table.iter()? {
                let (key, value) = entry?;
                chunk.push((
                    K::as_bytes(&key.value()).as_ref().to_vec(),
                    V::as_bytes(&value.value()).as_ref().to_vec(),
                ));
                if chunk.len() >= CHUNK
                    && let Err(err) = write(&mut chunk)
                {
                    write_error = Some(err.to_string());
                    return Ok(());
                }
            }
            Ok(())
        },
    ));
    let damage = match read {
        Ok(Ok(())) => None,
        Ok(Err(err)) => Some(err.to_string()),
        Err(panic) => Some(super::panic_message(panic.as_ref())),
    };
    // What was read before the damage (or the end).
    if write_error.is_none()
        && let Err(err) = write(&mut chunk)
    {
        write_error = Some(err.to_string());
    }
    (
        TableReport {
            table: name,
            entries,
            damage,
        },
        write_error,
    )
}

/// Makes the recovered store whole: every table there, names that point at
/// the servers actually recovered, and generations moved on so the derived
/// indexes are rebuilt from it.
fn finish(target: &Database) -> Result<(), StoreError> {
    #[derive(serde::Deserialize)]
    struct Named {
        id: uuid::Uuid,
        name: String,
    }
    let txn = target.begin_write()?;
    {
        // Every table exists, as a store of this version expects.
        txn.open_table(SERVERS.redb())?;
        txn.open_table(HISTORY.redb())?;
        txn.open_table(AUDIT.redb())?;
        txn.open_table(catalog::TOOLS.redb())?;
        txn.open_table(catalog::WIRE_NAMES.redb())?;
        txn.open_table(catalog::RESOURCES.redb())?;
        txn.open_table(catalog::RESOURCE_TEMPLATES.redb())?;
        txn.open_table(catalog::PROMPTS.redb())?;
        txn.open_table(embeddings::EMBEDDINGS)?;
        txn.open_table(skills::SKILLS.redb())?;
        txn.open_table(skills::SUGGESTIONS.redb())?;
        txn.open_table(profiles::PROFILES.redb())?;
        txn.open_table(grants::GRANTS.redb())?;
        txn.open_table(pins::PINS.redb())?;
        txn.open_table(super::tokens::TOKENS.redb())?;
        let mut servers: Vec<Named> = Vec::new();
        for entry in txn.open_table(SERVERS.redb())?.iter()? {
            let (_, bytes) = entry?;
            if let Ok(named) = serde_json::from_slice::<Named>(bytes.value()) {
                servers.push(named);
            }
        }
        let mut names = txn.open_table(SERVER_NAMES.redb())?;
        names.retain(|_, _| false)?;
        for server in &servers {
            names.insert(server.name.as_str(), server.id.as_u128())?;
        }
        let mut meta = txn.open_table(META.redb())?;
        if meta.get(super::META_SCHEMA_VERSION)?.is_none() {
            meta.insert(super::META_SCHEMA_VERSION, super::SCHEMA_VERSION)?;
        }
        for key in [META_GENERATION, META_CATALOG_GENERATION] {
            let next = meta.get(key)?.map(|v| v.value()).unwrap_or(0) + 1;
            meta.insert(key, next)?;
        }
    }
    txn.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparse_store_is_copied_with_its_holes() {
        use std::io::{Seek as _, SeekFrom, Write as _};
        use std::os::unix::fs::MetadataExt as _;
        let temp = tempfile::tempdir().unwrap();
        let from = temp.path().join("sparse");
        let mut file = std::fs::File::create(&from).unwrap();
        file.write_all(b"head").unwrap();
        file.seek(SeekFrom::Start(32 << 20)).unwrap();
        file.write_all(b"middle").unwrap();
        file.set_len(64 << 20).unwrap();
        drop(file);
        let to = temp.path().join("copy");
        private_copy(&from, &to).unwrap();
        let (original, copy) = (std::fs::read(&from).unwrap(), std::fs::read(&to).unwrap());
        assert_eq!(original.len(), copy.len());
        assert!(original == copy, "the copy differs");
        let allocated = |path: &Path| std::fs::metadata(path).unwrap().blocks() * 512;
        // Where the disk keeps holes, the copy keeps them too.
        if allocated(&from) < 1 << 20 {
            assert!(allocated(&to) < 1 << 20, "{} bytes taken", allocated(&to));
        }
    }

    #[test]
    fn a_private_copy_does_not_follow_a_planted_link() {
        let temp = tempfile::tempdir().unwrap();
        let (from, victim, at) = (
            temp.path().join("store"),
            temp.path().join("victim"),
            temp.path().join("store.check-1"),
        );
        std::fs::write(&from, b"the store").unwrap();
        std::fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, &at).unwrap();
        private_copy(&from, &at).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(
            !std::fs::symlink_metadata(&at)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&at).unwrap(), b"the store");
    }

    #[test]
    fn no_daemon_opens_the_store_while_it_is_being_recovered() {
        let temp = tempfile::tempdir().unwrap();
        drop(crate::store::Store::open(temp.path()).unwrap());
        let (_, held) = copy_of(temp.path()).unwrap();
        assert!(matches!(
            crate::store::Store::open(temp.path()),
            Err(StoreError::AlreadyOpen { .. })
        ));
        drop(held);
        assert!(crate::store::Store::open(temp.path()).is_ok());
    }

    #[test]
    fn an_empty_store_file_is_not_called_sound() {
        let temp = tempfile::tempdir().unwrap();
        std::fs::write(temp.path().join(STORE_FILE), b"").unwrap();
        let report = check(temp.path()).unwrap();
        assert!(!report.sound(), "{report}");
        assert!(report.to_string().contains("empty"), "{report}");
        let recovered = recover(temp.path(), true).unwrap();
        assert!(recovered.recovered.is_none(), "{recovered}");
        assert_eq!(
            std::fs::metadata(temp.path().join(STORE_FILE))
                .unwrap()
                .len(),
            0
        );
    }
}
