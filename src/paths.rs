//! Where things live on disk: the data dir and the files in it that other
//! processes look for (the daemon's address, the admin token).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const DATA_DIR_ENV: &str = "MCP_AGGREGATOR_DATA_DIR";
pub const DAEMON_FILE: &str = "daemon.json";
pub const TOKEN_FILE: &str = "admin.token";
/// The key that seals the `requestState`s handed to 2026-07-28 clients.
pub const STATE_KEY_FILE: &str = "state.key";
/// The daemon's Unix socket, where `stdio` relays attach.
pub const SOCKET_FILE: &str = "mcp.sock";
/// Held (flock) by a `stdio` relay while it starts a daemon, so clients
/// starting at the same moment end with one.
pub const START_LOCK_FILE: &str = "start.lock";
/// The log of a daemon a `stdio` relay started (it has no terminal).
pub const DAEMON_LOG_FILE: &str = "daemon.log";
/// Longest socket path `bind` takes (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// `--data-dir` > `MCP_AGGREGATOR_DATA_DIR` (clap reads both into `flag`) >
/// the XDG data dir (`$XDG_DATA_HOME/mcp-aggregator`, else
/// `~/.local/share/mcp-aggregator`).
pub fn resolve_data_dir(flag: Option<&Path>) -> Option<PathBuf> {
    if let Some(dir) = flag {
        return Some(dir.to_path_buf());
    }
    dirs::data_dir().map(|dir| dir.join("mcp-aggregator"))
}

/// Where the daemon of `data_dir` takes local clients: `mcp.sock` in the
/// data dir, or, when that path is too long for a socket, a file named by
/// the data dir's hash in a private directory of ours under the temp dir.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    let beside = data_dir.join(SOCKET_FILE);
    if beside.as_os_str().len() <= MAX_SOCKET_PATH {
        return beside;
    }
    use sha2::Digest as _;
    let absolute = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let digest = sha2::Sha256::digest(absolute.as_os_str().as_encoded_bytes());
    let name: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    std::env::temp_dir()
        .join(format!(
            "mcp-aggregator-{}",
            rustix::process::getuid().as_raw()
        ))
        .join(format!("{name}.sock"))
}

/// Creates `dir` (and its parents), or tightens an existing one, to 0700:
/// the data dir holds the store, keys, the token and the socket.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let refused = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
    let me = rustix::process::getuid().as_raw();
    // A link someone else made (in a shared dir such as /tmp) would have
    // us change, and then use, whatever directory they point it at.
    let link = std::fs::symlink_metadata(dir)?;
    if link.file_type().is_symlink() && link.uid() != me {
        return Err(refused(format!(
            "{} is a symbolic link another user made; not following it",
            dir.display()
        )));
    }
    let meta = std::fs::metadata(dir)?;
    // /tmp, /var/tmp: everyone's, and never to be made ours.
    if meta.mode() & 0o1000 != 0 {
        return Err(refused(format!(
            "{} is a shared directory (sticky, like /tmp); give the data a directory of its own inside it",
            dir.display()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        if meta.uid() != me {
            return Err(refused(format!(
                "{} belongs to another user and is open to others; use a directory of your own",
                dir.display()
            )));
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// When process `pid` started, in clock ticks after boot (field 22 of
/// `/proc/PID/stat`; the name before it may hold spaces and parentheses).
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Creates the directory a socket goes in: private, and refused when it
/// belongs to another user (the fallback one is in the shared temp dir,
/// where anyone could have made it first).
pub fn create_socket_dir(socket: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let Some(dir) = socket.parent() else {
        return Ok(());
    };
    create_private_dir(dir)?;
    if std::fs::metadata(dir)?.uid() != rustix::process::getuid().as_raw() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} belongs to another user", dir.display()),
        ));
    }
    Ok(())
}

/// Written by a running daemon so the CLI can find its HTTP listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonInfo {
    pub pid: u32,
    /// Base URL of the HTTP listener, e.g. `http://127.0.0.1:8765`.
    pub url: String,
    /// When the process started (clock ticks after boot, as
    /// `/proc/PID/stat` says): a pid is reused, a start time with it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<u64>,
}

impl DaemonInfo {
    /// This process, listening at `url`.
    pub fn of_this_process(url: String) -> DaemonInfo {
        let pid = std::process::id();
        DaemonInfo {
            pid,
            url,
            started: process_start(pid),
        }
    }

    /// Reads the daemon file of `data_dir`, if the process that wrote it
    /// still runs: its pid alive is not enough (after a crash the pid may
    /// be another process's, and the CLI would send the admin token to
    /// whatever listens at the address the file names).
    pub fn read(data_dir: &Path) -> Option<DaemonInfo> {
        let bytes = read_regular_file(&data_dir.join(DAEMON_FILE), 64 * 1024).ok()?;
        let info: DaemonInfo = serde_json::from_slice(&bytes).ok()?;
        let running = match info.started {
            Some(started) => process_start(info.pid) == Some(started),
            None => Path::new(&format!("/proc/{}", info.pid)).exists(),
        };
        running.then_some(info)
    }

    /// Writes atomically (temp file + rename), so a reader never sees half.
    pub fn write(&self, data_dir: &Path) -> std::io::Result<()> {
        let tmp = data_dir.join(format!("{DAEMON_FILE}.{}.tmp", self.pid));
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        let _ = std::fs::remove_file(&tmp);
        let written = write_private_file(&tmp, text.as_bytes())
            .and_then(|()| std::fs::rename(&tmp, data_dir.join(DAEMON_FILE)));
        // A full disk leaves no half-written file behind.
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// Removes the daemon file if it is still ours.
    pub fn remove(data_dir: &Path, pid: u32) {
        let path = data_dir.join(DAEMON_FILE);
        let ours = read_regular_file(&path, 64 * 1024)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<DaemonInfo>(&bytes).ok())
            .is_some_and(|info| info.pid == pid);
        if ours {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Reads the admin token of a data dir, if there is one.
pub fn read_token(data_dir: &Path) -> Option<String> {
    let bytes = read_regular_file(&data_dir.join(TOKEN_FILE), 64 * 1024).ok()?;
    String::from_utf8(bytes)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// Reads a small file of the data dir, at most `max` bytes of it, refusing
/// anything but a regular file: a FIFO (or a device) planted in its place
/// would block the reader for ever — a daemon that SIGTERM cannot stop, a
/// CLI that hangs.
pub fn read_regular_file(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        // Opening a FIFO with no writer would block here.
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Writes a file only its owner can read, replacing nothing that exists.
pub fn write_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    let written = std::io::Write::write_all(&mut file, contents).and_then(|()| file.sync_all());
    // A full disk leaves no empty or half-written file: the next start
    // would take it for a damaged one.
    if written.is_err() {
        let _ = std::fs::remove_file(path);
    }
    written
}

/// A 32-byte key kept in a private file: read, or drawn from the OS and
/// written (0600) on first use. `Ok(None)` when the file has another length
/// (the caller says what to do about it).
pub fn private_key(path: &Path) -> std::io::Result<Option<[u8; 32]>> {
    let bytes = match read_regular_file(path, 64) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            use chacha20poly1305::aead::{OsRng, rand_core::RngCore as _};
            let mut key = [0u8; 32];
            OsRng
                .try_fill_bytes(&mut key)
                .map_err(|err| std::io::Error::other(err.to_string()))?;
            write_private_file(path, &key)?;
            return Ok(Some(key));
        }
        Err(err) => return Err(err),
    };
    Ok(<[u8; 32]>::try_from(bytes.as_slice()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    #[test]
    fn a_daemon_file_names_a_running_daemon_only_while_its_process_runs() {
        let temp = tempfile::tempdir().unwrap();
        let mine = DaemonInfo::of_this_process("http://127.0.0.1:1".into());
        assert!(mine.started.is_some());
        mine.write(temp.path()).unwrap();
        assert_eq!(DaemonInfo::read(temp.path()), Some(mine.clone()));
        // The pid lives on in another process (pid reuse): not ours.
        let reused = DaemonInfo {
            started: mine.started.map(|s| s + 1),
            ..mine.clone()
        };
        reused.write(temp.path()).unwrap();
        assert_eq!(DaemonInfo::read(temp.path()), None);
        // A file an older daemon wrote (no start time): the pid decides.
        let older = DaemonInfo {
            started: None,
            ..mine
        };
        older.write(temp.path()).unwrap();
        assert!(DaemonInfo::read(temp.path()).is_some());
    }

    #[test]
    fn a_private_dir_is_made_ours_and_nothing_shared_is_changed() {
        let temp = tempfile::tempdir().unwrap();
        // An open directory of ours is tightened.
        let open = temp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&open).unwrap();
        assert_eq!(std::fs::metadata(&open).unwrap().mode() & 0o777, 0o700);
        // A shared one (sticky, like /tmp) is refused and left as it was.
        let shared = temp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(create_private_dir(&shared).is_err());
        assert_eq!(std::fs::metadata(&shared).unwrap().mode() & 0o7777, 0o1777);
        // A link of ours to a directory of ours is followed.
        let link = temp.path().join("link");
        std::os::unix::fs::symlink(&open, &link).unwrap();
        create_private_dir(&link).unwrap();
        // A link another user made is not, nor is what it points at changed
        // (only root can make one here).
        if rustix::process::getuid().is_root() {
            let target = temp.path().join("target");
            std::fs::create_dir(&target).unwrap();
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
            let planted = temp.path().join("planted");
            std::os::unix::fs::symlink(&target, &planted).unwrap();
            std::os::unix::fs::lchown(&planted, Some(65534), Some(65534)).unwrap();
            let refused = create_private_dir(&planted).unwrap_err();
            assert!(refused.to_string().contains("another user"), "{refused}");
            assert_eq!(std::fs::metadata(&target).unwrap().mode() & 0o777, 0o755);
        }
    }
}
