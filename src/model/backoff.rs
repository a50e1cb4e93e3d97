//! The one retry schedule of the process (a server's reconnects, a tool's
//! classification retries): the first delay doubled per failure in a row,
//! at most a ceiling, each shortened by up to a fifth at random so that
//! retriers that failed together (servers after a network blip, tools of
//! one LLM outage) do not retry in step.

use std::time::Duration;

/// How much of a delay jitter may take off.
const JITTER: f64 = 0.2;

/// An exponential backoff with a ceiling and jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub first: Duration,
    /// The longest delay (never gives up).
    pub ceiling: Duration,
}

impl Backoff {
    /// The delay without jitter after `failures` failures in a row (the
    /// first failure waits `first`).
    pub fn nominal(&self, failures: u32) -> Duration {
        let doubled = self
            .first
            .saturating_mul(1u32 << failures.saturating_sub(1).min(16));
        doubled.min(self.ceiling)
    }

    /// The delay after `failures` failures in a row, jittered. The same
    /// `seed` and `failures` always give the same delay (a retry due time
    /// computed again later does not move); a fresh seed per attempt gives
    /// a fresh draw.
    pub fn delay(&self, failures: u32, seed: u64) -> Duration {
        let nominal = self.nominal(failures);
        let draw = fastrand::Rng::with_seed(seed ^ u64::from(failures).rotate_left(32)).f64();
        nominal.mul_f64(1.0 - JITTER * draw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSIONS: Backoff = Backoff {
        first: Duration::from_secs(1),
        ceiling: Duration::from_secs(30),
    };

    #[test]
    fn doubles_from_the_first_delay_up_to_the_ceiling() {
        let nominal: Vec<u64> = (1..=7).map(|n| SESSIONS.nominal(n).as_secs()).collect();
        assert_eq!(nominal, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(SESSIONS.nominal(u32::MAX), Duration::from_secs(30));
        assert_eq!(SESSIONS.nominal(0), Duration::from_secs(1));
    }

    #[test]
    fn jitter_shortens_by_at_most_a_fifth_and_is_stable_per_seed() {
        let mut spread = std::collections::HashSet::new();
        for seed in 0..200 {
            let delay = SESSIONS.delay(3, seed);
            assert!(delay <= Duration::from_secs(4), "{delay:?}");
            assert!(delay >= Duration::from_millis(3200), "{delay:?}");
            assert_eq!(delay, SESSIONS.delay(3, seed));
            spread.insert(delay);
        }
        // Retriers with different seeds do not retry in step.
        assert!(spread.len() > 150, "{} distinct delays", spread.len());
    }
}
