//! Checkpoints: catching a divergence between machines cheaply.
//!
//! Each machine reports the hash of its game state after the ticks it runs
//! (every tick, or the same subset on every machine) into a
//! [`HashChain`]. Once per [`CHECK_INTERVAL`] it sends a checkpoint: the
//! chain through the last tick it reported in the interval, 16 bits of it,
//! or all 64 when the checkpoint closes a [`BLOCK`]. The chain folds in
//! every hash since the block began, so a checkpoint that arrives catches
//! any divergence since, even one the states recovered from. A short
//! checkpoint is sent once (the next one covers it); the full ones of the
//! last four blocks are acknowledged and resent until they are, since only
//! they cover the end of a block.
//!
//! The first mismatch with each remote is reported once (every later
//! checkpoint in the block will differ too), with the last checkpoint both
//! agreed on: the search for the first divergent tick starts after it.

use crate::desync::{
    BLOCK, CHECK_INTERVAL, ChainError, FirstDifference, HashChain, Search, Step, block_of,
};
use crate::rate::TokenBucket;
use crate::wire::{Checkpoint, DatagramWriter, MAX_CHAIN_QUESTIONS, Message};
use crate::{Instant, PeerId, PlayerId, Tick};
use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

mod bisect;
mod local;
mod referee;
mod remote;

pub(crate) use bisect::*;
pub(crate) use local::*;
pub(crate) use referee::*;
pub(crate) use remote::*;

/// Checkpoints of the remote's kept for ticks we have not reported yet.
const PENDING: usize = 32;
/// Checkpoints made and kept for sending.
const MADE: usize = 4;
/// Checkpoints (and acknowledgements) one datagram carries at most, and a
/// reader takes.
const PER_DATAGRAM: usize = 4;
/// A remote's checkpoints kept once compared with ours (two blocks'
/// worth): which of the differing states a majority holds.
const RECENT: usize = 2 * (BLOCK / CHECK_INTERVAL) as usize;

/// The checkpoint value for the chain `chain` through `tick`: the whole
/// chain when `full`, else its low 16 bits.
pub(crate) fn truncate(chain: u64, full: bool) -> u64 {
    if full { chain } else { chain & 0xFFFF }
}

/// One answered tick: the tick, the chain through it, the state hash
/// after it.
pub(crate) type Link = (Tick, u64, u64);
/// An answer: the question's id and the ticks answered.
pub(crate) type Answer = (u32, Vec<Link>);

/// A mismatch found while comparing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// The checkpoint's tick.
    pub(crate) tick: Tick,
    /// Our checkpoint value.
    pub(crate) local: u64,
    /// Theirs.
    pub(crate) remote: u64,
    /// The last checkpoint both agreed on before it, in the same run of
    /// comparisons.
    pub(crate) agreed: Option<Tick>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESEND: Duration = Duration::from_millis(250);

    fn run(
        checks: &mut LocalChecks,
        ticks: impl Iterator<Item = u32>,
        hash: impl Fn(u32) -> u64,
    ) -> Vec<Checkpoint> {
        ticks
            .filter_map(|t| checks.report(Tick::new(t), hash(t)).unwrap())
            .collect()
    }

    #[test]
    fn one_checkpoint_per_interval_full_at_each_block_end() {
        let mut c = LocalChecks::new(256, RESEND);
        let made = run(&mut c, 0..200, |_| 1);
        let ticks: Vec<u32> = made.iter().map(|c| c.tick.get()).collect();
        assert_eq!(ticks, (0..24).map(|k| k * 8 + 7).collect::<Vec<_>>());
        for cp in &made {
            assert_eq!(cp.full, cp.tick.get() % 64 == 63, "{cp:?}");
            assert!(cp.full || cp.value <= 0xFFFF);
        }
        // Every tenth tick: one per interval it falls in, the last of a block
        // in full.
        let mut c = LocalChecks::new(256, RESEND);
        let made = run(&mut c, (0..20).map(|k| k * 10), |_| 1);
        let full: Vec<u32> = made
            .iter()
            .filter(|c| c.full)
            .map(|c| c.tick.get())
            .collect();
        assert_eq!(full, vec![60, 120]);
    }

    #[test]
    fn a_late_starter_checks_from_its_first_whole_block() {
        let mut a = LocalChecks::new(256, RESEND);
        let mut b = LocalChecks::new(256, RESEND);
        run(&mut a, 0..300, u64::from);
        let made = run(&mut b, 100..300, u64::from);
        assert!(made.iter().all(|c| c.tick.get() >= 128), "{made:?}");
        let mut r = RemoteChecks::default();
        for cp in made {
            assert_eq!(a.receive(&mut r, cp), None);
        }
        assert_eq!(r.agreed, Some(Tick::new(295)));
    }

    #[test]
    fn mismatch_found_whichever_side_reports_first_and_once() {
        let mut a = LocalChecks::new(256, RESEND);
        let mut b = LocalChecks::new(256, RESEND);
        let theirs = run(&mut b, 0..100, |t| u64::from(t == 50));
        // Theirs arrive before we run: they wait.
        let mut r = RemoteChecks::default();
        for cp in &theirs {
            assert_eq!(a.receive(&mut r, *cp), None);
        }
        assert_eq!(r.len(), theirs.len());
        run(&mut a, 0..100, |_| 0);
        let m = a.catch_up(&mut r).unwrap();
        assert_eq!(m.tick, Tick::new(55));
        assert_eq!(m.agreed, Some(Tick::new(47)));
        assert_eq!(a.catch_up(&mut r), None);
        // Ours first: found on arrival, once.
        let mut r = RemoteChecks::default();
        let found: Vec<_> = theirs
            .iter()
            .filter_map(|cp| a.receive(&mut r, *cp))
            .collect();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].tick, Tick::new(55));
    }

    #[test]
    fn a_divergence_the_states_recover_from_is_still_caught() {
        let mut a = LocalChecks::new(256, RESEND);
        let mut b = LocalChecks::new(256, RESEND);
        run(&mut a, 0..65, |_| 0);
        let theirs = run(&mut b, 0..65, |t| u64::from(t == 57));
        let mut r = RemoteChecks::default();
        let found: Vec<_> = theirs
            .iter()
            .filter_map(|cp| a.receive(&mut r, *cp))
            .collect();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].tick, Tick::new(63));
        assert!(theirs.last().unwrap().full);
    }

    #[test]
    fn storage_is_capped() {
        let mut c = LocalChecks::new(4, RESEND);
        run(&mut c, 0..100, |_| 0);
        assert_eq!(c.len(), 4);
        let mut r = RemoteChecks::default();
        for t in 1000..1100 {
            c.receive(
                &mut r,
                Checkpoint {
                    tick: Tick::new(t),
                    full: false,
                    value: 0,
                    ack: None,
                },
            );
        }
        assert_eq!(r.len(), PENDING);
    }

    /// An unacknowledged full checkpoint goes again after the resend
    /// period the session was built with (its `keepalive_interval`), not
    /// a fixed one.
    #[test]
    fn an_unacknowledged_full_checkpoint_goes_again_after_the_resend_period() {
        let at = |ms: u64| Instant::ZERO + Duration::from_millis(ms);
        let sent = |r: &mut RemoteChecks, c: &LocalChecks, now: Instant| {
            let mut buf = Vec::new();
            let mut w = DatagramWriter::new(&mut buf, Tick::ZERO, 1200);
            r.write(c, &mut w, now);
            w.messages()
        };
        for period in [Duration::from_millis(100), Duration::from_millis(400)] {
            let mut c = LocalChecks::new(256, period);
            run(&mut c, 0..65, |_| 1);
            let mut r = RemoteChecks::default();
            assert!(sent(&mut r, &c, at(0)) > 0);
            let ms = u64::try_from(period.as_millis()).unwrap();
            assert!(!r.has_news(&c, at(ms - 1)), "{period:?}: not yet");
            assert!(r.has_news(&c, at(ms)), "{period:?}: due");
            assert_eq!(sent(&mut r, &c, at(ms)), 1, "{period:?}: the full one");
        }
    }
}

#[cfg(test)]
mod split_delivery {
    use super::*;

    fn cp(t: u32, full: bool) -> Checkpoint {
        Checkpoint {
            tick: Tick::new(t),
            full,
            value: u64::from(t) * 3,
            ack: None,
        }
    }

    /// Four full verdicts kept from before two players parted, and a full
    /// split checkpoint after: five full ones, where a client's
    /// acknowledgements had four slots, so each acknowledgement pushed
    /// another out and one full checkpoint went again every resend period
    /// for the rest of the block (35 in 35 periods; found in review). A
    /// client that acknowledges everything is sent nothing more.
    #[test]
    fn every_full_checkpoint_acknowledged_stays_acknowledged() {
        let resend = Duration::from_millis(250);
        let mut referee = Referee::new(512, false, resend);
        for b in 0..4u32 {
            for k in 0..8u32 {
                let t = b * 64 + k * 8 + 7;
                referee.settle(cp(t, t % 64 == 63), vec![PeerId(1), PeerId(2)]);
            }
        }
        let mut r = Relayed::default();
        r.tell_split(cp(319, true));
        let mut resent = 0;
        for step in 0..40u64 {
            let now = Instant::ZERO + Duration::from_millis(step * 250);
            if !r.has_news(&referee, true, Tick::new(u32::MAX), now) {
                continue;
            }
            let mut buf = Vec::new();
            let mut w = DatagramWriter::new(&mut buf, Tick::ZERO, 1200);
            r.write(&referee, &mut w, true, Tick::new(u32::MAX), now);
            let n = w.messages();
            if step > 4 {
                resent += n;
            }
            // The client acknowledges every full one it got.
            let fulls: Vec<Tick> = referee
                .kept
                .iter()
                .chain(&r.split)
                .filter(|c| c.full)
                .map(|c| c.tick)
                .collect();
            let msgs = Incoming {
                acks: fulls,
                ..Incoming::default()
            };
            r.took(&msgs, &referee);
        }
        assert_eq!(resent, 0, "messages sent after everything was acknowledged");
    }
}
