//! Admission: a stranger's datagram screened, a Hello admitted to a new
//! seat, a spectator's place, or a seat taken back with its resume token.

use super::*;

/// Why a survivor of a takeover that ran frames the new host replaced is
/// refused (the room hands out no snapshot to put it right).
pub(super) fn replaced_refusal() -> Rejection {
    Rejection::Other(
        "this player ran frames the new host replaced, and the room hands out no snapshot: it can only join again as a new player"
            .into(),
    )
}

impl<I: Input> Sequencer<I> {
    /// A datagram from a peer with no connection: it must open one. It is
    /// screened as every server screens strangers
    /// ([`screen_stranger`](admission::screen_stranger)), and answered, if
    /// at all, with no more bytes than it had: a refusal too (a host's
    /// sequencer cannot tell a forged source address, so a larger answer
    /// would let anyone aim it at someone else).
    pub(super) fn take_stranger(
        &mut self,
        peer: PeerId,
        datagram: &[u8],
    ) -> Result<(), SequencerError> {
        let hello = match admission::screen_stranger(datagram, self.config.max_datagram) {
            Ok((_, hello)) => hello,
            Err(unwelcome) => {
                let mut out = Vec::new();
                if let Some(len) = unwelcome.answer(self.open, datagram.len(), &mut out) {
                    out.truncate(len);
                    self.reply(peer, out);
                }
                return Err(match unwelcome {
                    admission::Unwelcome::Version(theirs) => {
                        let reason = Rejection::ProtocolMismatch {
                            server: wire::VERSION,
                            client: theirs,
                        };
                        self.stats.rejects += 1;
                        self.push_event(SequencerEvent::Rejected {
                            peer,
                            reason: reason.clone(),
                        });
                        SequencerError::Refused { peer, reason }
                    }
                    admission::Unwelcome::NotOurs => WireError::BadMagic.into(),
                    admission::Unwelcome::TooLarge { len, .. } => WireError::Oversized(len).into(),
                    admission::Unwelcome::Malformed(e) => e.into(),
                    _ => SequencerError::NotConnected(peer),
                });
            }
        };
        let admitted = self.admit(peer, &hello);
        if let Err(SequencerError::Refused { reason, .. }) = &admitted {
            let mut out = Vec::new();
            let reject = Message::Reject(reason.as_reason());
            if let Some(len) = admission::write_answer(&reject, self.open, datagram.len(), &mut out)
            {
                out.truncate(len);
                self.reply(peer, out);
            }
        }
        admitted
    }

    /// A Hello from a peer with no connection: the room's game and codec,
    /// then a seat taken back with its token, or a new seat (or a place to
    /// watch).
    pub(super) fn admit(&mut self, peer: PeerId, hello: &Hello<'_>) -> Result<(), SequencerError> {
        match self.fingerprint {
            Some(fp) if fp != hello.fingerprint => {
                return self.refuse(
                    peer,
                    Rejection::GameMismatch {
                        server: fp,
                        client: hello.fingerprint,
                    },
                );
            }
            Some(_) => {}
            None => self.fingerprint = Some(hello.fingerprint),
        }
        if hello.codec != I::CODEC {
            return self.refuse(
                peer,
                Rejection::Other(
                    "the room's players use another input type (another build of the game? \
                     give each build its own fingerprint)"
                        .into(),
                ),
            );
        }
        // A known token takes its seat back on this new connection, once the
        // seat's old connection has gone quiet (or was dropped), and is
        // spent doing so.
        if let Some((player, with_previous)) = self.resumable(hello) {
            return self.resume_seat(peer, hello, player, with_previous);
        }
        // A token no seat holds: taking a new seat instead would hand a
        // client that kept its state someone else's game.
        if let Some(proof) = hello.resume {
            let cookie = hello.cookie.unwrap_or_default();
            if self
                .replaced
                .iter()
                .any(|t| admission::resume_proof(t, cookie, hello.key.as_ref()) == proof)
            {
                return self.refuse(peer, replaced_refusal());
            }
            return self.refuse(peer, Rejection::BadToken);
        }
        self.seat_newcomer(peer, hello)
    }

    /// A Hello proving `player`'s token (`with_previous`: the one before
    /// its latest): the seat moves to this connection, the rest of the
    /// stream coming from the history, a snapshot, or a replay of the game
    /// from its start; or it is refused, and why.
    fn resume_seat(
        &mut self,
        peer: PeerId,
        hello: &Hello<'_>,
        player: PlayerId,
        with_previous: bool,
    ) -> Result<(), SequencerError> {
        if !self.seat_quiet(player, self.now) {
            return self.refuse(peer, Rejection::SeatBusy);
        }
        // Held after a takeover for the peer that reported it: the
        // token alone, which candidates saw, does not take it.
        if self.seats[player.index()]
            .as_ref()
            .and_then(|s| s.bound)
            .is_some_and(|b| b != peer)
        {
            return self.refuse(peer, Rejection::BadToken);
        }
        let old = self.seat_conn(player);
        let live = self.seats[player.index()].as_ref().is_some_and(|s| s.live);
        // A survivor of a takeover back for the first time that ran
        // frames past the first one the new host sealed ran the old
        // host's, which the takeover replaced (its claim to hold them
        // was not believed): its state is not the match's any more.
        // (Held for its reporter until it is back, however long that
        // takes.)
        let handed_over = self.seats[player.index()]
            .as_ref()
            .is_some_and(|s| s.bound.is_some());
        let ran_replaced = handed_over
            && hello
                .resume_from
                .zip(self.taken_over_at)
                .is_some_and(|(t, next)| t > next);
        // A player that was playing and still holds the frames up to
        // the one it names is sent the rest from the history.
        let from_history = hello
            .resume_from
            .filter(|t| live && !ran_replaced && *t >= self.history_base && *t <= self.open);
        // Otherwise it is resumed from a snapshot, like a joiner, where a
        // joiner would be (and always if it was joining): its seat runs
        // neutral and holds nobody up until it has caught up again. A
        // joiner starts its join over: the new connection knows nothing
        // of the old one's snapshot. (It replays the game instead, while
        // the history holds it, when nobody else could donate: a room
        // of joiners would wait for ever.)
        let rejoin = from_history.is_none()
            && (!live || self.snapshot_join_now())
            && (self.donor_available(old) || !self.replayable());
        if ran_replaced && !(rejoin && self.config.snapshot_join) {
            // Its seat cannot be played on: nobody waits for it (and a
            // Hello repeated after this answer was lost hears it again).
            if old.is_none() {
                if let Some(s) = self.seats[player.index()].as_ref()
                    && self.replaced.len() < wire::MAX_SEATS
                {
                    self.replaced.push(s.token);
                }
                self.release_seat(player, SystemEvent::Abandoned { player });
            }
            return self.refuse(peer, replaced_refusal());
        }
        if from_history.is_none() && !rejoin && !self.replayable() {
            return self.refuse(
                peer,
                Rejection::Other(
                    "the game has run past its replay history: resuming needs a snapshot".into(),
                ),
            );
        }
        self.move_seat(peer, player, with_previous, old, from_history, rejoin);
        Ok(())
    }

    /// Moves `player`'s seat to the new connection `peer` (from the old
    /// one, `old`, if it still has one), with a fresh token: sent the
    /// frames from `from_history`, or joining again from a snapshot
    /// (`rejoin`), or replaying the game from its start.
    fn move_seat(
        &mut self,
        peer: PeerId,
        player: PlayerId,
        with_previous: bool,
        old: Option<usize>,
        from_history: Option<Tick>,
        rejoin: bool,
    ) {
        let live = self.seats[player.index()].as_ref().is_some_and(|s| s.live);
        let previous = old.map(|i| {
            let previous = self.conns[i].peer;
            self.conns.remove(i);
            self.cursor = 0;
            previous
        });
        let now = self.now;
        if rejoin {
            self.join_asked = Some(self.join_asked.map_or((now, now), |(f, _)| (f, now)));
        }
        let next = match from_history {
            Some(t) => t,
            None if rejoin => self.open,
            None => self.config.first_tick,
        };
        let mut conn = self.new_conn(peer, Some(player), next, rejoin);
        conn.replaying = !rejoin && next < self.open;
        self.conns.push(conn);
        let fresh = ResumeToken(self.tokens.next_secret());
        let open = self.open;
        let due = open.saturating_add(self.delay);
        // A joiner that replays the game instead plays at once, as one
        // joining by replay does.
        let replays = !rejoin && !live;
        if let Some(s) = self.seats[player.index()].as_mut() {
            s.conn = Some(peer);
            // The token the client holds stays good until it shows it
            // got the new one.
            if !with_previous {
                s.previous = Some(s.token);
            }
            s.token = fresh;
            // Back from a drop (its seat ran neutral meanwhile), or
            // replaying: its inputs are due a delay from now, as a
            // joiner's are, so nobody waits while it stamps its way up
            // from where it stopped (its acknowledgement moves it there).
            if ((s.lost.is_some() && s.live) || replays) && !s.handed_over {
                s.due_from(due);
            }
            s.handed_over = false;
            s.bound = None;
            if replays {
                s.live = true;
                s.last_input = now;
            }
            s.lost = None;
            if rejoin {
                s.stop_playing(open);
            }
        }
        if replays {
            self.add_tick_event(self.open, SystemEvent::CaughtUp { player });
        }
        // A CaughtUp the old connection earned and no tick carries yet
        // would end the new one's join before it is over.
        if rejoin {
            for events in self.tick_events.values_mut() {
                events.retain(|e| *e != SystemEvent::CaughtUp { player });
            }
        }
        self.start_clock();
        self.push_event(SequencerEvent::Resumed {
            peer,
            previous,
            seat: Some(player),
        });
    }

    /// A Hello with no token: a new seat (or a place to watch), joining
    /// from a snapshot or by replaying the game, while there is room.
    fn seat_newcomer(&mut self, peer: PeerId, hello: &Hello<'_>) -> Result<(), SequencerError> {
        // A game under way is joined from a snapshot when the room says so;
        // otherwise by replaying it, while the history holds it all.
        let from_snapshot =
            self.snapshot_join_now() && (self.donor_available(None) || !self.replayable());
        if !from_snapshot && self.history_base > self.config.first_tick {
            return self.refuse(
                peer,
                Rejection::Other(
                    "the game has run past its replay history: joining needs a snapshot".into(),
                ),
            );
        }
        let seat = if hello.spectator {
            let watching = self.conns.iter().filter(|c| c.seat.is_none()).count();
            if watching >= usize::from(self.config.max_spectators) {
                return self.refuse(peer, Rejection::RoomFull);
            }
            None
        } else {
            let Some(free) = self.seats.iter().position(Option::is_none) else {
                return self.refuse(peer, Rejection::RoomFull);
            };
            let player = PlayerId(free as u16);
            let from = self.open.saturating_add(self.delay);
            self.seats[free] = Some(Seat {
                conn: Some(peer),
                token: ResumeToken(self.tokens.next_secret()),
                previous: None,
                lost: None,
                from,
                pending: BTreeMap::new(),
                taken: Taken::new(from),
                recent: Recent::default(),
                last: I::default(),
                slack: 0,
                last_input: self.now,
                waited_since: None,
                pause_asked: None,
                handed_over: false,
                wants: None,
                bound: None,
                live: !from_snapshot,
                name: admission::display_name(hello.name),
                ready: false,
                ready_at: None,
            });
            self.had_player = true;
            self.add_tick_event(self.open, SystemEvent::Joined { player });
            self.start_clock();
            Some(player)
        };
        let now = self.now;
        if from_snapshot {
            self.join_asked = Some(
                self.join_asked
                    .map_or((now, now), |(first, _)| (first, now)),
            );
        }
        // A joiner from a snapshot is sent frames from the snapshot's tick
        // on, once it is known.
        let next = if from_snapshot {
            self.open
        } else {
            self.config.first_tick
        };
        let conn = self.new_conn(peer, seat, next, from_snapshot);
        self.conns.push(conn);
        self.push_event(SequencerEvent::Joined {
            peer,
            seat,
            tick: self.open,
            name: admission::display_name(hello.name),
        });
        Ok(())
    }

    /// A connection just admitted, sent frames from `next`.
    pub(super) fn new_conn(
        &self,
        peer: PeerId,
        seat: Option<PlayerId>,
        next: Tick,
        join: bool,
    ) -> Conn {
        let now = self.now;
        Conn {
            peer,
            seat,
            next,
            frames_sent: Resend::new(next),
            sent_from: None,
            welcome_pending: true,
            link: Link::ready(now).paced(self.period()),
            ack_pending: false,
            checks: Relayed::default(),
            datagram_rate: TokenBucket::full(self.config.max_datagrams_per_sec, now),
            snapshot_rate: TokenBucket::full(SNAPSHOT_DATAGRAMS_PER_SEC, now),
            input_rate: TokenBucket::full(self.config.max_inputs_per_sec, now),
            closing: None,
            join: join.then_some(Join::Waiting),
            replaying: false,
            resync: None,
            judged_from: Tick::ZERO,
            diverged: false,
            resync_donor: None,
            delay_moved: false,
            resyncs: 0,
            contact: Vec::new(),
            roster_acked: Vec::new(),
        }
    }

    pub(super) fn refuse(&mut self, peer: PeerId, reason: Rejection) -> Result<(), SequencerError> {
        self.stats.rejects += 1;
        self.push_event(SequencerEvent::Rejected {
            peer,
            reason: reason.clone(),
        });
        Err(SequencerError::Refused { peer, reason })
    }

    /// The seat `hello` proves it may take back, and the token it proves:
    /// the seat's own (`false`) or the one before (`true`).
    pub(super) fn resumable(&self, hello: &Hello<'_>) -> Option<(PlayerId, bool)> {
        let proof = hello.resume?;
        let cookie = hello.cookie.unwrap_or_default();
        let proves =
            |t: &ResumeToken| admission::resume_proof(t, cookie, hello.key.as_ref()) == proof;
        self.seats.iter().enumerate().find_map(|(i, s)| {
            let s = s.as_ref()?;
            let previous = if proves(&s.token) {
                false
            } else if s.previous.as_ref().is_some_and(proves) {
                true
            } else {
                return None;
            };
            Some((PlayerId(i as u16), previous))
        })
    }

    /// Whether `seat`'s connection, if it still has one, has been quiet long
    /// enough for its token to move the seat to another.
    pub(super) fn seat_quiet(&self, seat: PlayerId, now: Instant) -> bool {
        self.seat_conn(seat).is_none_or(|i| {
            let c = &self.conns[i];
            c.closing.is_some() || c.link.silent_for(now) >= self.config.resume_after_silence
        })
    }

    /// The connection playing `seat`, if any.
    pub(super) fn seat_conn(&self, seat: PlayerId) -> Option<usize> {
        let peer = self.seats.get(seat.index())?.as_ref()?.conn?;
        self.conn_index(peer)
    }

    /// How connection `i` ends when it is given up for silence: a player's
    /// seat is held for its resume token, when the grace holds any.
    pub(super) fn silence_reason(&self, i: usize) -> DropReason {
        if self.conns[i].seat.is_some() && self.config.seat_grace > self.config.timeout {
            DropReason::Lost
        } else {
            DropReason::TimedOut
        }
    }
}
