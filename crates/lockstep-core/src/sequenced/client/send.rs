//! Our datagram to the sequencer: when one is due, and what goes in it.

use super::*;

impl<I: Input> ClientSession<I> {
    /// Writes the next datagram for the sequencer into `buf`.
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        if !self.link.flush
            || self.redirect.is_some()
            || self.closed().is_some_and(|r| *r != CloseReason::Left)
        {
            return None;
        }
        buf.clear();
        // The base is the first frame we lack: the sequencer resends from it.
        let base = self.base();
        // Room for the seal either way, so a server sees one size limit for
        // what is inside, sealed or not.
        let budget = self.config.max_datagram - secure::SEALED_OVERHEAD;
        let mut w = DatagramWriter::new(buf, base, budget);
        if self.leaving.is_some() {
            w.put(Message::Bye {
                reason: ByeReason::Leaving,
                text: "",
            });
        }
        self.put_hello(&mut w, base);
        self.put_control(&mut w);
        if self.put_inputs(&mut w) {
            self.ack_watch.waiting(self.now);
        }
        self.put_progress(&mut w);
        let more = self.put_donation(&mut w);
        if matches!(self.state, State::Connecting) {
            // A server answers an unproven address with no more bytes than
            // it received: give it room for its challenge.
            w.pad_to(MIN_HELLO_DATAGRAM);
        }
        let len = w.finish();
        let len = self.seal(buf, len);
        // A snapshot goes out as fast as its window allows.
        self.link.flush = more;
        let timed = self.connected();
        self.link
            .sent(self.now, len, self.config.ping_interval, timed);
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += len as u64;
        if self.leaving.is_some() && !matches!(self.state, State::Closed(_)) {
            self.disconnect(State::Closed(CloseReason::Left));
        }
        Some(Transmit {
            destination: self.server,
            len,
        })
    }

    /// The first frame we lack.
    pub(super) fn base(&self) -> Tick {
        self.next_tick
            .saturating_add(self.frames.iter().take_while(|f| f.is_some()).count() as u32)
    }

    pub(super) fn send_due(&self) -> Instant {
        let resend = || {
            self.link
                .send_due(self.started, self.config.resend_interval)
        };
        if self.leaving.is_some() || self.moving && !self.connected() {
            return resend();
        }
        if !self.connected() {
            return self.link.send_due(self.started, self.config.hello_interval);
        }
        // Our inputs make a datagram go by themselves (see `inputs_due`),
        // whatever else is due.
        let inputs = self.inputs_due();
        let or_inputs = |at: Instant| inputs.map_or(at, |i| i.min(at));
        if self.server_checks.has_news(&self.checks, self.now)
            || self.pause_requested.is_some()
            || self.joining.is_some()
            || self.donation.is_some()
            || self.has_hole()
            || self.ready_unshown()
        {
            return or_inputs(resend());
        }
        let keepalive = or_inputs(
            self.link
                .send_due(self.started, self.config.keepalive_interval),
        );
        // Time alone makes a full checkpoint the server has not
        // acknowledged news.
        self.server_checks
            .news_at(&self.checks)
            .map_or(keepalive, |at| keepalive.min(at.max(resend())))
    }

    /// What our Hello asks for (the room, as whom, with which build and
    /// codec): the rest of it is the handshake's. The handshake's keys are
    /// bound to it ([`secure::hello_binding`]).
    pub(super) fn hello_asks(&self) -> Hello<'_> {
        let config = &self.config;
        Hello {
            fingerprint: config.fingerprint,
            spectator: config.spectator,
            room: &config.room,
            name: &config.name,
            ticket: &config.ticket,
            codec: I::CODEC,
            ..Hello::default()
        }
    }

    /// The Hello, until the server answers it.
    fn put_hello(&self, w: &mut DatagramWriter<'_>, base: Tick) {
        if !matches!(self.state, State::Connecting) {
            return;
        }
        let config = &self.config;
        w.put(Message::Hello(Hello {
            // Never the token itself, which anyone watching could
            // replay: proof of it, bound to this handshake's cookie and
            // key. Not before a cookie when sealing (nothing to bind).
            resume: config
                .resume
                .filter(|_| self.public.is_none() || !self.cookie.is_empty())
                .map(|t| admission::resume_proof(&t, &self.cookie, self.public.as_ref())),
            cookie: (!self.cookie.is_empty()).then_some(self.cookie.as_slice()),
            key: self.public,
            // Where we are, when we kept our state across a lost
            // connection: the rest may come from the history.
            resume_from: (self.reconnecting && self.joining.is_none()).then_some(base),
            ..self.hello_asks()
        }));
    }

    /// Ping and pong, a pause or resume asked for, checkpoints, and the
    /// roster's acknowledgements.
    fn put_control(&mut self, w: &mut DatagramWriter<'_>) {
        if let Some(pong) = self.link.pong(self.now) {
            w.put(pong);
        }
        if self.connected()
            && let Some(ping) = self.link.ping(self.now, self.config.ping_interval)
        {
            w.put(ping);
        }
        match self.pause_requested {
            Some(true) => w.put(Message::Pause {
                frame: self.next_commit,
            }),
            Some(false) => w.put(Message::Resume {
                lifted: self.next_tick,
            }),
            None => {}
        }
        if self.connected() && self.ready_unshown() {
            w.put(Message::Ready { ready: self.ready });
        }
        self.server_checks.write(&self.checks, w, self.now);
        for _ in 0..MEMBER_ACKS_PER_DATAGRAM {
            let Some((seat, version)) = self.member_acks.pop_front() else {
                break;
            };
            w.put(Message::MemberAck { seat, version });
        }
    }

    /// Our inputs due (see [`link::Resend`]): each a few times over the
    /// datagrams after it, then again only if the sequencer has not
    /// acknowledged it in time; one run per stretch of consecutive ticks
    /// (a late client may have skipped some), each coded against the
    /// input the sequencer acknowledged last (see [`link::reference`]).
    /// With them, our floor when the sequencer lacks ticks we hold nothing
    /// for. Returns whether any input went.
    fn put_inputs(&mut self, w: &mut DatagramWriter<'_>) -> bool {
        let Some(seat) = self.seat() else {
            return false;
        };
        let red = self.inputs_redundancy();
        let ranges = self
            .inputs_sent
            .due(self.now, self.next_commit, red)
            .runs(u32::MAX);
        let mut left = w.remaining();
        // Each run: its start, reference, inputs; and what each range got
        // to before the datagram was full. The chain writers, their bytes
        // and the list of runs are kept from one datagram to the next.
        let mut chains = core::mem::take(&mut self.run_chains);
        let mut used = 0;
        let mut reached: [Option<(Tick, Tick)>; 2] = [None, None];
        'ranges: for (r, range) in ranges.into_iter().enumerate() {
            let Some((a, b)) = range else {
                continue;
            };
            let mut expect: Option<Tick> = None;
            let first = self.unacked.partition_point(|(t, _)| *t < a);
            for (tick, input) in self.unacked.range(first..).take_while(|(t, _)| *t < b) {
                if expect != Some(*tick)
                    || chains[..used]
                        .last()
                        .is_none_or(|run| run.chain.count() >= wire::MAX_RUN)
                {
                    if let Some(run) = chains[..used].last() {
                        left = left.saturating_sub(run.chain.len() + 12);
                    }
                    if left < 32 {
                        break 'ranges;
                    }
                    let r = link::reference(
                        *tick,
                        &self.ack_watch,
                        &self.own_inputs,
                        self.now,
                        self.link.rtt(),
                    );
                    let after = r.input.cloned().unwrap_or_default();
                    match chains.get_mut(used) {
                        Some(kept) => {
                            kept.start = *tick;
                            kept.back = r.back;
                            kept.check = r.check;
                            kept.chain.restart(after);
                        }
                        None => chains.push(RunOut {
                            start: *tick,
                            back: r.back,
                            check: r.check,
                            chain: ChainWriter::after(after),
                        }),
                    }
                    used += 1;
                }
                let Some(run) = chains[..used].last_mut() else {
                    break 'ranges;
                };
                if !run.chain.push(input, left.saturating_sub(24)) {
                    break 'ranges;
                }
                expect = tick.next();
                reached[r] = Some((a, expect.unwrap_or(*tick)));
            }
            // Ticks of the range we hold nothing for went too: the floor
            // says so.
            reached[r] = Some((a, b));
        }
        let floor = self.input_floor();
        let acks = [(seat, floor)];
        let acks: &[(PlayerId, Tick)] = if floor > self.ack_watch.get() {
            &acks
        } else {
            &[]
        };
        let mut bytes = core::mem::take(&mut self.run_bytes);
        bytes.clear();
        for run in &chains[..used] {
            run.chain.write(&mut bytes);
        }
        let mut runs: Vec<InputRun<'_>> = wire::reuse(core::mem::take(&mut self.run_list));
        let mut from = 0;
        for run in &chains[..used] {
            // Each chain took its length in `bytes`, in order.
            let end = from + run.chain.len();
            if !run.chain.is_empty() {
                runs.push(InputRun {
                    seat,
                    start: run.start,
                    count: run.chain.count() as u32,
                    back: run.back,
                    check: run.check,
                    chain: &bytes[from..end],
                });
            }
            from = end;
        }
        if runs.is_empty() && acks.is_empty() {
            self.run_list = wire::reuse(runs);
            self.run_bytes = bytes;
            self.run_chains = chains;
            return false;
        }
        w.put(Message::Inputs(Inputs {
            acks: acks.into(),
            runs: (&runs).into(),
        }));
        let went = !runs.is_empty();
        self.run_list = wire::reuse(runs);
        self.run_bytes = bytes;
        self.run_chains = chains;
        for (a, b) in reached.into_iter().flatten() {
            self.inputs_sent.sent(a, b, self.now, red);
        }
        went
    }

    /// The first tick we still have an input to deliver for: nothing
    /// before it is to come.
    pub(super) fn input_floor(&self) -> Tick {
        self.unacked.front().map_or(self.next_commit, |(t, _)| *t)
    }

    /// How hard our inputs are repeated, from the link.
    fn inputs_redundancy(&self) -> link::Redundancy {
        let (rate, deadline, seats) = self
            .welcome()
            .map_or((30, false, 1), |w| (w.tick_rate, w.deadline, w.seats));
        let period = Duration::from_secs(1) / rate.max(1);
        // An input late in a room that waits for all holds everyone up: as
        // many as the room seats, for all we know.
        let held_up = if deadline { 1 } else { seats };
        self.link
            .input_redundancy(self.config.resend_interval, period, held_up)
    }

    /// When our inputs make a datagram go by themselves (a copy left, a
    /// resend timer), never sooner than a copy's spacing after the last
    /// datagram; `None` when none waits.
    fn inputs_due(&self) -> Option<Instant> {
        self.seat()?;
        self.inputs_sent.next_send(
            self.now,
            self.next_commit,
            || self.inputs_redundancy(),
            self.link.last_sent(),
        )
    }

    /// A joiner's acknowledgement and its word that it caught up, and the
    /// delay a player wants.
    fn put_progress(&self, w: &mut DatagramWriter<'_>) {
        if let Some(j) = &self.joining
            && let Some(ack) = j.receiver.current_ack()
        {
            w.put(Message::SnapshotAck(ack));
        }
        if self.says_caught_up() {
            w.put(Message::CaughtUp {
                tick: self.next_tick,
            });
        }
        if let Some(t) = self.tracker.as_ref().filter(|_| {
            self.config.adaptive.is_some()
                && self.joining.is_none()
                && self.connected()
                && self.leaving.is_none()
        }) {
            w.put(Message::DelayWanted { delay: t.wanted() });
        }
    }

    /// Chunks of the state we donate; whether another datagram should
    /// follow at once.
    fn put_donation(&mut self, w: &mut DatagramWriter<'_>) -> bool {
        let mut more = false;
        if let Some(tx) = self.donation.as_mut().and_then(|d| d.sender.as_mut()) {
            let carried = tx.write_due(w, self.now);
            // Another datagram at once only if this one made room for a
            // chunk (else the next one would not either).
            more = carried && tx.has_due(self.now);
            self.link.chunk_starved = !carried && tx.has_due(self.now);
        }
        more
    }

    /// Seals the `len` bytes written to `buf`, once sealing began; the
    /// datagram's length.
    fn seal(&mut self, buf: &mut Vec<u8>, len: usize) -> usize {
        let mut len = len;
        if let Some(channel) = &mut self.channel {
            let mut sealed = core::mem::take(&mut self.crypt);
            sealed.clear();
            channel.seal(&buf[..len], &mut sealed);
            buf.clear();
            buf.extend_from_slice(&sealed);
            len = buf.len();
            self.crypt = sealed;
        }
        len
    }
}

/// One run of our inputs being written into a datagram: its first tick,
/// its reference (see [`link::reference`]) and its chain. Kept from one
/// datagram to the next, the chain restarted.
#[derive(Debug)]
pub(super) struct RunOut<I> {
    start: Tick,
    back: u32,
    check: u8,
    chain: ChainWriter<I>,
}
