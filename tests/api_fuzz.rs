//! schemathesis (PyPI) fuzzes the admin API against the OpenAPI document
//! the daemon serves: no 5xx, no panic, every response as documented. It
//! runs in a network namespace of its own (`unshare -n`), so the URLs it
//! invents for registrations reach nothing, and the daemon gets an empty
//! PATH, so the commands it invents cannot run.

use std::path::Path;
use std::process::Command;

#[test]
fn the_admin_api_holds_up_to_schemathesis() {
    fuzz(&[]);
}

/// The same against a replica whose tables are on a real PostgreSQL.
#[cfg(all(feature = "fixture", feature = "postgres"))]
#[test]
fn a_replica_on_a_shared_store_holds_up_to_schemathesis() {
    use mcp_aggregator::store::postgres::test_cluster::TestCluster;
    let Some(cluster) = TestCluster::start_or_skip("api_fuzz replica") else {
        return;
    };
    fuzz(&["--store", &cluster.url(), "--replica-id", "fuzz"]);
}

/// Runs schemathesis against a daemon started with `serve_args`.
fn fuzz(serve_args: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("tests/.venv/bin/python");
    let schemathesis = root.join("tests/.venv/bin/schemathesis");
    assert!(
        schemathesis.exists(),
        "{} is missing: run scripts/setup.sh",
        schemathesis.display()
    );
    let status = Command::new("unshare")
        .arg("-n")
        .arg(&python)
        .arg(root.join("tests/python/api_fuzz.py"))
        .arg(env!("CARGO_BIN_EXE_mcp-aggregator"))
        .arg(&schemathesis)
        .env("FUZZ_EXAMPLES", "10")
        .env(
            "FUZZ_SERVE_ARGS",
            serde_json::to_string(serve_args).expect("arguments as JSON"),
        )
        .status()
        .expect("run `unshare -n` (util-linux; needs root or user namespaces)");
    assert!(status.success(), "schemathesis found problems (see above)");
}
