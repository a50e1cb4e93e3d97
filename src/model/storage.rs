//! What the process shows of its store's disk (`/healthz`, `/metrics`).

/// What `/healthz` and `/metrics` show of the store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StorageStatus {
    /// `ok`, or `failing` while writes fail.
    pub status: &'static str,
    /// The store file (left out of `/healthz` without the admin token).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// The last write error while failing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The disk is full (or over quota).
    pub disk_full: bool,
    /// Seconds writes have been failing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failing_for_secs: Option<u64>,
    /// Writes that failed since start.
    pub write_errors: u64,
}
