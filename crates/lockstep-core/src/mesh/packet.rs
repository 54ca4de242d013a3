//! Building the datagram for one peer within the datagram budget.
//!
//! Control messages go first (they are small and must get through), then
//! the inputs due to the peer (see `link::Resend`) as far as they fit, as
//! delta chains, or, for an observer, as many confirmed frames as fit.

use super::MeshSession;
use super::store::Cell;
use crate::link;
use crate::wire::{
    self, Abandon, ByeReason, ChainWriter, DatagramWriter, Endorsement, Frames, Hello, InputRun,
    Inputs, Message, RejectReason, ResumeToken, Status, Welcome,
};
use crate::{Frame, Input, Instant, PlayerId, Tick};

/// Bytes a run's header may take: seat, start tick, count and chain length.
const RUN_HEADER: usize = 12;
/// Bytes an `Inputs` message may take besides its runs and acks.
const INPUTS_HEADER: usize = 3;

/// A run coded for an `Inputs` message, its chain in [`Packing::bytes`].
#[derive(Debug, Clone)]
struct CodedRun {
    seat: PlayerId,
    start: Tick,
    count: u32,
    back: u32,
    check: u8,
    bytes: core::ops::Range<usize>,
}

/// What coding an `Inputs` message works in, kept from one datagram to the
/// next so that none allocates.
#[derive(Debug)]
pub(super) struct Packing<I> {
    acks: Vec<(PlayerId, Tick)>,
    wanted: Vec<(PlayerId, Tick, Tick)>,
    /// Of each stretch of our own input due, how far it went.
    own_sent: Vec<(Tick, Tick)>,
    chain: ChainWriter<I>,
    runs: Vec<CodedRun>,
    bytes: Vec<u8>,
}

impl<I: Input> Default for Packing<I> {
    fn default() -> Self {
        Self {
            acks: Vec::new(),
            wanted: Vec::new(),
            own_sent: Vec::new(),
            chain: ChainWriter::new(),
            runs: Vec::new(),
            bytes: Vec::new(),
        }
    }
}
impl<I: Input> MeshSession<I> {
    /// Writes the datagram for peer `i` into `buf`; returns whether another
    /// should follow at once (snapshot chunks are due that did not fit).
    pub(super) fn build_datagram(&mut self, i: usize, buf: &mut Vec<u8>) -> bool {
        let now = self.now;
        let budget = self.config.max_datagram;
        let mut w = DatagramWriter::new(buf, self.next_tick, budget);
        let p = &self.peers[i];
        // Every message below is bounded far under the minimum budget (256
        // bytes) except inputs and frames, which are sized to what is left;
        // a refusal can only mean "no room", so it is safe to skip.
        if let Some(reason) = p.refused {
            w.put(Message::Reject(reason.as_reject()));
            w.finish();
            return false;
        }
        if self.leaving {
            w.put(Message::Bye {
                reason: ByeReason::Leaving,
                text: "",
            });
        }
        // Until welcomed, and again while the peer is silent: the Hello
        // carries our full tick, which anchors how it reads the datagram's
        // 16-bit one after a long silence.
        if !p.welcomed || p.link.interrupted() {
            w.put(Message::Hello(Hello {
                fingerprint: self.config.fingerprint,
                spectator: self.local_seat.is_none(),
                resume_from: Some(self.next_tick),
                ..Hello::default()
            }));
        }
        if p.owe_welcome {
            w.put(Message::Welcome(Welcome {
                seat: self.local_seat,
                start: self.next_tick,
                tick: self.next_tick,
                deadline: false,
                tick_rate: 0,
                delay: self.delays.delay,
                seats: self.seats.len() as u32,
                token: ResumeToken::default(),
                snapshot: false,
                lobby: false,
                match_id: 0,
            }));
        }
        // A snapshot's chunks come next: they are what an observer catching
        // up needs most, and everything after them is repeated until
        // acknowledged anyway.
        let more = self.put_chunks(&mut w, i);
        let p = &self.peers[i];
        // Its checkpoint first: a reader takes the first few.
        for m in self.resync_request(p.id).into_iter().flatten() {
            w.put(m);
        }
        // Whom our next tick waits on, once it has waited a tick period: a
        // peer waiting on no one but itself is one that stopped sending
        // input.
        let (waits, tick) = &self.waits;
        if *tick == self.next_tick && !waits.named().is_empty() {
            w.put(Message::Status(Status {
                open: self.next_tick,
                slack: 0,
                waiting: waits.named().to_vec(),
            }));
        }
        for m in p
            .link
            .pong(now)
            .into_iter()
            .chain(p.link.ping(now, self.config.ping_interval))
        {
            w.put(m);
        }
        if self.local_seat.is_some() {
            if let Some(frame) = self.pause.frame() {
                w.put(Message::Pause { frame });
            }
            if let Some(lifted) = self.pause.lifted().filter(|l| p.lifted_known < Some(*l)) {
                w.put(Message::Resume { lifted });
            }
        }
        let p = &mut self.peers[i];
        p.checks.write(&self.checks, &mut w, now);
        let p = &self.peers[i];
        if let Some(ack) = self.snapshot_ack_for(i) {
            w.put(Message::SnapshotAck(ack));
        }
        let targets = self.targets();
        if self.local_seat.is_some() && p.seat.is_some() {
            // An endorsement is repeated until the peer is past its tick (it
            // then applied it) and, to the abandoned peer, for good.
            let endorsements: Vec<Endorsement> = self
                .endorsed
                .values()
                .filter(|e| {
                    e.from >= p.next_tick
                        || p.seat == Some(e.seat)
                        || self.seats[e.seat.index()].empty_from.is_none()
                })
                .copied()
                .collect();
            if !self.votes.is_empty() || !self.frozen.is_empty() || !endorsements.is_empty() {
                w.put(Message::Abandon(Abandon {
                    votes: self.votes.iter().copied().collect(),
                    frozen: self.frozen.iter().map(|(s, t)| (*s, *t)).collect(),
                    endorsements,
                }));
            }
            let sent_own = self.put_inputs(&mut w, i, &targets);
            let p = &mut self.peers[i];
            // A datagram without our inputs leaves the watch on an
            // acknowledgement we still wait for running: most go without
            // them once each input went its few times.
            if sent_own {
                p.ack_watch.waiting(now);
            } else if p.inputs_sent.is_clear(self.next_commit) {
                p.ack_watch.idle();
            }
        } else if p.seat.is_none() && self.is_feeder() {
            // One behind every frame held gets a snapshot instead.
            if self.peers[i].next_tick >= self.store.base() {
                self.put_frames(&mut w, self.peers[i].next_tick);
            }
        }
        w.finish();
        more
    }

    /// Seats whose input we may still need forwarded, or forward: the
    /// frozen ones, our own excepted.
    fn targets(&self) -> Vec<PlayerId> {
        self.frozen
            .keys()
            .copied()
            .filter(|c| Some(*c) != self.local_seat)
            .collect()
    }

    /// Acks, our own inputs due to the peer (see [`link::Resend`]) and
    /// forwarded ones, as one `Inputs` message sized to what is left of
    /// the datagram; our own runs coded against the input the peer
    /// acknowledged last (see [`link::reference`]). Returns whether our own
    /// inputs went.
    fn put_inputs(&mut self, w: &mut DatagramWriter<'_>, i: usize, targets: &[PlayerId]) -> bool {
        let mut sc = core::mem::take(&mut self.packing);
        let red = self.inputs_redundancy(i);
        let sent_own = self.pack_inputs(w, i, targets, red, &mut sc);
        let now = self.now;
        let record = &mut self.peers[i].inputs_sent;
        for &(a, b) in &sc.own_sent {
            record.sent(a, b, now, red);
        }
        self.packing = sc;
        sent_own
    }

    /// How hard our inputs to peer `i` are repeated, from its link.
    pub(super) fn inputs_redundancy(&self, i: usize) -> link::Redundancy {
        // Every player waits for every input: one late holds them all up.
        let held_up = self.seats.iter().filter(|s| s.empty_from.is_none()).count() as u32;
        self.peers[i]
            .link
            .input_redundancy(self.config.resend_interval, self.period(), held_up)
    }

    /// When our inputs make a datagram to peer `i` go by themselves (a
    /// copy left, a resend timer), never sooner than a copy's spacing
    /// after the last datagram; `None` when none waits.
    pub(super) fn inputs_due(&self, i: usize) -> Option<Instant> {
        self.local_seat?;
        let p = &self.peers[i];
        p.seat?;
        // A peer we refused, or cannot play with, is sent none (only why,
        // on its own timer).
        if p.refused.is_some() || p.incompatible.is_some() {
            return None;
        }
        p.inputs_sent.next_send(
            self.now,
            self.next_commit,
            || self.inputs_redundancy(i),
            p.link.last_sent(),
        )
    }

    fn pack_inputs(
        &self,
        w: &mut DatagramWriter<'_>,
        i: usize,
        targets: &[PlayerId],
        red: link::Redundancy,
        sc: &mut Packing<I>,
    ) -> bool {
        let p = &self.peers[i];
        sc.acks.clear();
        // A player is told how far we hold its own input: forwarded copies
        // of it are not what it sent us.
        if let Some(s) = p.seat {
            sc.acks.push((s, self.held_own(s)));
        }
        for &c in targets {
            if Some(c) != p.seat {
                sc.acks.push((c, self.contiguous(c)));
            }
        }
        sc.wanted.clear();
        sc.own_sent.clear();
        if let Some(me) = self.local_seat {
            let due = p.inputs_sent.due(self.now, self.next_commit, red);
            for (a, b) in due.runs(u32::MAX).into_iter().flatten() {
                sc.wanted.push((me, a, b));
                sc.own_sent.push((a, a));
            }
        }
        for &c in targets {
            if Some(c) != p.seat {
                sc.wanted.push((c, p.lacks(c), self.contiguous(c)));
            }
        }
        // Primed ticks are known to everyone: never worth sending.
        let floor = self
            .store
            .base()
            .max(self.start.saturating_add(self.config.delay));
        // The delay a seat wants goes with its input: every change within a
        // run is sent with it (a run ends short of a change that did not
        // fit), so whoever holds an input holds its want.
        for run in &mut sc.wanted {
            run.1 = run.1.max(floor);
            let (changes, end) = self.delays.for_run(run.0.index(), run.1, run.2);
            run.2 = end;
            if !changes.is_empty() {
                let m = Message::DelayWants {
                    seat: run.0,
                    changes,
                };
                if w.push(&m).is_err() {
                    run.2 = run.1;
                }
            }
        }
        let mut left = w
            .remaining()
            .saturating_sub(INPUTS_HEADER + sc.acks.len() * 8);
        sc.runs.clear();
        sc.bytes.clear();
        // Our own stretches come first, one entry of `own_sent` each.
        for k in 0..sc.wanted.len() {
            let (seat, from, end) = sc.wanted[k];
            // What is under the floor counts as gone: it never needs to.
            if let Some(o) = sc.own_sent.get_mut(k) {
                o.1 = from.min(end).max(o.0);
            }
            if from >= end || left <= RUN_HEADER {
                continue;
            }
            // Input forwarded for another seat is always self-contained.
            let r = if Some(seat) == self.local_seat {
                link::reference(from, &p.ack_watch, &self.own_inputs, self.now, p.link.rtt())
            } else {
                link::Reference::none()
            };
            let chain = &mut sc.chain;
            chain.restart(r.input.cloned().unwrap_or_default());
            let mut t = from;
            while t < end && chain.count() < wire::MAX_RUN {
                // Forwarded input is passed on as held: the endorsements'
                // digests catch a lie, wherever it came from.
                let Some(input) = self.store.cell(t, seat.index()).and_then(Cell::input) else {
                    break;
                };
                if !chain.push(input, left - RUN_HEADER) {
                    break;
                }
                let Some(n) = t.next() else { break };
                t = n;
            }
            if let Some(o) = sc.own_sent.get_mut(k) {
                o.1 = t.max(o.0);
            }
            if !chain.is_empty() {
                left = left.saturating_sub(RUN_HEADER + chain.len());
                let at = sc.bytes.len();
                chain.write(&mut sc.bytes);
                sc.runs.push(CodedRun {
                    seat,
                    start: from,
                    count: chain.count() as u32,
                    back: r.back,
                    check: r.check,
                    bytes: at..sc.bytes.len(),
                });
            }
        }
        if sc.acks.is_empty() && sc.runs.is_empty() {
            return false;
        }
        let own = sc.runs.iter().any(|c| Some(c.seat) == self.local_seat);
        let run = |c: &CodedRun| InputRun {
            seat: c.seat,
            start: c.start,
            count: c.count,
            back: c.back,
            check: c.check,
            chain: sc.bytes.get(c.bytes.clone()).unwrap_or_default(),
        };
        // One run (our own) is the usual datagram: no list to build.
        let pushed = if let [one] = sc.runs.as_slice() {
            w.push(&Message::Inputs(Inputs {
                acks: (&sc.acks).into(),
                runs: (&[run(one)]).into(),
            }))
        } else {
            let runs: Vec<InputRun<'_>> = sc.runs.iter().map(run).collect();
            w.push(&Message::Inputs(Inputs {
                acks: (&sc.acks).into(),
                runs: (&runs).into(),
            }))
        };
        pushed.is_ok() && own
    }

    /// Confirmed frames from `from` on, as many as fit: only frames every
    /// live player has run (a frame only this peer ran could still be undone
    /// by an abandonment, its own input never having reached anyone).
    fn put_frames(&self, w: &mut DatagramWriter<'_>, from: Tick) {
        let start = from.max(self.store.base());
        let end = self.min_live_next();
        let mut frames: Vec<Frame<I>> = Vec::new();
        let mut t = start;
        // A bounded try: an observer catching up gets plenty per second,
        // and the encoding work per datagram stays small.
        while t < end && frames.len() < 64 {
            let Some(slot) = self.store.get(t) else { break };
            frames.push(slot.to_frame(t));
            let Some(n) = t.next() else { break };
            t = n;
        }
        // Halve until the message fits what is left.
        let seats = self.seats.len();
        let mut body = Vec::new();
        while !frames.is_empty() {
            body.clear();
            wire::encode_frames_body(&frames, seats, None, &mut body);
            let m = Message::Frames(Frames {
                start,
                count: frames.len() as u32,
                seats: seats as u32,
                reference: None,
                body: &body,
            });
            if w.push(&m).is_ok() {
                return;
            }
            frames.truncate(frames.len() / 2);
        }
    }
}

/// Why a peer was refused, kept to tell it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    Game { ours: u64, theirs: u64 },
}

impl Refusal {
    fn as_reject(self) -> RejectReason<'static> {
        match self {
            Self::Game { ours, theirs } => RejectReason::GameMismatch {
                server: ours,
                client: theirs,
            },
        }
    }
}
