//! Domain types shared by every layer: what a registered server is, how it is
//! reached, and the status state machine. Nothing here does I/O.

pub mod backoff;
pub mod call;
pub mod health;
pub mod instance;
pub mod param_headers;
pub mod pinned_tools;
pub mod printable;
pub mod profile;
pub mod redact;
pub mod server;
pub mod skill;
pub mod status;
pub mod storage;
pub mod token;
pub mod tool;
pub mod trust;
pub mod wire_name;

pub use backoff::Backoff;
pub use call::{CallSink, Caller, ConnectOutcome, ServerNotice, ServerRequestHandler};
pub use profile::{Profile, ProfileError, ProfileMatcher};
pub use server::{
    AuditEntry, AuditFilter, AuditResult, ConnectionHistoryEntry, OAuthClientSettings, ServerId,
    ServerRecord, ServerSource, Transport, TransportType,
};
pub use skill::{
    Classification, ClassificationEvent, ClassificationState, Skill, SkillAssignment,
    SkillSuggestion,
};
pub use status::{InvalidTransition, ServerStatus, StatusTrigger};
pub use storage::StorageStatus;
pub use token::{NamedToken, TokenName, TokenScope};
pub use tool::{
    CatalogDiff, CatalogKind, HeldItem, ITEM_TRUST_FIELD, ItemTrust, RefusedItem, ToolRecord,
};
pub use trust::{
    CallLimits, Decision, Finding, Hold, HoldReason, Pin, PinPolicy, Severity, TrustSettings,
};
