//! Sealing: which tick runs which input, under `WaitForAll` or
//! `Deadline`, the adaptive delay, and single-player mode.

use super::*;

/// What sealing does next with the open tick.
enum Due {
    /// Seal it.
    Seal,
    /// It was sealed already (a player alone): look at the next.
    Sealed,
    /// Something changed (a seat abandoned): look again.
    Again,
    /// It is not due.
    Stop,
}

impl<I: Input> Sequencer<I> {
    /// Starts the `Deadline` clock at the open tick if it stopped (nobody
    /// was playing).
    pub(super) fn start_clock(&mut self) {
        if self.playing
            && matches!(self.config.policy, Policy::Deadline { .. })
            && self.clock.is_none()
        {
            self.clock = Some((self.now, self.open));
            if self.solo_pace.is_some() {
                self.solo_pace = Some((self.now, self.open));
            }
        }
    }

    pub(super) fn next_seal_at(&self) -> Option<Instant> {
        if self.paused() {
            return None;
        }
        let (start, first) = self.clock?;
        let n = u64::from(self.open.since(first)) + 1;
        let micros = n.saturating_mul(1_000_000) / u64::from(self.config.tick_rate);
        Some(start + Duration::from_micros(micros))
    }

    /// The largest delay a client may be stamping with: with `adaptive`,
    /// one that fell a moment ago still has input in flight for it.
    pub(super) fn max_delay(&self) -> u32 {
        self.config
            .adaptive
            .as_ref()
            .map_or(self.delay, |a| a.max.max(self.delay))
    }

    /// With `adaptive` under `WaitForAll`: plays at the largest delay a
    /// playing seat wants, rising at once, falling a tick at a time once
    /// the wants stayed below the delay for a second.
    /// The change takes effect at the open tick, in every stream.
    pub(super) fn adapt_delay(&mut self) {
        let Some(a) = &self.config.adaptive else {
            return;
        };
        if !matches!(self.config.policy, Policy::WaitForAll { .. }) || self.paused() {
            return;
        }
        let Some(wanted) = self
            .seats
            .iter()
            .flatten()
            .filter(|s| s.live && s.conn.is_some())
            .filter_map(|s| s.wants)
            .max()
        else {
            return;
        };
        // The same step as a mesh's, counted in the ticks the room seals.
        let Some(wanted) = self.delay_step.decide(
            self.delay,
            a.clamp(wanted),
            self.open,
            self.config.tick_rate,
        ) else {
            return;
        };
        self.delay = wanted;
        self.stats.delay_changes += 1;
        for c in self.conns.iter_mut().filter(|c| c.join.is_some()) {
            c.delay_moved = true;
        }
        // One change per tick: a later one replaces an earlier one not
        // sealed yet, in its place, unless a seat went live after it (its
        // inputs are due from the delay before): then it follows.
        let open = self.open;
        let events = self.tick_events.entry(open).or_default();
        let change = SystemEvent::DelayChanged { delay: wanted };
        match events
            .iter()
            .rposition(|e| matches!(e, SystemEvent::DelayChanged { .. }))
        {
            Some(i)
                if !events[i..]
                    .iter()
                    .any(|e| matches!(e, SystemEvent::CaughtUp { .. })) =>
            {
                events[i] = change;
            }
            _ => events.push(change),
        }
        self.flush_all();
    }

    /// Whether the lobby's start rule holds (or the owner asked to start,
    /// or enough players were ready for `ready_wait`).
    fn start_due(&self) -> bool {
        let seated = || self.seats.iter().flatten();
        self.start_asked
            || self.ready_wait_ends().is_some_and(|t| t <= self.now)
            || match self.config.start {
                Start::AtOnce => true,
                Start::Seated(n) => seated().count() >= usize::from(n),
                Start::Ready { min } => {
                    seated().count() >= usize::from(min) && seated().all(|s| s.ready)
                }
                Start::Manual => false,
            }
    }

    /// In a lobby that starts once its players are ready: when it starts
    /// without those not ready yet, `ready_wait` after at least `min` were.
    pub(super) fn ready_wait_ends(&self) -> Option<Instant> {
        if self.playing || !matches!(self.config.start, Start::Ready { .. }) {
            return None;
        }
        Some(self.enough_ready? + self.config.ready_wait?)
    }

    /// Notes since when enough seated players are ready (`Start::Ready`).
    fn note_readiness(&mut self) {
        let Start::Ready { min } = self.config.start else {
            return;
        };
        let ready = self.seats.iter().flatten().filter(|s| s.ready).count();
        if ready >= usize::from(min) {
            self.enough_ready.get_or_insert(self.now);
        } else {
            self.enough_ready = None;
        }
    }

    /// Closes the lobby once its start rule holds: the match starts at the
    /// open tick (every seat taken meanwhile joins there, a delay before
    /// its first input), and every client hears of it at once (its next
    /// datagram carries no `Lobby`).
    fn start_if_due(&mut self) -> bool {
        if !self.playing {
            self.note_readiness();
        }
        if !self.playing && self.start_due() {
            self.playing = true;
            let players = self.seats.iter().flatten().count();
            self.push_event(SequencerEvent::MatchStarted {
                tick: self.open,
                players,
            });
            self.start_clock();
            self.flush_all();
        }
        self.playing
    }

    /// Seals every tick that is due.
    pub(super) fn seal_due(&mut self) {
        if !self.start_if_due() {
            return;
        }
        self.adapt_delay();
        let mut sealed = false;
        loop {
            if self.paused() || self.open.next().is_none() {
                break;
            }
            let due = match self.config.policy {
                Policy::Deadline { .. } => self.deadline_due(),
                Policy::WaitForAll { abandon_after } => self.all_in(abandon_after),
            };
            match due {
                Due::Stop => break,
                Due::Again => continue,
                Due::Sealed => {
                    sealed = true;
                    continue;
                }
                Due::Seal => {}
            }
            self.waits.clear();
            self.seal_one();
            sealed = true;
        }
        if sealed {
            // New frames go at once, except to a link that bundles them
            // (see `link::Pace`): there they wait for its next datagram.
            for i in 0..self.conns.len() {
                if self.conns[i].link.bundle() <= 1 || self.send_due(i) <= self.now {
                    self.conns[i].link.flush = true;
                }
            }
        }
    }

    /// Under `Deadline`: the open tick is due on the clock, or sealed at
    /// once for a player alone as its input arrives.
    fn deadline_due(&mut self) -> Due {
        // Nobody playing (joiners play once caught up): stop
        // the clock rather than seal empty frames for nobody;
        // the next player restarts it.
        if !self.anyone_live() {
            self.clock = None;
            return Due::Stop;
        }
        // Single-player mode: a player alone has its input for
        // the open tick sealed as it arrives, with no wait for
        // the clock (which then counts from a tick and a round
        // trip later, sealing ticks it sends nothing for: a game
        // committing every tick always comes first).
        let solo = self.solo_seat();
        if self.solo != solo {
            self.switch_solo(solo);
        }
        let in_pace = self.solo_in_pace_from().is_none_or(|at| at <= self.now);
        let ready = in_pace
            && solo
                .and_then(|p| self.seats[p.index()].as_ref())
                .is_some_and(|s| s.pending.contains_key(&self.open));
        if ready {
            self.seal_one();
            // A tick more, and the player's round trip: its
            // next input has time to come.
            let period = Duration::from_secs(1) / self.config.tick_rate;
            let rtt = solo
                .and_then(|p| self.seat_conn(p))
                .and_then(|i| self.conns[i].link.rtt())
                .unwrap_or_default()
                .min(SOLO_MAX_RTT);
            self.clock = Some((self.now + period + rtt, self.open));
            return Due::Sealed;
        }
        match self.next_seal_at() {
            Some(at) if at <= self.now => Due::Seal,
            _ => Due::Stop,
        }
    }

    /// Under `WaitForAll`: every playing seat's input for the open tick is
    /// in, or whom it waits on (abandoning a seat silent for
    /// `abandon_after`).
    fn all_in(&mut self, abandon_after: Duration) -> Due {
        if !self.anyone_live() {
            self.waits.clear();
            return Due::Stop;
        }
        let blocked = self.blocked();
        if !blocked.is_empty() {
            // Give up on whoever has been silent too long.
            let mut dropped = false;
            for s in &blocked {
                // Silence is about inputs, not datagrams: keeping
                // the connection alive holds nobody up for long.
                // It counts from when the game began waiting on
                // the seat, since nobody can send input while
                // the game waits on someone else.
                let now = self.now;
                let seat = self.seats[s.index()].as_mut();
                let silent = seat.is_none_or(|seat| {
                    let since = *seat.waited_since.get_or_insert(now);
                    now - seat.last_input.max(since) >= abandon_after
                });
                let seat = self.seats[s.index()].as_ref();
                let conn = seat
                    .and_then(|seat| seat.conn)
                    .and_then(|p| self.conn_index(p));
                if let (true, Some(i)) = (silent, conn) {
                    self.close(
                        i,
                        Closing::Bye(
                            ByeReason::Timeout,
                            "abandoned: the game waited on your input too long".into(),
                        ),
                        DropReason::Abandoned,
                    );
                    dropped = true;
                }
            }
            if dropped {
                return Due::Again;
            }
            let blocked = if self.someone_ahead() {
                blocked
            } else {
                Vec::new()
            };
            // Inputs for a tick arrive a little apart: the room
            // is waiting on someone (and says so) once the open
            // tick has waited a tick period and their links' jitter.
            let after = self.naming_after(&blocked);
            if let Some(old) = self.waits.update(&blocked, self.now, after) {
                if old.is_empty() {
                    self.stats.stalls += 1;
                }
                // Those it names, or names no more, hear it at once (a
                // player waited on paces faster to catch up, see
                // `ClientSession::ready_to_pace`); the rest with their next
                // frame.
                let named = self.waits.named();
                for c in &mut self.conns {
                    if c.seat
                        .is_some_and(|s| old.contains(&s) != named.contains(&s))
                    {
                        c.link.flush = true;
                    }
                }
            }
            return Due::Stop;
        }
        Due::Seal
    }

    /// When a player alone may have the open tick sealed, if not at any
    /// time: never faster than the tick rate allows, give or take the lead
    /// a client may have.
    fn solo_in_pace_from(&self) -> Option<Instant> {
        let (t0, k0) = self.solo_pace?;
        let lead = u64::from(self.delay) + u64::from(self.config.max_lead);
        // The open tick is in pace once this many whole periods passed.
        let periods = (u64::from(self.open.since(k0)) + 1)
            .checked_sub(lead)
            .filter(|&p| p > 0)?;
        let micros = periods
            .saturating_mul(1_000_000)
            .div_ceil(u64::from(self.config.tick_rate.max(1)));
        Some(t0 + Duration::from_micros(micros))
    }

    /// When a player alone, its input for the open tick in, has it sealed
    /// by time passing alone (see [`solo_in_pace_from`](Self::solo_in_pace_from)).
    pub(super) fn solo_seal_at(&self) -> Option<Instant> {
        if !matches!(self.config.policy, Policy::Deadline { .. }) || self.paused() {
            return None;
        }
        let seat = self.solo_seat()?;
        let pending = self.seats[seat.index()]
            .as_ref()
            .is_some_and(|s| s.pending.contains_key(&self.open));
        pending.then(|| self.solo_in_pace_from()).flatten()
    }

    /// The one seat that plays, when only one does (`Deadline`'s
    /// single-player mode).
    pub(super) fn solo_seat(&self) -> Option<PlayerId> {
        let mut live = self
            .seats
            .iter()
            .enumerate()
            .filter(|(_, s)| s.as_ref().is_some_and(|s| s.live && s.conn.is_some()))
            .map(|(i, _)| PlayerId(i as u16));
        let first = live.next();
        live.next().is_none().then_some(first).flatten()
    }

    /// Enters or leaves single-player mode. Leaving it, the player is told
    /// its input came late, so it stamps its next input `delay` ticks ahead
    /// again (the ticks between run neutral for it: nothing it committed is
    /// dropped or run twice).
    pub(super) fn switch_solo(&mut self, solo: Option<PlayerId>) {
        if let Some(was) = self.solo
            && solo.is_none()
            && let Some(s) = self.seats[was.index()].as_mut()
        {
            s.slack = s.slack.min(-1);
        }
        if solo.is_none() {
            // The clock takes over from now, whatever wait solo mode set.
            self.solo_pace = None;
            if self.clock.is_some_and(|(at, _)| at > self.now) {
                self.clock = Some((self.now, self.open));
            }
        } else if self.solo.is_none() || self.solo_pace.is_none() {
            self.solo_pace = Some((self.now, self.open));
        }
        self.solo = solo;
        self.flush_all();
    }

    /// Whether any seat plays (is taken by a connected player and, if it
    /// joined from a snapshot, caught up).
    pub(super) fn anyone_live(&self) -> bool {
        self.live_players() > 0
    }

    /// How long the open tick waits on `seats` before it names them (see
    /// [`wait::worth_naming_after`]).
    pub(super) fn naming_after(&self, seats: &[PlayerId]) -> Duration {
        let jitter = seats
            .iter()
            .filter_map(|s| self.seat_conn(*s))
            .filter_map(|i| self.conns[i].link.jitter())
            .max()
            .unwrap_or_default();
        wait::worth_naming_after(self.period(), jitter)
    }

    /// How many seats play (see [`anyone_live`](Self::anyone_live)).
    pub(super) fn live_players(&self) -> u32 {
        let n = self
            .seats
            .iter()
            .flatten()
            .filter(|s| s.live && s.conn.is_some())
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Seats without input for the open tick. While every seat lacks it, the
    /// tick is simply in the future; `waiting` only names seats holding up
    /// others who already sent theirs.
    pub(super) fn blocked(&self) -> Vec<PlayerId> {
        let t = self.open;
        self.seats
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.as_ref()?;
                // A held seat (its connection dropped) holds nobody up; one
                // handed over by a host that left does, while its player
                // is on its way back.
                let here = s.conn.is_some() || s.handed_over;
                (s.live && here && t >= s.from && !s.pending.contains_key(&t))
                    .then_some(PlayerId(i as u16))
            })
            .collect()
    }

    pub(super) fn someone_ahead(&self) -> bool {
        self.seats
            .iter()
            .flatten()
            .any(|s| s.live && s.taken.end() > self.open && self.open >= s.from)
    }

    pub(super) fn seal_one(&mut self) {
        let t = self.open;
        let missing = match self.config.policy {
            Policy::Deadline { missing } => missing,
            Policy::WaitForAll { .. } => MissingInput::Neutral,
        };
        let inputs = self
            .seats
            .iter_mut()
            .map(|s| {
                let s = s.as_mut()?;
                s.waited_since = None;
                if t < s.from || !s.live {
                    return Some(I::default());
                }
                Some(match s.pending.remove(&t) {
                    Some(input) => {
                        s.last = input.clone();
                        input
                    }
                    // A held seat's player is not there to hold a key down.
                    None => match missing {
                        MissingInput::RepeatLast if s.conn.is_some() => s.last.clone(),
                        _ => I::default(),
                    },
                })
            })
            .collect();
        let events = self.tick_events.remove(&t).unwrap_or_default();
        let frame = Frame {
            tick: t,
            inputs,
            events,
        };
        if let Some(sim) = self.simulation.as_mut() {
            sim.step(&frame);
            // Its chain gives the references: clients reporting the same
            // ticks are told when they differ.
            if t.since(self.config.first_tick)
                .is_multiple_of(self.config.sim_check_every.max(1))
            {
                self.referee.simulated(t, sim.hash());
            }
        }
        self.history.push(frame);
        self.stats.sealed += 1;
        self.seal_rate.add(self.now, 1);
        self.open = t.saturating_add(1);
        // A snapshot held for delayed spectators goes the moment it is old
        // enough: the open tick moves here, and no timer may come before
        // the next seal (a room that seals on inputs has none due).
        self.release_held();
        let keep = self.config.history as usize;
        if self.history.len() >= keep + keep / 2 {
            let mut cut = self.history.len() - keep;
            // Joiners need the frames after their snapshot, and a client
            // replaying the game (one resumed while nobody could donate) the
            // frames from its start: kept for them, up to eight times the
            // history.
            let joiners_from = self
                .conns
                .iter()
                .filter(|c| c.closing.is_none() && (c.join.is_some() || c.replaying))
                .map(|c| c.next)
                // A joiner still waiting gets the snapshot being fetched,
                // and the frames after its tick; while the game can still be
                // replayed from its start, it stays so (if every donor goes,
                // the joiners replay it instead of waiting for ever).
                .chain(self.fetch.as_ref().map(|f| f.tick.saturating_add(1)))
                .chain(
                    (self.replayable()
                        && self
                            .conns
                            .iter()
                            .any(|c| matches!(c.join, Some(Join::Waiting))))
                    .then_some(self.config.first_tick),
                )
                .min();
            if let Some(from) = joiners_from
                && self.history.len() < keep.saturating_mul(8)
            {
                cut = cut.min(from.since(self.history_base.min(from)) as usize);
            }
            self.history.drain(..cut);
            self.history_base = self.history_base.saturating_add(cut as u32);
            for i in 0..self.conns.len() {
                if self.conns[i].next < self.history_base && self.conns[i].closing.is_none() {
                    // A player's seat is held: it may come back on a new
                    // connection and get a snapshot.
                    let (kind, reason) = match self.silence_reason(i) {
                        DropReason::Lost => (ByeReason::Timeout, DropReason::Lost),
                        _ => (ByeReason::Kicked, DropReason::FellBehind),
                    };
                    self.close(
                        i,
                        Closing::Bye(kind, "fell further behind than the history".into()),
                        reason,
                    );
                }
            }
        }
    }
}
