//! schemathesis (PyPI) fuzzes the admin API against the OpenAPI document
//! the daemon serves: no 5xx, no panic, every response as documented. It
//! runs in a network namespace of its own (`unshare -n`), so the URLs it
//! invents for registrations reach nothing, and the daemon gets an empty
//! PATH, so the commands it invents cannot run.

use std::path::Path;
use std::process::Command;

#[test]
fn the_admin_api_holds_up_to_schemathesis() {
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
        .status()
        .expect("run `unshare -n` (util-linux; needs root or user namespaces)");
    assert!(status.success(), "schemathesis found problems (see above)");
}
