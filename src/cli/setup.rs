//! `client setup` and `client list`: the aggregator's entry written into an
//! MCP client's own config file (merged with what is there, the change
//! shown first, the old file kept as a backup), and, with
//! `--move-servers`, the client's other servers moved into the
//! aggregator's config file so the user moves once.

use serde_json::{Map, Value, json};
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::admin_args::{ClientCommand, ClientSetupArgs};
use super::clients::{self, McpClient};
use super::error::CliError;
use super::output::table;
use crate::config;

pub(super) fn run(command: ClientCommand) -> Result<ExitCode, CliError> {
    match command {
        ClientCommand::Setup(args) => setup(args),
        ClientCommand::List => list(),
    }
}

fn known_client(id: &str) -> Result<&'static McpClient, CliError> {
    clients::find(id).ok_or_else(|| {
        CliError::Usage(format!(
            "unknown client {id:?}; known clients: {}",
            clients::client_ids()
        ))
    })
}

fn list() -> Result<ExitCode, CliError> {
    let rows = clients::CLIENTS
        .iter()
        .map(|client| {
            let (file, state) = match client.config_file(None) {
                Ok(path) => {
                    let state = match read_json(&path) {
                        Ok((None, _)) => "no file".to_owned(),
                        Ok((Some(root), _)) => {
                            let entries = section(&root, client.section);
                            let ours = entries
                                .map(|s| {
                                    s.values()
                                        .filter(|e| config::launches_aggregator(e))
                                        .count()
                                })
                                .unwrap_or(0);
                            let others = entries.map(Map::len).unwrap_or(0) - ours;
                            if ours > 0 {
                                format!("set up ({others} other servers)")
                            } else {
                                format!("not set up ({others} servers)")
                            }
                        }
                        Err(err) => err.to_string(),
                    };
                    (path.display().to_string(), state)
                }
                Err(err) => (String::new(), err),
            };
            let project = if client.has_project_scope() {
                "yes"
            } else {
                "no"
            };
            vec![client.id.to_owned(), file, state, project.to_owned()]
        })
        .collect();
    println!("{}", table(&["CLIENT", "FILE", "STATE", "--project"], rows));
    Ok(ExitCode::SUCCESS)
}

fn setup(args: ClientSetupArgs) -> Result<ExitCode, CliError> {
    let client = known_client(&args.client)?;
    let file = match &args.file {
        Some(file) => file.clone(),
        None => client
            .config_file(args.project.as_deref())
            .map_err(CliError::Usage)?,
    };
    check_entry_name(&args.name)?;
    if let Some(dir) = args.project.as_deref().filter(|dir| !dir.is_dir()) {
        return Err(CliError::Usage(format!(
            "the project directory {} does not exist",
            dir.display()
        )));
    }
    let aggregator_config = match (&args.config, args.move_servers) {
        (Some(path), _) => Some(absolute(path)),
        (None, true) => Some(default_aggregator_config()?),
        // The installer's config, once it exists: an entry without it
        // would start a daemon that applies no file, and the servers the
        // user added there would never show.
        (None, false) => default_aggregator_config()
            .ok()
            .filter(|path| path.is_file()),
    };
    if args.config.is_none()
        && !args.move_servers
        && let Some(path) = &aggregator_config
    {
        println!(
            "The entry applies {} (the default config; --config chooses another).",
            path.display()
        );
    }
    check_links(&file)?;
    if let Some(path) = &aggregator_config {
        check_links(path)?;
    }
    let mut writes: Vec<&Path> = vec![&file];
    if args.move_servers
        && let Some(path) = &aggregator_config
    {
        writes.push(path);
    }
    act_as_owner(&writes)?;
    if aggregator_config
        .as_deref()
        .is_some_and(|config| same_file(config, &file))
    {
        return Err(CliError::Usage(format!(
            "--config names {} itself: the aggregator's servers need a file of their own",
            file.display()
        )));
    }

    let (root, file_snapshot) = read_json(&file).map_err(|err| match err {
        // A file with comments: what to add by hand.
        CliError::Usage(message) if message.contains("not plain JSON") => {
            let entry = aggregator_entry(client, &args, aggregator_config.as_deref())
                .map(|entry| {
                    format!(
                        "\nunder `{}`, add:\n\"{}\": {}",
                        client.section,
                        args.name,
                        serde_json::to_string_pretty(&entry).unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            CliError::Usage(format!("{message}{entry}"))
        }
        other => other,
    })?;
    let mut root = root.unwrap_or_else(|| json!({}));
    let Some(top) = root.as_object_mut() else {
        return Err(CliError::Usage(format!(
            "{} is not a JSON object; fix or move it first",
            file.display()
        )));
    };
    let before: Map<String, Value> = match top.get(client.section) {
        None => Map::new(),
        Some(Value::Object(entries)) => entries.clone(),
        Some(_) => {
            return Err(CliError::Usage(format!(
                "`{}` in {} is not an object; fix it first",
                client.section,
                file.display()
            )));
        }
    };

    // The servers to move are the client's others; the aggregator's own
    // entries (under any name) are replaced, never moved. A server under
    // the entry's name is moved too, or, when nothing moves, kept.
    let moving: Map<String, Value> = if args.move_servers {
        before
            .iter()
            .filter(|(_, entry)| !config::launches_aggregator(entry))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    } else {
        Map::new()
    };
    if !args.move_servers
        && before
            .get(&args.name)
            .is_some_and(|entry| !config::launches_aggregator(entry))
    {
        return Err(CliError::Usage(format!(
            "{:?} is already another server in {}; pick another --name, or --move-servers to move it into the aggregator",
            args.name,
            file.display()
        )));
    }
    if let Some(profile) = &args.profile {
        warn_if_profile_unknown(profile, aggregator_config.as_deref());
    }
    let entry = aggregator_entry(client, &args, aggregator_config.as_deref())?;
    let mut after = before.clone();
    if args.move_servers {
        after.retain(|name, _| !moving.contains_key(name));
    }
    after.insert(args.name.clone(), entry);

    println!(
        "{} ({}), `{}`:",
        file.display(),
        client.title,
        client.section
    );
    let changed = print_changes(&before, &after);
    let mut merged_config = None;
    let mut merged_snapshot = None;
    if let Some(target) = aggregator_config.as_deref().filter(|_| !moving.is_empty()) {
        let merged = merge_into_aggregator_config(target, &moving)?;
        merged_snapshot = merged.read_from.clone();
        println!(
            "\n{} (the aggregator's servers), `mcpServers`:",
            target.display()
        );
        print_changes(&merged.before, &merged.after);
        merged_config = Some((target.to_path_buf(), merged));
    }
    if !changed && merged_config.is_none() {
        println!(
            "\nnothing to change: {} already runs the aggregator",
            client.title
        );
        return Ok(ExitCode::SUCCESS);
    }
    if args.dry_run {
        println!("\n(dry run: nothing written)");
        return Ok(ExitCode::SUCCESS);
    }
    if !args.yes && !confirm()? {
        println!("nothing written");
        return Ok(ExitCode::from(1));
    }

    // One run at a time over each file it writes (two clients moving into
    // one file, or two runs on one client's file, would each write over
    // the other), and only over the files as they were shown: a client
    // that rewrote its file meanwhile keeps its change.
    let mut lock_dirs = vec![parent_dir(&file)];
    if let Some((target, _)) = &merged_config {
        lock_dirs.push(parent_dir(target));
    }
    let _locks = lock_all(lock_dirs)?;
    if snapshot(&file) != file_snapshot {
        return Err(changed_meanwhile(&file));
    }
    if let Some((target, _)) = &merged_config
        && snapshot(target) != merged_snapshot
    {
        return Err(changed_meanwhile(target));
    }
    // The aggregator's file first: if it cannot be written, the client
    // keeps its servers.
    if let Some((target, merged)) = merged_config {
        let mut document = merged.document;
        document["mcpServers"] = Value::Object(merged.after);
        write_with_backup(&target, &document)?;
    }
    root[client.section] = Value::Object(after);
    write_with_backup(&file, &root)?;
    println!(
        "\nRestart {} to pick it up. It starts `mcp-aggregator stdio`, which starts (or joins) the one daemon.",
        client.title
    );
    Ok(ExitCode::SUCCESS)
}

/// The entry the client runs: this binary (an absolute path: GUI clients
/// do not see the shell's PATH), `stdio`, and the options given.
fn aggregator_entry(
    client: &McpClient,
    args: &ClientSetupArgs,
    config_file: Option<&Path>,
) -> Result<Value, CliError> {
    let command = match &args.command {
        Some(command) => command.clone(),
        None => std::env::current_exe()
            .and_then(std::fs::canonicalize)
            .map_err(|err| CliError::Failed(format!("cannot tell where this binary is: {err}")))?
            .display()
            .to_string(),
    };
    let mut stdio_args = vec!["stdio".to_owned()];
    if let Some(profile) = &args.profile {
        stdio_args.extend(["--profile".to_owned(), profile.clone()]);
    }
    if let Some(path) = config_file {
        stdio_args.extend(["--config".to_owned(), path.display().to_string()]);
    }
    if let Some(dir) = &args.data_dir.data_dir {
        stdio_args.extend(["--data-dir".to_owned(), absolute(dir).display().to_string()]);
    }
    let mut entry = Map::new();
    if client.typed_entries {
        entry.insert("type".into(), json!("stdio"));
    }
    entry.insert("command".into(), json!(command));
    entry.insert("args".into(), json!(stdio_args));
    Ok(Value::Object(entry))
}

/// Says so when the profile the entry names is not in the config file it
/// applies: unless the daemon has it (`profiles set`), the client's every
/// start fails with "Profile not found". The daemon is not asked (it may
/// not run now), so this warns and writes anyway.
fn warn_if_profile_unknown(profile: &str, config_file: Option<&Path>) {
    let defined = config_file
        .and_then(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .is_some_and(|root| root["profiles"].get(profile).is_some());
    if !defined {
        let file = config_file.map_or_else(
            || "no config file is applied".to_owned(),
            |path| format!("it is not in {}", path.display()),
        );
        eprintln!(
            "note: profile {profile:?} must exist when the client starts ({file}): define it with `mcp-aggregator profiles set {profile} …` or in the config file's `profiles`, or the client's start fails with \"Profile not found\""
        );
    }
}

/// What an entry's name may be: short, printable, not empty.
fn check_entry_name(name: &str) -> Result<(), CliError> {
    if name.trim().is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
        return Err(CliError::Usage(format!(
            "--name {name:?}: use 1 to 64 printable characters"
        )));
    }
    Ok(())
}

/// A file's bytes as they are now (`None`: no file), to tell whether
/// someone wrote it meanwhile.
fn snapshot(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

fn changed_meanwhile(path: &Path) -> CliError {
    CliError::Failed(format!(
        "{} changed while this ran (another program wrote it); nothing was written: run the command again",
        path.display()
    ))
}

fn same_file(a: &Path, b: &Path) -> bool {
    let resolve = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| absolute(p));
    resolve(a) == resolve(b)
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Exclusive locks on each directory's set-up lock file, held until
/// dropped; taken in one order (by resolved path), so two runs that need
/// the same two never wait on each other.
fn lock_all(dirs: Vec<PathBuf>) -> Result<Vec<std::fs::File>, CliError> {
    let mut dirs: Vec<PathBuf> = dirs
        .into_iter()
        .map(|dir| {
            std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::canonicalize(&dir))
                .map_err(|err| CliError::Failed(format!("cannot lock {}: {err}", dir.display())))
        })
        .collect::<Result<_, _>>()?;
    dirs.sort();
    dirs.dedup();
    dirs.iter().map(|dir| lock(dir)).collect()
}

/// An exclusive lock on `dir`'s set-up lock file. Never through a link
/// (run as root in a user's directory, a link planted there would have
/// root create or open a file elsewhere), and only a regular file.
fn lock(dir: &Path) -> Result<std::fs::File, CliError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = dir.join(".mcp-aggregator-setup.lock");
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .and_then(|file| {
            if !file.metadata()?.is_file() {
                return Err(std::io::Error::other("not a regular file"));
            }
            rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
            Ok(file)
        })
        .map_err(|err| CliError::Failed(format!("cannot lock {}: {err}", path.display())))
}

/// Each link on the way to `path` that someone else made (not this user,
/// not root) is followed only to what its maker owns: run as root for a
/// user (`sudo -E`), a link the user planted must not have root rewrite, or
/// show, a file of root's or another user's. A link to where nothing is yet
/// counts the directory the file would be made in.
fn check_links(path: &Path) -> Result<(), CliError> {
    use std::os::unix::fs::MetadataExt as _;
    let me = rustix::process::geteuid().as_raw();
    let mut walked = PathBuf::new();
    for component in absolute(path).components() {
        walked.push(component);
        let Ok(link) = std::fs::symlink_metadata(&walked) else {
            // Nothing there yet: nothing further to follow.
            return Ok(());
        };
        if !link.file_type().is_symlink() || link.uid() == me || link.uid() == 0 {
            continue;
        }
        let leads_to_owner = match std::fs::metadata(&walked) {
            Ok(target) => Some(target.uid()),
            Err(_) => std::fs::read_link(&walked).ok().and_then(|target| {
                let target = parent_dir(&walked).join(target);
                std::fs::metadata(parent_dir(&target))
                    .ok()
                    .map(|dir| dir.uid())
            }),
        };
        if leads_to_owner != Some(link.uid()) {
            return Err(CliError::Usage(format!(
                "{} is a link made by user {} to something that user does not own; it is not followed (put the file itself in place of the link, or run this as that user)",
                walked.display(),
                link.uid()
            )));
        }
    }
    Ok(())
}

/// Run as root for a user's client (`sudo -E`, HOME the user's), the rest
/// of the run is done as that user: the kernel then keeps any link the
/// user could plant, at any moment, from leading root's reads and writes
/// anywhere the user could not go, and what is made (the file, its
/// directory, the lock, backups) is the user's. The user is the owner of
/// the first thing on the way to each file, from the root down, that root
/// does not own (a home directory): from there on, that user decides what
/// the path leads to, and nothing the user does below it changes whose it
/// is.
fn act_as_owner(paths: &[&Path]) -> Result<(), CliError> {
    if !rustix::process::geteuid().is_root() {
        return Ok(());
    }
    let mut owner: Option<(u32, u32, PathBuf)> = None;
    for path in paths {
        let found = match ownership(path) {
            Ownership::Root => continue,
            Ownership::User(uid, gid, at) => (uid, gid, at),
            Ownership::Open(dir) => {
                return Err(CliError::Usage(format!(
                    "{} lies under {}, which anyone may write to: run this as the user it is for, not as root",
                    path.display(),
                    dir.display()
                )));
            }
        };
        match &owner {
            Some((uid, _, at)) if *uid != found.0 => {
                return Err(CliError::Usage(format!(
                    "{} is user {uid}'s and {} user {}'s: run this as each of them",
                    at.display(),
                    found.2.display(),
                    found.0
                )));
            }
            Some(_) => {}
            None => owner = Some(found),
        }
    }
    let Some((uid, gid, owned)) = owner else {
        return Ok(());
    };
    become_user(uid, gid).map_err(|err| {
        CliError::Failed(format!(
            "cannot act as user {uid}, who owns {}: {err}",
            owned.display()
        ))
    })
}

/// Whose a path is, for a run as root.
enum Ownership {
    /// Root's all the way down.
    Root,
    /// The first thing on the way, from the root down, that another user
    /// owns: that user's, with its owner and group.
    User(u32, u32, PathBuf),
    /// Under a directory anyone may write to, where its next part could
    /// be anyone's (not there yet, or in a directory without the sticky
    /// bit, where root's own entry can be renamed away).
    Open(PathBuf),
}

fn ownership(path: &Path) -> Ownership {
    use std::os::unix::fs::MetadataExt as _;
    let mut walked = PathBuf::new();
    // A directory anyone may write to that the walk just went through, and
    // whether it has the sticky bit.
    let mut open: Option<(PathBuf, bool)> = None;
    for component in absolute(path).components() {
        walked.push(component);
        let Ok(metadata) = std::fs::symlink_metadata(&walked) else {
            // Nothing further exists: root's so far, unless anyone may make
            // the next part.
            return match open {
                Some((dir, _)) => Ownership::Open(dir),
                None => Ownership::Root,
            };
        };
        if metadata.uid() != 0 {
            return Ownership::User(metadata.uid(), metadata.gid(), walked);
        }
        if let Some((dir, false)) = open {
            return Ownership::Open(dir);
        }
        open = (metadata.is_dir() && metadata.mode() & 0o002 != 0)
            .then(|| (walked.clone(), metadata.mode() & 0o1000 != 0));
    }
    Ownership::Root
}

/// Becomes `uid` for good: with its own group and groups when the system
/// knows the user, else with no other groups and `gid` (root's group is
/// never kept).
fn become_user(uid: u32, gid: u32) -> std::io::Result<()> {
    let account = user_account(uid);
    let gid = match &account {
        Some((_, primary)) => *primary,
        None if gid == 0 => uid,
        None => gid,
    };
    // SAFETY: initgroups(3), setgroups(2), setgid(2) and setuid(2) take a
    // NUL-terminated name that lives through the call, or plain values (a
    // null list with a zero count); glibc applies them to every thread.
    let done = unsafe {
        let groups = match &account {
            Some((name, _)) => libc::initgroups(name.as_ptr(), gid),
            None => libc::setgroups(0, std::ptr::null()),
        };
        groups == 0 && libc::setgid(gid) == 0 && libc::setuid(uid) == 0
    };
    if done {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The user's name and primary group, when the system knows `uid`.
fn user_account(uid: u32) -> Option<(std::ffi::CString, u32)> {
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: `passwd` is plain data getpwuid_r(3) fills in; `buffer`
    // outlives the call and its length is passed; `found` is checked
    // before anything it points at is read, and the name is copied out
    // before `buffer` goes away.
    unsafe {
        let mut entry: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let code = libc::getpwuid_r(
            uid,
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        );
        if code != 0 || found.is_null() || entry.pw_name.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(entry.pw_name).to_owned();
        Some((name, entry.pw_gid))
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Where the installer puts the aggregator's own config file.
fn default_aggregator_config() -> Result<PathBuf, CliError> {
    dirs::config_dir()
        .map(|dir| dir.join("mcp-aggregator").join("servers.json"))
        .ok_or_else(|| {
            CliError::Usage("no config directory found (is HOME set?); pass --config FILE".into())
        })
}

struct MergedConfig {
    document: Value,
    /// The bytes `document` was read from.
    read_from: Option<Vec<u8>>,
    before: Map<String, Value>,
    after: Map<String, Value>,
}

/// The aggregator's config file with the moved servers added. A name it
/// already has with other settings is a conflict the user settles.
fn merge_into_aggregator_config(
    path: &Path,
    moving: &Map<String, Value>,
) -> Result<MergedConfig, CliError> {
    let (document, read_from) = read_json(path)?;
    let document = document.unwrap_or_else(|| json!({"mcpServers": {}}));
    let before = match document.get("mcpServers") {
        Some(Value::Object(entries)) => entries.clone(),
        None => Map::new(),
        Some(_) => {
            return Err(CliError::Usage(format!(
                "`mcpServers` in {} is not an object; fix it first",
                path.display()
            )));
        }
    };
    let conflicts: Vec<&str> = moving
        .iter()
        .filter(|(name, entry)| before.get(*name).is_some_and(|have| have != *entry))
        .map(|(name, _)| name.as_str())
        .collect();
    if !conflicts.is_empty() {
        return Err(CliError::Usage(format!(
            "{} already has servers named {} with other settings; rename or remove them there first",
            path.display(),
            conflicts.join(", ")
        )));
    }
    let mut after = before.clone();
    for (name, entry) in moving {
        after.insert(name.clone(), entry.clone());
    }
    Ok(MergedConfig {
        document,
        read_from,
        before,
        after,
    })
}

/// The file as JSON, `None` when there is none yet, with the bytes it was
/// read from (to tell later whether someone wrote it meanwhile). Only a regular file
/// (through links) is read or replaced: `/dev/null`, a FIFO or a
/// directory named by mistake is refused before anything happens.
fn read_json(path: &Path) -> Result<(Option<Value>, Option<Vec<u8>>), CliError> {
    match std::fs::metadata(path) {
        Ok(metadata) if !metadata.is_file() => {
            return Err(CliError::Usage(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        Ok(metadata) if metadata.len() > config::MAX_CONFIG_BYTES => {
            return Err(CliError::Usage(format!(
                "{} is larger than {} bytes",
                path.display(),
                config::MAX_CONFIG_BYTES
            )));
        }
        _ => {}
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok((None, None)),
        Err(err) => {
            return Err(CliError::Failed(format!(
                "cannot read {}: {err}",
                path.display()
            )));
        }
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Err(CliError::Usage(format!(
            "{} is not UTF-8 text",
            path.display()
        )));
    };
    // Some editors on Windows start a file with a byte-order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Ok((None, Some(bytes)));
    }
    let json = serde_json::from_str(text).map_err(|err| {
        CliError::Usage(format!(
            "{} is not plain JSON (line {}, column {}: {err}); comments and trailing commas cannot be kept by a rewrite, so add the entry by hand",
            path.display(),
            err.line(),
            err.column()
        ))
    })?;
    Ok((Some(json), Some(bytes)))
}

fn section<'a>(root: &'a Value, name: &str) -> Option<&'a Map<String, Value>> {
    root.get(name)?.as_object()
}

/// Prints what changes between two server lists, entry by entry;
/// whether anything does.
fn print_changes(before: &Map<String, Value>, after: &Map<String, Value>) -> bool {
    let mut changed = false;
    for (name, old) in before {
        match after.get(name) {
            Some(new) if new == old => {}
            Some(new) => {
                println!("- {:?}: {}", name, compact(old));
                println!("+ {:?}: {}", name, compact(new));
                changed = true;
            }
            None => {
                println!("- {:?}: {}", name, compact(old));
                changed = true;
            }
        }
    }
    for (name, new) in after.iter().filter(|(name, _)| !before.contains_key(*name)) {
        println!("+ {:?}: {}", name, compact(new));
        changed = true;
    }
    if !changed {
        println!("  (no change)");
    }
    changed
}

fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Asks on the terminal; refuses to guess when there is none.
fn confirm() -> Result<bool, CliError> {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::Usage(
            "not writing without confirmation: run it in a terminal, or pass --yes (--dry-run only shows the change)".into(),
        ));
    }
    print!("\nWrite these changes? [y/N] ");
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|err| CliError::Failed(format!("cannot read the answer: {err}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes"))
}

/// Replaces `path` with `document` in one rename (a crash leaves the old
/// file or the new one, never half of one), keeping the old file's mode
/// and the old file itself as `NAME.bak-TIMESTAMP`.
fn write_with_backup(path: &Path, document: &Value) -> Result<(), CliError> {
    let failed = |what: &str, err: &dyn std::fmt::Display| {
        CliError::Failed(format!("cannot {what} {}: {err}", path.display()))
    };
    // A file linked from elsewhere (a dotfiles repository) stays a link:
    // the file it points to is the one replaced.
    let resolved;
    let path = match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => {
            resolved =
                std::fs::canonicalize(path).map_err(|err| failed("follow the link", &err))?;
            resolved.as_path()
        }
        _ => path,
    };
    let dir = parent_dir(path);
    std::fs::create_dir_all(&dir).map_err(|err| failed("create the directory of", &err))?;
    let existing = std::fs::metadata(path).ok();
    if existing
        .as_ref()
        .is_some_and(|metadata| metadata.permissions().readonly())
    {
        return Err(CliError::Usage(format!(
            "{} is read-only; make it writable first if it should change",
            path.display()
        )));
    }
    let mut backup = None;
    if let Some(metadata) = &existing {
        backup = Some(backup_of(path, metadata).map_err(|err| failed("back up", &err))?);
    }
    let replaced = replace_with(path, &dir, document, existing.as_ref());
    match (&replaced, backup) {
        (Ok(()), Some(backup)) => println!("backup: {}", backup.display()),
        // The old file is untouched: a backup of it would only be clutter.
        (Err(_), Some(backup)) => {
            let _ = std::fs::remove_file(backup);
        }
        (_, None) => {}
    }
    replaced
}

/// Writes `document` beside `path` and renames it into place, with the
/// old file's mode and owner.
fn replace_with(
    path: &Path,
    dir: &Path,
    document: &Value,
    existing: Option<&std::fs::Metadata>,
) -> Result<(), CliError> {
    let failed = |what: &str, err: &dyn std::fmt::Display| {
        CliError::Failed(format!("cannot {what} {}: {err}", path.display()))
    };
    let mut text = serde_json::to_string_pretty(document).map_err(|err| failed("encode", &err))?;
    text.push('\n');
    let mut temporary =
        tempfile::NamedTempFile::new_in(dir).map_err(|err| failed("write beside", &err))?;
    temporary
        .write_all(text.as_bytes())
        .and_then(|()| temporary.as_file().sync_all())
        .map_err(|err| failed("write", &err))?;
    // On the open file, never by its name: in a directory someone else
    // may write to, the name could be a link to another file by now.
    if let Some(metadata) = existing {
        temporary
            .as_file()
            .set_permissions(metadata.permissions())
            .map_err(|err| failed("keep the mode of", &err))?;
        keep_owner(temporary.as_file(), metadata)
            .map_err(|err| failed("keep the owner of", &err))?;
    }
    temporary
        .persist(path)
        .map_err(|err| failed("replace", &err.error))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Gives `file` the owner `original` has, when that is not this user and
/// this is root (a file of another user's that root may write; only root
/// may give a file away, and a user replacing a file root left in their
/// directory makes it theirs).
fn keep_owner(file: &std::fs::File, original: &std::fs::Metadata) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let me = rustix::process::geteuid();
    if original.uid() == me.as_raw() || !me.is_root() {
        return Ok(());
    }
    std::os::unix::fs::fchown(file, Some(original.uid()), Some(original.gid()))
}

/// Copies `path` to a backup name no earlier backup holds
/// (`NAME.bak-YYYYMMDD-HHMMSS`, then `-2`, `-3`… within one second), with
/// the owner `original` has.
fn backup_of(path: &Path, original: &std::fs::Metadata) -> std::io::Result<PathBuf> {
    use std::io::Write as _;
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
    let bytes = std::fs::read(path)?;
    for attempt in 1..1000 {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".bak-{stamp}"));
        if attempt > 1 {
            name.push(format!("-{attempt}"));
        }
        let backup = PathBuf::from(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&backup)
        {
            Ok(mut file) => {
                use std::os::unix::fs::PermissionsExt as _;
                let written = file
                    .set_permissions(std::fs::Permissions::from_mode(0o600))
                    .and_then(|()| keep_owner(&file, original))
                    .and_then(|()| file.write_all(&bytes))
                    .and_then(|()| file.sync_all());
                // A full disk leaves no empty or cut backup behind, which
                // would look like a copy of the old file.
                if let Err(err) = written {
                    let _ = std::fs::remove_file(&backup);
                    return Err(err);
                }
                return Ok(backup);
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
    Err(std::io::Error::other("too many backups this second"))
}
