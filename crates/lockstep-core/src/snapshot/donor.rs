//! How long each end of a state's transfer may take, in every topology:
//! the one rule a sequencer fetching a joiner's state, a mesh player
//! fetching its own after a divergence, and a sequencer sending a state to
//! a joiner all keep. Each session supplies its *quiet* period (the
//! sequencer's `donor_timeout`, the mesh's `interrupt_after`); the
//! multiples are here.
//!
//! - A donor must send a chunk not held before at least every quiet
//!   period, and deliver within [`DONOR_TIME`] of them in all, or another
//!   is asked: a donor sending a chunk now and then cannot hold a joiner
//!   (and, once their lead runs out, everyone) for good.
//! - A receiver must acknowledge something new at least every
//!   [`RECEIVER_STALL`] quiet periods, and take the whole within
//!   [`RECEIVER_TIME`] of them, or it is dropped: it would be sent the
//!   window again and again for nothing.

use super::SnapshotSender;
use crate::Instant;
use core::time::Duration;

/// How many quiet periods a donor has in all, however it progresses.
pub(crate) const DONOR_TIME: u32 = 10;
/// How many quiet periods a receiver may go without acknowledging
/// anything new.
pub(crate) const RECEIVER_STALL: u32 = 3;
/// How many quiet periods a receiver has to take a state in all.
pub(crate) const RECEIVER_TIME: u32 = 20;

/// Why a donor is given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lapse {
    /// Nothing new for a quiet period.
    Quiet,
    /// Progressing, but not done within [`DONOR_TIME`] quiet periods.
    TooSlow,
}

impl Lapse {
    /// The reason a session reports.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::Quiet => "it went quiet",
            Self::TooSlow => "it sends too slowly",
        }
    }
}

/// A donor's clock: when it was asked, and when it last sent a chunk not
/// held before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DonorClock {
    asked: Instant,
    progress: Instant,
}

impl DonorClock {
    /// A donor asked now.
    pub(crate) fn asked(now: Instant) -> Self {
        Self {
            asked: now,
            progress: now,
        }
    }

    /// It sent a chunk not held before.
    pub(crate) fn progressed(&mut self, now: Instant) {
        self.progress = now;
    }

    /// Whether the donor is to be given up at `now`, and why.
    pub(crate) fn lapse(&self, now: Instant, quiet: Duration) -> Option<Lapse> {
        if now - self.progress >= quiet {
            Some(Lapse::Quiet)
        } else if now - self.asked >= quiet * DONOR_TIME {
            Some(Lapse::TooSlow)
        } else {
            None
        }
    }

    /// When [`lapse`](Self::lapse) next says so, unless the donor
    /// progresses first.
    pub(crate) fn deadline(&self, quiet: Duration) -> Instant {
        (self.progress + quiet).min(self.asked + quiet * DONOR_TIME)
    }
}

/// Whether the receiver of `tx` is to be dropped at `now`.
pub(crate) fn receiver_lapsed(tx: &SnapshotSender, now: Instant, quiet: Duration) -> bool {
    receiver_deadline(tx, quiet).is_some_and(|t| now >= t)
}

/// When the receiver of `tx` lapses, unless it acknowledges something new
/// first.
pub(crate) fn receiver_deadline(tx: &SnapshotSender, quiet: Duration) -> Option<Instant> {
    let stall = tx.last_progress().map(|t| t + quiet * RECEIVER_STALL);
    let whole = tx.started().map(|t| t + quiet * RECEIVER_TIME);
    match (stall, whole) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn a_donor_lapses_when_quiet_or_too_slow_whichever_comes_first() {
        let quiet = Duration::from_secs(1);
        let mut d = DonorClock::asked(at(0));
        assert_eq!(d.lapse(at(999), quiet), None);
        assert_eq!(d.lapse(at(1_000), quiet), Some(Lapse::Quiet));
        // Dripping a chunk every 900 ms keeps it until ten periods.
        for k in 1..=11 {
            d.progressed(at(900 * k));
        }
        assert_eq!(d.deadline(quiet), at(10_000));
        assert_eq!(d.lapse(at(9_999), quiet), None);
        assert_eq!(d.lapse(at(10_000), quiet), Some(Lapse::TooSlow));
    }
}
