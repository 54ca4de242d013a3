//! What an input run is coded against (see
//! [`InputRun::back`](crate::wire::InputRun::back)): the input its
//! recipient acknowledged last, so that an input that did not change costs
//! one bit even when it is the only one unacknowledged. A recipient keeps
//! the last inputs each seat's own sender sent it ([`Recent`]); a sender
//! keeps its own, and codes a run starting at the recipient's
//! acknowledgement against the input just before it ([`reference`]),
//! unless the acknowledgement has stopped moving while inputs wait (a run
//! the recipient cannot read, because it no longer holds the reference,
//! would leave it there for good): then runs go self-contained, coded
//! against the neutral input, until it moves again ([`AckWatch`]).

use crate::wire::MAX_INPUT_BACK;
use crate::{Instant, Tick};
use core::time::Duration;
use std::collections::VecDeque;

/// Inputs kept per seat: as far back as a reference may reach.
const KEPT: usize = MAX_INPUT_BACK as usize;

/// How long the acknowledgement may stand still while inputs wait before
/// runs go self-contained: twice the round trip, and at least this.
const STUCK_AFTER: Duration = Duration::from_millis(250);

/// The latest inputs of one seat, by tick, as its own sender sent them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recent<I> {
    /// Oldest first, one per tick, at most [`KEPT`].
    inputs: VecDeque<(Tick, I)>,
}

impl<I> Default for Recent<I> {
    fn default() -> Self {
        Self {
            inputs: VecDeque::new(),
        }
    }
}

impl<I: Clone> Recent<I> {
    /// `input` is the seat's input for `tick` (the first one noted for a
    /// tick stays: an input never changes once sent).
    pub(crate) fn note(&mut self, tick: Tick, input: &I) {
        let at = self.inputs.partition_point(|(t, _)| *t < tick);
        if self.inputs.get(at).is_some_and(|(t, _)| *t == tick) {
            return;
        }
        if self.inputs.len() >= KEPT {
            if at == 0 {
                return;
            }
            self.inputs.pop_front();
            self.inputs.insert(at - 1, (tick, input.clone()));
        } else {
            self.inputs.insert(at, (tick, input.clone()));
        }
    }

    /// The seat's input for `tick`, if kept.
    pub(crate) fn get(&self, tick: Tick) -> Option<&I> {
        let at = self.inputs.partition_point(|(t, _)| *t < tick);
        self.inputs
            .get(at)
            .filter(|(t, _)| *t == tick)
            .map(|(_, i)| i)
    }
}

/// A sender's view of one recipient's acknowledgement of its inputs: where
/// it stands and when it last moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct AckWatch {
    acked: Tick,
    /// When it last moved, or inputs began to wait on it.
    since: Option<Instant>,
}

impl AckWatch {
    /// The recipient acknowledged inputs up to `acked` (excluded) at `now`.
    pub(crate) fn acked(&mut self, acked: Tick, now: Instant) {
        if acked > self.acked || self.since.is_none() {
            self.since = Some(now);
        }
        self.acked = self.acked.max(acked);
    }

    /// Nothing waits for an acknowledgement any more: the next input to
    /// wait starts the clock again.
    pub(crate) fn idle(&mut self) {
        self.since = None;
    }

    /// An input went out at `now` to wait for its acknowledgement.
    pub(crate) fn waiting(&mut self, now: Instant) {
        self.since.get_or_insert(now);
    }

    /// Whether the acknowledgement has stood still for too long at `now`
    /// while inputs waited, with round trip `rtt`.
    fn stuck(&self, now: Instant, rtt: Option<Duration>) -> bool {
        let after = (rtt.unwrap_or_default() * 2).max(STUCK_AFTER);
        self.since
            .is_some_and(|s| now.saturating_duration_since(s) > after)
    }
}

/// The `back` and reference for a run of our seat's inputs from `start`,
/// sent at `now` to a recipient whose acknowledgement is `watch`, over a
/// link with round trip `rtt`, when `own` holds our inputs: the last input
/// the recipient acknowledged (the one before its acknowledgement), if it
/// is before `start`, within reach ([`MAX_INPUT_BACK`]) and ours to tell,
/// and the acknowledgement still moves; else none (0).
pub(crate) fn reference<'a, I: Clone>(
    start: Tick,
    watch: &AckWatch,
    own: &'a Recent<I>,
    now: Instant,
    rtt: Option<Duration>,
) -> (u32, Option<&'a I>) {
    let Some(held) = watch.acked.get().checked_sub(1).map(Tick::new) else {
        return (0, None);
    };
    let back = start.get().wrapping_sub(held.get());
    if held >= start || back > MAX_INPUT_BACK || watch.stuck(now, rtt) {
        return (0, None);
    }
    match own.get(held) {
        Some(i) => (back, Some(i)),
        None => (0, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u32) -> Tick {
        Tick::new(n)
    }

    #[test]
    fn recent_inputs_are_kept_by_tick_and_bounded() {
        let mut r = Recent::default();
        for k in (0..100u32).rev() {
            r.note(t(k), &k);
        }
        // Noted newest first: the newest 64 are the ones kept... the oldest
        // are dropped as the newer come in order.
        let mut r2 = Recent::default();
        for k in 0..100u32 {
            r2.note(t(k), &k);
        }
        assert_eq!(r2.get(t(35)), None);
        assert_eq!(r2.get(t(36)), Some(&36));
        assert_eq!(r2.get(t(99)), Some(&99));
        // The first input noted for a tick stays.
        r2.note(t(99), &7);
        assert_eq!(r2.get(t(99)), Some(&99));
        // Out of order, within reach, is kept in order.
        let mut r3 = Recent::default();
        r3.note(t(5), &5);
        r3.note(t(3), &3);
        r3.note(t(4), &4);
        assert_eq!(
            (r3.get(t(3)), r3.get(t(4)), r3.get(t(5))),
            (Some(&3), Some(&4), Some(&5))
        );
        // Full, an input older than everything kept is not.
        assert_eq!(r.get(t(0)), None);
        assert_eq!(r.inputs.len(), KEPT);
    }

    #[test]
    fn a_run_is_coded_against_the_acknowledged_input_while_acks_move() {
        let at = Instant::from_millis;
        let mut own = Recent::default();
        for k in 0..10u32 {
            own.note(t(k), &(k * 10));
        }
        let mut w = AckWatch::default();
        w.acked(t(6), at(0));
        let rtt = Some(Duration::from_millis(50));
        assert_eq!(reference(t(6), &w, &own, at(10), rtt), (1, Some(&50)));
        // A run further on is coded against the same acknowledged input.
        assert_eq!(reference(t(8), &w, &own, at(10), rtt), (3, Some(&50)));
        // Before it, out of reach, or not ours to tell: none.
        assert_eq!(reference(t(5), &w, &own, at(10), rtt), (0, None));
        assert_eq!(reference(t(6 + 64), &w, &own, at(10), rtt), (0, None));
        assert_eq!(
            reference(t(6), &AckWatch::default(), &own, at(10), rtt),
            (0, None)
        );
        // The acknowledgement stands still while inputs wait: none, until
        // it moves again.
        w.waiting(at(0));
        assert_eq!(reference(t(6), &w, &own, at(251), rtt), (0, None));
        w.acked(t(7), at(300));
        assert_eq!(reference(t(7), &w, &own, at(301), rtt), (1, Some(&60)));
        // Nothing waiting: standing still is no sign of anything.
        w.idle();
        assert_eq!(reference(t(7), &w, &own, at(5_000), rtt), (1, Some(&60)));
    }
}
