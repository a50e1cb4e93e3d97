//! The process's Prometheus metrics (`/metrics`): the series recorded as
//! things happen (calls, health checks, reconnects, statuses, searches,
//! dropped notifications) live in one registry for the process, as a
//! Prometheus endpoint is one per process; figures that already exist
//! elsewhere (catalog and index sizes, cache counters, process figures) are
//! read when scraped and handed to `render`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::sync::{LazyLock, OnceLock};

/// The `server` label of per-server series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabel {
    pub server: String,
}

/// A server and one of its statuses (1 for the current one, else 0).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    pub server: String,
    pub status: String,
}

type Seconds = Family<ServerLabel, Histogram, fn() -> Histogram>;

/// Every series recorded as it happens.
pub struct Metrics {
    registry: Registry,
    pub calls: Family<ServerLabel, Counter>,
    pub call_errors: Family<ServerLabel, Counter>,
    pub call_seconds: Seconds,
    pub health_check_seconds: Seconds,
    pub health_check_failures: Family<ServerLabel, Counter>,
    pub reconnects: Family<ServerLabel, Counter>,
    pub server_status: Family<StatusLabel, Gauge>,
    pub search_seconds: Histogram,
    pub notifications_dropped: Counter,
    pub stderr_lines_dropped: Family<ServerLabel, Counter>,
    /// Calls refused by a server's limits (`limit`: `concurrent`, `rate`).
    pub calls_limited: Family<LimitLabel, Counter>,
    /// Calls that waited for room under a server's limits.
    pub calls_waited: Family<ServerLabel, Counter>,
    /// Calls in flight to a server that has limits.
    pub calls_in_flight: Family<ServerLabel, Gauge>,
}

/// A server and the limit that refused a call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabel {
    pub server: String,
    pub limit: String,
}

/// 50 µs to ~50 s: calls through a fast local server take well under a
/// millisecond, a slow remote one tens of seconds.
fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 21))
}

impl Metrics {
    fn new() -> Metrics {
        RECORDING.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut registry = registry();
        let calls = Family::<ServerLabel, Counter>::default();
        let call_errors = Family::<ServerLabel, Counter>::default();
        let call_seconds: Seconds = Family::new_with_constructor(latency_buckets);
        let health_check_seconds: Seconds = Family::new_with_constructor(latency_buckets);
        let health_check_failures = Family::<ServerLabel, Counter>::default();
        let reconnects = Family::<ServerLabel, Counter>::default();
        let server_status = Family::<StatusLabel, Gauge>::default();
        let search_seconds = latency_buckets();
        let notifications_dropped = Counter::default();
        let stderr_lines_dropped = Family::<ServerLabel, Counter>::default();
        let calls_limited = Family::<LimitLabel, Counter>::default();
        let calls_waited = Family::<ServerLabel, Counter>::default();
        let calls_in_flight = Family::<ServerLabel, Gauge>::default();
        registry.register(
            "calls_limited",
            "Calls refused by a server's limits (concurrent calls, or calls per second)",
            calls_limited.clone(),
        );
        registry.register(
            "calls_waited",
            "Calls that waited for room under a server's limits (let through or refused after the wait)",
            calls_waited.clone(),
        );
        registry.register(
            "calls_in_flight",
            "Tool calls in flight to a server",
            calls_in_flight.clone(),
        );
        registry.register(
            "server_stderr_lines_dropped",
            "Lines a server wrote to stderr beyond what the log takes from one server",
            stderr_lines_dropped.clone(),
        );
        registry.register(
            "calls",
            "Requests made to a server for clients (tool calls, resource reads, prompts)",
            calls.clone(),
        );
        registry.register(
            "call_errors",
            "Requests to a server that failed: no answer in time, the link broke, or an internal error",
            call_errors.clone(),
        );
        registry.register(
            "call_duration_seconds",
            "Time from sending a request to a server to its answer",
            call_seconds.clone(),
        );
        registry.register(
            "health_check_duration_seconds",
            "Time an active health check took (health URL or ping)",
            health_check_seconds.clone(),
        );
        registry.register(
            "health_check_failures",
            "Health checks that failed",
            health_check_failures.clone(),
        );
        registry.register(
            "reconnects",
            "Connection attempts after a server was lost or failed",
            reconnects.clone(),
        );
        registry.register(
            "server_status",
            "1 for the status each server is in, 0 for the others",
            server_status.clone(),
        );
        registry.register(
            "search_duration_seconds",
            "Time a tool search took inside the index",
            search_seconds.clone(),
        );
        registry.register(
            "notifications_dropped",
            "Notifications not delivered to a client that fell behind",
            notifications_dropped.clone(),
        );
        Metrics {
            registry,
            calls,
            call_errors,
            call_seconds,
            health_check_seconds,
            health_check_failures,
            reconnects,
            server_status,
            search_seconds,
            notifications_dropped,
            stderr_lines_dropped,
            calls_limited,
            calls_waited,
            calls_in_flight,
        }
    }

    /// Records the status a server is now in.
    pub fn set_status(&self, server: &str, status: &str, all: &[&str]) {
        for candidate in all {
            self.server_status
                .get_or_create(&StatusLabel {
                    server: server.to_owned(),
                    status: (*candidate).to_owned(),
                })
                .set(i64::from(candidate == &status));
        }
    }

    /// Forgets a removed server's series.
    pub fn forget_server(&self, server: &str, all_statuses: &[&str]) {
        let label = ServerLabel {
            server: server.to_owned(),
        };
        self.calls.remove(&label);
        self.call_errors.remove(&label);
        self.call_seconds.remove(&label);
        self.health_check_seconds.remove(&label);
        self.health_check_failures.remove(&label);
        self.reconnects.remove(&label);
        for status in all_statuses {
            self.server_status.remove(&StatusLabel {
                server: server.to_owned(),
                status: (*status).to_owned(),
            });
        }
    }
}

static GLOBAL: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Set once the process's figures exist (labelled as they were then).
static RECORDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The replica's id when several share one store (`serve --store`).
static REPLICA: OnceLock<String> = OnceLock::new();

/// Labels every figure with `replica="ID"` (one of several replicas
/// behind a load balancer: their scrapes stay apart). Only before the
/// first figure is recorded: `false` when it came too late for some.
pub fn set_replica(id: &str) -> bool {
    let first = REPLICA.set(id.to_owned()).is_ok();
    first && !RECORDING.load(std::sync::atomic::Ordering::SeqCst)
}

/// A registry of the process's figures: named `mcp_aggregator_*`, and
/// labelled with the replica when there are several.
fn registry() -> Registry {
    match REPLICA.get() {
        Some(id) => Registry::with_prefix_and_labels(
            "mcp_aggregator",
            [(Cow::Borrowed("replica"), Cow::Owned(id.clone()))].into_iter(),
        ),
        None => Registry::with_prefix("mcp_aggregator"),
    }
}

/// The process's metrics.
pub fn global() -> &'static Metrics {
    &GLOBAL
}

/// Figures read when `/metrics` is scraped.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub tools: u64,
    pub resources: u64,
    pub prompts: u64,
    pub index_documents: u64,
    pub index_pending: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_evictions: u64,
    pub cache_entries: u64,
    /// The store accepts writes.
    pub storage_ok: bool,
    /// Writes to the store's file that failed since start.
    pub storage_write_errors: u64,
    pub process: ProcessFigures,
}

/// What the kernel says about this process.
#[derive(Debug, Clone, Default)]
pub struct ProcessFigures {
    pub resident_bytes: u64,
    pub open_fds: u64,
    pub child_processes: u64,
    pub server_processes: u64,
}

impl ProcessFigures {
    /// Read from `/proc` (zeros where it cannot be read).
    pub fn read() -> ProcessFigures {
        let page = 4096;
        let resident_bytes = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |pages| pages * page);
        let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        ProcessFigures {
            resident_bytes,
            open_fds,
            child_processes: children_of(std::process::id()).len() as u64,
            server_processes: crate::reaper::marked_processes() as u64,
        }
    }
}

/// Live processes whose parent is `pid` (the stdio servers; not yet reaped
/// ones included: they still hold a slot).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                // The command may contain spaces and parentheses: the
                // fields after the last `)` are fixed.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// The text exposition: every recorded series, then the scraped figures.
pub fn render(snapshot: &Snapshot) -> String {
    let mut scraped = registry();
    let gauge = |v: u64| ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
    if REPLICA.get().is_some() {
        scraped.register(
            "replica_info",
            "1: this process is the replica of its label, one of several sharing a store",
            gauge(1),
        );
    }
    scraped.register(
        "catalog_tools",
        "Tools in the catalog",
        gauge(snapshot.tools),
    );
    scraped.register(
        "catalog_resources",
        "Resources in the catalog",
        gauge(snapshot.resources),
    );
    scraped.register(
        "catalog_prompts",
        "Prompts in the catalog",
        gauge(snapshot.prompts),
    );
    scraped.register(
        "index_documents",
        "Tools in the keyword index",
        gauge(snapshot.index_documents),
    );
    scraped.register(
        "index_pending",
        "Tools in the catalog not yet in the search index",
        gauge(snapshot.index_pending),
    );
    scraped.register(
        "resource_cache_hits",
        "Resource reads answered from the cache",
        ConstCounter::new(snapshot.cache_hits),
    );
    scraped.register(
        "resource_cache_misses",
        "Resource reads that went to the server",
        ConstCounter::new(snapshot.cache_misses),
    );
    scraped.register(
        "resource_cache_evictions",
        "Resources dropped from the cache to make room",
        ConstCounter::new(snapshot.cache_evictions),
    );
    scraped.register(
        "resource_cache_entries",
        "Resources in the cache",
        gauge(snapshot.cache_entries),
    );
    let process = &snapshot.process;
    scraped.register(
        "process_resident_memory_bytes",
        "Resident memory of the aggregator process",
        gauge(process.resident_bytes),
    );
    scraped.register(
        "process_open_fds",
        "Open file descriptors of the aggregator process",
        gauge(process.open_fds),
    );
    scraped.register(
        "process_child_processes",
        "Live child processes (stdio servers, and orphans of theirs re-parented to us)",
        gauge(process.child_processes),
    );
    scraped.register(
        "storage_healthy",
        "1 while the store accepts writes, 0 while they fail (a full or failing disk)",
        gauge(u64::from(snapshot.storage_ok)),
    );
    scraped.register(
        "storage_write_errors",
        "Writes to the store's file that failed (a full disk, an I/O error)",
        ConstCounter::new(snapshot.storage_write_errors),
    );
    scraped.register(
        "server_processes",
        "Live processes of stdio servers, their descendants included (those that left the group too)",
        gauge(process.server_processes),
    );
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode_registry(&mut out, &global().registry);
    let _ = prometheus_client::encoding::text::encode_registry(&mut out, &scraped);
    let _ = prometheus_client::encoding::text::encode_eof(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_found_in_proc() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let found = children_of(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&child.id()), "{found:?}");
    }

    #[test]
    fn render_ends_with_eof_and_names_scraped_figures() {
        let text = render(&Snapshot {
            tools: 7,
            ..Snapshot::default()
        });
        assert!(text.contains("mcp_aggregator_catalog_tools 7"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
