//! Whether a definition is offered, held back, or offered and flagged: the
//! one place that applies a server's pinning policy to a pin, a
//! fingerprint and the poisoning checks' findings.

use crate::model::{Finding, HoldReason, PinPolicy, Severity};

/// What to do with the item's pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinAction {
    /// Leave it as it is.
    Keep,
    /// Pin this definition (trust on first use).
    Pin,
    /// Pin this definition and record that it changed or is new (`warn`).
    Flag,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Held back, and why.
    pub hold: Option<HoldReason>,
    pub pin: PinAction,
}

/// `pinned`: the fingerprint approved for this item and the one a user
/// rejected, if any; `server_approved`: the server's definitions were
/// approved before (its first complete listing is trusted on first use).
pub fn judge(
    policy: PinPolicy,
    server_approved: bool,
    pinned: Option<(&str, Option<&str>)>,
    fingerprint: &str,
    findings: &[Finding],
) -> Verdict {
    let offer = |pin| Verdict { hold: None, pin };
    let hold = |reason| Verdict {
        hold: Some(reason),
        pin: PinAction::Keep,
    };
    if policy == PinPolicy::Off {
        return offer(PinAction::Keep);
    }
    let alarming = findings.iter().any(|f| f.severity == Severity::High);
    match pinned {
        // The very definition approved (by a user, if it had findings).
        Some((approved, _)) if approved == fingerprint => offer(PinAction::Keep),
        Some((_, Some(rejected))) if rejected == fingerprint => hold(HoldReason::Rejected),
        Some(_) if policy == PinPolicy::Block => hold(HoldReason::Changed),
        _ if alarming => hold(HoldReason::Findings),
        Some(_) => offer(PinAction::Flag),
        None if !server_approved => offer(PinAction::Pin),
        None if policy == PinPolicy::Block => hold(HoldReason::New),
        None => offer(PinAction::Flag),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn high() -> Vec<Finding> {
        vec![Finding {
            rule: "r".into(),
            severity: Severity::High,
            field: "description".into(),
            start: 0,
            end: 1,
            excerpt: "x".into(),
            message: "m".into(),
        }]
    }

    #[test]
    fn block_trusts_first_use_then_holds_changes_and_new_items() {
        let b = PinPolicy::Block;
        assert_eq!(judge(b, false, None, "a", &[]).pin, PinAction::Pin);
        assert_eq!(judge(b, true, Some(("a", None)), "a", &[]).hold, None);
        assert_eq!(
            judge(b, true, Some(("a", None)), "b", &[]).hold,
            Some(HoldReason::Changed)
        );
        assert_eq!(judge(b, true, None, "b", &[]).hold, Some(HoldReason::New));
        assert_eq!(
            judge(b, true, Some(("a", Some("b"))), "b", &[]).hold,
            Some(HoldReason::Rejected)
        );
    }

    #[test]
    fn warn_lets_changes_through_flagged_but_not_alarming_ones() {
        let w = PinPolicy::Warn;
        assert_eq!(
            judge(w, true, Some(("a", None)), "b", &[]),
            Verdict {
                hold: None,
                pin: PinAction::Flag
            }
        );
        assert_eq!(judge(w, true, None, "b", &[]).pin, PinAction::Flag);
        assert_eq!(
            judge(w, false, None, "b", &high()).hold,
            Some(HoldReason::Findings)
        );
    }

    #[test]
    fn an_approved_definition_is_offered_whatever_its_findings_and_off_holds_nothing() {
        assert_eq!(
            judge(PinPolicy::Block, true, Some(("a", None)), "a", &high()).hold,
            None
        );
        assert_eq!(
            judge(PinPolicy::Off, true, Some(("a", None)), "b", &high()).hold,
            None
        );
        assert_eq!(
            judge(PinPolicy::Block, false, None, "a", &high()).hold,
            Some(HoldReason::Findings)
        );
    }
}
