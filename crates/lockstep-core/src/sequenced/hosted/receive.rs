//! A takeover's messages, taken: a seat coming back to the new host, a
//! survivor's report to its candidate, a candidate's answer to its
//! reporter, and the frames a survivor hands the candidate. Each message
//! is one handler; the datagram is decoded once by the caller.

use super::report::bare_host;
use super::*;

/// Whether the rest of a datagram is still to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// Go on with its next message.
    Next,
    /// Nothing more of it is taken.
    Stop,
}

impl<I: Input> HostedSession<I> {
    /// A `Takeover` or `TakeoverAck` from `from`.
    pub(super) fn take_takeover(&mut self, from: PeerId, d: &Datagram<'_>) {
        // Already taken over: a seat we hold comes back.
        if self.hosting() {
            self.report_to_host(from, d);
            return;
        }
        // A collecting candidate's probe carries its own report, marked.
        let mark = d.messages.iter().find_map(bare_host);
        for m in &d.messages {
            let flow = match *m {
                Message::Takeover {
                    epoch,
                    seat,
                    token,
                    lacks,
                } => self.take_report(from, d, mark, (epoch, seat, token, lacks)),
                Message::TakeoverAck { .. } => self.take_answer(from, m),
                _ => Flow::Next,
            };
            if flow == Flow::Stop {
                return;
            }
        }
        self.take_survivor_frames(from, d);
    }

    /// A report reaching us once we host: a seat we hold comes back (by
    /// either token it names); any other reported too late (the match went
    /// on without it); one naming a takeover we never knew of is a player
    /// that left us for another host.
    fn report_to_host(&mut self, from: PeerId, d: &Datagram<'_>) {
        // The reports whose token is one our sequencer holds the seat for.
        let Role::Host(h) = &mut self.role else {
            return;
        };
        let seq = h.sequencer();
        let proven: Vec<(PlayerId, u32)> = d
            .messages
            .iter()
            .filter_map(|m| match *m {
                Message::Takeover {
                    seat, token, epoch, ..
                } => Some((seat, token, epoch)),
                _ => None,
            })
            .filter(|(seat, token, _)| seq.holds_token(*seat, token))
            .map(|(seat, _, epoch)| (seat, epoch))
            .collect();
        // A takeover we never knew of: nothing is answered.
        let newer: Vec<PlayerId> = proven
            .iter()
            .filter(|(_, e)| *e > self.epoch)
            .map(|(s, _)| *s)
            .collect();
        if !newer.is_empty() {
            // Only from the seat's own connection: its token may have
            // reached others (a takeover called off, say).
            if Some(newer[0]) != self.seat() && self.seat_peers.get(&newer[0]) == Some(&from) {
                self.deposers.insert(newer[0]);
            }
            self.depose_if_left();
            return;
        }
        if !d
            .messages
            .iter()
            .any(|m| matches!(m, Message::Takeover { .. }))
        {
            return;
        }
        if proven.is_empty() {
            let late = answer(self.epoch, Reply::Late, self.client().frame());
            self.answer_report(from, late);
            self.ignore(from, Ignored::Late);
        } else if !self.ready.contains_key(&from) {
            // Once per report (those we told at the takeover are told
            // again on our own until they come).
            let ready = answer(self.epoch, Reply::Ready, self.client().frame());
            self.answer_report(from, ready);
        }
        self.sent_at = None;
    }

    /// A survivor's report of `seat`, to us as a candidate: counted once it
    /// proves the seat and comes from where the seat's player is.
    fn take_report(
        &mut self,
        from: PeerId,
        d: &Datagram<'_>,
        mark: Option<PlayerId>,
        (epoch, seat, token, lacks): (u32, PlayerId, ResumeToken, Tick),
    ) -> Flow {
        if self.takeover.is_none() && !self.hosting() {
            let flow = self.join_takeover(from);
            if flow == Flow::Stop {
                return flow;
            }
        }
        if !matches!(self.takeover, Some(Takeover::Collecting { .. }))
            || !self.proves_seat(from, seat, &token, mark)
        {
            return Flow::Next;
        }
        // Epochs may differ (a player that joined after a takeover counts
        // from 0): the higher one stands, from a report that proved its
        // seat.
        self.epoch = self.epoch.max(epoch);
        let Some(Takeover::Collecting {
            reports,
            distrusted,
            contested,
            ..
        }) = &mut self.takeover
        else {
            return Flow::Next;
        };
        // A seat proven from two places: one of them got the token from
        // the other's reports. Neither has it.
        if contested.contains(&seat) {
            self.ignore(from, Ignored::Contested(seat));
            return Flow::Next;
        }
        if reports.get(&seat).is_some_and(|r| r.peer != from) {
            reports.remove(&seat);
            if contested.len() < wire::MAX_SEATS {
                contested.push(seat);
            }
            self.ignore(from, Ignored::Contested(seat));
            return Flow::Next;
        }
        // The other token it named for the seat, if any.
        let previous = d.messages.iter().find_map(|m| match *m {
            Message::Takeover {
                seat: s, token: t, ..
            } if s == seat && t != token => Some(t),
            _ => None,
        });
        // A claim found false once stays so.
        let lacks = if distrusted.contains(&seat) {
            reports.get(&seat).map_or(lacks, |r| r.lacks.min(lacks))
        } else {
            lacks
        };
        let inputs = reported_inputs(d, seat);
        reports.insert(
            seat,
            Report {
                peer: from,
                token,
                previous,
                lacks,
                inputs,
            },
        );
        self.sent_at = None;
        Flow::Next
    }

    /// Someone noticed the host gone before us: we take part if we find it
    /// gone too (a player that still hears the host never leaves it on
    /// another's word), and otherwise say so.
    fn join_takeover(&mut self, from: PeerId) -> Flow {
        if self.host_gone() {
            self.begin_takeover();
            Flow::Next
        } else if self.awaiting_welcome() {
            // We moved to a host that has not welcomed us yet: we cannot
            // say it lives.
            self.ignore(from, Ignored::Moving);
            Flow::Stop
        } else {
            // We still hear the host: say so (once for the datagram), and
            // take no part.
            let base = self.client().frame();
            let alive = answer(self.epoch, Reply::Alive(self.host_seat), base);
            self.answer_report(from, alive);
            self.ignore(from, Ignored::HostHeard);
            Flow::Stop
        }
    }

    /// Whether a report of `seat` with `token` from `from` proves the seat:
    /// the token is the one the host committed to, it comes from where the
    /// roster says the seat's player is (its token went to every candidate
    /// it reported to, and the host that left minted it), the seat is not
    /// the lost host's, and it is not an earlier candidate's probe (we
    /// yield to that one, and never count it: it may not hear us, and
    /// would go on counting us too).
    fn proves_seat(
        &mut self,
        from: PeerId,
        seat: PlayerId,
        token: &ResumeToken,
        mark: Option<PlayerId>,
    ) -> bool {
        let holds = self
            .roster
            .iter()
            .any(|e| e.seat == seat && e.commitment == token_commitment(token));
        if !holds {
            self.ignore(from, Ignored::Unproven(seat));
            return false;
        }
        let contact = self
            .roster
            .iter()
            .find(|e| e.seat == seat)
            .map(|e| e.contact.as_slice())
            .filter(|c| !c.is_empty());
        if let Some(c) = contact
            && self.peers.get(c) != Some(&from)
        {
            self.ignore(from, Ignored::Elsewhere(seat));
            return false;
        }
        if Some(seat) == self.host_seat {
            self.ignore(from, Ignored::HostSeat(seat));
            return false;
        }
        if mark == Some(seat) && Some(seat) < self.seat() {
            self.ignore(from, Ignored::EarlierCandidate(seat));
            return false;
        }
        true
    }

    /// A `TakeoverAck` `m` from `from`: another player's word on who
    /// hosts, a collecting candidate's mark, or our candidate's answer.
    fn take_answer(&mut self, from: PeerId, m: &Message<'_>) -> Flow {
        let Message::TakeoverAck {
            ready,
            late,
            alive,
            host,
            ..
        } = *m
        else {
            return Flow::Next;
        };
        let sender = self.seat_of(from);
        // Another player's word that it follows a seat as host.
        if let (true, Some(h), Some(s)) = (alive, host, sender)
            && h != s
        {
            self.vouched.insert(h);
        }
        // Only `host` set: naming the sender, a collecting candidate's mark
        // on its probe; naming another seat, a candidate that gave up for
        // it, passing it on (named as `alive` would, but nobody's word that
        // it hosts).
        let bare = bare_host(m);
        let follow = bare.is_some() && bare != sender;
        let probe = bare.is_some() && !follow;
        let alive = alive || follow;
        if matches!(self.takeover, Some(Takeover::Collecting { .. }))
            && !self.collector_yields(from, ready, late, alive, host)
        {
            return Flow::Next;
        }
        // A mark: only another collecting candidate acts on it (above).
        let ours = matches!(
            &self.takeover,
            Some(Takeover::Reporting { peer: Some(p), .. }) if *p == from
        );
        if probe {
            return Flow::Next;
        }
        if !ours {
            if !matches!(self.takeover, Some(Takeover::Collecting { .. })) {
                self.ignore(from, Ignored::NotOurCandidate);
            }
            return Flow::Next;
        }
        if alive && self.redirected_by(sender, host) {
            return Flow::Stop;
        }
        self.candidate_answered(m, alive)
    }

    /// Our candidate says it follows `host`: returns whether we stop
    /// reporting to it. Another host than the one we lost: the candidate
    /// we gave up on took over already (its answers to us were lost), and
    /// we report to that host again. A host it names again, or its own
    /// seat: it holds us to no end, counts as failed, and the next
    /// candidate is tried (a later takeover may follow the same word once
    /// more).
    fn redirected_by(&mut self, sender: Option<PlayerId>, host: Option<PlayerId>) -> bool {
        let me = self.seat();
        if let Some(h) = host.filter(|h| {
            Some(*h) != self.host_seat
                && Some(*h) != me
                && Some(*h) != sender
                && !self.redirected.contains(h)
        }) && self
            .roster
            .iter()
            .any(|e| e.seat == h && e.playing && !e.contact.is_empty())
        {
            self.redirected.insert(h);
            self.failed.retain(|s| *s != h);
            self.report_to(h);
            return true;
        }
        if host.is_some() && host != self.host_seat {
            // (A match goes on elsewhere: never alone.)
            self.told_alive = true;
            if let Some(Takeover::Reporting { seat, .. }) = &self.takeover {
                let seat = *seat;
                self.failed.push(seat);
            }
            self.next_candidate();
            return true;
        }
        false
    }

    /// Our candidate's answer `m` (`alive` as read): the host lives for
    /// it, it counted us and waits, it is ready (we move to it), or the
    /// match went on without us.
    fn candidate_answered(&mut self, m: &Message<'_>, alive: bool) -> Flow {
        let Message::TakeoverAck {
            epoch,
            ready,
            want,
            late,
            ..
        } = *m
        else {
            return Flow::Next;
        };
        let now = self.now;
        let Some(Takeover::Reporting {
            since,
            want: w,
            acked,
            peer: Some(p),
            ..
        }) = &mut self.takeover
        else {
            return Flow::Next;
        };
        if alive && *acked {
            // The candidate that counted us heard the host again before it
            // sealed anything: called off; we follow the host again once we
            // hear it (or take part in the next takeover if we do not).
            self.call_off();
            return Flow::Stop;
        }
        if alive {
            // The host lives for the candidate (or it has not noticed the
            // silence yet): we wait on it, and never go on alone.
            self.told_alive = true;
            *since = now;
            return Flow::Next;
        }
        *since = now;
        *w = want;
        *acked = true;
        let to = *p;
        self.epoch = self.epoch.max(epoch);
        if late {
            self.went_on_without_us();
        } else if ready {
            let Some(Takeover::Reporting { seat, .. }) = self.takeover.take() else {
                return Flow::Next;
            };
            // The old host is out of the roster for good (a takeover
            // before the new host's roster comes must not wait on it), and
            // the seat we move to hosts.
            let old = self.host_seat.replace(seat);
            self.roster.retain(|e| Some(e.seat) != old);
            self.moved_at = Some(now);
            let _ = self.client_mut().move_to(to, now);
        } else {
            self.sent_at = None;
        }
        Flow::Next
    }

    /// The match went on under a new host without us (we reported too
    /// late): this session ends, and the game hears it once, in place of
    /// the host's goodbye held back or as the session's end.
    fn went_on_without_us(&mut self) {
        self.takeover = None;
        self.ended = true;
        let reason = crate::sequenced::CloseReason::Bye(
            wire::ByeReason::Kicked,
            "the match went on under a new host without this player (it reported too late)".into(),
        );
        if self.client().closed().is_some() {
            self.held_close = Some(Event::Closed { reason });
        } else {
            self.client_mut().end(reason);
        }
    }

    /// Frames from the survivor we asked for them (from nobody else): a
    /// run that continues from the first frame we lack (a frame past a gap
    /// could be anything).
    fn take_survivor_frames(&mut self, from: PeerId, d: &Datagram<'_>) {
        let frames_in = d.messages.iter().any(|m| matches!(m, Message::Frames(_)));
        if frames_in && self.asked() != Some(from) {
            self.ignore(from, Ignored::FramesRefused);
        }
        if self.asked() != Some(from) {
            return;
        }
        let seats = self.me().map_or(0, |(_, _, w)| w) as usize;
        let before = self.client().lacks();
        let frames: Vec<Frame<I>> = d
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Frames(f) if f.seats as usize == seats => f.decode::<I>(None).ok(),
                _ => None,
            })
            .flatten()
            .skip_while(|f| f.tick < before)
            .enumerate()
            .take_while(|(k, f)| f.tick == before.saturating_add(*k as u32))
            .map(|(_, f)| f)
            .collect();
        if frames.is_empty() {
            return;
        }
        self.client_mut().hold_frames(frames);
        let now = self.now;
        if self.client().lacks() > before
            && let Some(Takeover::Collecting { progress, .. }) = &mut self.takeover
        {
            *progress = now;
        }
        self.sent_at = None;
    }
}

/// The inputs a report carries for `seat`, by tick (at most 256).
fn reported_inputs<I: Input>(d: &Datagram<'_>, seat: PlayerId) -> Vec<(Tick, I)> {
    d.messages
        .iter()
        .filter_map(|m| match m {
            Message::Inputs(i) => Some(i),
            _ => None,
        })
        .flat_map(|i| i.runs.iter())
        .filter(|r| r.seat == seat)
        .filter_map(|r| r.decode::<I>(None).ok().map(|v| (r.start, v)))
        .flat_map(|(start, v)| {
            v.into_iter()
                .enumerate()
                .map(move |(k, x)| (start.saturating_add(k as u32), x))
        })
        .take(256)
        .collect()
}
