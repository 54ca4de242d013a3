//! The adaptive input delay of a mesh, worked out of the input streams.
//!
//! A mesh has nobody to decide for it, so the delay is a function of the
//! stream every peer runs: each player stamps the delay its
//! [`DelayTracker`] wants into its own input stream (a change goes with its
//! input for the tick it was committed for, in the same datagram as that
//! input, every time it is sent or forwarded), and at every tick each peer
//! computes the session's delay from the wants of the seats playing that
//! tick:
//!
//! - the largest want of the seats whose input the tick holds, kept within
//!   [`AdaptiveDelay::min`]`..=`[`max`](AdaptiveDelay::max);
//! - a rise takes effect at once; a fall only once that largest want has
//!   stayed below the delay for `tick_rate` ticks (a second of play), by
//!   one tick, at most once per `tick_rate` ticks (the rule of
//!   `rules::delay`, which the sequencer applies too);
//! - the frame of a tick the delay changed at carries
//!   [`SystemEvent::DelayChanged`].
//!
//! Every peer holding a tick's inputs holds the wants that go with them,
//! so every peer puts the same change in the same frame: no proposal, no
//! vote, and nothing to redo when a player is abandoned (its wants stop
//! counting where its input does). A change moves only the tick a player
//! stamps its next input for: after a rise its next commit first tops its
//! lead up with neutral input, after a fall [`MeshSession::input_due`]
//! holds commits back until the frames catch up. No tick is run twice or
//! skipped, and every input committed runs at the tick it was stamped for.

use super::MeshSession;
use super::store::Cell;
use crate::error::CommitError;
use crate::frame::SystemEvent;
use crate::rules::delay::DelayStep;
use crate::wire::MAX_DELAY_CHANGES;
use crate::{AdaptiveDelay, DelayTracker, Input, PlayerId, Tick};
use std::collections::{BTreeMap, VecDeque};

/// Delay changes remembered for the checkpoints of ticks already run.
const HISTORY: usize = 256;

/// What the delay in force is multiplied by before it is mixed into a
/// checkpoint's hash (the 64-bit golden ratio).
pub(super) const DELAY_MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// The delay in force and the wants it follows.
#[derive(Debug, Clone)]
pub(super) struct DelayState {
    /// The delay in force as of the last frame run.
    pub(super) delay: u32,
    /// When the delay may step.
    step: DelayStep,
    /// The delay in force from each tick a change ran at, the latest
    /// [`HISTORY`] changes: what a checkpoint of an earlier tick mixes in.
    history: VecDeque<(Tick, u32)>,
    /// The delay before the oldest change in `history`.
    history_floor: u32,
    /// Per seat: the changes of the delay it wants, stamped in its input
    /// stream, from the input store's first tick on.
    changes: Vec<BTreeMap<Tick, u32>>,
    /// Per seat: what it wants before its first change held.
    floor: Vec<u32>,
    /// Our player's tracker (with `adaptive`).
    pub(super) tracker: Option<DelayTracker>,
    /// The want last stamped in our stream.
    stamped: u32,
    /// The delay rose since our last commit: it tops the lead up.
    rose: bool,
    /// Frames complete before this tick were told to the tracker.
    arrived_to: Tick,
}

impl DelayState {
    pub(super) fn new(
        delay: u32,
        seats: usize,
        adaptive: Option<&AdaptiveDelay>,
        tick_rate: u32,
        playing: bool,
        first: Tick,
    ) -> Self {
        Self {
            delay,
            step: DelayStep::default(),
            history: VecDeque::new(),
            history_floor: delay,
            changes: vec![BTreeMap::new(); seats],
            floor: vec![delay; seats],
            // Every player measures how its frames arrive (late frames,
            // slack); only an adaptive session stamps what it wants.
            tracker: playing.then(|| {
                let a = adaptive.cloned().unwrap_or_default();
                DelayTracker::new(a, tick_rate, delay)
            }),
            stamped: delay,
            rose: false,
            arrived_to: first,
        }
    }

    /// What `seat` wants at `tick`.
    fn want_at(&self, seat: usize, tick: Tick) -> u32 {
        let held = self
            .changes
            .get(seat)
            .and_then(|c| c.range(..=tick).next_back());
        held.map_or_else(
            || self.floor.get(seat).copied().unwrap_or(self.delay),
            |(_, d)| *d,
        )
    }

    /// `seat`'s changes from `from` up to `end`, at most
    /// [`MAX_DELAY_CHANGES`], and where a run sent with them must end: at
    /// the first change that did not fit.
    pub(super) fn for_run(&self, seat: usize, from: Tick, end: Tick) -> (Vec<(Tick, u32)>, Tick) {
        let Some(c) = self.changes.get(seat) else {
            return (Vec::new(), end);
        };
        if from >= end {
            return (Vec::new(), end);
        }
        let mut it = c.range(from..end).map(|(t, d)| (*t, *d));
        let list: Vec<(Tick, u32)> = it.by_ref().take(MAX_DELAY_CHANGES).collect();
        let end = it.next().map_or(end, |(t, _)| t);
        (list, end)
    }

    /// `seat`'s want at `tick` is `want`: the one that came with the input
    /// the cell now holds (none: it wants what it wanted before). A
    /// player's own input replacing a copy forwarded for it brings its own
    /// want, never the forwarder's.
    pub(super) fn take(&mut self, seat: usize, tick: Tick, want: Option<u32>) {
        if let Some(c) = self.changes.get_mut(seat) {
            match want {
                Some(d) => c.insert(tick, d),
                None => c.remove(&tick),
            };
        }
    }

    /// The delay in force when the frame of `tick` ran.
    pub(super) fn delay_at(&self, tick: Tick) -> u32 {
        self.history
            .iter()
            .rev()
            .find(|(t, _)| *t <= tick)
            .map_or(self.history_floor, |(_, d)| *d)
    }

    /// A checkpoint's hash for `tick` as it is compared: the game's, with
    /// the delay in force then mixed in, so peers that came to run
    /// different delays (wants that reached them differently) find out
    /// as they would a diverged state.
    pub(super) fn mix(&self, tick: Tick, hash: u64) -> u64 {
        hash ^ u64::from(self.delay_at(tick)).wrapping_mul(DELAY_MIX)
    }

    /// Forgets changes before `base`, keeping each seat's latest as its
    /// floor.
    pub(super) fn prune_below(&mut self, base: Tick) {
        for (c, floor) in self.changes.iter_mut().zip(&mut self.floor) {
            while let Some(entry) = c.first_entry() {
                if *entry.key() >= base {
                    break;
                }
                *floor = entry.remove();
            }
        }
    }
}

impl<I: Input> MeshSession<I> {
    /// The largest delay any peer may be stamping with: the adaptive
    /// delay's `max` (or the fixed delay). Bounds what input is taken and
    /// what history is kept.
    pub(super) fn delay_cap(&self) -> u32 {
        self.config
            .adaptive
            .as_ref()
            .map_or(self.config.delay, |a| a.max.max(self.config.delay))
    }

    /// The input delay in force: the session's fixed one, or with
    /// [`MeshConfig::adaptive`](super::MeshConfig::adaptive) the one the
    /// frames run so far last set.
    pub fn delay(&self) -> u32 {
        self.delays.delay
    }

    /// Whether the input for the tick `delay` ticks past the next frame is
    /// still to commit: the classic lockstep loop runs a frame, then
    /// commits while this holds, which keeps the lead exactly the delay.
    /// After the delay fell it stays false until the frames caught up with
    /// the inputs committed; after it rose, the ticks it added are filled
    /// with neutral input at the next commit, so the game commits once per
    /// frame run whatever the delay does. A game that commits on a clock of
    /// its own instead keeps the lead it has: the delay can then rise but
    /// never fall.
    pub fn input_due(&self) -> bool {
        self.local_seat
            .is_some_and(|s| self.seats[s.index()].empty_from.is_none())
            && !self.leaving
            && self.next_commit.since(self.next_tick) < self.delays.delay
    }

    /// The frames ready to run, as a [`Pacer`](crate::Pacer) should count
    /// them. Every player's clock sets the pace together (a player running
    /// faster would speed the whole match up), so frames beyond one count
    /// only while a peer's game waits on our input: our clock runs behind
    /// theirs, and catching up brings it in step. An observer counts all of
    /// them.
    ///
    /// ```text
    /// let due = pacer.ticks_due(now, session.ready_to_pace());
    /// ```
    pub fn ready_to_pace(&self) -> usize {
        if self.frozen() {
            return 0;
        }
        let ready = self.frames_ready();
        if self.paced_together() {
            ready.min(1)
        } else {
            ready
        }
    }

    /// Whether every player's clock sets the pace together, so that a
    /// pacer must never run slower than the tick rate for want of a frame
    /// in hand: a player whose game no peer waits on (the case where
    /// [`ready_to_pace`](Self::ready_to_pace) counts one frame at most; see
    /// `ClientSession::paced_together`).
    pub fn paced_together(&self) -> bool {
        let waited_on = self
            .peers
            .iter()
            .any(|p| p.waits_on_us && p.seat.is_some_and(|s| self.seat_live(s)));
        self.local_seat.is_some() && !waited_on
    }

    /// The frames complete and ready to run, in a row from the next one:
    /// how far behind the others we are, as far as we know.
    pub fn frames_ready(&self) -> usize {
        let mut ready = 0;
        let mut t = self.next_tick;
        while self.store.get(t).is_some_and(|s| s.complete()) {
            ready += 1;
            match t.next() {
                Some(n) => t = n,
                None => break,
            }
        }
        ready
    }

    /// Tops our lead up to the delay after a rise, with neutral input,
    /// within the lead limit and short of a pause's freeze frame.
    pub(super) fn fill_after_rise(&mut self, seat: PlayerId) -> Result<(), CommitError> {
        let limit = self.delays.delay + self.config.max_lead;
        while self.delays.rose
            && self.next_commit.since(self.next_tick).saturating_add(1) < self.delays.delay
            && self
                .next_commit
                .since(self.min_live_next())
                .saturating_add(1)
                < limit
            && self.pause.frame().is_none_or(|f| self.next_commit < f)
        {
            self.stamp_own(seat, I::default())?;
        }
        self.delays.rose &=
            self.next_commit.since(self.next_tick).saturating_add(1) < self.delays.delay;
        Ok(())
    }

    /// Our input for `tick` was committed: the tracker is told, and a new
    /// want is stamped at it.
    pub(super) fn stamp_want(&mut self, seat: PlayerId, tick: Tick) {
        let Some(t) = self.delays.tracker.as_mut() else {
            return;
        };
        t.committed(tick, self.now);
        if self.config.adaptive.is_none() {
            return;
        }
        let want = t.wanted();
        if want != self.delays.stamped {
            self.delays.stamped = want;
            self.delays.take(seat.index(), tick, Some(want));
        }
    }

    /// Tells the tracker of every frame that became complete since the
    /// last call: when its last input arrived.
    pub(super) fn note_arrivals(&mut self) {
        if self.delays.tracker.is_none() {
            return;
        }
        let mut t = self.delays.arrived_to.max(self.next_tick);
        while self.store.get(t).is_some_and(|s| s.complete()) {
            if self
                .delays
                .tracker
                .as_mut()
                .is_some_and(|tr| tr.arrived(t, self.now))
            {
                self.stats.late_frames += 1;
            }
            match t.next() {
                Some(n) => t = n,
                None => break,
            }
        }
        self.delays.arrived_to = t;
    }

    /// The delay for `tick`, about to run, from the wants of the seats it
    /// holds input of: `Some` when it changes there.
    pub(super) fn decide_delay(&mut self, tick: Tick) -> Option<u32> {
        let a = self.config.adaptive.as_ref()?;
        let slot = self.store.get(tick)?;
        let wanted = slot
            .cells
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c, Cell::Known(_)))
            .map(|(i, _)| self.delays.want_at(i, tick))
            .max()?;
        let wanted = a.clamp(wanted);
        let d = &mut self.delays;
        d.step.decide(d.delay, wanted, tick, self.config.tick_rate)
    }

    /// The delay changed to `delay` at the frame about to be handed out.
    pub(super) fn delay_changed(&mut self, delay: u32) {
        let playing = self
            .local_seat
            .is_some_and(|s| self.seats[s.index()].empty_from.is_none());
        if playing && delay > self.delays.delay {
            self.delays.rose = true;
        }
        self.delays.delay = delay;
        let at = self.next_tick;
        let h = &mut self.delays.history;
        if h.len() >= HISTORY
            && let Some((_, d)) = h.pop_front()
        {
            self.delays.history_floor = d;
        }
        self.delays.history.push_back((at, delay));
        self.stats.delay_changes += 1;
        if let Some(t) = self.delays.tracker.as_mut() {
            t.set_delay(delay);
        }
    }

    /// Runs the delay's rules for the frame at `tick`, about to be handed
    /// out, and puts a change in it. An observer takes the changes the
    /// frames it is sent carry.
    pub(super) fn follow_delay(&mut self, tick: Tick) {
        if self.local_seat.is_none() {
            let change = self.store.get(tick).and_then(|s| {
                s.events.iter().rev().find_map(|e| match e {
                    SystemEvent::DelayChanged { delay } => Some(*delay),
                    _ => None,
                })
            });
            if let Some(d) = change {
                self.delay_changed(d);
            }
            return;
        }
        if let Some(d) = self.decide_delay(tick) {
            if let Some(slot) = self.store.get_mut(tick) {
                slot.add_event(SystemEvent::DelayChanged { delay: d });
            }
            self.delay_changed(d);
        }
    }
}
