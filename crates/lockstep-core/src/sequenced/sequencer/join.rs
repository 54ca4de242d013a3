//! Joining a game under way, and resyncing a diverged client: the
//! snapshot fetched from a donor and handed to every joiner waiting.

use super::*;

impl<I: Input> Sequencer<I> {
    /// A chunk of the snapshot being fetched, from its donor (anyone else's
    /// chunks are ignored).
    pub(super) fn take_chunk(&mut self, i: usize, chunk: &wire::SnapshotChunk<'_>) {
        let peer = self.conns[i].peer;
        let now = self.now;
        if self
            .thanked
            .is_some_and(|(p, a)| p == peer && a.id == chunk.id)
        {
            // It missed our last acknowledgement: say it again.
            self.conns[i].link.flush = true;
            return;
        }
        let Some(f) = self
            .fetch
            .as_mut()
            .filter(|f| f.donor == peer && f.id == chunk.id)
        else {
            return;
        };
        f.started = true;
        self.conns[i].link.flush = true;
        let before = f.receiver.progress().map_or(0, |p| p.2);
        let taken = f.receiver.take(chunk);
        if f.receiver.progress().map_or(0, |p| p.2) > before || matches!(taken, Ok(Some(_))) {
            f.clock.progressed(now);
        }
        match taken {
            Ok(None) => {}
            Ok(Some(snapshot)) if snapshot.tick != f.tick => {
                let reason = format!(
                    "a snapshot after tick {} instead of {}",
                    snapshot.tick, f.tick
                );
                self.donor_failed(reason);
            }
            Ok(Some(snapshot)) => {
                self.thanked = f.receiver.current_ack().map(|a| (f.donor, a));
                let donor = f.donor;
                self.deliver(&snapshot, Some(donor));
            }
            Err(e @ SnapshotError::TooLarge { .. }) => {
                self.too_large_claim(e);
            }
            Err(e) => self.donor_failed(e.to_string()),
        }
    }

    /// Hands `snapshot` to every joiner waiting for one; a spectator of a
    /// room that watches with a delay gets it once it is that old (it is
    /// held until then).
    pub(super) fn deliver(&mut self, snapshot: &crate::snapshot::Snapshot, donor: Option<PeerId>) {
        self.fetch = None;
        self.join_retry = None;
        self.bad_donors.clear();
        self.too_large.clear();
        self.join_asked = None;
        // Spectators only (a player's state is its own business); one
        // snapshot is held at a time, and later spectators wait for it.
        if self.held.is_none()
            && self.conns.iter().any(|c| {
                matches!(c.join, Some(Join::Waiting))
                    && c.closing.is_none()
                    && c.seat.is_none()
                    && snapshot.tick >= self.frontier(c)
            })
        {
            self.held = Some((snapshot.clone(), donor));
        }
        self.hold_spectators();
        self.send_snapshot(snapshot, donor, |j| matches!(j, Some(Join::Waiting)));
    }

    /// Spectators waiting for a snapshot wait for the one held, if one is
    /// (and its frames are still kept), instead of asking for a newer one
    /// (each newer one would push everyone's release back again).
    fn hold_spectators(&mut self) {
        let Some((snapshot, _)) = &self.held else {
            return;
        };
        let after = snapshot.tick.saturating_add(1);
        if after < self.history_base {
            self.held = None;
            return;
        }
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if matches!(c.join, Some(Join::Waiting)) && c.closing.is_none() && c.seat.is_none() {
                let c = &mut self.conns[i];
                c.join = Some(Join::Held);
                // The frames after it are kept for it.
                c.lacks_from(after);
            }
        }
    }

    /// Hands the snapshot held for spectators to them once it is
    /// `spectator_delay` old.
    pub(super) fn release_held(&mut self) {
        let Some((snapshot, _)) = &self.held else {
            return;
        };
        let old_enough = self
            .conns
            .iter()
            .filter(|c| matches!(c.join, Some(Join::Held)))
            .all(|c| snapshot.tick < self.frontier(c));
        if !old_enough {
            return;
        }
        if let Some((snapshot, donor)) = self.held.take() {
            self.send_snapshot(&snapshot, donor, |j| matches!(j, Some(Join::Held)));
        }
    }

    /// Starts sending `snapshot` to every open connection whose join
    /// `takes` it.
    fn send_snapshot(
        &mut self,
        snapshot: &crate::snapshot::Snapshot,
        donor: Option<PeerId>,
        takes: impl Fn(&Option<Join>) -> bool,
    ) {
        if !self
            .conns
            .iter()
            .any(|c| takes(&c.join) && c.closing.is_none())
        {
            return;
        }
        let chunk_len = self.config.max_datagram.saturating_sub(160);
        let id = self.next_snapshot_id;
        self.next_snapshot_id = id.wrapping_add(1);
        // Compressed once; every joiner's sender shares the bytes.
        let tx = match SnapshotSender::new(id, snapshot, chunk_len, &self.config.snapshot) {
            Ok(tx) => tx,
            Err(e) => {
                self.refuse_waiting_joiners(&e);
                return;
            }
        };
        let mut joiners = 0;
        for c in &mut self.conns {
            if !takes(&c.join) || c.closing.is_some() {
                continue;
            }
            c.join = Some(Join::Receiving(Box::new(tx.for_another(id))));
            // A client being resynced is sent the frames up to the
            // snapshot's tick it lacks, then the rest (see `build`).
            let after = snapshot.tick.saturating_add(1);
            c.lacks_from(if c.resync.is_some() {
                c.next.min(after)
            } else {
                after
            });
            c.judged_from = after;
            // Its frames start again after the snapshot (a client being
            // resynced may not have run the ones it was sent before).
            c.sent_from = None;
            c.resync_donor = donor.filter(|_| c.resync.is_some());
            c.link.flush = true;
            joiners += 1;
        }
        self.push_event(SequencerEvent::SnapshotReady {
            tick: snapshot.tick,
            bytes: snapshot.bytes.len(),
            joiners,
        });
    }

    /// The donor says its state is over the cap. Every donor's state is
    /// about as large: once two say so (or nobody else could), the joiners
    /// cannot get in. One alone could be lying to keep them out.
    pub(super) fn too_large_claim(&mut self, e: SnapshotError) {
        let Some(donor) = self.fetch.as_ref().map(|f| f.donor) else {
            return;
        };
        if !self.too_large.contains(&donor) {
            self.too_large.push(donor);
        }
        let others = self.conns.iter().any(|c| {
            c.closing.is_none()
                && c.join.is_none()
                && c.peer != donor
                && !self.too_large.contains(&c.peer)
                && !self.bad_donors.contains(&c.peer)
        });
        if self.too_large.len() >= 2 || !others {
            self.fetch = None;
            self.too_large.clear();
            self.refuse_waiting_joiners(&e);
        } else {
            self.donor_failed(e.to_string());
        }
    }

    /// Closes every joiner still waiting for a snapshot, telling it why.
    pub(super) fn refuse_waiting_joiners(&mut self, e: &SnapshotError) {
        for i in 0..self.conns.len() {
            if matches!(self.conns[i].join, Some(Join::Waiting | Join::Held)) {
                let text = format!("cannot join the game under way: {e}");
                self.close(
                    i,
                    Closing::Error(ErrorCode::TooLarge, text.clone()),
                    DropReason::Violation(ErrorCode::TooLarge, text),
                );
            }
        }
    }

    /// The donor being asked failed: another is asked at once.
    pub(super) fn donor_failed(&mut self, reason: String) {
        if let Some(f) = self.fetch.take() {
            self.bad_donors.push(f.donor);
            self.push_event(SequencerEvent::SnapshotFailed {
                donor: f.donor,
                reason,
            });
            self.join_asked = Some((Instant::ZERO, Instant::ZERO));
        }
    }

    /// When the joiners waiting may stop waiting for others to share their
    /// snapshot.
    pub(super) fn join_due(&self) -> Option<Instant> {
        if self.fetch.is_some() {
            return None;
        }
        let (first, last) = self.join_asked?;
        // A client being resynced does not wait for joiners to share with.
        let resync = self
            .conns
            .iter()
            .any(|c| c.resync.is_some() && matches!(c.join, Some(Join::Waiting)));
        let due = if resync {
            last
        } else {
            (last + self.config.join_wait).min(first + self.config.join_wait_max)
        };
        Some(self.join_retry.map_or(due, |r| due.max(r)))
    }

    /// Asks a donor for a snapshot once joiners have waited long enough,
    /// and replaces a donor that went away or quiet; closes a joiner that
    /// stopped acknowledging its snapshot (it would be sent the window
    /// again and again for nothing).
    pub(super) fn progress_joins(&mut self) {
        let now = self.now;
        self.hold_spectators();
        self.release_held();
        self.drop_stalled_receivers();
        let waiting = self
            .conns
            .iter()
            .any(|c| matches!(c.join, Some(Join::Waiting)) && c.closing.is_none());
        if !waiting {
            self.fetch = None;
            self.join_asked = None;
            return;
        }
        if self.fetch.is_some() && !self.fetch_failed() {
            return;
        }
        if self.join_asked.is_none() {
            self.join_asked = Some((now, now));
        }
        if self.join_due().is_some_and(|t| t > now) {
            return;
        }
        // A sequencer that runs the game hands over its own state, after
        // the last tick sealed.
        if let Some(sim) = &self.simulation {
            let tick = self.open.saturating_sub(1).max(self.config.first_tick);
            let snapshot = crate::snapshot::Snapshot::new(tick, sim.snapshot());
            self.deliver(&snapshot, None);
            return;
        }
        match self.pick_donor() {
            Some(donor) => self.ask_donor(donor),
            None => self.nobody_to_ask(),
        }
    }

    /// Closes every joiner that stopped acknowledging its snapshot.
    fn drop_stalled_receivers(&mut self) {
        let (now, quiet) = (self.now, self.config.donor_timeout);
        for i in 0..self.conns.len() {
            let stalled = matches!(&self.conns[i].join, Some(Join::Receiving(tx))
                if donor::receiver_lapsed(tx, now, quiet));
            if stalled && self.conns[i].closing.is_none() {
                let text = "stopped acknowledging its snapshot".to_owned();
                self.close(
                    i,
                    Closing::Error(ErrorCode::Violation, text.clone()),
                    DropReason::Violation(ErrorCode::Violation, text),
                );
            }
        }
    }

    /// Whether the donor asked failed (it left, went quiet or sends too
    /// slowly): then it is given up.
    fn fetch_failed(&mut self) -> bool {
        let Some(f) = &self.fetch else {
            return false;
        };
        let gone = self
            .conn_index(f.donor)
            .is_none_or(|i| self.conns[i].closing.is_some());
        if gone {
            self.donor_failed("it left".into());
        } else if let Some(lapse) = f.clock.lapse(self.now, self.config.donor_timeout) {
            self.donor_failed(lapse.reason().into());
        } else {
            return false;
        }
        true
    }

    /// The donor: a client that is not joining itself, closest to the open
    /// tick (it runs the requested tick soonest), then nearest.
    fn pick_donor(&self) -> Option<PeerId> {
        let open = self.open;
        // Once the seated majority has agreed on a state, a client that
        // agreed with it donates (a spectator's state is nobody's reference)
        // while there is one, and one that handed out a state found wrong
        // at once only if nobody else can.
        let voters = self.referee.voters();
        self.conns
            .iter()
            .filter(|c| {
                c.closing.is_none() && c.join.is_none() && !self.bad_donors.contains(&c.peer)
            })
            .min_by_key(|c| {
                (
                    !voters.is_empty() && !voters.contains(&c.peer),
                    self.suspects.contains(&c.peer),
                    open.since(c.next.min(open)),
                    c.link.rtt().unwrap_or(Duration::MAX),
                )
            })
            .map(|c| c.peer)
    }

    /// Nobody can be asked for the state: everyone left is waiting for it
    /// (while the game can still be replayed, they are told to come back
    /// and replay it: a player's seat is held for it, and its resume takes
    /// the replay), or everyone failed (they are all tried again later).
    fn nobody_to_ask(&mut self) {
        let now = self.now;
        let all_waiting = self
            .conns
            .iter()
            .all(|c| c.closing.is_some() || matches!(c.join, Some(Join::Waiting)));
        if all_waiting && self.simulation.is_none() && self.replayable() {
            for i in 0..self.conns.len() {
                if self.conns[i].closing.is_none() {
                    let reason = self.silence_reason(i);
                    self.close(
                        i,
                        Closing::Bye(
                            ByeReason::Timeout,
                            "nobody can hand you the game's state: reconnect to replay it".into(),
                        ),
                        reason,
                    );
                }
            }
            return;
        }
        // Nobody to ask (or everyone failed): try them all again later.
        self.bad_donors.clear();
        self.join_asked = Some((now, now));
        self.join_retry = Some(now + self.config.join_wait);
    }

    /// Asks `donor` for the state.
    fn ask_donor(&mut self, donor: PeerId) {
        let (now, open) = (self.now, self.open);
        let id = self.next_snapshot_id;
        self.next_snapshot_id = id.wrapping_add(1);
        // The state after the open tick, once sealed; while nothing is
        // sealed (a pause, nobody playing), after the last tick sealed,
        // which an in-step donor holds already.
        let sealing = !self.paused() && self.anyone_live();
        let tick = if sealing {
            open
        } else {
            open.saturating_sub(1).max(self.config.first_tick)
        };
        self.fetch = Some(Fetch {
            id,
            tick,
            donor,
            clock: DonorClock::asked(now),
            started: false,
            receiver: SnapshotReceiver::new(self.config.snapshot.clone()),
        });
        if let Some(i) = self.conn_index(donor) {
            self.conns[i].link.flush = true;
        }
        self.push_event(SequencerEvent::SnapshotAsked { donor, tick, id });
    }

    /// Whether anyone could hand a joiner the game's state: the sequencer's
    /// own game, or a client (other than connection `except`) that is not
    /// joining itself.
    pub(super) fn donor_available(&self, except: Option<usize>) -> bool {
        self.simulation.is_some()
            || self
                .conns
                .iter()
                .enumerate()
                .any(|(k, c)| Some(k) != except && c.closing.is_none() && c.join.is_none())
    }

    /// Whether a client arriving now joins from a snapshot: the room says
    /// so, and the game is far enough under way.
    pub(super) fn snapshot_join_now(&self) -> bool {
        self.config.snapshot_join
            && self.open.since(self.config.first_tick) >= self.config.snapshot_join_after.max(1)
    }

    /// A client found diverged is resynced, where the room allows it: it
    /// waits for a snapshot as a joiner does, on the same connection; a
    /// seat resynced `max_resyncs` times already is dropped instead.
    pub(super) fn resync(&mut self, peer: PeerId, verdict: Checkpoint) {
        if !self.config.snapshot_join || self.config.max_resyncs == 0 {
            return;
        }
        let Some(i) = self.conn_index(peer) else {
            return;
        };
        let c = &mut self.conns[i];
        if c.closing.is_some() || c.join.is_some() {
            return;
        }
        let seat = c.seat;
        // Diverged again, on the state it was handed: its donor may have
        // lied, and hands nobody its state again.
        if let Some(d) = c.resync_donor.take() {
            if self.suspects.len() >= SUSPECTS {
                self.suspects.pop_front();
            }
            self.suspects.push_back(d);
        }
        let count = match seat {
            Some(s) => {
                let n = self.resyncs.entry(s).or_insert(0);
                *n += 1;
                *n
            }
            None => {
                c.resyncs += 1;
                c.resyncs
            }
        };
        // A fetch from this very client would hand its own state back.
        if self.fetch.as_ref().is_some_and(|f| f.donor == peer) {
            self.fetch = None;
        }
        if count > self.config.max_resyncs {
            let text = format!("its game diverged {count} times");
            self.close(
                i,
                Closing::Error(ErrorCode::Violation, text.clone()),
                DropReason::Violation(ErrorCode::Violation, text),
            );
            return;
        }
        self.referee.forget(peer);
        let id = self.next_resync;
        self.next_resync = self.next_resync.wrapping_add(1);
        let c = &mut self.conns[i];
        c.join = Some(Join::Waiting);
        c.resync = Some((id, verdict));
        c.link.flush = true;
        if let Some(player) = seat {
            let open = self.open;
            if let Some(s) = self.seats[player.index()].as_mut() {
                s.stop_playing(open);
            }
            for events in self.tick_events.values_mut() {
                events.retain(|e| *e != SystemEvent::CaughtUp { player });
            }
        }
        let now = self.now;
        self.join_asked = Some(self.join_asked.map_or((now, now), |(f, _)| (f, now)));
        self.push_event(SequencerEvent::Resync { peer, seat, count });
    }
}
