//! The sequencer's datagrams: opened, decoded once, and each message
//! handed to what owns it.

use super::*;
use std::borrow::Cow;

/// A frame read from a `Frames` message: the game's, and, in a room of
/// opaque inputs, the relay's bytes it was read from (what later frames
/// are coded against) and the seats whose bytes did not decode.
#[derive(Debug)]
pub(super) struct Decoded<I> {
    frame: Frame<I>,
    relay: Option<Vec<Option<Vec<u8>>>>,
    undecodable: Vec<(PlayerId, crate::InputDecodeError)>,
}

impl<I> Decoded<I> {
    /// A frame read as the game's inputs, with no bytes of a relay's.
    pub(super) fn typed(frame: Frame<I>) -> Self {
        Self {
            frame,
            relay: None,
            undecodable: Vec::new(),
        }
    }
}

/// A frame of an opaque room, read from its inputs as the relay holds
/// them (see [`crate::input::relay`]; `neutral` the neutral input's
/// encoding). Bytes that do not decode as the game's input (a client of
/// another build, or one sending bytes no build reads) are the neutral
/// input, and noted: every client of this build reads every cell from
/// the relay's bytes alone, so all read them alike and stay in step, where
/// refusing the frame stalled the room for good.
pub(super) fn typed_frame<I: Input>(relay: Frame<Vec<u8>>, neutral: &[u8]) -> Decoded<I> {
    let mut undecodable = Vec::new();
    let frame = crate::input::relay::frame_of(&relay, neutral, |seat, e| {
        undecodable.push((seat, e));
    });
    Decoded {
        frame,
        relay: Some(relay.inputs),
        undecodable,
    }
}

impl<I: Input> ClientSession<I> {
    pub(super) fn unseal_and_take(
        &mut self,
        from: PeerId,
        datagram: &[u8],
    ) -> Result<(), DatagramError> {
        if from != self.server {
            return Err(DatagramError::UnknownPeer(from));
        }
        if !secure::is_sealed(datagram) {
            // A plain datagram could be anyone's: once we asked for sealing,
            // only the handshake's own answers may come plain (a forged
            // Welcome or Frames must never reach the game).
            let handshake_only = |d: &Datagram<'_>| {
                d.messages.iter().all(|m| {
                    // A redirect only ever comes sealed: a forged one
                    // would send us to the forger.
                    matches!(
                        m,
                        Message::Challenge { .. }
                            | Message::Reject(_)
                            | Message::Error { .. }
                            | Message::Padding { .. }
                    ) && !matches!(m, Message::Reject(wire::RejectReason::Moved(_)))
                })
            };
            if self.channel.is_some() {
                return Err(secure::SealError::NotSealed.into());
            }
            if self.config.secret.is_none() {
                return self.take(datagram);
            }
            // Decoded once, for the check and for taking it (a handshake
            // answer holds no Welcome, so its ticks need no second read).
            let d = Datagram::decode(datagram, self.server_base)
                .ok()
                .filter(handshake_only)
                .ok_or(secure::SealError::NotSealed)?;
            if matches!(self.state, State::Closed(_)) {
                return Ok(());
            }
            return self.take_decoded(d);
        }
        let mut buf = core::mem::take(&mut self.crypt);
        buf.clear();
        buf.extend_from_slice(datagram);
        let opened = match (&mut self.channel, &mut self.pending) {
            (Some(c), _) => c.open(&mut buf).map(|p| p.len()),
            (None, Some(p)) => p.open(&mut buf).map(|p| p.len()),
            (None, None) => Err(secure::SealError::WrongConnection),
        };
        let r = match opened {
            Ok(len) => {
                if self.channel.is_none() {
                    self.channel = self.pending.take();
                }
                let start = secure::SEALED_HEADER_LEN;
                self.take(&buf[start..start + len])
            }
            Err(e) => Err(e.into()),
        };
        self.crypt = buf;
        r
    }

    pub(super) fn take(&mut self, datagram: &[u8]) -> Result<(), DatagramError> {
        if matches!(self.state, State::Closed(_)) {
            // The server's goodbye ends ours.
            let bye = Datagram::decode(datagram, self.server_base)
                .is_ok_and(|d| d.messages.iter().any(|m| matches!(m, Message::Bye { .. })));
            if bye && self.leaving.is_some() {
                self.leaving = Some(Instant::ZERO);
            }
            return Ok(());
        }
        let mut decoded = self.decoder.decode(datagram, self.server_base);
        // Until the Welcome, our idea of the server's position is a guess:
        // the Welcome's absolute tick says where the room really is, and the
        // datagram's relative ticks are read again from there.
        if !self.connected()
            && let Ok(d) = &decoded
            && let Some(at) = d.messages.iter().find_map(|m| match m {
                Message::Welcome(w) => Some(w.tick),
                _ => None,
            })
            && wire::expand_tick(d.base.get() as u16, at) != d.base
        {
            decoded = Datagram::decode(datagram, at);
        }
        let d = match decoded {
            Ok(d) => d,
            Err(WireError::UnsupportedVersion { ours, theirs }) => {
                let reason = Rejection::ProtocolMismatch {
                    server: theirs,
                    client: ours,
                };
                self.close(CloseReason::Rejected(reason));
                return Err(DatagramError::Incompatible(Incompatibility::Protocol {
                    ours,
                    theirs,
                }));
            }
            Err(e) => return Err(e.into()),
        };
        self.take_decoded(d)
    }

    /// A datagram from the server, decoded: its typed payloads checked
    /// whole, then each message handed to what owns it.
    fn take_decoded(&mut self, mut d: Datagram<'_>) -> Result<(), DatagramError> {
        // Decode typed payloads before acting on anything.
        let (frames, waiting) = self.typed_frames(&d)?;
        let now = self.now;
        if self.link.heard(now) {
            self.push_event(Event::Recovered {
                peer: self.server,
                player: None,
            });
        }
        self.server_base = d.base;
        let mut checks = Incoming::default();
        for m in &d.messages {
            checks.take(m);
        }
        for o in self.server_checks.receive(&self.checks, &checks, now) {
            self.check_outcome(o);
        }
        self.link.flush |= self.server_checks.urgent(now);
        // The sequencer's datagrams carry a `Lobby` while its lobby is
        // open: the first with a `Status` and none says the match started.
        let (mut lobby, mut status) = (false, false);
        for m in d.messages.drain(..) {
            match m {
                Message::Welcome(w) => self.welcomed(w),
                Message::Lobby(rule) => {
                    lobby = true;
                    self.lobby_rule = rule;
                }
                Message::Challenge { cookie, key } if !self.connected() => {
                    self.challenged(cookie, key);
                }
                // Reconnecting before the old connection went quiet (its
                // late datagrams still arrive): the Hello is repeated
                // until the seat is free, each time as a new handshake (a
                // server forgets a refused sealed connection for good).
                Message::Reject(wire::RejectReason::SeatBusy) if self.reconnecting => {
                    self.start_handshake_over();
                }
                Message::Reject(wire::RejectReason::Moved(to)) if !self.connected() => {
                    self.redirected(to);
                    return Ok(());
                }
                // A redirect answers a Hello: once welcomed, a late or
                // replayed copy changes nothing.
                Message::Reject(wire::RejectReason::Moved(_)) => {}
                Message::Reject(r) => {
                    self.close(CloseReason::Rejected(r.into()));
                    return Ok(());
                }
                Message::Error { code, text } => {
                    self.close(CloseReason::Error(code, text.to_owned()));
                    return Ok(());
                }
                Message::Bye { reason, text } => {
                    self.close(CloseReason::Bye(reason, text.to_owned()));
                    return Ok(());
                }
                Message::Status(st) => {
                    status = true;
                    self.server_open = st.open;
                    self.slack = st.slack;
                    self.waiting = st.waiting;
                    self.note_slack(st.slack);
                }
                Message::Inputs(i) => self.inputs_acked(&i),
                Message::Resync { id, verdict } => self.resync(id, verdict),
                Message::Pause { frame } => self.take_pause(frame),
                Message::Resume { lifted } => self.take_resume(lifted),
                m @ (Message::Ping { .. } | Message::Pong { .. }) => {
                    self.link.take_message(&m, now);
                }
                Message::SnapshotChunk(c) => self.take_chunk(&c),
                Message::SnapshotRequest { id, tick } => self.snapshot_requested(id, tick),
                Message::Member(m) => self.take_member(&m),
                Message::SnapshotAck(a) => self.donation_acked(&a),
                _ => {}
            }
        }
        self.decoder.recycle(d);
        if status
            && !lobby
            && let State::Connected(w) = &mut self.state
        {
            w.lobby = false;
        }
        let had_hole = self.has_hole();
        self.take_frames(frames);
        for w in waiting {
            self.wait_for_reference(w);
        }
        self.take_waiting_frames();
        // A hole before frames that did arrive: say so at once.
        if !had_hole && self.has_hole() {
            self.link.flush = true;
        }
        Ok(())
    }

    /// The datagram's frames, as the game's inputs. A sequencer of our own
    /// input type chains our values; a relay of an opaque room chains byte
    /// strings from the empty one, which a value's chain may not read:
    /// those are read as bytes.
    /// Also returns the messages coded against a frame that has not
    /// arrived (a datagram overtaken by a later one): they wait for it,
    /// once the whole datagram is taken.
    fn typed_frames(&self, d: &Datagram<'_>) -> Result<TypedFrames<I>, DatagramError> {
        let mut frames = Vec::new();
        let mut waiting = Vec::new();
        for m in &d.messages {
            let Message::Frames(f) = m else { continue };
            match self.decode_frames(f)? {
                Some(typed) => frames.extend(typed),
                None => waiting.push(WaitingFrames {
                    start: f.start,
                    count: f.count,
                    seats: f.seats,
                    reference: f.reference,
                    body: f.body.to_vec(),
                }),
            }
        }
        Ok((frames, waiting))
    }

    /// One `Frames` message as the game's inputs, or `None` if it is coded
    /// against a frame we do not hold. In a room of opaque inputs every
    /// message is read as the relay's bytes, against the relay's bytes of
    /// its reference, as the relay coded it: what a cell means depends on
    /// nothing but those bytes, not on which frames this client held when
    /// the message was made (a message read as the game's inputs when it
    /// could be, and as bytes when not, read one input two ways).
    fn decode_frames(
        &self,
        f: &wire::Frames<'_>,
    ) -> Result<Option<Vec<Decoded<I>>>, DatagramError> {
        if I::CODEC == InputCodec::Opaque {
            let reference = match f.reference {
                Some(t) => match self.relay_frame(t) {
                    Some(cells) => Some(cells),
                    None => return Ok(None),
                },
                None => None,
            };
            let raw = f.decode::<Vec<u8>>(reference.as_deref())?;
            let neutral = &self.neutral;
            return Ok(Some(
                raw.into_iter().map(|r| typed_frame(r, neutral)).collect(),
            ));
        }
        let reference = match f.reference {
            Some(t) => match self.held_frame(t) {
                Some(cells) => Some(cells),
                None => return Ok(None),
            },
            None => None,
        };
        Ok(Some(
            f.decode::<I>(reference)?
                .into_iter()
                .map(Decoded::typed)
                .collect(),
        ))
    }

    /// The relay's bytes of the frame at `tick`, if we hold it: as they
    /// came (lent), or, for a frame that came otherwise (a survivor's, in
    /// a host migration), worked out from its inputs.
    fn relay_frame(&self, tick: Tick) -> Option<Cow<'_, [Option<Vec<u8>>]>> {
        let cells = self.held_frame(tick)?;
        if let Some(relay) = self.relay_frames.get(&tick) {
            return Some(Cow::Borrowed(relay));
        }
        Some(Cow::Owned(
            cells
                .iter()
                .map(|c| {
                    c.as_ref()
                        .map(|i| crate::input::relay::bytes_of(i, &self.neutral))
                })
                .collect(),
        ))
    }

    /// Keeps `w`, whose reference has not arrived, to read once it has (the
    /// oldest go while [`WAITING_FRAMES`] messages or [`WAITING_BYTES`]
    /// bytes wait already).
    fn wait_for_reference(&mut self, w: WaitingFrames) {
        let mut bytes = w.body.len()
            + self
                .waiting_frames
                .iter()
                .map(|w| w.body.len())
                .sum::<usize>();
        while self.waiting_frames.len() >= WAITING_FRAMES || bytes > WAITING_BYTES {
            let Some(old) = self.waiting_frames.pop_front() else {
                break;
            };
            bytes -= old.body.len();
        }
        self.waiting_frames.push_back(w);
    }

    /// Reads the waiting messages whose reference has arrived (one may
    /// bring another's), and forgets those that end before the first frame
    /// we lack, and those whose reference we ran past without keeping it
    /// (it can no longer come).
    fn take_waiting_frames(&mut self) {
        loop {
            let (base, next) = (self.base(), self.next_tick);
            let recent = &self.recent;
            self.waiting_frames.retain(|w| {
                w.start.saturating_add(w.count) > base
                    && w.reference
                        .is_none_or(|r| r >= next || recent.get(r).is_some())
            });
            let ready = self
                .waiting_frames
                .iter()
                .position(|w| w.reference.is_none_or(|r| self.held_frame(r).is_some()));
            let Some(k) = ready else { return };
            let Some(w) = self.waiting_frames.remove(k) else {
                return;
            };
            let f = wire::Frames {
                start: w.start,
                count: w.count,
                seats: w.seats,
                reference: w.reference,
                body: &w.body,
            };
            // Checked as it came but for its body: one that does not read
            // is dropped (the sequencer sends its frames again).
            if let Ok(Some(frames)) = self.decode_frames(&f) {
                self.take_frames(frames);
            }
        }
    }

    /// Whether frames came that cannot run yet: there is a hole before
    /// them, or they wait for a reference that has not arrived. The
    /// sequencer hears of it at once and at the resend interval until it
    /// is filled, so it learns of a frame that lost every copy a round
    /// trip after the frame went.
    pub(super) fn has_hole(&self) -> bool {
        self.frames.front().is_some_and(Option::is_none) || !self.waiting_frames.is_empty()
    }

    /// The cells of the frame at `tick`, if we hold it: run lately, or
    /// arrived and waiting to run.
    fn held_frame(&self, tick: Tick) -> Option<&[Option<I>]> {
        if tick < self.next_tick {
            return self.recent.get(tick);
        }
        self.frames
            .get(tick.since(self.next_tick) as usize)?
            .as_ref()
            .map(|f| f.inputs.as_slice())
    }

    /// The server's challenge: answered at once (the server keeps no state
    /// until we do), sealed from then on when both hold the secret.
    fn challenged(&mut self, cookie: &[u8], key: Option<[u8; 32]>) {
        self.cookie.clear();
        self.cookie
            .extend_from_slice(&cookie[..cookie.len().min(MAX_COOKIE)]);
        let hello = secure::hello_binding(&self.hello_asks());
        self.pending = match (&self.config.secret, key) {
            (Some(secret), Some(key)) => SecureChannel::client(secret, &key, cookie, &hello)
                .ok()
                .map(Box::new),
            _ => None,
        };
        self.link.flush = true;
    }

    /// The sequencer's acknowledgement of our inputs: those below it are
    /// kept (for a rewind) or dropped.
    fn inputs_acked(&mut self, i: &Inputs<'_>) {
        let Some(seat) = self.seat() else {
            return;
        };
        let Some((_, acked)) = i.acks.iter().find(|(s, _)| *s == seat) else {
            return;
        };
        self.acked = self.acked.max(acked);
        self.ack_watch.acked(acked, self.now);
        // An acknowledgement behind the record is an old one (a datagram
        // that came late): what the sequencer dropped of ours, it says by a
        // resync or a new Welcome, which start the record over.
        if acked > self.inputs_sent.base() {
            self.inputs_sent.lacks_from(acked);
        }
        self.inputs_sent.heard(self.now);
        while self.unacked.front().is_some_and(|(t, _)| *t < acked) {
            if let Some(sent) = self.unacked.pop_front()
                && self.config.keep_frames > 0
                && sent.0 >= self.next_tick
            {
                if self.sent.len() >= self.config.max_unacked {
                    self.sent.pop_front();
                }
                self.sent.push_back(sent);
            }
        }
        if self.unacked.is_empty() {
            self.ack_watch.idle();
        }
        // A seat taken back: the sequencer already holds its inputs up to
        // `acked`; commit from there.
        self.next_commit = self.next_commit.max(acked);
    }

    /// The room's pause, followed; our request for one is answered.
    fn take_pause(&mut self, frame: Tick) {
        if let PauseChange::Began(frame) = self.pause.follow_pause(frame, self.next_tick) {
            self.push_event(Event::Paused { frame });
        }
        if self.pause_requested == Some(true) {
            self.pause_requested = None;
        }
    }

    /// The room's resume, followed; our request for one is answered.
    fn take_resume(&mut self, lifted: Tick) {
        if let PauseChange::Lifted(frame) = self.pause.follow_resume(lifted) {
            self.push_event(Event::Resumed { frame });
        }
        if self.pause_requested == Some(false) {
            self.pause_requested = None;
        }
    }

    /// The sequencer acknowledged chunks of the state we donate.
    fn donation_acked(&mut self, a: &wire::SnapshotAck) {
        if let Some(tx) = self.donation.as_mut().and_then(|d| d.sender.as_mut()) {
            tx.take_ack(a, self.now);
            if tx.done() {
                self.donation = None;
            }
        }
    }

    /// The datagram's frames, stored once we know where they start (a
    /// joiner's count from its snapshot's tick).
    fn take_frames(&mut self, frames: Vec<Decoded<I>>) {
        let waiting_for_start = self
            .joining
            .as_ref()
            .is_some_and(|j| j.tick.is_none() && !j.resync);
        if self.connected() && !waiting_for_start {
            for f in frames {
                self.store_frame(f);
            }
        }
    }

    pub(super) fn welcomed(&mut self, mut w: Welcome) {
        if self.connected() {
            return;
        }
        if w.seat.is_some() {
            self.token = Some(w.token);
            // Every seated client measures how its frames arrive (late
            // frames, slack); only an adaptive one says what it wants.
            if self.tracker.is_none() {
                let a = self.config.adaptive.clone().unwrap_or_default();
                self.tracker = Some(DelayTracker::new(a, w.tick_rate, w.delay));
            }
        }
        let reconnected = core::mem::take(&mut self.reconnecting);
        self.moving = false;
        // A new connection's acknowledgements start over: our runs are
        // coded against nothing it has not acknowledged itself, and every
        // input it has not acknowledged goes to it afresh.
        self.ack_watch = link::AckWatch::default();
        self.inputs_sent = link::Resend::new(self.input_floor());
        if reconnected {
            // Our state stands unless the sequencer sends a snapshot, or we
            // had none of our own yet (we were joining).
            let kept = !w.snapshot && self.joining.is_none();
            // Kept: our lead is the delay we last ran with; the changes
            // since are in the frames still to run.
            if kept && let Some(old) = self.welcome() {
                w.delay = old.delay;
            }
            self.state = State::Connected(w);
            if !kept {
                self.frames.clear();
                self.unacked.clear();
                self.joining = None;
                self.start_over(w);
            }
            self.push_event(Event::Reconnected {
                seat: w.seat,
                tick: self.next_tick,
                kept,
            });
            return;
        }
        self.start_over(w);
        self.state = State::Connected(w);
        self.push_event(Event::Connected {
            seat: w.seat,
            tick: w.tick,
        });
    }

    /// The sequencer found our state diverged from the majority's: we wait
    /// for a snapshot as a joiner does (the game stops getting frames until
    /// it arrives), then run on from it.
    pub(super) fn resync(&mut self, id: u32, verdict: wire::Checkpoint) {
        if id <= self.resynced || self.joining.is_some() || !self.connected() {
            return;
        }
        // The verdict that found us, compared before our state goes (its
        // own message may have been lost): the search starts from it.
        let mut checks = Incoming::default();
        checks.checkpoints.push(verdict);
        let now = self.now;
        for o in self.server_checks.receive(&self.checks, &checks, now) {
            self.check_outcome(o);
        }
        let previous = self.resynced;
        self.resynced = id;
        self.joining = Some(Joining::new(&self.config, Some((self.now, previous))));
        // Our seat runs neutral until we caught up: inputs not yet
        // acknowledged will never run. Our hashes describe a state about to
        // be replaced: no more is reported until the new one runs (what we
        // hold still answers the search for where we parted).
        self.unacked.clear();
        // Commits start again where the seat goes live; none made before
        // may leave a gap there. The ticks stamped again get other inputs:
        // no run may be coded against what went before, nor against an
        // acknowledgement of it.
        self.next_commit = self.next_tick;
        self.own_inputs.clear();
        self.ack_watch = link::AckWatch::default();
        self.inputs_sent = link::Resend::new(self.next_commit);
        self.link.flush = true;
        if self.resync_told != id {
            self.resync_told = id;
            self.push_event(Event::Resyncing);
        }
    }

    /// Takes our position from `w`, as a session that has run nothing.
    pub(super) fn start_over(&mut self, w: Welcome) {
        if w.snapshot {
            self.joining = Some(Joining::new(&self.config, None));
        }
        self.next_tick = if w.snapshot { w.tick } else { w.start };
        self.next_commit = w.tick.saturating_add(w.delay);
        self.inputs_sent = link::Resend::new(self.next_commit);
        self.own_inputs.clear();
        self.lead = 0;
        self.slack_low = None;
        self.raised_for = None;
        self.acked = Tick::ZERO;
        // A state from a snapshot has a chain complete from its next block;
        // one run from the room's first tick, from the start.
        self.checks.restart();
        self.server_checks.restart();
        if !w.snapshot {
            self.checks.starts_at(w.start);
        }
        self.server_open = w.tick;
    }

    pub(super) fn store_frame(&mut self, d: Decoded<I>) {
        let f = d.frame;
        if f.tick < self.next_tick {
            return;
        }
        let i = f.tick.since(self.next_tick) as usize;
        if i >= self.config.window as usize {
            return;
        }
        while self.frames.len() <= i {
            self.frames.push_back(None);
        }
        if self.frames[i].is_none() {
            if let Some(t) = self.tracker.as_mut()
                && t.arrived(f.tick, self.now)
            {
                self.stats.late_frames += 1;
            }
            let tick = f.tick;
            self.frames[i] = Some(f);
            self.keep_relay_frame(tick, d.relay);
            for (player, e) in d.undecodable {
                self.stats.inputs_undecodable += 1;
                if self.undecodable_seats.insert(player) {
                    self.push_event(Event::InputUndecodable {
                        player,
                        tick,
                        reason: e.to_string(),
                    });
                }
            }
        }
    }

    /// Keeps the relay's bytes of the frame at `tick` (or forgets those of
    /// another frame for that tick, when this one has none), for as long
    /// as the frame may be a reference.
    fn keep_relay_frame(&mut self, tick: Tick, relay: Option<Vec<Option<Vec<u8>>>>) {
        match relay {
            Some(cells) => {
                self.relay_frames.insert(tick, cells);
            }
            None => {
                self.relay_frames.remove(&tick);
            }
        }
        let oldest = self.next_tick.saturating_sub(recent::KEPT as u32);
        if self
            .relay_frames
            .first_key_value()
            .is_some_and(|(t, _)| *t < oldest)
        {
            self.relay_frames = self.relay_frames.split_off(&oldest);
        }
    }
}
