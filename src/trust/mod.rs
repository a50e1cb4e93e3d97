//! Trust in what servers offer: each definition's fingerprint, the rule
//! that decides whether a changed, new or suspicious definition is offered
//! or held back (`judge`), the offline poisoning checks (`scan`), the
//! word-by-word difference shown before an approval (`diff`), and a call's
//! arguments judged against the tool's schema (`arguments`). Pure
//! functions over model types: the store applies them inside the
//! transaction that writes a server's catalog, so a pin and the catalog
//! never disagree.

pub mod arguments;
pub mod diff;
pub mod fingerprint;
pub mod judge;
pub mod scan;

pub use arguments::ArgumentProblem;
pub use diff::{FieldChange, changes};
pub use fingerprint::{earlier_fingerprint, fingerprint, pinned_fields};
pub use judge::{PinAction, Verdict, judge};
pub use scan::{ScanContext, scan_definition, warm_up};
