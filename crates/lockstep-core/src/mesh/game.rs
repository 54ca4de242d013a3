//! What the game calls: commit its input, run frames, pause and resume,
//! abandon a silent player, admit an observer, leave, report checksums.

use super::*;

impl<I: Input> MeshSession<I> {
    /// Commits the local input for the next tick and schedules it to every
    /// peer. Returns the tick it will run on.
    ///
    /// A refusal is backpressure, not an error to report: keep the input and
    /// offer it again next frame (see [`CommitError`]).
    pub fn commit_local(&mut self, input: I) -> Result<Tick, CommitError> {
        self.stir();
        let Some(seat) = self.local_seat else {
            return Err(CommitError::Observer);
        };
        if self.leaving {
            return Err(CommitError::Left);
        }
        if let Some(from) = self.seats[seat.index()].empty_from {
            return Err(CommitError::Abandoned { from });
        }
        // Inputs before the freeze frame are still owed: the frame before it
        // cannot run without them.
        if let Some(frame) = self.pause.frame().filter(|f| self.next_commit >= *f) {
            self.stats.commits_refused += 1;
            return Err(CommitError::Paused { frame });
        }
        if self.lead_held() {
            let limit = self.lead_limit();
            let lead = self.next_commit.since(self.min_live_next());
            self.stats.commits_refused += 1;
            return Err(CommitError::TooFarAhead { lead, limit });
        }
        self.scratch.clear();
        input.encode(&mut self.scratch);
        if self.scratch.len() > self.config.max_input_len {
            return Err(CommitError::InputTooLarge {
                len: self.scratch.len(),
                max: self.config.max_input_len,
            });
        }
        // The delay rose: the lead is topped up to it with neutral input,
        // before this one (nobody sampled input for the ticks it adds).
        self.fill_after_rise(seat)?;
        if let Some(frame) = self.pause.frame().filter(|f| self.next_commit >= *f) {
            // The rise reached the freeze frame: this input waits for the
            // resume.
            self.stats.commits_refused += 1;
            return Err(CommitError::Paused { frame });
        }
        let tick = self.stamp_own(seat, input)?;
        self.stamp_want(seat, tick);
        self.note_arrivals();
        for p in self.peers.iter_mut().filter(|p| p.seat.is_some()) {
            p.link.flush = true;
        }
        Ok(tick)
    }

    /// Our `input` for the next tick to stamp, which it returns.
    pub(super) fn stamp_own(&mut self, seat: PlayerId, input: I) -> Result<Tick, CommitError> {
        let tick = self.next_commit;
        let after = tick.next().ok_or(CommitError::TickSpaceExhausted)?;
        let (seats, start) = (&self.seats, self.start);
        let slot = self
            .store
            .ensure(tick, |t| new_slot(seats, start, t))
            .ok_or(CommitError::TickSpaceExhausted)?;
        self.own_inputs.note(tick, &input);
        slot.cells[seat.index()] = Cell::Known(input);
        self.next_commit = after;
        Ok(tick)
    }

    /// Whether the game waits for its next frame: it is not complete, and
    /// nothing but its inputs holds it back (not a pause, a snapshot or a
    /// resync). Observers count no stalls.
    fn waiting_for_frame(&self) -> bool {
        self.local_seat.is_some()
            && !self.frozen()
            && !self.snapshot_waiting()
            && self.resync_limit().is_none_or(|l| self.next_tick <= l)
            && !self.store.get(self.next_tick).is_some_and(|s| s.complete())
    }

    /// A stall is the picture stopping: no frame for two tick periods
    /// (steady latency beyond the input delay is not one).
    pub(super) fn note_stall(&mut self) {
        if self.local_seat.is_some() {
            self.stall.no_frame(self.now, self.two_ticks());
        }
    }

    fn two_ticks(&self) -> Duration {
        Duration::from_secs(2) / self.config.tick_rate.max(1)
    }

    /// When a stall begins if the next frame does not complete first: a
    /// timer, so that a loop asking for frames only once one is there
    /// still has its stalls counted.
    pub(super) fn stall_due(&self) -> Option<Instant> {
        if !self.waiting_for_frame() {
            return None;
        }
        self.stall.begins_at(self.two_ticks())
    }

    /// The next confirmed frame, if every input for it is known. Frames come
    /// out in tick order, each exactly once; run every one.
    ///
    /// `None` means "not yet": a missing input (see
    /// [`awaiting`](Self::awaiting)) or the pause frame.
    pub fn advance(&mut self) -> Option<Frame<I>> {
        if self.frozen() || self.snapshot_waiting() {
            return None;
        }
        let tick = self.next_tick;
        // Resyncing: no frame past the donor's state (or, until it
        // arrives, past the tick asked for).
        if self.resync_limit().is_some_and(|l| tick > l) {
            self.stir();
            self.announce_resync();
            return None;
        }
        if !self.store.get(tick).is_some_and(|s| s.complete()) {
            self.note_stall();
            return None;
        }
        let next = tick.next()?;
        self.stir();
        self.follow_delay(tick);
        let frame = self.store.get(tick)?.to_frame(tick);
        self.stall.ran(self.now);
        if self.local_seat.is_none() {
            // Observers learn membership from the frames themselves.
            for ev in &frame.events {
                if let SystemEvent::Abandoned { player } | SystemEvent::Left { player } = *ev {
                    if let Some(seat) = self.seats.get_mut(player.index()) {
                        seat.empty_from = Some(tick);
                    }
                    self.ignore_checksums_of(player, tick);
                    self.decisions.push((player, tick));
                    self.push_event(Event::Abandoned { player, from: tick });
                }
            }
        }
        self.next_tick = next;
        self.stats.frames += 1;
        self.frame_rate.add(self.now, 1);
        if self.is_feeder() {
            for p in self.peers.iter_mut().filter(|p| p.seat.is_none()) {
                p.link.flush = true;
            }
        }
        self.prune();
        self.plan_snapshots();
        self.announce_resync();
        Some(frame)
    }

    /// Calls a pause. The peers are told, commits for the returned frame and
    /// later stop (inputs still owed for earlier frames are taken), and the
    /// simulation will rest on the returned frame. If an earlier pause is
    /// already in flight, that one wins and its frame is returned.
    pub fn request_pause(&mut self) -> Result<Tick, PauseError> {
        self.stir();
        let Some(seat) = self.local_seat else {
            return Err(PauseError::Observer);
        };
        if self.seats[seat.index()].empty_from.is_some() {
            return Err(PauseError::Abandoned);
        }
        let change = self.pause.request(self.next_commit);
        self.note_pause_change(change);
        self.flush_all();
        Ok(self.pause.frame().unwrap_or(self.next_commit))
    }

    /// Lifts the pause and lets commits flow again; the peers are told.
    /// Returns the frame the lifted pause was to freeze on, or `None` if
    /// there was no pause. Safe to call when not paused.
    pub fn resume(&mut self) -> Option<Tick> {
        self.stir();
        let change = self.pause.resume();
        self.note_pause_change(change);
        self.flush_all();
        match change {
            PauseChange::Lifted(f) => Some(f),
            _ => None,
        }
    }

    /// Votes to give up on a player who has stopped sending.
    ///
    /// A vote is never withdrawn, and alone it does nothing: once a strict
    /// majority of the other seated players voted (silence past
    /// `abandon_after` and a goodbye vote on their own), the seat's input is
    /// no longer taken, every peer reports how far it holds it, and the
    /// lowest live seat proposes the first tick nobody holds (so no peer has
    /// run past it). Once every live peer endorsed that tick, with equal
    /// digests of the player's input before it, [`Event::Abandoned`] and a
    /// [`SystemEvent::Abandoned`] in the frame stream follow. In a
    /// two-player session one vote is a majority. Unlike a protocol where
    /// one machine relays everything, a mesh peer cannot pick the tick
    /// itself: another peer may already hold, and have run, later inputs of
    /// the player.
    pub fn abandon(&mut self, player: PlayerId) -> Result<(), AbandonError> {
        self.stir();
        let Some(me) = self.local_seat else {
            return Err(AbandonError::Observer);
        };
        if player == me {
            return Err(AbandonError::Local);
        }
        let seat = self
            .seats
            .get(player.index())
            .filter(|s| s.peer.is_some())
            .ok_or(AbandonError::NoSuchPlayer(player))?;
        if let Some(from) = seat.empty_from {
            return Err(AbandonError::AlreadyAbandoned { player, from });
        }
        self.vote(player);
        self.progress_abandonments();
        Ok(())
    }

    /// Adds an observer to a session under way (the game learned of it
    /// from its lobby, as it learned the roster). Its own session lists the
    /// players and itself; it is sent the game's state as a snapshot (see
    /// [`Event::SnapshotRequested`]), then frames. Datagrams from a peer not
    /// added are refused as [`DatagramError::UnknownPeer`].
    ///
    /// ```
    /// use lockstep_core::{ConfigError, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster};
    /// let roster = Roster::new().player(PeerId(0), PlayerId(0)).player(PeerId(1), PlayerId(1));
    /// let mut s = MeshSession::<u8>::new(MeshConfig::default(), roster, PeerId(0), Instant::ZERO)?;
    /// s.add_observer(PeerId(7))?;
    /// assert_eq!(s.add_observer(PeerId(1)), Err(ConfigError::DuplicatePeer(PeerId(1))));
    /// assert!(s.remove_observer(PeerId(7)));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn add_observer(&mut self, peer: PeerId) -> Result<(), ConfigError> {
        self.stir();
        if peer == self.local || self.peers.iter().any(|p| p.id == peer) {
            return Err(ConfigError::DuplicatePeer(peer));
        }
        let (width, first, now) = (self.seats.len(), self.start, self.now);
        self.peers.push(Peer::new(peer, None, width, first, now));
        Ok(())
    }

    /// Forgets an observer (it left, or the game stopped admitting it):
    /// nothing more is sent to it and its datagrams are refused. Returns
    /// whether it was one. Players are never removed: they are abandoned.
    pub fn remove_observer(&mut self, peer: PeerId) -> bool {
        self.stir();
        let before = self.peers.len();
        self.peers.retain(|p| p.seat.is_some() || p.id != peer);
        self.cursor = 0;
        self.prune();
        self.peers.len() < before
    }

    /// Leaves the session: every peer is told goodbye (and empties this
    /// seat at once instead of waiting for silence: the frame stream
    /// records [`SystemEvent::Left`] when the deciding peer heard the
    /// goodbye), and commits stop. Nothing is sent until the session is
    /// next driven: keep driving it until the others have emptied the
    /// seat ([`abandoned`](Self::abandoned) lists our own; a
    /// [`Runner`](crate::Runner)'s status turns `Ended`), so the goodbye
    /// gets through loss.
    pub fn leave(&mut self) {
        self.stir();
        self.leaving = true;
        self.flush_all();
    }

    /// Reports the game's state hash after running `tick`. Peers compare;
    /// a mismatch raises [`Event::Desync`]. Ticks must ascend; reporting
    /// every tick or every Nth is the game's choice (the same on every peer).
    pub fn report_checksum(&mut self, tick: Tick, hash: u64) -> Result<(), ChecksumError> {
        self.stir();
        self.checks.may_report(tick, self.next_tick)?;
        // A checkpoint rides on the next datagram: it is not worth one.
        // An adaptive session's carries the delay in force too.
        let hash = if self.config.adaptive.is_some() {
            self.delays.mix(tick, hash)
        } else {
            hash
        };
        let _ = self.checks.report(tick, hash);
        let now = self.now;
        for i in 0..self.peers.len() {
            for o in self.peers[i].checks.catch_up(&self.checks, now) {
                self.check_outcome(i, o);
            }
        }
        self.plan_resync();
        Ok(())
    }
}
