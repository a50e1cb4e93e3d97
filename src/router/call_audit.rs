//! Tool calls in the audit log: who called which tool of which server, how
//! long it took and whether it failed — never arguments or results. A call
//! hands its entry to a bounded queue (when the queue is full the entry is
//! dropped and counted: a call never waits for the disk); one task writes
//! what gathered, at most once a second, in one transaction, bounded as
//! every audit entry is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

use super::{CallError, CallOutcome};
use crate::model::{AuditEntry, Caller};
use crate::registry::Registry;

/// Entries waiting to be written at most.
const QUEUE: usize = 8192;
/// How often gathered entries are written.
const WRITE_EVERY: Duration = Duration::from_secs(1);
/// The action tool calls are logged under.
pub const CALL_ACTION: &str = "call";

pub struct CallAudit {
    queue: mpsc::Sender<AuditEntry>,
    dropped: AtomicU64,
}

impl CallAudit {
    /// Starts the task that writes entries through `registry`; it ends
    /// once the audit is dropped and its queue is written.
    pub fn start(registry: Registry) -> CallAudit {
        let (queue, mut entries) = mpsc::channel(QUEUE);
        tokio::spawn(async move {
            let mut failing = false;
            while let Some(first) = entries.recv().await {
                // Calls that come within the second share the write.
                tokio::time::sleep(WRITE_EVERY).await;
                let mut batch = vec![first];
                while let Ok(entry) = entries.try_recv() {
                    batch.push(entry);
                }
                match registry.append_audits(batch).await {
                    Ok(()) if failing => {
                        failing = false;
                        tracing::info!("tool calls are written to the audit log again");
                    }
                    Ok(()) => {}
                    Err(err) if !failing => {
                        failing = true;
                        tracing::warn!("tool calls cannot be written to the audit log: {err}");
                    }
                    Err(_) => {}
                }
            }
        });
        CallAudit {
            queue,
            dropped: AtomicU64::new(0),
        }
    }

    /// Records one call: `tool` as the client named it when it could not
    /// be routed.
    pub fn record(
        &self,
        caller: &Caller,
        tool: &str,
        took: Duration,
        outcome: &Result<CallOutcome, CallError>,
    ) {
        let (server, tool, result) = match outcome {
            Ok(outcome) => {
                let result = if reports_error(outcome.result.get()) {
                    "error: the tool reported an error (isError)".to_owned()
                } else {
                    "ok".to_owned()
                };
                (
                    outcome.route.server_name.to_string(),
                    outcome.route.tool_id.to_string(),
                    result,
                )
            }
            Err(err) => (
                err.server().unwrap_or_default().to_owned(),
                tool.to_owned(),
                format!("error: {err}"),
            ),
        };
        self.write(caller, server, &tool, took, result);
    }

    /// Records a call that ended before its outcome: the client cancelled
    /// it or went away, after it may have reached the server.
    pub fn record_cancelled(&self, caller: &Caller, tool: &str, took: Duration) {
        self.write(
            caller,
            String::new(),
            tool,
            took,
            "cancelled: the client cancelled the call or went away".to_owned(),
        );
    }

    fn write(&self, caller: &Caller, server: String, tool: &str, took: Duration, result: String) {
        let entry = AuditEntry {
            seq: 0,
            timestamp: chrono::Utc::now(),
            actor: caller.who.as_deref().unwrap_or("unknown client").to_owned(),
            action: CALL_ACTION.to_owned(),
            server,
            result,
            details: Some(format!("tool {tool}, {} ms", took.as_millis())),
        };
        if self.queue.try_send(entry).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(
                    dropped,
                    "tool calls come faster than the audit log is written; some are not recorded"
                );
            }
        }
    }
}

/// Whether a call's result says the tool failed (`isError: true`), read
/// without building the result.
fn reports_error(result: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Flag {
        #[serde(rename = "isError", default)]
        is_error: Option<bool>,
    }
    serde_json::from_str::<Flag>(result).is_ok_and(|f| f.is_error == Some(true))
}

#[cfg(test)]
mod tests {
    use super::reports_error;

    #[test]
    fn an_error_result_is_told_from_a_good_one() {
        assert!(reports_error(r#"{"content":[],"isError":true}"#));
        assert!(!reports_error(
            r#"{"content":[{"type":"text","text":"\"isError\":true"}]}"#
        ));
        assert!(!reports_error(r#"{"content":[],"isError":false}"#));
        assert!(!reports_error("not json"));
    }
}
