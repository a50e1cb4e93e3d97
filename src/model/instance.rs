//! Which aggregator process this is: an id drawn once per process and
//! carried in the `_meta` of our initialize (and discover) answers, so a
//! session can tell that the server it opened is this very aggregator
//! (registered as its own server: through `stdio` on the same data dir, or
//! its own `/mcp`) and refuse it before its tools fold back into the
//! catalog again and again.

use std::sync::OnceLock;

/// The `_meta` key that carries the id.
pub const INSTANCE_META: &str = "io.github.mcp-aggregator/instance";

/// This process's id.
pub fn instance_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| uuid::Uuid::new_v4().simple().to_string())
}

/// Whether an initialize answer (its `_meta`) is this process's own.
pub fn is_own_answer(answer: &serde_json::Value) -> bool {
    answer
        .get("_meta")
        .and_then(|meta| meta.get(INSTANCE_META))
        .and_then(serde_json::Value::as_str)
        == Some(instance_id())
}
