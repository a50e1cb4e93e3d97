//! A real PostgreSQL for tests: the distribution's server, `initdb` and
//! `pg_ctl` into a temporary directory, as a user who is not root (the
//! server refuses root), listening on a Unix socket in that directory only
//! (no port to collide on, nothing on the network), stopped and removed
//! when dropped. Tests can stop and start it again to play an outage.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the server's programs are when they are not on `PATH`.
const DEBIAN_BINARIES: &str = "/usr/lib/postgresql";

/// The socket's port number (only its file name: nothing listens on TCP).
const PORT: u16 = 5432;

pub struct TestCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// The user the server runs as when the tests run as root.
    run_as: Option<String>,
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster")
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl TestCluster {
    /// A new cluster, started; `Err` says why there is none (no server
    /// installed, or it did not start).
    pub fn start() -> Result<TestCluster, String> {
        let bin = find_binaries().ok_or_else(|| {
            "no PostgreSQL server here (pg_ctl is neither on PATH nor under /usr/lib/postgresql); scripts/setup.sh installs it".to_owned()
        })?;
        let run_as = if rustix::process::geteuid().is_root() {
            Some(
                ["postgres", "nobody"]
                    .into_iter()
                    .find(|user| user_exists(user))
                    .ok_or("running as root, and neither a postgres nor a nobody user exists")?
                    .to_owned(),
            )
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("mcpa-pg-")
            .tempdir()
            .map_err(|err| format!("no temporary directory: {err}"))?;
        let cluster = TestCluster { dir, bin, run_as };
        std::fs::create_dir(cluster.socket_dir())
            .map_err(|err| format!("cannot create the socket directory: {err}"))?;
        for path in [cluster.dir.path(), &cluster.socket_dir()] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
                .map_err(|err| format!("cannot open up {}: {err}", path.display()))?;
            if let Some(user) = &cluster.run_as {
                chown(path, user)?;
            }
        }
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data_dir().display().to_string(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ],
        )?;
        cluster.start_again()?;
        Ok(cluster)
    }

    /// The cluster, or the test is skipped with the reason printed; under
    /// CI (`CI` set) a missing server fails the test instead.
    pub fn start_or_skip(test: &str) -> Option<TestCluster> {
        match TestCluster::start() {
            Ok(cluster) => Some(cluster),
            Err(reason) if std::env::var_os("CI").is_none() => {
                eprintln!("{test}: skipped: {reason}");
                None
            }
            Err(reason) => panic!("{test}: {reason}"),
        }
    }

    /// The URL to connect with (user postgres, no password).
    pub fn url(&self) -> String {
        let socket_dir = self.socket_dir().display().to_string();
        let host =
            percent_encoding::utf8_percent_encode(&socket_dir, percent_encoding::NON_ALPHANUMERIC);
        format!("postgresql://postgres@{host}:{PORT}/postgres")
    }

    /// Starts the server (again, after `stop`), waiting until it accepts
    /// connections.
    pub fn start_again(&self) -> Result<(), String> {
        let options = format!(
            "-c listen_addresses='' -c unix_socket_directories='{}' -p {PORT}",
            self.socket_dir().display()
        );
        self.run(
            "pg_ctl",
            &[
                "start",
                "-w",
                "-t",
                "120",
                "-D",
                &self.data_dir().display().to_string(),
                "-l",
                &self.dir.path().join("server.log").display().to_string(),
                "-o",
                &options,
            ],
        )
    }

    /// Stops the server (fast: connections are cut, the data is kept).
    pub fn stop(&self) -> Result<(), String> {
        self.run(
            "pg_ctl",
            &[
                "stop",
                "-w",
                "-t",
                "60",
                "-m",
                "fast",
                "-D",
                &self.data_dir().display().to_string(),
            ],
        )
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("socket")
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let program = self.bin.join(program);
        let mut command = match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(&program);
                command
            }
            None => Command::new(&program),
        };
        // The server's own environment, not the tests': no PG* variables
        // pointing elsewhere, a locale that always exists.
        command
            .args(args)
            .env("LC_ALL", "C")
            .env("LANG", "C")
            .current_dir(self.dir.path());
        let output = command
            .output()
            .map_err(|err| format!("cannot run {}: {err}", program.display()))?;
        if output.status.success() {
            Ok(())
        } else {
            let log =
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
            Err(format!(
                "{} {} failed ({}): {}{}\n{log}",
                program.display(),
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr),
            ))
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        // Immediate: nothing in a test's cluster needs a clean shutdown.
        let _ = self.run(
            "pg_ctl",
            &[
                "stop",
                "-w",
                "-t",
                "30",
                "-m",
                "immediate",
                "-D",
                &self.data_dir().display().to_string(),
            ],
        );
    }
}

fn find_binaries() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("pg_ctl").is_file() && dir.join("initdb").is_file() {
                return Some(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(DEBIAN_BINARIES)
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("pg_ctl").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn user_exists(user: &str) -> bool {
    Command::new("id")
        .arg("-u")
        .arg(user)
        .output()
        .is_ok_and(|out| out.status.success())
}

fn chown(path: &Path, user: &str) -> Result<(), String> {
    let status = Command::new("chown")
        .arg(user)
        .arg(path)
        .status()
        .map_err(|err| format!("cannot run chown: {err}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("chown {user} {} failed", path.display()))
    }
}
