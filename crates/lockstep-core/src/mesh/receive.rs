//! A peer's datagram: decoded once and checked whole ([`Received`]),
//! then each part handed to the rule that owns it.

use super::*;

/// A datagram's messages, read and checked, before any of them is acted on.
pub(super) struct Received<'a, I> {
    pub(super) hello: Option<u64>,
    pub(super) reject: Option<wire::RejectReason<'a>>,
    pub(super) welcomed: bool,
    pub(super) bye: bool,
    pub(super) acks: Vec<(PlayerId, Tick)>,
    pub(super) inputs: Vec<(PlayerId, Tick, I)>,
    pub(super) frames: Vec<Frame<I>>,
    pub(super) checks: Incoming<'a>,
    pub(super) pause: Option<Tick>,
    pub(super) lifted: Option<Tick>,
    pub(super) abandon: Option<&'a Abandon>,
    pub(super) ping: Option<u32>,
    pub(super) pong: Option<(u32, u32, u32, u32)>,
    pub(super) waits_on_itself: bool,
    pub(super) waits_on_us: bool,
    pub(super) wants: Vec<(PlayerId, Vec<(Tick, u32)>)>,
    pub(super) chunks: Vec<wire::SnapshotChunk<'a>>,
    pub(super) snapshot_ack: Option<wire::SnapshotAck>,
    pub(super) resync_request: Option<(u32, Tick)>,
}

impl<I> Default for Received<'_, I> {
    fn default() -> Self {
        Self {
            hello: None,
            reject: None,
            welcomed: false,
            bye: false,
            acks: Vec::new(),
            inputs: Vec::new(),
            frames: Vec::new(),
            checks: Incoming::default(),
            pause: None,
            lifted: None,
            abandon: None,
            ping: None,
            pong: None,
            waits_on_itself: false,
            waits_on_us: false,
            wants: Vec::new(),
            chunks: Vec::new(),
            snapshot_ack: None,
            resync_request: None,
        }
    }
}

/// How input (or a want) from a peer is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Not the sender's to send, or out of reach.
    Refused,
    /// For a tick already run.
    Redundant,
    /// The sender's own seat's.
    Own,
    /// A frozen seat's, forwarded.
    Forwarded,
}

impl<I: Input> MeshSession<I> {
    pub(super) fn take_datagram(
        &mut self,
        from: PeerId,
        datagram: &[u8],
    ) -> Result<(), DatagramError> {
        let idx = self
            .peers
            .iter()
            .position(|p| p.id == from)
            .ok_or(DatagramError::UnknownPeer(from))?;
        let now = self.now;
        self.peers[idx].link.received(now, datagram.len());
        // The header holds the low 16 bits of the sender's tick, read as
        // the tick nearest to ours between players (never more than a lead
        // apart), and to where the sender was last when an observer is at
        // either end: right unless it moved 32 768 ticks since, which only
        // an observer far behind (or jumping ahead from a snapshot) does.
        // Those datagrams open with the full tick (a Hello's `resume_from`,
        // a Welcome's `tick`): the anchor the header is read against.
        let anchor = wire::peek_anchor(datagram);
        let players = self.local_seat.is_some() && self.peers[idx].seat.is_some();
        let guess = if players {
            self.next_tick
        } else {
            self.peers[idx].next_tick
        };
        let reference = anchor.unwrap_or(guess);
        let d = match self.decoder.decode(datagram, reference) {
            Ok(d) => d,
            Err(e) => {
                if let WireError::UnsupportedVersion { ours, theirs } = e {
                    self.note_incompatible(idx, Incompatibility::Protocol { ours, theirs });
                }
                return Err(e.into());
            }
        };
        let anchored = anchor.is_some();
        if let Some(reason) = self.peers[idx].incompatible {
            return Err(DatagramError::Incompatible(reason));
        }
        // Everything is validated and decoded before any state changes.
        let r = self.read(idx, &d)?;
        self.take_handshake(idx, &r)?;
        self.take_peer_state(idx, &r, d.base, anchored);
        self.take_pause(idx, &r);
        self.take_bye(idx, &r);
        self.take_abandon(idx, r.abandon);
        self.take_inputs(idx, r.inputs, &r.wants);
        self.take_frames(idx, r.frames);
        for c in &r.chunks {
            self.take_chunk(idx, c);
        }
        if let Some(ack) = r.snapshot_ack {
            self.take_snapshot_ack(idx, &ack);
        }
        if let Some((id, after)) = r.resync_request {
            self.take_resync_request(idx, id, after);
        }
        self.plan_resync();
        self.progress_abandonments();
        self.plan_snapshots();
        self.flush_chunks();
        self.note_arrivals();
        self.decoder.recycle(d);
        Ok(())
    }

    /// Reads a datagram's messages into one [`Received`], checking every
    /// seat, input size and frame shape.
    pub(super) fn read<'a>(
        &mut self,
        idx: usize,
        d: &'a Datagram<'a>,
    ) -> Result<Received<'a, I>, DatagramError> {
        let width = self.seats.len();
        let seat_ok = |s: PlayerId| {
            if s.index() < width {
                Ok(())
            } else {
                Err(DatagramError::Violation("seat that does not exist"))
            }
        };
        let mut r = Received::default();
        for m in &d.messages {
            match m {
                Message::Hello(h) => r.hello = Some(h.fingerprint),
                Message::Status(st) => {
                    r.waits_on_itself = !st.waiting.is_empty()
                        && st.waiting.iter().all(|s| Some(*s) == self.peers[idx].seat);
                    r.waits_on_us = self.local_seat.is_some_and(|s| st.waiting.contains(&s));
                }
                Message::Welcome(_) => r.welcomed = true,
                Message::Reject(rej) => r.reject = Some(*rej),
                Message::Bye { .. } => r.bye = true,
                Message::Inputs(msg) => {
                    for (s, t) in msg.acks {
                        seat_ok(s)?;
                        r.acks.push((s, t));
                    }
                    let sender_seat = self.peers[idx].seat;
                    for run in msg.runs {
                        seat_ok(run.seat)?;
                        // A run of the sender's own seat may be coded
                        // against an input it sent us; one we no longer
                        // hold is skipped (its inputs come again). Input
                        // forwarded for another seat never is.
                        if run.back > 0 && Some(run.seat) != sender_seat {
                            return Err(DatagramError::Violation(
                                "forwarded input coded against a reference",
                            ));
                        }
                        let Some(reference) =
                            crate::link::readable(&run, Some(&self.seat_inputs[run.seat.index()]))
                        else {
                            continue;
                        };
                        let mut decoded = core::mem::take(&mut self.run_inputs);
                        decoded.clear();
                        run.decode_into(reference, &mut decoded)?;
                        for (k, input) in decoded.iter().enumerate() {
                            // An input the same as the one before it is
                            // the same size.
                            if k > 0 && decoded[k - 1] == *input {
                                continue;
                            }
                            self.scratch.clear();
                            input.encode(&mut self.scratch);
                            if self.scratch.len() > self.config.max_input_len {
                                return Err(DatagramError::Violation("input over the size limit"));
                            }
                        }
                        let ticks = (0..).map(|k| run.start.saturating_add(k));
                        r.inputs.extend(
                            ticks
                                .zip(decoded.drain(..))
                                .map(|(tick, input)| (run.seat, tick, input)),
                        );
                        self.run_inputs = decoded;
                    }
                }
                Message::Frames(f) => {
                    if f.seats as usize != width {
                        return Err(DatagramError::Violation(
                            "frame with the wrong number of seats",
                        ));
                    }
                    // Only an observer takes frames, from a player, and
                    // no more than its window holds: a body describes up
                    // to eight frames a byte, so frames decoded for anyone
                    // else (a forged datagram's, say) would cost far more
                    // than the bytes that carried them.
                    let window = self.config.observer_window as usize;
                    if self.local_seat.is_some()
                        || self.peers[idx].seat.is_none()
                        || r.frames.len() >= window
                    {
                        continue;
                    }
                    // Mesh players code frames against no reference.
                    r.frames.extend(f.decode::<I>(None)?);
                }
                m @ (Message::Checkpoint(_)
                | Message::CheckpointAck { .. }
                | Message::ChainQuery { .. }
                | Message::ChainAnswer { .. }) => {
                    r.checks.take(m);
                }
                Message::Pause { frame } => r.pause = Some(*frame),
                Message::Resume { lifted } => r.lifted = Some(*lifted),
                Message::Abandon(a) => {
                    let endorsed = a.endorsements.iter().map(|e| &e.seat);
                    let frozen = a.frozen.iter().map(|(s, _)| s);
                    for &s in a.votes.iter().chain(frozen).chain(endorsed) {
                        seat_ok(s)?;
                    }
                    r.abandon = Some(a);
                }
                Message::Ping { stamp } => r.ping = Some(*stamp),
                Message::Pong {
                    stamp,
                    held_ms,
                    received,
                    sent,
                } => r.pong = Some((*stamp, *held_ms, *received, *sent)),
                Message::SnapshotChunk(c) => r.chunks.push(*c),
                Message::SnapshotAck(a) => r.snapshot_ack = Some(*a),
                Message::SnapshotRequest { id, tick } => r.resync_request = Some((*id, *tick)),
                Message::CaughtUp { .. }
                | Message::Resync { .. }
                | Message::Error { .. }
                | Message::Challenge { .. }
                | Message::Padding { .. }
                | Message::Member(_)
                | Message::MemberAck { .. }
                | Message::Lobby(_)
                | Message::Ready { .. }
                | Message::Takeover { .. }
                | Message::TakeoverAck { .. }
                | Message::DelayWanted { .. } => {}
                Message::DelayWants { seat, changes } => {
                    seat_ok(*seat)?;
                    r.wants.push((*seat, changes.clone()));
                }
            }
        }
        Ok(r)
    }

    /// The handshake: nothing is taken from a peer before its Hello shows
    /// it runs the same game.
    pub(super) fn take_handshake(
        &mut self,
        idx: usize,
        r: &Received<'_, I>,
    ) -> Result<(), DatagramError> {
        if let Some(rej) = r.reject {
            let reason = Incompatibility::from_reject(rej);
            self.note_incompatible(idx, reason);
            return Err(DatagramError::Incompatible(reason));
        }
        match r.hello {
            Some(fp) if fp != self.config.fingerprint => {
                let ours = self.config.fingerprint;
                self.peers[idx].refused = Some(Refusal::Game { ours, theirs: fp });
                self.peers[idx].link.flush = true;
                let reason = Incompatibility::Game { ours, theirs: fp };
                self.note_incompatible(idx, reason);
                Err(DatagramError::Incompatible(reason))
            }
            Some(_) => {
                let p = &mut self.peers[idx];
                p.greeted = true;
                p.owe_welcome = true;
                Ok(())
            }
            None if !self.peers[idx].greeted => {
                Err(DatagramError::Violation("datagram before hello"))
            }
            None => {
                self.peers[idx].owe_welcome = false;
                Ok(())
            }
        }
    }

    /// What the datagram says about its sender: it is alive, where it is,
    /// what it holds, its round trip and its checksums.
    pub(super) fn take_peer_state(
        &mut self,
        idx: usize,
        r: &Received<'_, I>,
        base: Tick,
        anchored: bool,
    ) {
        let now = self.now;
        let (local_plays, local_next) = (self.local_seat.is_some(), self.next_tick);
        let p = &mut self.peers[idx];
        let recovered = p.link.heard(now);
        if r.welcomed {
            p.welcomed = true;
        }
        if recovered {
            let (peer, player) = (p.id, p.seat);
            self.push_event(Event::Recovered { peer, player });
        }
        let p = &mut self.peers[idx];
        // An anchored position is the sender's own word, also backwards
        // (it restarted, or an earlier reading was off by 65 536). An
        // observer's position is its latest datagram's, never past ours (it
        // runs only frames the players ran): a datagram from before it
        // jumped ahead, read against the jump, can land anywhere, and must
        // not stick as a maximum would.
        p.next_tick = if anchored {
            base
        } else if p.seat.is_none() && local_plays {
            base.min(local_next)
        } else {
            p.next_tick.max(base)
        };
        p.waits_on_itself = r.waits_on_itself;
        p.waits_on_us = r.waits_on_us;
        if let Some(stamp) = r.ping {
            p.link.pinged_by(stamp, now);
        }
        if let Some(pong) = r.pong {
            p.link.ponged(now, pong);
        }
        for &(seat, tick) in &r.acks {
            let a = &mut p.acks[seat.index()];
            *a = Some(a.map_or(tick, |old| old.max(tick)));
            if Some(seat) == self.local_seat {
                p.ack_watch.acked(tick, now);
            }
        }
        // An acknowledgement behind the record is an old one (a datagram
        // that came late).
        if let Some(me) = self.local_seat.filter(|_| p.seat.is_some()) {
            let lacks = p.lacks(me);
            if lacks > p.inputs_sent.base() {
                p.inputs_sent.lacks_from(lacks);
            }
            if r.acks.iter().any(|(s, _)| *s == me) {
                p.inputs_sent.heard(now);
            }
        }
        if let Some(l) = r.lifted {
            p.lifted_known = p.lifted_known.max(Some(l));
        }
        // Whether it still needs our resume is in its own datagram: one that
        // freezes on no lifted pause needs none (an idle peer is not told
        // again and again); one still frozen on a pause we lifted missed
        // the resume and is told again.
        if let Some(lifted) = self.pause.lifted() {
            match (p.seat, r.pause) {
                (Some(_), Some(f)) if f <= lifted => p.lifted_known = None,
                (Some(_), Some(_)) => {}
                (Some(_), None) => p.lifted_known = p.lifted_known.max(Some(lifted)),
                // An observer sends no pause of its own: it knows once it
                // has run past the frame.
                (None, _) if p.next_tick > lifted => {
                    p.lifted_known = p.lifted_known.max(Some(lifted));
                }
                (None, _) => {}
            }
        }
        let now = self.now;
        let p = &mut self.peers[idx];
        for o in p.checks.receive(&self.checks, &r.checks, now) {
            self.check_outcome(idx, o);
        }
        let p = &mut self.peers[idx];
        p.link.flush |= p.checks.urgent(now);
    }

    /// Pause and resume: control state that must reach everyone. Only
    /// players in the game have a say: not observers, not abandoned seats.
    pub(super) fn take_pause(&mut self, idx: usize, r: &Received<'_, I>) {
        let in_game = self.peers[idx]
            .seat
            .is_some_and(|s| self.seats[s.index()].empty_from.is_none());
        if !in_game {
            return;
        }
        if let Some(f) = r.pause {
            let change = self.pause.receive_pause(f, self.next_tick);
            self.note_pause_change(change);
        }
        if let Some(f) = r.lifted {
            let change = self.pause.receive_resume(f, self.next_tick);
            self.note_pause_change(change);
        }
    }

    /// A goodbye: we vote to abandon the sender's seat at once.
    pub(super) fn take_bye(&mut self, idx: usize, r: &Received<'_, I>) {
        if !r.bye || self.peers[idx].left {
            return;
        }
        self.peers[idx].left = true;
        let (peer, player) = (self.peers[idx].id, self.peers[idx].seat);
        self.push_event(Event::PeerLeft { peer, player });
        if let Some(seat) = player.filter(|s| self.local_seat.is_some() && self.seat_live(*s)) {
            self.vote(seat);
        }
    }

    /// The sender's votes, frozen seats and endorsements (see the abandon
    /// module): recorded, to be weighed with everyone else's.
    pub(super) fn take_abandon(&mut self, idx: usize, abandon: Option<&Abandon>) {
        let p = &mut self.peers[idx];
        if p.seat.is_none() || self.local_seat.is_none() {
            return;
        }
        let (now, hold) = (self.now, self.config.vote_hold);
        match abandon {
            Some(a) => {
                p.votes.clone_from(&a.votes);
                p.frozen.clone_from(&a.frozen);
                p.hear_endorsements(&a.endorsements, now);
            }
            None => {
                p.votes.clear();
                p.frozen.clear();
                p.hear_endorsements(&[], now);
            }
        }
        p.hear_votes(now, hold);
        // Before this datagram's inputs: forwarded ones for a seat its
        // votes just froze are taken.
        if let Some(me) = self.local_seat {
            self.freeze_majorities(me);
        }
        // A peer that holds less of a frozen seat's input than we do gets
        // ours at once, not at the next resend.
        let p = &self.peers[idx];
        let behind = self
            .frozen
            .keys()
            .any(|&c| p.seat != Some(c) && p.acks[c.index()] < Some(self.contiguous(c)));
        if behind {
            self.peers[idx].link.flush = true;
        }
    }

    /// Inputs: a peer's own seat's, and forwarded ones for frozen seats
    /// (held, not run, until the abandonment is agreed).
    /// Inputs from peer `idx`, and the wants that go with them: a want is
    /// taken with the input of its seat and tick, when that input is new
    /// here, so a want cannot come without its input (nor be forged
    /// more cheaply than one).
    pub(super) fn take_inputs(
        &mut self,
        idx: usize,
        inputs: Vec<(PlayerId, Tick, I)>,
        wants: &[(PlayerId, Vec<(Tick, u32)>)],
    ) {
        let sender_seat = self.peers[idx].seat;
        if self.local_seat.is_none() || sender_seat.is_none() {
            self.stats.inputs_refused += inputs.len() as u64;
            return;
        }
        let now = self.now;
        let mut fresh = false;
        let mut own_fresh = false;
        for (seat, tick, input) in inputs {
            let own = match self.input_verdict(idx, seat, tick) {
                Verdict::Refused => {
                    self.stats.inputs_refused += 1;
                    continue;
                }
                Verdict::Redundant => {
                    self.stats.inputs_redundant += 1;
                    continue;
                }
                Verdict::Own => true,
                Verdict::Forwarded => false,
            };
            let (seats, start) = (&self.seats, self.start);
            match self.store.ensure(tick, |t| new_slot(seats, start, t)) {
                // A player's own input also replaces input forwarded for it
                // while it was frozen here and since thawed.
                Some(slot)
                    if slot.cells[seat.index()].is_unknown()
                        || (own && matches!(slot.cells[seat.index()], Cell::Forwarded(_))) =>
                {
                    // What we run for the seat is what its runs are read
                    // against: a forgery that came first reads no run of
                    // the seat's true sender (their checks differ).
                    slot.cells[seat.index()] = if own {
                        self.seat_inputs[seat.index()].note(tick, &input);
                        Cell::Known(input)
                    } else {
                        Cell::Forwarded(input)
                    };
                    fresh = true;
                    // The want goes with the input it came with, and only
                    // with it: a player's own replacing a forwarded copy
                    // drops the forwarder's.
                    let want = wants
                        .iter()
                        .filter(|(s, _)| *s == seat)
                        .flat_map(|(_, c)| c)
                        .find(|(t, _)| *t == tick)
                        .map(|(_, d)| *d);
                    self.delays.take(seat.index(), tick, want);
                    own_fresh |= own;
                }
                _ => self.stats.inputs_redundant += 1,
            }
        }
        if fresh {
            self.peers[idx].ack_pending = true;
        }
        if own_fresh {
            self.peers[idx].last_input = Some(now);
        }
    }

    /// Whether input of `seat` for `tick` (or the want that goes with it)
    /// is taken from peer `idx`: a player's own, or a frozen seat's
    /// forwarded, within reach.
    pub(super) fn input_verdict(&self, idx: usize, seat: PlayerId, tick: Tick) -> Verdict {
        let sender_seat = self.peers[idx].seat;
        if self.local_seat.is_none() || sender_seat.is_none() {
            return Verdict::Refused;
        }
        // No peer commits further than its own lead past where it says it
        // is: input beyond that is a lie about its position, which would
        // make peers it told another position wait on themselves.
        let claimed = self.peers[idx]
            .next_tick
            .saturating_add(self.delay_cap() + self.config.max_lead);
        let own = Some(seat) == sender_seat;
        let frozen = self.frozen.contains_key(&seat);
        let empty = self
            .seats
            .get(seat.index())
            .is_none_or(|s| s.empty_from.is_some_and(|e| tick >= e));
        if Some(seat) == self.local_seat
            || (own && frozen)
            || (own && tick >= claimed)
            || (!own && !frozen)
            || empty
            || tick >= self.horizon()
        {
            Verdict::Refused
        } else if tick < self.next_tick {
            Verdict::Redundant
        } else if own {
            Verdict::Own
        } else {
            Verdict::Forwarded
        }
    }

    /// Confirmed frames, for observers.
    pub(super) fn take_frames(&mut self, idx: usize, frames: Vec<Frame<I>>) {
        if self.local_seat.is_some() || self.peers[idx].seat.is_none() {
            return;
        }
        let end = self.next_tick.saturating_add(self.config.observer_window);
        for frame in frames {
            if frame.tick < self.next_tick || frame.tick >= end {
                self.stats.inputs_redundant += 1;
                continue;
            }
            let (seats, start) = (&self.seats, self.start);
            if let Some(slot) = self.store.ensure(frame.tick, |t| new_slot(seats, start, t)) {
                if slot.complete() {
                    continue;
                }
                slot.cells = frame
                    .inputs
                    .into_iter()
                    .map(|c| c.map_or(Cell::Empty, Cell::Known))
                    .collect();
                slot.events = frame.events;
                slot.events.sort();
                slot.events.dedup();
            }
        }
    }

    pub(super) fn note_incompatible(&mut self, idx: usize, reason: Incompatibility) {
        let p = &mut self.peers[idx];
        if p.incompatible.is_none() {
            p.incompatible = Some(reason);
            let peer = p.id;
            self.push_event(Event::Incompatible { peer, reason });
        }
    }
}
