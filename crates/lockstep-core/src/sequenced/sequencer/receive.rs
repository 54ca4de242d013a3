//! A connection's datagram: checked, decoded once, and each message
//! handed to the rule that owns it.

use super::*;

/// A datagram's inputs, checked, by tick, and the floor it named.
type Checked<I> = (Vec<(Tick, I)>, Option<Tick>);

impl<I: Input> Sequencer<I> {
    /// A datagram from connection `i`: within its rates and the size
    /// limit, decoded once, its inputs checked whole, then each message
    /// taken. Breaking a rule closes the connection, and nothing of the
    /// datagram is acted on.
    pub(super) fn take_conn(&mut self, i: usize, datagram: &[u8]) -> Result<(), SequencerError> {
        if self.conns[i].closing.is_some() {
            return Ok(());
        }
        self.within_limits(i, datagram)?;
        let d = match self.decoder.decode(datagram, self.open) {
            Ok(d) => d,
            Err(e) => return Err(self.violation(i, ErrorCode::Malformed, e.to_string())),
        };
        let (inputs, floor) = self.checked_inputs(i, &d)?;
        self.note_position(i, &d, inputs.len())?;
        self.take_messages(i, d, inputs, floor);
        Ok(())
    }

    /// Connection `i` was heard: within its datagram rate (a snapshot's
    /// transfer allows more) and the size limit, or closed.
    fn within_limits(&mut self, i: usize, datagram: &[u8]) -> Result<(), SequencerError> {
        let now = self.now;
        {
            let c = &mut self.conns[i];
            c.link.heard(now);
            let transferring = matches!(c.join, Some(Join::Receiving(_)))
                || self.fetch.as_ref().is_some_and(|f| f.donor == c.peer);
            let allowed =
                (transferring && c.snapshot_rate.take(1, now)) || c.datagram_rate.take(1, now);
            if !allowed {
                return Err(self.violation(
                    i,
                    ErrorCode::RateLimited,
                    "too many datagrams per second".into(),
                ));
            }
        }
        if datagram.len() > self.config.max_datagram {
            return Err(self.violation(
                i,
                ErrorCode::TooLarge,
                format!(
                    "datagram of {} bytes over the {}-byte limit",
                    datagram.len(),
                    self.config.max_datagram
                ),
            ));
        }
        Ok(())
    }

    /// The inputs of connection `i`'s datagram, every one its own seat's,
    /// within the horizon, the input rate and the input size limit, by
    /// tick; and its floor, if it named one (see [`Taken`]). The runs'
    /// headers are checked before any chain is decoded: a chain of
    /// unchanged inputs decodes to far more than its bytes (a kilobyte of
    /// one seat's runs to thousands of inputs), so only as many as the
    /// rate allows are ever decoded.
    fn checked_inputs(&mut self, i: usize, d: &Datagram<'_>) -> Result<Checked<I>, SequencerError> {
        let seat = self.conns[i].seat;
        let horizon = self
            .open
            .saturating_add(self.max_delay() + self.config.max_lead + 1);
        let mut floor = None;
        let mut count: u32 = 0;
        for m in &d.messages {
            let Message::Inputs(msg) = m else {
                continue;
            };
            let Some(s) = seat else {
                return Err(self.violation(
                    i,
                    ErrorCode::Violation,
                    "a spectator sent inputs".into(),
                ));
            };
            for (ack_seat, tick) in msg.acks.iter() {
                if ack_seat != s {
                    return Err(self.violation(
                        i,
                        ErrorCode::Violation,
                        format!("a floor for {ack_seat} from the connection playing {s}"),
                    ));
                }
                floor = floor.max(Some(tick));
            }
            for run in msg.runs {
                if run.seat != s {
                    return Err(self.violation(
                        i,
                        ErrorCode::Violation,
                        format!("input for {} from the connection playing {}", run.seat, s),
                    ));
                }
                // A run coded against an input we no longer hold is
                // skipped: its inputs come again against one we do.
                let recent = self.seats[s.index()].as_ref().map(|seat| &seat.recent);
                if crate::link::readable(&run, recent).is_none() {
                    continue;
                }
                if run.start.saturating_add(run.count.saturating_sub(1)) > horizon {
                    let t = run.start.max(horizon.saturating_add(1));
                    let text = format!("input for tick {t}, beyond tick {horizon}");
                    return Err(self.violation(i, ErrorCode::Violation, text));
                }
                count = count.saturating_add(run.count);
            }
        }
        if let Some(f) = floor.filter(|f| *f > horizon.saturating_add(1)) {
            let text = format!("a floor at tick {f}, beyond tick {horizon}");
            return Err(self.violation(i, ErrorCode::Violation, text));
        }
        if !self.conns[i].input_rate.holds(count, self.now) {
            return Err(self.violation(
                i,
                ErrorCode::RateLimited,
                "too many inputs per second".into(),
            ));
        }
        let mut inputs: Vec<(Tick, I)> = Vec::with_capacity(count as usize);
        let mut decoded = core::mem::take(&mut self.decoded);
        let checked = self.decode_runs(i, d, &mut decoded, &mut inputs);
        decoded.clear();
        self.decoded = decoded;
        checked.map(|()| (inputs, floor))
    }

    /// The readable runs of a datagram whose headers passed, decoded into
    /// `inputs` (through `decoded`), each input within the size limit.
    fn decode_runs(
        &mut self,
        i: usize,
        d: &Datagram<'_>,
        decoded: &mut Vec<I>,
        inputs: &mut Vec<(Tick, I)>,
    ) -> Result<(), SequencerError> {
        let Some(s) = self.conns[i].seat else {
            return Ok(());
        };
        let mut scratch = Vec::new();
        for m in &d.messages {
            let Message::Inputs(msg) = m else {
                continue;
            };
            for run in msg.runs {
                let recent = self.seats[s.index()].as_ref().map(|seat| &seat.recent);
                let Some(reference) = crate::link::readable(&run, recent) else {
                    continue;
                };
                decoded.clear();
                if let Err(e) = run.decode_into(reference, decoded) {
                    return Err(self.violation(i, ErrorCode::Malformed, e.to_string()));
                }
                for k in 0..decoded.len() {
                    // An input the same as the one before it is as long.
                    if k > 0 && decoded[k] == decoded[k - 1] {
                        continue;
                    }
                    scratch.clear();
                    decoded[k].encode(&mut scratch);
                    if scratch.len() > self.config.max_input_len {
                        return Err(self.violation(
                            i,
                            ErrorCode::TooLarge,
                            format!(
                                "input of {} bytes over the {}-byte limit",
                                scratch.len(),
                                self.config.max_input_len
                            ),
                        ));
                    }
                }
                let start = run.start;
                inputs.extend(
                    decoded
                        .drain(..)
                        .enumerate()
                        .map(|(k, input)| (start.saturating_add(k as u32), input)),
                );
            }
        }
        Ok(())
    }

    /// Connection `i` sent `inputs` inputs (within its input rate, or it is
    /// closed) and says it lacks frames from the datagram's base on.
    fn note_position(
        &mut self,
        i: usize,
        d: &Datagram<'_>,
        inputs: usize,
    ) -> Result<(), SequencerError> {
        let frontier = self.frontier(&self.conns[i]);
        {
            let c = &mut self.conns[i];
            let n = u32::try_from(inputs).unwrap_or(u32::MAX);
            if !c.input_rate.take(n, self.now) {
                return Err(self.violation(
                    i,
                    ErrorCode::RateLimited,
                    "too many inputs per second".into(),
                ));
            }
            // A joiner cannot know where its frames start before its
            // snapshot's first chunk: its position counts from then on.
            if !Self::before_snapshot(c) {
                c.lacks_from(c.next.max(d.base.min(frontier)));
                c.frames_sent.heard(self.now);
                // Caught up once within a lead of the open tick.
                c.replaying =
                    c.replaying && frontier.since(c.next) > self.delay + self.config.max_lead;
            }
            // A spectator says nothing when it has caught up: its position
            // shows it.
            if c.seat.is_none()
                && matches!(c.join, Some(Join::CatchingUp))
                && c.next.saturating_add(1) >= frontier
            {
                c.join = None;
            }
        }

        Ok(())
    }

    /// Each message of connection `i`'s datagram, handed to what owns it,
    /// then its inputs.
    fn take_messages(
        &mut self,
        i: usize,
        mut d: Datagram<'_>,
        inputs: Vec<(Tick, I)>,
        floor: Option<Tick>,
    ) {
        let now = self.now;
        let seat = self.conns[i].seat;
        let mut hello_seen = false;
        let peer = self.conns[i].peer;
        // The last donor, once it sends no more chunks, got our thanks.
        if self.thanked.is_some_and(|(p, _)| p == peer)
            && !d
                .messages
                .iter()
                .any(|m| matches!(m, Message::SnapshotChunk(_)))
        {
            self.thanked = None;
        }
        let mut checks = Incoming::default();
        for m in &d.messages {
            checks.take(m);
        }
        self.take_checks(i, &checks);
        for m in d.messages.drain(..) {
            match m {
                Message::Hello(_) => hello_seen = true,
                Message::Pause { frame } => {
                    if let Some(s) = seat {
                        self.pause_asked(s, frame);
                    }
                }
                Message::Resume { .. } if seat.is_some() => self.resume(),
                m @ (Message::Ping { .. } | Message::Pong { .. }) => {
                    let (to_it, from_it) = self.conns[i].link.take_message(&m, now);
                    self.stats.datagrams_lost_out += to_it;
                    self.stats.datagrams_lost_in += from_it;
                }
                Message::Bye { .. } => {
                    self.close(
                        i,
                        Closing::Bye(ByeReason::Leaving, String::new()),
                        DropReason::Left,
                    );
                    return;
                }
                Message::SnapshotChunk(c) => self.take_chunk(i, &c),
                Message::SnapshotAck(a) => {
                    let done = match self.conns[i].join.as_mut() {
                        Some(Join::Receiving(tx)) => {
                            tx.take_ack(&a, now);
                            tx.done()
                        }
                        _ => false,
                    };
                    if done {
                        self.conns[i].join = Some(Join::CatchingUp);
                    }
                }
                Message::CaughtUp { .. } => self.caught_up(i),
                Message::MemberAck { seat, version } => self.roster_acked(i, seat, version),
                // Readiness counts only in the lobby, and changes at most
                // every `READY_EVERY` (each change goes to every client);
                // a change put off is sent again until the roster shows it.
                Message::Ready { ready } if !self.playing => {
                    if let Some(s) = seat.and_then(|s| self.seats[s.index()].as_mut())
                        && s.ready != ready
                        && s.ready_at.is_none_or(|t| now - t >= READY_EVERY)
                    {
                        s.ready = ready;
                        s.ready_at = Some(now);
                    }
                }
                Message::DelayWanted { delay } => {
                    if let Some(s) = seat.and_then(|s| self.seats[s.index()].as_mut()) {
                        s.wants = Some(delay);
                    }
                }
                _ => {}
            }
        }
        self.decoder.recycle(d);
        self.conns[i].welcome_pending = hello_seen;
        // It has its Welcome, and the token in it: the one before is spent.
        if !hello_seen && let Some(s) = seat.and_then(|s| self.seats[s.index()].as_mut()) {
            s.previous = None;
        }
        if let Some(s) = seat {
            // Ticks its client says it will never send are given up: its
            // acknowledgement moves past them.
            if let Some((f, seat)) = floor.zip(self.seats[s.index()].as_mut())
                && seat.live
            {
                seat.taken.skip_to(f);
            }
            for (t, input) in inputs {
                self.accept_input(s, t, input);
            }
            self.conns[i].ack_pending = true;
        }
    }

    pub(super) fn accept_input(&mut self, seat: PlayerId, stamped: Tick, input: I) {
        let open = self.open;
        let deadline = matches!(self.config.policy, Policy::Deadline { .. });
        let horizon = open.saturating_add(self.max_delay() + self.config.max_lead + 1);
        let Some(s) = self.seats[seat.index()].as_mut() else {
            return;
        };
        let newest = stamped >= s.taken.end();
        if !s.live || stamped < s.from || !s.taken.take(stamped) {
            self.stats.duplicate_inputs += 1;
            return;
        }
        // What it took is what the seat's runs are read against (an input
        // refused here was never taken, whatever its client thinks).
        s.recent.note(stamped, &input);
        s.last_input = self.now;
        // An input resent after later ones came says nothing of how early
        // they arrive.
        if newest {
            s.slack = i32::try_from(i64::from(stamped.get()) - i64::from(open.get())).unwrap_or(0);
        }
        let mut at = stamped;
        if at < open {
            if !deadline {
                return;
            }
            self.stats.late_inputs += 1;
            at = open;
        }
        while s.pending.contains_key(&at) {
            at = at.saturating_add(1);
        }
        // Late inputs queue behind each other, but no further than an input
        // may be stamped: a client that held back a run of ticks and sends
        // them all at once cannot fill the room's memory with its future.
        if at <= horizon {
            s.pending.insert(at, input);
        }
    }

    /// A client's checkpoints, questions and answers about its state.
    pub(super) fn take_checks(&mut self, i: usize, msgs: &Incoming<'_>) {
        let (peer, seat) = (self.conns[i].peer, self.conns[i].seat);
        // Acknowledgements ride on the next datagram: frames go every tick.
        self.conns[i].checks.took(msgs, &self.referee);
        let seated = self.seats.iter().flatten().count();
        // A client joining (or being resynced) runs a state not yet judged:
        // its checkpoints count once it caught up.
        let judged = self.conns[i].join.is_none();
        let from = self.conns[i].judged_from;
        // A spectator watching with a delay reports no tick it may not see
        // (a checkpoint of one would be a guess, the verdict its answer).
        let frontier = self.frontier(&self.conns[i]);
        for &cp in msgs.checkpoints.iter().filter(|c| judged && c.tick >= from) {
            if cp.tick >= frontier {
                continue;
            }
            for v in self.referee.vote(seat, peer, cp, seated) {
                self.stats.desyncs += 1;
                match &v {
                    Verdicted::Desync { peer, verdict, .. } => {
                        if let Some(j) = self.conn_index(*peer) {
                            self.conns[j].diverged = true;
                        }
                        self.resync(*peer, *verdict);
                    }
                    // Nobody can tell who is right, so nobody is resynced;
                    // each is told its state differs from another's, and
                    // may ask the others where it parted from them.
                    Verdicted::Split { told, .. } => {
                        for (p, other) in told {
                            if let Some(j) = self.conn_index(*p) {
                                self.conns[j].diverged = true;
                                self.conns[j].checks.tell_split(*other);
                            }
                        }
                    }
                }
                let ev = match v {
                    Verdicted::Desync { verdict, peer, got } => SequencerEvent::Desync {
                        tick: verdict.tick,
                        peer,
                        expected: verdict.value,
                        got,
                    },
                    Verdicted::Split { tick, hashes, .. } => {
                        SequencerEvent::ChecksumSplit { tick, hashes }
                    }
                };
                self.push_event(ev);
            }
        }
        let now = self.now;
        // Only a client found diverged asks, and only about ticks the
        // clients still hold: anything else is passed to nobody.
        let low = self.open.saturating_sub(self.config.checksum_window as u32);
        let ticks: Vec<Tick> = msgs
            .query
            .map(|(_, t)| {
                t.iter()
                    .copied()
                    .filter(|t| *t >= low && *t < frontier)
                    .collect()
            })
            .unwrap_or_default();
        if let Some((id, _)) = msgs.query
            && self.conns[i].diverged
            && !ticks.is_empty()
            && self.conns[i].checks.may_ask(now)
        {
            let ticks = ticks.as_slice();
            let live = |p: PeerId| {
                self.conns
                    .iter()
                    .any(|c| c.peer == p && c.closing.is_none() && !Self::before_snapshot(c))
            };
            match self.referee.route(peer, id, ticks, live) {
                Routed::Forward { to, id } => {
                    for to in to {
                        if let Some(j) = self.conn_index(to) {
                            self.conns[j].checks.query = Some((id, ticks.to_vec()));
                            self.conns[j].link.flush = true;
                        }
                    }
                }
                Routed::Answer(entries) => {
                    self.conns[i].checks.answer = Some((id, entries));
                    self.conns[i].link.flush = true;
                }
                Routed::Nowhere => {}
            }
        }
        if let Some((id, entries)) = msgs.answer
            && let Some((asker, answer)) = self.referee.answered(peer, id, entries)
            && let Some(j) = self.conn_index(asker)
        {
            self.conns[j].checks.answer = Some(answer);
            self.conns[j].link.flush = true;
        }
    }

    /// A seat asks for a pause freezing at `frame`: granted while its budget
    /// lasts; a request repeated or delayed in the network is not new.
    pub(super) fn pause_asked(&mut self, seat: PlayerId, frame: Tick) {
        let Some(s) = self.seats[seat.index()].as_mut() else {
            return;
        };
        if s.pause_asked.is_some_and(|f| frame <= f) {
            return;
        }
        s.pause_asked = Some(frame);
        // The budget belongs to the seat for the room's life: leaving and
        // coming back does not refill it.
        if self.paused() || self.pauses_used[seat.index()] >= self.config.pauses_per_seat {
            return;
        }
        self.pauses_used[seat.index()] += 1;
        self.pause();
    }

    /// A joiner says it caught up: a player's seat plays from the open tick
    /// plus the delay, and the stream says so at the open tick.
    pub(super) fn caught_up(&mut self, i: usize) {
        if !matches!(self.conns[i].join, Some(Join::CatchingUp)) {
            return;
        }
        let (peer, seat) = (self.conns[i].peer, self.conns[i].seat);
        self.conns[i].join = None;
        let open = self.open;
        let from = open.saturating_add(self.delay);
        if let Some(player) = seat
            && let Some(s) = self.seats[player.index()].as_mut()
        {
            s.live = true;
            s.due_from(from);
            s.last_input = self.now;
            // A joiner the delay moved under may have missed a change (one
            // in a frame before its snapshot's tick, after its Welcome):
            // the frame it goes live at states the delay its inputs are due
            // by. One the delay did not move under knows it from its
            // Welcome, and the other games are not told of a change that
            // is none.
            let delay = self.delay;
            let moved = core::mem::take(&mut self.conns[i].delay_moved);
            let stated = self.tick_events.get(&open).is_some_and(|evs| {
                evs.iter()
                    .rev()
                    .take_while(|e| !matches!(e, SystemEvent::CaughtUp { .. }))
                    .any(|e| *e == SystemEvent::DelayChanged { delay })
            });
            if self.config.adaptive.is_some() && moved && !stated {
                let evs = self.tick_events.entry(open).or_default();
                evs.push(SystemEvent::DelayChanged { delay });
            }
            self.add_tick_event(open, SystemEvent::CaughtUp { player });
            self.start_clock();
        }
        self.push_event(SequencerEvent::CaughtUp {
            peer,
            seat,
            tick: open,
        });
    }
}
