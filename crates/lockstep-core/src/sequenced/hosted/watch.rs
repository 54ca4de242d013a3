//! Watching the host: when it is gone (silent, or said goodbye), who
//! takes over in what order, and a host deposed by its players.

use super::*;

impl<I: Input> HostedSession<I> {
    /// Notes what our client learned: our seat and token, the roster and
    /// who hosts (kept as they were once a takeover began).
    pub(super) fn note_client(&mut self) {
        if self.client().connected() {
            // Welcomed: silence counts from what we hear again.
            self.moved_at = None;
        }
        if self.takeover.is_some() {
            return;
        }
        let Some(welcome) = self.client().welcome().copied() else {
            return;
        };
        let Some(me) = welcome.seat.map(|s| (s, welcome.token, welcome.seats)) else {
            return;
        };
        if let Some((seat, token, _)) = self.me()
            && seat == me.0
            && token != me.1
        {
            self.earlier = Some(token);
        }
        self.room = Some(welcome);
        let c = self.client();
        let changes = c.roster_changes();
        if changes == self.roster_seen {
            return;
        }
        // Entries merge seat by seat: a new host's roster comes in pieces
        // (under loss, some seats' entries first), and until a seat's own
        // entry comes the one known before stands (an entry saying the seat
        // is empty removes it). A new host names its players' contacts a
        // moment after it shared their seats: the contacts known before
        // stand in meanwhile too.
        let entries: Vec<(PlayerId, Option<SeatInfo>)> =
            c.roster_entries().map(|(k, e)| (k, e.cloned())).collect();
        self.roster_seen = changes;
        for (seat, entry) in entries {
            let at = self.roster.iter().position(|o| o.seat == seat);
            match (entry, at) {
                (Some(mut e), Some(i)) => {
                    if e.contact.is_empty() && !e.hosts {
                        e.contact = core::mem::take(&mut self.roster[i].contact);
                    }
                    self.roster[i] = e;
                }
                (Some(e), None) => {
                    let i = self.roster.partition_point(|o| o.seat < seat);
                    self.roster.insert(i, e);
                }
                (None, Some(i)) => {
                    self.roster.remove(i);
                }
                (None, None) => {}
            }
        }
        // A client that moved has no host in its roster until its new
        // host's entry comes: it follows the seat it moved to meanwhile.
        if let Some(h) = self.roster.iter().rev().find(|e| e.hosts) {
            self.host_seat = Some(h.seat);
        }
    }

    /// Whether the host we follow is gone: silent for `host_timeout`, or
    /// it said goodbye.
    pub(super) fn host_gone(&self) -> bool {
        if !self.may_take_over() {
            return false;
        }
        self.host_said_bye() || self.silent_until().is_some_and(|t| self.now >= t)
    }

    /// Whether the host we follow said it went: only such a goodbye (not
    /// one that drops us, nor a refusal) hands the match over at once.
    pub(super) fn host_said_bye(&self) -> bool {
        matches!(
            self.client().closed(),
            Some(crate::sequenced::CloseReason::Bye(
                wire::ByeReason::Leaving | wire::ByeReason::Shutdown,
                _
            ))
        )
    }

    /// Whether this client could take part in a takeover: it has a seat
    /// and a roster, and the match has not ended for it.
    pub(super) fn may_take_over(&self) -> bool {
        !self.hosting() && self.room.is_some() && !self.roster.is_empty() && !self.ended
    }

    /// When the host we follow counts as silent, while we are connected to
    /// it and may take over.
    pub(super) fn silent_until(&self) -> Option<Instant> {
        let c = self.client();
        if !self.may_take_over() || c.closed().is_some() {
            return None;
        }
        // A host we moved to is silent until it welcomes us (whatever
        // else it sends).
        let heard = match self.moved_at {
            Some(moved) if self.awaiting_welcome() => moved,
            _ => c.last_heard()?,
        };
        Some(heard + self.config.host_timeout)
    }

    /// The seats that may take over, in order: playing, reachable, not
    /// the host that left, not failed.
    pub(super) fn candidates(&self) -> impl Iterator<Item = PlayerId> + '_ {
        let me = self.seat();
        self.roster
            .iter()
            .filter(move |e| e.playing && (!e.contact.is_empty() || Some(e.seat) == me))
            .filter(|e| Some(e.seat) != self.host_seat && !self.failed.contains(&e.seat))
            .map(|e| e.seat)
    }

    pub(super) fn begin_takeover(&mut self) {
        self.old_host = self
            .me()
            .map(|(_, token, _)| (self.client().server_peer(), token));
        self.epoch_before = self.epoch;
        // Never wraps: a later takeover always counts higher.
        self.epoch = self.epoch.saturating_add(1);
        self.failed.clear();
        self.redirected.clear();
        self.vouched.clear();
        self.collecting_since = None;
        self.told_alive = false;
        self.next_candidate();
    }

    /// Whether `from` is the host we left for good: a candidate counted us,
    /// or the takeover is over.
    pub(super) fn committed_against(&self, from: PeerId) -> bool {
        self.old_host.is_some_and(|(p, _)| p == from)
            && match &self.takeover {
                None => true,
                Some(Takeover::Reporting { acked, .. }) => *acked,
                Some(Takeover::Collecting { .. }) => false,
            }
    }

    /// Tells the host we left that we play under another now (at most once
    /// a resend interval, however much it sends): our report, with the
    /// token it handed us.
    pub(super) fn tell_old_host(&mut self) {
        let now = self.now;
        if self.told_old.is_some_and(|t| now < t + self.resend()) {
            return;
        }
        let (Some((to, token)), Some((seat, _, _))) = (self.old_host, self.me()) else {
            return;
        };
        self.told_old = Some(now);
        let mut buf = Vec::new();
        let mut w = DatagramWriter::new(&mut buf, self.client().frame(), 64);
        w.put(Message::Takeover {
            epoch: self.epoch,
            seat,
            token,
            lacks: self.client().lacks(),
        });
        w.finish();
        self.answer_report(to, buf);
    }

    /// Hosting: more than half of the other seats proved they left us for
    /// another host. The session ends: whoever still follows us is told
    /// goodbye, and takes part in a takeover of its own (to find it was
    /// left out, or to join the new host).
    pub(super) fn depose_if_left(&mut self) {
        let me = self.seat();
        let others = self.roster.iter().filter(|e| Some(e.seat) != me).count();
        if self.deposed || self.deposers.len() * 2 <= others {
            return;
        }
        self.deposed = true;
        if let Role::Host(h) = &mut self.role {
            h.sequencer().shutdown(
                "another player hosts this match now: this host was replaced while out of reach",
            );
        }
    }
}
