//! What an input run is coded against (see
//! [`InputRun::back`](crate::wire::InputRun::back)): the input its
//! recipient acknowledged last, so that an input that did not change costs
//! one bit even when it is the only one unacknowledged. A recipient keeps
//! the last inputs it took from each seat's own sender ([`Recent`]); a
//! sender keeps its own, and codes a run starting at the recipient's
//! acknowledgement against the input just before it ([`reference`]), with
//! a check of that input: a recipient holding another one for that tick
//! skips the run rather than misread it ([`readable`]),
//! unless the acknowledgement has stopped moving while inputs wait (a run
//! the recipient cannot read, because it no longer holds the reference,
//! would leave it there for good): then runs go self-contained, coded
//! against the neutral input, until it moves again ([`AckWatch`]).

use crate::wire::{HeldInput, MAX_INPUT_BACK, reference_check};
use crate::{Input, Instant, Tick};
use core::time::Duration;
use std::collections::VecDeque;

/// Inputs kept per seat: as far back as a reference may reach.
const KEPT: usize = MAX_INPUT_BACK as usize;

/// How long the acknowledgement may stand still while inputs wait before
/// runs go self-contained: twice the round trip, and at least this.
const STUCK_AFTER: Duration = Duration::from_millis(250);

/// The latest inputs of one seat, by tick: on a sender, as it stamped
/// them; on a recipient, as it took them (from the seat's own sender),
/// each with its [`reference_check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recent<I> {
    /// Oldest first, one per tick, at most [`KEPT`].
    inputs: VecDeque<(Tick, I, u8)>,
    /// Where checks are computed.
    scratch: Vec<u8>,
}

impl<I> Default for Recent<I> {
    fn default() -> Self {
        Self {
            inputs: VecDeque::new(),
            scratch: Vec::new(),
        }
    }
}

impl<I> Recent<I> {
    /// Forgets every input: what was sent or taken before no longer holds
    /// (a resynced client stamps its ticks again).
    pub(crate) fn clear(&mut self) {
        self.inputs.clear();
    }
}

impl<I: Input> Recent<I> {
    /// Where `tick` is or would go: the first kept input not before it.
    /// Inputs are one a tick and mostly consecutive, so the place a run of
    /// consecutive ticks up to the newest would put it is tried first (the
    /// usual case: the newest tick, or one shortly before it), and only a
    /// miss searches.
    fn position(&self, tick: Tick) -> usize {
        let n = self.inputs.len();
        let Some(&(last, ..)) = self.inputs.back() else {
            return 0;
        };
        if tick > last {
            return n;
        }
        let back = last.since(tick) as usize;
        if back < n
            && self
                .inputs
                .get(n - 1 - back)
                .is_some_and(|(t, ..)| *t == tick)
        {
            return n - 1 - back;
        }
        self.inputs.partition_point(|(t, ..)| *t < tick)
    }

    /// `input` is now the seat's input for `tick`: the last one noted for a
    /// tick counts (a client re-stamps ticks after a resync, and a relay
    /// takes them again).
    pub(crate) fn note(&mut self, tick: Tick, input: &I) {
        let check = reference_check(input, &mut self.scratch);
        let at = self.position(tick);
        if let Some(kept) = self.inputs.get_mut(at).filter(|(t, ..)| *t == tick) {
            *kept = (tick, input.clone(), check);
            return;
        }
        if self.inputs.len() >= KEPT {
            if at == 0 {
                return;
            }
            self.inputs.pop_front();
            self.inputs.insert(at - 1, (tick, input.clone(), check));
        } else {
            self.inputs.insert(at, (tick, input.clone(), check));
        }
    }

    /// The seat's input for `tick` and its check, if kept.
    pub(crate) fn get(&self, tick: Tick) -> Option<(&I, u8)> {
        let at = self.position(tick);
        self.inputs
            .get(at)
            .filter(|(t, ..)| *t == tick)
            .map(|(_, i, c)| (i, *c))
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

    /// Where it stands: the first input the recipient lacks.
    pub(crate) fn get(&self) -> Tick {
        self.acked
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

/// What a run is coded against: `back` (0 for the neutral input), and the
/// reference input with its check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reference<'a, I> {
    pub(crate) back: u32,
    pub(crate) check: u8,
    pub(crate) input: Option<&'a I>,
}

impl<I> Reference<'_, I> {
    /// The neutral input.
    pub(crate) fn none() -> Self {
        Self {
            back: 0,
            check: 0,
            input: None,
        }
    }
}

/// The reference for a run of our seat's inputs from `start`, sent at
/// `now` to a recipient whose acknowledgement is `watch`, over a link with
/// round trip `rtt`, when `own` holds our inputs: the last input the
/// recipient acknowledged (the one before its acknowledgement), if it is
/// before `start`, within reach ([`MAX_INPUT_BACK`]) and ours to tell, and
/// the acknowledgement still moves; else none.
pub(crate) fn reference<'a, I: Input>(
    start: Tick,
    watch: &AckWatch,
    own: &'a Recent<I>,
    now: Instant,
    rtt: Option<Duration>,
) -> Reference<'a, I> {
    let Some(held) = watch.acked.get().checked_sub(1).map(Tick::new) else {
        return Reference::none();
    };
    let back = start.get().wrapping_sub(held.get());
    if held >= start || back > MAX_INPUT_BACK || watch.stuck(now, rtt) {
        return Reference::none();
    }
    match own.get(held) {
        Some((input, check)) => Reference {
            back,
            check,
            input: Some(input),
        },
        None => Reference::none(),
    }
}

/// What a recipient reads a run against, from the inputs `recent` it took
/// from the run's seat: `Some(None)` for the neutral input, `Some(Some)`
/// for the held reference the run's check matches, with the check kept
/// for it (for [`InputRun::decode_into`](crate::wire::InputRun::decode_into),
/// which then works out no check of its own); `None` when it does not
/// hold the reference, or holds another input for that tick (the sender's
/// acknowledged input never reached it, or a forgery did first): the run
/// is skipped, and its inputs come again against another.
pub(crate) fn readable<'a, I: Input>(
    run: &crate::wire::InputRun<'_>,
    recent: Option<&'a Recent<I>>,
) -> Option<Option<HeldInput<'a, I>>> {
    match run.reference() {
        None => Some(None),
        Some(t) => match recent?.get(t) {
            Some((input, check)) if check == run.check => Some(Some(HeldInput::kept(input, check))),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u32) -> Tick {
        Tick::new(n)
    }

    fn input<I: Input>(r: &Recent<I>, tick: u32) -> Option<&I> {
        r.get(t(tick)).map(|(i, _)| i)
    }

    #[test]
    fn recent_inputs_are_kept_by_tick_and_bounded() {
        let mut r = Recent::default();
        for k in (0..100u32).rev() {
            r.note(t(k), &k);
        }
        let mut r2 = Recent::default();
        for k in 0..100u32 {
            r2.note(t(k), &k);
        }
        assert_eq!(input(&r2, 35), None);
        assert_eq!(input(&r2, 36), Some(&36));
        assert_eq!(input(&r2, 99), Some(&99));
        // The last input noted for a tick counts, with its check.
        r2.note(t(99), &7);
        assert_eq!(input(&r2, 99), Some(&7));
        assert_eq!(
            r2.get(t(99)).map(|(_, c)| c),
            Some(reference_check(&7u32, &mut Vec::new()))
        );
        // Out of order, within reach, is kept in order.
        let mut r3 = Recent::default();
        r3.note(t(5), &5);
        r3.note(t(3), &3);
        r3.note(t(4), &4);
        assert_eq!(
            (input(&r3, 3), input(&r3, 4), input(&r3, 5)),
            (Some(&3), Some(&4), Some(&5))
        );
        // Full, an input older than everything kept is not.
        assert_eq!(input(&r, 0), None);
        assert_eq!(r.inputs.len(), KEPT);
        r3.clear();
        assert_eq!(input(&r3, 5), None);
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
        let r = |start: u32, w: &AckWatch, now: u64| {
            let r = reference(t(start), w, &own, at(now), rtt);
            (r.back, r.input.copied())
        };
        assert_eq!(r(6, &w, 10), (1, Some(50)));
        // A run further on is coded against the same acknowledged input.
        assert_eq!(r(8, &w, 10), (3, Some(50)));
        // Before it, out of reach, or not ours to tell: none.
        assert_eq!(r(5, &w, 10), (0, None));
        assert_eq!(r(6 + 64, &w, 10), (0, None));
        assert_eq!(r(6, &AckWatch::default(), 10), (0, None));
        // The acknowledgement stands still while inputs wait: none, until
        // it moves again.
        w.waiting(at(0));
        assert_eq!(r(6, &w, 251), (0, None));
        w.acked(t(7), at(300));
        assert_eq!(r(7, &w, 301), (1, Some(60)));
        // Nothing waiting: standing still is no sign of anything.
        w.idle();
        assert_eq!(r(7, &w, 5_000), (1, Some(60)));
        let checked = reference(t(7), &w, &own, at(5_000), rtt);
        assert_eq!(checked.check, reference_check(&60u32, &mut Vec::new()));
    }

    #[test]
    fn a_run_reads_only_against_the_input_its_sender_coded_it_against() {
        let mut held = Recent::default();
        held.note(t(9), &90u32);
        let run = |check| crate::wire::InputRun {
            seat: crate::PlayerId(0),
            start: t(10),
            count: 1,
            back: 1,
            check,
            chain: &[],
        };
        let right = reference_check(&90u32, &mut Vec::new());
        assert_eq!(
            readable(&run(right), Some(&held)),
            Some(Some(HeldInput::kept(&90, right)))
        );
        // Another input held for that tick (a forgery came first), or none.
        assert_eq!(readable(&run(right ^ 1), Some(&held)), None);
        assert_eq!(readable(&run(right), None::<&Recent<u32>>), None);
        let neutral = crate::wire::InputRun {
            back: 0,
            check: 0,
            ..run(0)
        };
        assert_eq!(readable(&neutral, None::<&Recent<u32>>), Some(None));
    }
}
