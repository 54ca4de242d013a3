//! The candidate's part in a takeover: the reports it takes, the
//! answers it gives, and the room it starts once enough survivors
//! reported.

use super::*;

/// What an answer to a report says (one thing at a time).
#[derive(Debug, Clone, Copy)]
pub(super) enum Reply {
    /// Counted; wait (and send the frames from this tick on, if any).
    Wait(Option<Tick>),
    /// The new host is ready: come back.
    Ready,
    /// The match went on without that seat.
    Late,
    /// We still hear the host (on this seat, if we know it).
    Alive(Option<PlayerId>),
    /// A collecting candidate gave up for this seat: report there (we do
    /// not follow it yet, so this is no word that it hosts).
    Follow(PlayerId),
}

/// A candidate's (or new host's, or a player's that still hears the host)
/// answer to a report.
pub(super) fn answer(epoch: u32, reply: Reply, base: Tick) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = DatagramWriter::new(&mut buf, base, 64);
    w.put(Message::TakeoverAck {
        epoch,
        ready: matches!(reply, Reply::Ready),
        want: match reply {
            Reply::Wait(want) => want,
            _ => None,
        },
        late: matches!(reply, Reply::Late),
        alive: matches!(reply, Reply::Alive(_)),
        host: match reply {
            Reply::Alive(host) => host,
            Reply::Follow(seat) => Some(seat),
            _ => None,
        },
    });
    w.finish();
    buf
}

impl<I: Input> HostedSession<I> {
    /// A collecting candidate's answer from a player it asked: a new host
    /// (it answered `ready`, or `late`: believed only on another seat's
    /// word), a candidate earlier in the order that counts us (`Wait`), or
    /// a player that follows another
    /// host: we report to it instead, and tell our own reporters so.
    /// Returns whether we now report to the sender (its answer is then
    /// taken as a reporter's).
    pub(super) fn collector_yields(
        &mut self,
        from: PeerId,
        hosts: bool,
        late: bool,
        alive: bool,
        host: Option<PlayerId>,
    ) -> bool {
        let Some(sender) = self.seat_of(from) else {
            return false;
        };
        let me = self.seat();
        let to = if (hosts || late) && !self.believed(sender) {
            // Its own word that it hosts, or that the match went on
            // without us: nothing proves it (any seated player can say
            // so, and welcome whoever follows). A real host is named by
            // the players that follow it, and reached that way. We never
            // go on alone.
            self.ignore(from, Ignored::HostClaimNotBelieved(sender));
            self.told_alive = true;
            return false;
        } else if hosts || late {
            // Believed (a seat we followed that never welcomed us is the
            // host we replace next: its datagrams are no takeover
            // messages to us, and it leaves the roster at our next move).
            sender
        } else if alive {
            if host == self.host_seat {
                // It still hears the host: we never go on alone.
                self.told_alive = true;
                return false;
            }
            // Another's word that `h` hosts: once per seat in a takeover
            // (a liar naming a dead seat again and again would hold us),
            // and never its own (a host answers `ready`).
            match host {
                Some(h) if Some(h) != me && h != sender && self.redirected.insert(h) => h,
                // Someone says a match goes on elsewhere: whatever else we
                // do, we never go on alone.
                _ => {
                    self.told_alive = true;
                    return false;
                }
            }
        } else if Some(sender) < me && self.redirected.insert(sender) {
            // An earlier candidate that counts us, or marks its probe: once
            // per takeover (one that never goes on as a host, marking
            // again and again, would hold us for good).
            sender
        } else if Some(sender) < me {
            // Marked again by a seat we yielded to already: the match may
            // go on there; we never go on alone.
            self.told_alive = true;
            return false;
        } else {
            // A later candidate counting us: it yields to us when our own
            // answer reaches it.
            return false;
        };
        self.yield_to(to, (to == sender).then_some(from))
    }

    /// A collecting candidate reports to `to` instead (at `peer`, if
    /// known), and tells its own reporters to follow. Returns whether it
    /// now reports to `peer`.
    pub(super) fn yield_to(&mut self, to: PlayerId, peer: Option<PeerId>) -> bool {
        let Some(Takeover::Collecting { reports, .. }) = &self.takeover else {
            return false;
        };
        let reporters: Vec<PeerId> = reports.values().map(|r| r.peer).collect();
        let base = self.client().frame();
        for p in reporters {
            self.answer_report(p, answer(self.epoch, Reply::Follow(to), base));
        }
        self.failed.retain(|s| *s != to);
        self.report_to(to);
        if let (Some(from), Some(Takeover::Reporting { peer: p, .. })) = (peer, &mut self.takeover)
        {
            *p = Some(from);
            return true;
        }
        false
    }

    /// The survivor a candidate asks for the frames it lacks: the one
    /// holding the most, if more than the candidate.
    pub(super) fn asked(&self) -> Option<PeerId> {
        let Some(Takeover::Collecting { reports, .. }) = &self.takeover else {
            return None;
        };
        let own = self.client().lacks();
        reports
            .values()
            .filter(|r| r.lacks > own)
            .max_by_key(|r| r.lacks)
            .map(|r| r.peer)
    }

    /// Queues an answer to a report from anyone (at most
    /// [`ANSWERS_QUEUED`]: a flood of reports gets no more; each answer is
    /// smaller than the report it answers).
    pub(super) fn answer_report(&mut self, to: PeerId, bytes: Vec<u8>) {
        if self.out.len() < ANSWERS_QUEUED {
            self.out.push_back((to, bytes));
        }
    }

    /// Moves a takeover on: the next candidate after a silent one; the
    /// candidate going on once it heard enough.
    pub(super) fn progress_takeover(&mut self) {
        let now = self.now;
        match &self.takeover {
            Some(Takeover::Reporting { seat, since, .. })
                if now >= *since + self.config.host_timeout =>
            {
                let seat = *seat;
                self.failed.push(seat);
                self.next_candidate();
            }
            Some(Takeover::Reporting { .. }) => {}
            Some(Takeover::Collecting { since, reports, .. }) => {
                let since = *since;
                let expected: Vec<PlayerId> = self
                    .roster
                    .iter()
                    .map(|e| e.seat)
                    .filter(|s| Some(*s) != self.host_seat && Some(*s) != self.seat())
                    .collect();
                let heard = expected.iter().filter(|s| reports.contains_key(s)).count();
                // Survivors and us, of every seat: a host that went silent
                // may live on beyond a partition, with players of its own,
                // and counts against us; one that said goodbye is gone.
                let all = heard == expected.len();
                let host = usize::from(!self.host_said_bye());
                let majority = (heard + 1) * 2 > expected.len() + 1 + host;
                // At once when everyone reported, if that is a majority (a
                // lone survivor of a host gone silent cannot tell it from
                // being cut off); alone only when nobody said the host
                // lives.
                let go = (majority && (all || now >= since + self.config.takeover_wait))
                    || (now >= since + self.config.takeover_alone && !self.told_alive);
                if go {
                    self.settle();
                }
            }
            None => {}
        }
    }

    /// The candidate, once it heard enough: fetches the frames it lacks,
    /// then takes the match over.
    pub(super) fn settle(&mut self) {
        let own = self.client().lacks();
        if let Some(asked) = self.asked() {
            self.await_frames(asked, own);
            return;
        }
        let Some(Takeover::Collecting { reports, .. }) = self.takeover.take() else {
            return;
        };
        let Some((seat, token, _)) = self.me() else {
            return;
        };
        let now = self.now;
        // Frames past the gap at `own` (if any came) are nobody's to trust.
        self.client_mut().forget_frames_from(own);
        let c = self.client();
        let last = own.saturating_sub(1);
        let next = own;
        let frames = c.frames_held(c.held_from(), usize::MAX);
        let events = self.takeover_events(&frames, seat, &reports);
        let playing = |s: PlayerId| self.roster.iter().any(|e| e.seat == s && e.playing);
        let name = |s: PlayerId| {
            self.roster
                .iter()
                .find(|e| e.seat == s)
                .map_or_else(String::new, |e| e.name.clone())
        };
        let mut survivors: Vec<Survivor<I>> = reports
            .iter()
            .map(|(s, r)| Survivor {
                seat: *s,
                token: r.token,
                previous: r.previous,
                peer: Some(r.peer),
                playing: playing(*s),
                inputs: r.inputs.clone(),
                name: name(*s),
            })
            .collect();
        survivors.push(Survivor {
            seat,
            token,
            previous: None,
            peer: Some(HOST_PEER),
            playing: playing(seat),
            inputs: c.inputs_after(last),
            name: name(seat),
        });
        let handover = Handover {
            frames,
            next,
            survivors,
            events,
            fingerprint: self.config.client.fingerprint,
            match_id: c.welcome().map_or(0, |w| w.match_id),
        };
        let Ok(mut sequencer) = Sequencer::take_over(self.room_config(), handover, now) else {
            return;
        };
        // A paused room stays paused under its new host (its players froze
        // on the old host's word, and commit nothing to wait on) until a
        // player resumes it; the pause's `max_pause` counts from now.
        if c.paused() {
            sequencer.pause();
        }
        let Ok(placeholder) = ClientSession::new(self.config.client.clone(), HOST_PEER, now) else {
            return;
        };
        let Role::Client(mut client) =
            core::mem::replace(&mut self.role, Role::Client(Box::new(placeholder)))
        else {
            return;
        };
        if client.move_to(HOST_PEER, now).is_err() {
            self.role = Role::Client(client);
            return;
        }
        self.role = Role::Host(Box::new(HostSession::from_parts(sequencer, *client, now)));
        self.host_seat = None;
        for r in reports.values() {
            self.ready.insert(r.peer, now);
        }
        self.sent_at = None;
    }

    /// The candidate asked `asked` for the frames it lacks from `own` on:
    /// asked in the next takeover datagram to it; one that claims frames
    /// and sends none for `host_timeout` is not believed (it would hold
    /// the takeover for good).
    fn await_frames(&mut self, asked: PeerId, own: Tick) {
        let now = self.now;
        let quiet = self.config.host_timeout;
        if let Some(Takeover::Collecting {
            reports,
            progress,
            distrusted,
            ..
        }) = &mut self.takeover
            && now >= *progress + quiet
        {
            let mut cut = Vec::new();
            for (s, r) in reports.iter_mut().filter(|(_, r)| r.peer == asked) {
                r.lacks = own;
                if !distrusted.contains(s) {
                    distrusted.push(*s);
                }
                cut.push(*s);
            }
            *progress = now;
            for s in cut {
                self.ignore(asked, Ignored::ClaimNotBelieved(s));
            }
        }
    }

    /// The system events the new host's first tick carries: the old host
    /// gone (left, if it said goodbye), every seat still in the match that
    /// did not report given up (the roster's, and one seated too shortly
    /// before the host went for its entry to have reached us: the stream
    /// says it joined), and `seat` hosting.
    fn takeover_events(
        &self,
        frames: &[Frame<I>],
        seat: PlayerId,
        reports: &BTreeMap<PlayerId, Report<I>>,
    ) -> Vec<SystemEvent> {
        let c = self.client();
        let mut events: Vec<SystemEvent> = Vec::new();
        if let Some(h) = self.host_seat {
            events.push(
                if matches!(c.closed(), Some(crate::sequenced::CloseReason::Bye(..))) {
                    SystemEvent::Left { player: h }
                } else {
                    SystemEvent::Abandoned { player: h }
                },
            );
        }
        let mut occupied: BTreeMap<PlayerId, bool> =
            self.roster.iter().map(|e| (e.seat, true)).collect();
        for f in frames {
            for ev in &f.events {
                match *ev {
                    SystemEvent::Joined { player } => {
                        occupied.insert(player, true);
                    }
                    SystemEvent::Left { player } | SystemEvent::Abandoned { player } => {
                        occupied.insert(player, false);
                    }
                    _ => {}
                }
            }
        }
        for (&s, _) in occupied.iter().filter(|(_, here)| **here) {
            let answered = s == seat || reports.contains_key(&s);
            if !answered && Some(s) != self.host_seat {
                events.push(SystemEvent::Abandoned { player: s });
            }
        }
        events.push(SystemEvent::HostChanged { player: seat });
        events
    }

    /// The configuration a new host seals with: ours, with the room's shape
    /// as the old host described it (frame width, tick rate, input delay,
    /// policy), so the match runs on as it did.
    pub(super) fn room_config(&self) -> SequencerConfig {
        let mut config = self.config.sequencer.clone();
        let Some(w) = &self.room else {
            return config;
        };
        config.max_seats = u16::try_from(w.seats).unwrap_or(config.max_seats);
        if w.tick_rate > 0 {
            config.tick_rate = w.tick_rate;
        }
        config.delay = w.delay;
        // The delay the match ran at is kept within our adaptive bounds
        // (widened to it if need be: a room that cannot be taken over
        // dies with its host); a match at delay 0 stays fixed.
        if let Some(a) = config.adaptive.as_mut() {
            if w.delay == 0 {
                config.adaptive = None;
            } else {
                a.min = a.min.min(w.delay);
                a.max = a.max.max(w.delay);
            }
        }
        config.policy = match (w.deadline, config.policy) {
            (true, Policy::WaitForAll { .. }) => Policy::Deadline {
                missing: crate::sequenced::MissingInput::Neutral,
            },
            (false, Policy::Deadline { .. }) => Policy::WaitForAll {
                abandon_after: Duration::from_secs(10),
            },
            (_, p) => p,
        };
        config
    }
}
