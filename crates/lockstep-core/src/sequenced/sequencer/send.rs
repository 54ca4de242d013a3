//! A connection's datagram: when one is due, and what goes in it.

use super::*;

/// `text`, cut to the protocol's limit on a character boundary.
pub(super) fn truncate(text: &str) -> &str {
    if text.len() <= wire::MAX_TEXT {
        return text;
    }
    let mut end = wire::MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl<I: Input> Sequencer<I> {
    /// The tick after the last one `c` may be sent: the open tick, or, for
    /// a spectator of a room that watches with a delay, that many ticks
    /// before it (never a frame newer: see `spectator_delay`) until the
    /// match is over, when the rest is theirs.
    pub(super) fn frontier(&self, c: &Conn) -> Tick {
        let d = self.config.spectator_delay;
        if d == 0 || c.seat.is_some() || self.match_over() {
            return self.open;
        }
        self.open.saturating_sub(d).max(self.config.first_tick)
    }

    pub(super) fn send_due(&self, i: usize) -> Instant {
        let c = &self.conns[i];
        let resend = || c.link.send_due(self.started, self.config.resend_interval);
        let due = if !c.link.sent_any() {
            c.link
                .send_due(self.started, self.config.keepalive_interval)
        } else if self.has_news(c) {
            resend()
        } else {
            let interval = if c.ack_pending || !self.waits.named().is_empty() {
                // An acknowledgement, or whom the room waits on (sent at
                // once when it changes), rides on the next frames if they
                // come within three ticks, or within a bundle on a link
                // that bundles them.
                self.config
                    .resend_interval
                    .max(self.period() * 3.max(c.link.bundle()))
            } else {
                self.config.keepalive_interval
            };
            let quiet = c.link.send_due(self.started, interval);
            // Time alone makes a full verdict it has not acknowledged news.
            c.checks
                .news_at(&self.referee, Self::verdicts_for(c), self.frontier(c))
                .map_or(quiet, |at| quiet.min(at.max(resend())))
        };
        match self.frames_due(i) {
            Some(t) => due.min(t),
            None => due,
        }
    }

    /// How hard frames to connection `i` are repeated, from its link.
    pub(super) fn frames_redundancy(&self, i: usize) -> Redundancy {
        let c = &self.conns[i];
        let period = self.period();
        // A player acknowledges with its next input, a spectator with its
        // next datagram of any kind.
        let ack_delay = if c.seat.is_some() {
            self.config.resend_interval.max(period)
        } else {
            self.config.keepalive_interval
        };
        // A player that stalls in a room that waits for all holds everyone
        // up: its input runs late.
        let held_up = match (self.config.policy, c.seat) {
            (Policy::WaitForAll { .. }, Some(_)) => self.live_players(),
            _ => 1,
        };
        c.link.redundancy(ack_delay, period, held_up)
    }

    /// The tick period.
    pub(super) fn period(&self) -> Duration {
        Duration::from_secs(1) / self.config.tick_rate.max(1)
    }

    /// When frames make a datagram to connection `i` go by themselves (a
    /// copy left, a resend timer), never sooner than a copy's spacing after
    /// the last datagram; `None` when its frames follow the general
    /// schedule (it has none to run yet, or is resynced from a snapshot).
    fn frames_due(&self, i: usize) -> Option<Instant> {
        let c = &self.conns[i];
        if Self::frames_wait_for_snapshot(c) || c.closing.is_some() {
            return None;
        }
        c.frames_sent.next_send(
            self.now,
            self.frontier(c),
            || self.frames_redundancy(i),
            c.link.last_sent(),
        )
    }

    pub(super) fn has_news(&self, c: &Conn) -> bool {
        c.closing.is_some()
            || self.roster_unacked(c).next().is_some()
            || c.welcome_pending
            // Frames before a snapshot is whole go on the general schedule
            // (see `frames_due`).
            || c.next < self.frontier(c) && Self::frames_wait_for_snapshot(c)
            || self.paused()
            || c.checks.has_news(
                &self.referee,
                Self::verdicts_for(c),
                self.frontier(c),
                self.now,
            )
    }

    /// Whether `c` is sent verdicts: references are of no use to a joiner
    /// before its snapshot (and a joiner that never acknowledges them would
    /// get them all, again and again), but a client being resynced still
    /// hears the verdict that found it.
    fn verdicts_for(c: &Conn) -> bool {
        !Self::before_snapshot(c) || c.resync.is_some()
    }

    /// Whether `c`'s frames wait on a snapshot (it is joining, or being
    /// resynced, and has not caught up): they go on the general schedule,
    /// not their own (see `frames_due`).
    fn frames_wait_for_snapshot(c: &Conn) -> bool {
        c.join
            .as_ref()
            .is_some_and(|j| !matches!(j, Join::CatchingUp))
    }

    /// The `Frames` body of the `count` sealed frames from `start`, coded
    /// against the frame at `reference`: the one coded for another
    /// connection if it is still kept, else coded now (and kept). Returns
    /// its place in `coded`.
    fn coded(&mut self, start: Tick, count: usize, reference: Option<Tick>) -> usize {
        if let Some(k) = self
            .coded
            .iter()
            .position(|c| c.start == start && c.count == count && c.reference == reference)
        {
            self.stats.runs_shared += 1;
            return k;
        }
        self.stats.runs_encoded += 1;
        let seats = usize::from(self.config.max_seats);
        let cells = reference.map(|r| {
            self.history[r.since(self.history_base) as usize]
                .inputs
                .as_slice()
        });
        let k = start.since(self.history_base) as usize;
        // The oldest goes, its buffer reused.
        let mut body = if self.coded.len() >= CODED {
            self.coded.remove(0).body
        } else {
            Vec::new()
        };
        body.clear();
        wire::encode_frames_body(&self.history[k..k + count], seats, cells, &mut body);
        self.coded.push(Coded {
            start,
            count,
            reference,
            body,
        });
        self.coded.len() - 1
    }

    /// Whether `c` is joining and has not got its snapshot yet: nothing but
    /// the snapshot is of use to it.
    pub(super) fn before_snapshot(c: &Conn) -> bool {
        matches!(
            c.join,
            Some(Join::Waiting | Join::Held | Join::Receiving(_))
        )
    }

    /// Builds connection `i`'s datagram into `buf`; says whether it carried
    /// snapshot chunks.
    pub(super) fn build(&mut self, i: usize, buf: &mut Vec<u8>) -> bool {
        // A spectator watching with a delay is told no tick past its own.
        let base = self.frontier(&self.conns[i]);
        let mut w = DatagramWriter::new(buf, base, self.config.max_datagram);
        // Control messages are bounded far below the minimum budget; only
        // frames are sized to what is left.
        if self.put_goodbye(i, &mut w) {
            w.finish();
            return false;
        }
        self.put_control(i, &mut w);
        self.put_checks(i, &mut w);
        let chunks = self.put_stream(i, &mut w);
        w.finish();
        chunks
    }

    /// A closing connection's last word, alone: whether it had one.
    fn put_goodbye(&self, i: usize, w: &mut DatagramWriter<'_>) -> bool {
        let c = &self.conns[i];
        match &c.closing {
            Some(Closing::Error(code, text)) => {
                w.put(Message::Error {
                    code: *code,
                    text: truncate(text),
                });
                true
            }
            Some(Closing::Bye(reason, text)) => {
                w.put(Message::Bye {
                    reason: *reason,
                    text: truncate(text),
                });
                true
            }
            None => false,
        }
    }

    /// What every datagram to connection `i` may carry: its Welcome until
    /// it shows it got it, ping and pong, the room's status and pause, its
    /// seat's acknowledgement, the roster entries it lacks.
    fn put_control(&self, i: usize, w: &mut DatagramWriter<'_>) {
        let now = self.now;
        let c = &self.conns[i];
        if c.welcome_pending {
            // The client stamps its first input at `tick + delay`: its
            // seat's first due tick, whatever the delay did since (a
            // change after `tick` reaches it in the frames).
            let from = c
                .seat
                .and_then(|s| self.seats[s.index()].as_ref())
                .map(|s| s.from);
            let delay = from.map_or(self.delay, |f| {
                self.delay.min(f.since(self.config.first_tick.min(f)))
            });
            w.put(Message::Welcome(Welcome {
                seat: c.seat,
                start: self.config.first_tick,
                tick: from.map_or(self.frontier(c), |f| f.saturating_sub(delay)),
                deadline: matches!(self.config.policy, Policy::Deadline { .. }),
                tick_rate: self.config.tick_rate,
                delay,
                seats: u32::from(self.config.max_seats),
                token: c
                    .seat
                    .and_then(|s| self.seats[s.index()].as_ref())
                    .map(|s| s.token)
                    .unwrap_or_default(),
                snapshot: c.join.is_some(),
                lobby: !self.playing,
                match_id: self.match_id,
            }));
        }
        if !self.playing {
            w.put(Message::Lobby(if self.start_asked {
                Start::Manual
            } else {
                self.config.start
            }));
        }
        for m in c
            .link
            .pong(now)
            .into_iter()
            .chain(c.link.ping(now, self.config.ping_interval))
        {
            w.put(m);
        }
        let seat = c
            .seat
            .and_then(|s| Some((s, self.seats[s.index()].as_ref()?)));
        w.put(Message::Status(Status {
            open: self.frontier(c),
            slack: seat.map_or(0, |(_, s)| s.slack),
            waiting: self.waits.named().to_vec(),
        }));
        // A spectator watching with a delay is told of a pause at its own
        // frontier, not the room's open tick.
        let frontier = self.frontier(c);
        if let Some(frame) = self.pause.frame() {
            w.put(Message::Pause {
                frame: frame.min(frontier),
            });
        } else if let Some(lifted) = self.pause.lifted() {
            w.put(Message::Resume {
                lifted: lifted.min(frontier),
            });
        }
        if let Some((id, s)) = seat {
            w.put(Message::Inputs(Inputs {
                acks: (&[(id, s.taken.first())]).into(),
                runs: wire::List::EMPTY,
            }));
        }
        for k in self.roster_unacked(c).take(ROSTER_PER_DATAGRAM) {
            let e = &self.roster[k];
            w.put(Message::Member(Member {
                seat: PlayerId(k as u16),
                version: e.version,
                holder: e.holder.as_ref().map(|h| Holder {
                    playing: h.playing,
                    hosts: h.hosts,
                    commitment: h.commitment,
                    contact: &h.contact,
                    name: &h.name,
                    ready: h.ready,
                }),
            }));
        }
    }

    /// Checkpoints and the search for a divergence, a resync's news, and a
    /// snapshot's request and acknowledgements to its donor.
    fn put_checks(&mut self, i: usize, w: &mut DatagramWriter<'_>) {
        let now = self.now;
        let c = &self.conns[i];
        // Until its first chunk shows it took the news.
        if let Some((id, verdict)) = c.resync
            && matches!(c.join, Some(Join::Waiting | Join::Receiving(_)))
        {
            w.put(Message::Resync { id, verdict });
        }
        let verdicts = Self::verdicts_for(c);
        let before = self.frontier(c);
        let mut checks = core::mem::take(&mut self.conns[i].checks);
        checks.write(&self.referee, w, verdicts, before, now);
        self.conns[i].checks = checks;
        let c = &self.conns[i];
        if let Some((_, ack)) = self.thanked.filter(|(p, _)| *p == c.peer) {
            w.put(Message::SnapshotAck(ack));
        }
        if let Some(f) = self.fetch.as_ref().filter(|f| f.donor == c.peer) {
            if !f.started {
                w.put(Message::SnapshotRequest {
                    id: f.id,
                    tick: f.tick,
                });
            }
            if let Some(ack) = f.receiver.current_ack() {
                w.put(Message::SnapshotAck(ack));
            }
        }
    }

    /// The stream: frames from what the client lacks, as many as fit, or
    /// the chunks of the snapshot it joins from. Returns whether chunks
    /// went.
    fn put_stream(&mut self, i: usize, w: &mut DatagramWriter<'_>) -> bool {
        let now = self.now;
        let c = &self.conns[i];
        let next = c.next;
        let sent_from = c.sent_from;
        let resyncing = self.conns[i].resync.is_some();
        // A client being resynced runs on up to its snapshot's tick (its own
        // state there shows how it differs), never past it: frames it ran
        // beyond would be named by its datagrams after it went back.
        let mut end = self.frontier(c);
        let mut chunks = false;
        match self.conns[i].join.as_mut() {
            Some(Join::Waiting) if resyncing => match &self.fetch {
                Some(f) => end = end.min(f.tick.saturating_add(1)),
                None => return false,
            },
            // Nothing to run before the snapshot.
            Some(Join::Waiting | Join::Held) => return false,
            // The snapshot alone: frames are of no use before it is whole
            // (and a joiner that acknowledges slowly gets little of either).
            Some(Join::Receiving(tx)) => {
                let carried = tx.write_due(w, now);
                let starved = !carried && tx.has_due(now);
                let upto = tx.tick().saturating_add(1);
                self.conns[i].link.chunk_starved = starved;
                // Frames too, up to the snapshot's tick, for a client being
                // resynced that has not run that far.
                if !resyncing || next >= upto {
                    return carried;
                }
                chunks = carried;
                end = end.min(upto);
            }
            Some(Join::CatchingUp) | None => {}
        }
        // Frames from what the client lacks: those due again and those
        // never sent (see `link::resend`), each run coded against the frame
        // before it if that one went to the client on this connection (it
        // holds, or is being sent until it holds, every frame from the
        // first it was sent on).
        if next < self.history_base {
            // Frames it lacks are gone: it is being closed.
            return chunks;
        }
        let red = self.frames_redundancy(i);
        let runs = self.conns[i]
            .frames_sent
            .due(now, end, red)
            .runs(CATCH_UP_FRAMES);
        let seats = usize::from(self.config.max_seats);
        for (a, b) in runs.into_iter().flatten() {
            let reference = a
                .get()
                .checked_sub(1)
                .map(Tick::new)
                .filter(|r| *r >= self.history_base && sent_from.is_some_and(|s| s <= *r));
            let whole = b.since(a) as usize;
            let mut n = whole;
            while n > 0 {
                let body = self.coded(a, n, reference);
                let m = Message::Frames(Frames {
                    start: a,
                    count: n as u32,
                    seats: seats as u32,
                    reference,
                    body: &self.coded[body].body,
                });
                if w.push(&m).is_ok() {
                    break;
                }
                n /= 2;
            }
            if n == 0 {
                break;
            }
            let to = a.saturating_add(n as u32);
            let c = &mut self.conns[i];
            c.frames_sent.sent(a, to, now, red);
            c.sent_from = Some(c.sent_from.map_or(a, |s| s.min(a)));
            if n < whole {
                // The datagram is full.
                break;
            }
        }
        chunks
    }
}
