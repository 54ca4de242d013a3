//! Joining a game under way (and being resynced): the snapshot received
//! and restored; and a snapshot asked of us for someone else.

use super::*;

/// A client joining a game under way.
#[derive(Debug)]
pub(super) struct Joining {
    pub(super) receiver: SnapshotReceiver,
    /// The tick the snapshot follows, from its first chunk.
    pub(super) tick: Option<Tick>,
    /// The snapshot, complete, until the game takes it.
    pub(super) ready: Option<Snapshot>,
    /// The game took it: frames run.
    pub(super) restored: bool,
    /// A resync: frames run on up to the snapshot's tick.
    pub(super) resync: bool,
    /// The game was told the snapshot is whole.
    pub(super) announced: bool,
    /// Since when a resync has waited for its first chunk, and the resync
    /// id before it: one whose snapshot never starts is given up (a forged
    /// `Resync` in plain mode must not freeze the game), and the same
    /// resync repeated by the sequencer is taken again.
    pub(super) resync_wait: Option<(Instant, u32)>,
}

impl Joining {
    /// Waiting for a snapshot: a joiner's, or (with when it began and the
    /// resync id before it) a resync's.
    pub(super) fn new(config: &ClientConfig, resync: Option<(Instant, u32)>) -> Box<Self> {
        Box::new(Self {
            receiver: SnapshotReceiver::new(config.snapshot.clone()),
            tick: None,
            ready: None,
            restored: false,
            announced: false,
            resync: resync.is_some(),
            resync_wait: resync,
        })
    }
}

/// A snapshot asked of us.
#[derive(Debug)]
pub(super) struct Donation {
    pub(super) id: u32,
    pub(super) tick: Tick,
    pub(super) sender: Option<Box<SnapshotSender>>,
}

impl<I: Input> ClientSession<I> {
    /// Whether this client is joining a game under way: receiving its
    /// snapshot or catching up. Commits are refused until it is over.
    pub fn joining(&self) -> bool {
        self.joining.is_some()
    }

    /// Whether our state is being replaced with the majority's after
    /// [`Event::Resyncing`] (false again once it is restored, or once the
    /// resync is given up).
    pub fn resyncing(&self) -> bool {
        self.joining.as_ref().is_some_and(|j| j.resync)
    }

    /// While the snapshot of a game under way is awaited and arrives:
    /// chunks in, of how many (for a progress bar; `(0, 0)` until the first
    /// chunk).
    pub fn snapshot_progress(&self) -> Option<(u32, u32)> {
        let j = self.joining.as_ref()?;
        if j.ready.is_some() || j.restored {
            return None;
        }
        Some(
            j.receiver
                .progress()
                .map_or((0, 0), |(_, _, have, of)| (have, of)),
        )
    }

    /// The snapshot [`Event::Snapshot`] announced, once: restore it, then
    /// run frames as usual (they start right after its tick).
    pub fn take_snapshot(&mut self) -> Option<Snapshot> {
        let j = self.joining.as_mut().filter(|j| j.announced)?;
        let s = j.ready.take()?;
        j.restored = true;
        self.link.flush = true;
        Some(s)
    }

    /// Answers [`Event::SnapshotRequested`]: the game's state right after
    /// `tick` (run that frame first, and hand the state over before
    /// running the next). Sent in chunks beside the game's own traffic.
    ///
    /// A state for another tick, or when none is wanted (the request was
    /// withdrawn, or answered already and sent), is dropped with
    /// [`SnapshotError::NotAsked`]; handing the same tick's state over again
    /// while it is being sent does nothing.
    pub fn provide_snapshot(&mut self, tick: Tick, bytes: Vec<u8>) -> Result<(), SnapshotError> {
        let budget = self.config.max_datagram - secure::SEALED_OVERHEAD;
        let asked = self.donation.as_ref().map(|d| d.tick);
        let Some(d) = self.donation.as_mut().filter(|d| d.tick == tick) else {
            return Err(SnapshotError::NotAsked { tick, asked });
        };
        if d.sender.is_some() {
            return Ok(());
        }
        let snapshot = Snapshot::new(tick, bytes);
        let tx = SnapshotSender::new(
            d.id,
            &snapshot,
            budget.saturating_sub(160),
            &self.config.snapshot,
        )?;
        d.sender = Some(Box::new(tx));
        self.link.flush = true;
        Ok(())
    }

    /// Ends joining once the frame that makes our seat live has run (a
    /// spectator: once it has caught up with the open tick).
    pub(super) fn note_caught_up(&mut self, frame: &Frame<I>) {
        let live = match self.seat() {
            Some(me) => frame.events.contains(&SystemEvent::CaughtUp { player: me }),
            None => frame.tick.saturating_add(1) >= self.server_open,
        };
        if live {
            self.joining = None;
            if let Some(w) = self.welcome() {
                self.next_commit = self.next_commit.max(frame.tick.saturating_add(w.delay));
            }
            self.push_event(Event::CaughtUp { tick: frame.tick });
        }
    }

    /// Whether to tell the sequencer we caught up: the snapshot restored and
    /// the frames run up to its open tick.
    pub(super) fn says_caught_up(&self) -> bool {
        self.seat().is_some()
            && self
                .joining
                .as_ref()
                .is_some_and(|j| j.restored && self.next_tick.saturating_add(1) >= self.server_open)
    }

    /// A chunk of the snapshot we are joining from.
    pub(super) fn take_chunk(&mut self, c: &wire::SnapshotChunk<'_>) {
        let Some(j) = self
            .joining
            .as_mut()
            .filter(|j| !j.restored && j.ready.is_none())
        else {
            return;
        };
        self.link.flush = true;
        // A client being resynced runs on up to the snapshot's tick (the
        // sequencer sends it the frames), so its game holds its own state
        // there to compare; a joiner's stream starts right after it.
        let runs_up = j.resync && self.next_tick <= c.tick;
        if j.tick != Some(c.tick) {
            j.tick = Some(c.tick);
            if !runs_up {
                self.next_tick = c.tick.saturating_add(1);
                self.frames.clear();
            }
        }
        match j.receiver.take(c) {
            Ok(Some(snapshot)) => {
                j.ready = Some(snapshot);
                self.announce_snapshot();
            }
            Ok(None) => {}
            Err(_) => self.stats.snapshot_errors += 1,
        }
    }

    /// Tells the game the snapshot is whole, once it has run up to its tick
    /// (a client being resynced) or at once (a joiner).
    pub(super) fn announce_snapshot(&mut self) {
        let Some(j) = self.joining.as_mut() else {
            return;
        };
        let Some(tick) = j.ready.as_ref().map(|s| s.tick) else {
            return;
        };
        if j.announced || self.next_tick <= tick {
            return;
        }
        j.announced = true;
        // The stream goes on right after the snapshot's tick.
        if self.next_tick != tick.saturating_add(1) {
            self.next_tick = tick.saturating_add(1);
            self.frames.clear();
        }
        // The game's state is replaced: our chain starts over.
        self.checks.restart();
        self.server_checks.restart();
        self.push_event(Event::Snapshot { tick });
    }

    /// The sequencer asks for our state after `tick` for a joiner.
    pub(super) fn snapshot_requested(&mut self, id: u32, tick: Tick) {
        if self.donation.as_ref().is_some_and(|d| d.id == id) {
            return;
        }
        // The state after a tick already run is gone (unless it is the
        // last one run: the game's current state).
        if tick.saturating_add(1) < self.next_tick || self.joining.is_some() {
            return;
        }
        self.donation = Some(Donation {
            id,
            tick,
            sender: None,
        });
        self.push_event(Event::SnapshotRequested { tick });
    }
}
