//! Playing: our input committed at its tick (and our lead in a
//! `Deadline` room), frames run in order, the delay's changes followed.

use super::*;

impl<I: Input> ClientSession<I> {
    /// Two tick periods, once the room's tick rate is known.
    fn two_ticks(&self) -> Option<Duration> {
        self.welcome()
            .filter(|w| w.tick_rate > 0)
            .map(|w| Duration::from_secs(2) / w.tick_rate)
    }

    /// Whether the game waits for its next frame: none is here, and
    /// nothing but its arrival holds it back (not a pause, not a join).
    fn waiting_for_frame(&self) -> bool {
        !self.frozen()
            && !self.joining.as_ref().is_some_and(|j| {
                !(j.restored || (j.resync && j.tick.is_none_or(|t| self.next_tick <= t)))
            })
            && !matches!(self.frames.front(), Some(Some(_)))
    }

    /// A stall is the picture stopping: no frame for two tick periods
    /// (steady latency beyond the input delay is not one).
    pub(super) fn note_stall(&mut self) {
        if let Some(two_ticks) = self.two_ticks() {
            self.stall.no_frame(self.now, two_ticks);
        }
    }

    /// When a stall begins if the next frame does not come first: a timer,
    /// so that a loop asking for frames only once one is there still has
    /// its stalls counted and `stalled()` holding while they last.
    pub(super) fn stall_due(&self) -> Option<Instant> {
        if !self.connected() || !self.waiting_for_frame() {
            return None;
        }
        self.stall.begins_at(self.two_ticks()?)
    }

    /// Commits the local input for the next tick. A refusal is backpressure:
    /// offer the input again next frame.
    pub fn commit_local(&mut self, input: I) -> Result<Tick, CommitError> {
        let w = match &self.state {
            State::Connected(w) => *w,
            State::Connecting => return Err(CommitError::NotConnected),
            State::Closed(_) => return Err(CommitError::Left),
        };
        if w.seat.is_none() {
            return Err(CommitError::Observer);
        }
        if self.leaving.is_some() {
            return Err(CommitError::Left);
        }
        if self.joining.is_some() {
            return Err(CommitError::CatchingUp);
        }
        if w.lobby {
            return Err(CommitError::InLobby);
        }
        if let Some(frame) = self.pause.frame().filter(|f| self.next_commit >= *f) {
            self.stats.commits_refused += 1;
            return Err(CommitError::Paused { frame });
        }
        // Under a deadline, input stamped for a tick already sealed would
        // run late: stamp it where it will arrive in time instead.
        // Our lead rises to where an input reaches the open tick in time:
        // a round trip (with its jitter) and a tick past the open tick we
        // last heard of, at least the delay (once per late input stamped
        // since the last rise), and is kept until the slack says
        // otherwise.
        if w.deadline && self.slack < 0 && self.raised_for.is_none_or(|t| self.acked > t) {
            let period = (1_000_000 / u128::from(w.tick_rate.max(1))).max(1);
            let trip = self.link.rtt().zip(self.link.jitter()).map_or(0, |(r, j)| {
                u32::try_from((r + j).as_micros().div_ceil(period)).unwrap_or(u32::MAX)
            });
            let ahead = w.delay.max(trip.saturating_add(1));
            let cap = self
                .next_tick
                .saturating_add((w.delay + self.config.max_lead).saturating_sub(1));
            let target = self.server_open.saturating_add(ahead).min(cap);
            if self.next_commit < target {
                self.next_commit = target;
            }
            self.slack = 0;
            self.lead = self.next_commit.since(self.next_tick).max(1);
            self.slack_low = None;
            self.raised_for = Some(self.next_commit);
        }
        let limit = w.delay + self.config.max_lead;
        let lead = self.next_commit.since(self.next_tick);
        if lead >= limit {
            self.stats.commits_refused += 1;
            return Err(CommitError::TooFarAhead { lead, limit });
        }
        let mut scratch = Vec::new();
        input.encode(&mut scratch);
        if scratch.len() > self.config.max_input_len {
            return Err(CommitError::InputTooLarge {
                len: scratch.len(),
                max: self.config.max_input_len,
            });
        }
        // The delay rose: our lead is topped up to it with neutral input,
        // before this one (nobody sampled input for the ticks it adds). A
        // lead already past the delay (a game committing on its own clock)
        // gets none. Never past `max_unacked` inputs unacknowledged (the
        // oldest would be dropped unsent, and the room would wait on them
        // for good): the rest of a large rise follows at later commits.
        while self.delay_rose
            && self.next_commit.since(self.next_tick).saturating_add(1) < w.delay
            && self.pause.frame().is_none_or(|f| self.next_commit < f)
            && self.unacked.len() + 1 < self.config.max_unacked
        {
            let tick = self.next_commit;
            self.next_commit = tick.next().ok_or(CommitError::TickSpaceExhausted)?;
            self.own_inputs.note(tick, &I::default());
            self.unacked.push_back((tick, I::default()));
        }
        self.delay_rose &= self.next_commit.since(self.next_tick).saturating_add(1) < w.delay;
        if self.pause.frame().is_some_and(|f| self.next_commit >= f) {
            // The rise reached the freeze frame: the rest waits for the
            // resume, and so does this input.
            self.stats.commits_refused += 1;
            return Err(CommitError::Paused {
                frame: self.pause.frame().unwrap_or(self.next_commit),
            });
        }
        let tick = self.next_commit;
        self.next_commit = tick.next().ok_or(CommitError::TickSpaceExhausted)?;
        if self.committed_at.len() >= TIMED_INPUTS {
            self.committed_at.pop_front();
        }
        self.committed_at.push_back((tick, self.now));
        if let Some(t) = self.tracker.as_mut() {
            t.committed(tick, self.now);
        }
        self.own_inputs.note(tick, &input);
        self.unacked.push_back((tick, input));
        while self.unacked.len() > self.config.max_unacked {
            self.unacked.pop_front();
            self.stats.inputs_dropped += 1;
        }
        self.link.flush = true;
        Ok(tick)
    }

    /// The next frame, if it has arrived. Frames come in tick order, each
    /// exactly once; run every one.
    pub fn advance(&mut self) -> Option<Frame<I>> {
        // Joining, frames wait for the snapshot; being resynced, they run
        // up to its tick.
        if self.frozen()
            || self.joining.as_ref().is_some_and(|j| {
                !(j.restored || (j.resync && j.tick.is_none_or(|t| self.next_tick <= t)))
            })
        {
            return None;
        }
        match self.frames.front() {
            Some(Some(_)) => {}
            _ => {
                self.note_stall();
                return None;
            }
        }
        let frame = self.frames.pop_front().flatten()?;
        self.next_tick = self.next_tick.saturating_add(1);
        self.announce_snapshot();
        if self.joining.as_ref().is_some_and(|j| j.restored) {
            // A change before our seat goes live is in force when it does;
            // one after it moves our lead.
            let live_at = self
                .seat()
                .and_then(|p| {
                    let ev = SystemEvent::CaughtUp { player: p };
                    frame.events.iter().position(|e| *e == ev)
                })
                .unwrap_or(frame.events.len());
            self.take_delay_changes(frame.tick, &frame.events[..live_at]);
            self.note_caught_up(&frame);
            self.take_delay_changes(frame.tick, &frame.events[live_at..]);
        } else {
            self.take_delay_changes(frame.tick, &frame.events);
        }
        self.stats.frames += 1;
        self.frame_rate.add(self.now, 1);
        while self
            .committed_at
            .front()
            .is_some_and(|(t, _)| *t < frame.tick)
        {
            self.committed_at.pop_front();
        }
        if let Some((_, at)) = self.committed_at.front().filter(|(t, _)| *t == frame.tick) {
            self.stats.inputs_timed += 1;
            self.stats.input_latency_sum += self.now - *at;
            self.committed_at.pop_front();
        }
        self.stall.ran(self.now);
        self.recent.ran(&frame);
        self.keep(&frame);
        Some(frame)
    }

    /// The input delay changed at frame `tick`: the new one is in force. A
    /// playing seat's next commit after a rise tops its lead up to it with
    /// neutral inputs; after a fall, [`input_due`](Self::input_due) holds
    /// back until the frames caught up. Changes before our Welcome's tick
    /// were in force before it.
    pub(super) fn take_delay_changes(&mut self, tick: Tick, events: &[SystemEvent]) {
        let live = self.joining.is_none() && self.seat().is_some();
        let State::Connected(w) = &mut self.state else {
            return;
        };
        if tick < w.tick {
            return;
        }
        for ev in events {
            if let SystemEvent::DelayChanged { delay } = *ev {
                if live && delay > w.delay {
                    self.delay_rose = true;
                }
                w.delay = delay;
                if let Some(t) = self.tracker.as_mut() {
                    t.set_delay(delay);
                }
            }
        }
    }

    /// Keeps `frame`, just run, with `keep_frames`, and forgets the inputs
    /// sent for it and earlier.
    pub(super) fn keep(&mut self, frame: &Frame<I>) {
        let keep = self.config.keep_frames as usize;
        if keep == 0 {
            return;
        }
        if self.ran.len() >= keep {
            self.ran.pop_front();
        }
        self.ran.push_back(frame.clone());
        while self.sent.front().is_some_and(|(t, _)| *t <= frame.tick) {
            self.sent.pop_front();
        }
    }

    /// Whether the input for the tick `delay` ticks past the next frame is
    /// still to commit (in a `Deadline` room, our own lead's worth: it
    /// rises when an input arrives late and falls when inputs arrive with
    /// ticks to spare): the classic lockstep loop runs a frame, then
    /// commits while this holds, which keeps every player exactly the
    /// delay ahead (a player that joined while the game ran on has more
    /// lead than that, and commits nothing until it ran its way down to
    /// it). After the delay fell it stays false until the frames caught up
    /// with the inputs committed; after it rose, the ticks it added are
    /// filled with neutral input at the next commit, so the game commits
    /// once per frame run whatever the delay does.
    pub fn input_due(&self) -> bool {
        let Some(w) = self.welcome() else {
            return false;
        };
        w.seat.is_some()
            && !w.lobby
            && self.joining.is_none()
            && self.leaving.is_none()
            && self.next_commit.since(self.next_tick) < self.lead_target()
    }

    /// The lead the classic loop keeps: the room's delay, or in a
    /// `Deadline` room our own lead.
    pub(super) fn lead_target(&self) -> u32 {
        match self.welcome() {
            Some(w) if w.deadline && self.lead > 0 => self.lead,
            Some(w) => w.delay,
            None => 0,
        }
    }

    /// The sequencer reported the slack of our latest input. In a
    /// `Deadline` room, once every report for two seconds showed two
    /// ticks or more to spare, our lead falls by all but one of them
    /// (never below 1): [`input_due`](Self::input_due) holds commits back
    /// until the frames caught up, so no input is dropped or run twice. A
    /// late input raises the lead at the next commit (see `commit_local`).
    pub(super) fn note_slack(&mut self, slack: i32) {
        let Some(w) = self.welcome() else { return };
        if !w.deadline || w.seat.is_none() || self.joining.is_some() {
            return;
        }
        if self.lead == 0 {
            self.lead = w.delay.max(1);
        }
        if slack < 0 {
            self.slack_low = None;
            return;
        }
        let now = self.now;
        let (low, since) = self.slack_low.get_or_insert((slack, now));
        *low = (*low).min(slack);
        if now - *since < Duration::from_secs(2) {
            return;
        }
        let spare = u32::try_from(*low - 1).unwrap_or(0);
        let cut = spare.min(self.lead - 1);
        if cut > 0 {
            self.lead -= cut;
            self.stats.lead_cuts += 1;
        }
        self.slack_low = None;
    }
}
