//! A room taken over from a host that left (host migration): what the
//! survivors hand their new sequencer, and the room it starts.

use super::*;

/// What a player taking over from a host that left hands its new
/// sequencer ([`Sequencer::take_over`]), gathered from the survivors
/// ([`ClientSession::frames_held`](crate::sequenced::ClientSession::frames_held),
/// [`lacks`](crate::sequenced::ClientSession::lacks),
/// [`inputs_after`](crate::sequenced::ClientSession::inputs_after)).
#[derive(Debug, Clone)]
pub struct Handover<I> {
    /// Frames sealed by the old host, in order, without gaps, ending with
    /// the highest one any survivor holds (nobody ran a later one), and
    /// starting at or before the first frame any survivor lacks.
    pub frames: Vec<Frame<I>>,
    /// The first tick to seal: one past the last of `frames`.
    pub next: Tick,
    /// The seats whose players will come back.
    pub survivors: Vec<Survivor<I>>,
    /// For the first new frame: the old host's seat leaving
    /// ([`SystemEvent::Left`] or [`SystemEvent::Abandoned`]), the seats
    /// nobody came back for abandoned, and
    /// [`SystemEvent::HostChanged`].
    pub events: Vec<SystemEvent>,
    /// The game fingerprint the room requires.
    pub fingerprint: u64,
    /// The match's id, as the old host's Welcome gave it: the match goes
    /// on under it.
    pub match_id: u64,
}

/// A seat whose player will come back to a sequencer taking over.
#[derive(Debug, Clone)]
pub struct Survivor<I> {
    /// The seat.
    pub seat: PlayerId,
    /// Its resume token: the player takes the seat back with it
    /// ([`ClientSession::reconnect`](crate::sequenced::ClientSession::reconnect)).
    pub token: ResumeToken,
    /// Another token it may come back with: the one it held before
    /// `token`, or after it (an earlier host handed it a new one that the
    /// roster had not shared yet). Only the player that proved `token`
    /// names it.
    pub previous: Option<ResumeToken>,
    /// Where it reported from: only a Hello from this peer takes the seat
    /// back (none: from anywhere).
    pub peer: Option<PeerId>,
    /// It was playing (not catching up from a snapshot).
    pub playing: bool,
    /// Inputs it committed for ticks not sealed yet, by tick: they run
    /// while it comes back.
    pub inputs: Vec<(Tick, I)>,
    /// Its player's name, as the roster had it.
    pub name: String,
}

impl<I: Input> Sequencer<I> {
    /// A room taken over from a host that left (host migration): the
    /// frames sealed before, as the survivors held them, go on from the
    /// tick after the last; each survivor's seat is held for its token,
    /// with the inputs it committed for later ticks (under `WaitForAll` the
    /// room waits for a playing survivor up to `abandon_after`, then holds
    /// its seat as any dropped one's); the first new frame carries
    /// `handover.events`. Survivors come back with
    /// [`ClientSession::reconnect`](crate::sequenced::ClientSession::reconnect),
    /// keeping their state.
    pub fn take_over(
        config: SequencerConfig,
        handover: Handover<I>,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        let mut s = Self::new(config, now)?;
        let next = handover.next;
        // Tokens from a stream of their own: every host of the match may
        // hold the same key, and a token minted again for another seat
        // would let its holder resume that seat. The context (the tick and
        // the survivors' tokens) is new at every takeover.
        let mut context = next.get().to_le_bytes().to_vec();
        for sv in &handover.survivors {
            context.extend_from_slice(&sv.token.0);
        }
        s.tokens = s.tokens.branch(&context);
        s.fingerprint = Some(handover.fingerprint);
        s.match_id = handover.match_id;
        // A match that sealed a tick has started; one taken over in its
        // lobby keeps its lobby.
        s.playing |= next > s.config.first_tick;
        s.taken_over_at = Some(next);
        s.history_base = handover.frames.first().map_or(next, |f| f.tick);
        // The delay in force is the last one the frames set: the config's
        // comes from the frames this host ran, and a change may lie in one
        // handed over that it has not run yet.
        let last_change = handover.frames.iter().rev().find_map(|f| {
            f.events.iter().rev().find_map(|e| match e {
                SystemEvent::DelayChanged { delay } => Some(*delay),
                _ => None,
            })
        });
        if let Some(d) = last_change {
            s.delay = d;
            if let Some(a) = s.config.adaptive.as_mut() {
                a.min = a.min.min(d);
                a.max = a.max.max(d);
            }
        }
        s.history = handover.frames;
        s.open = next;
        for sv in handover.survivors {
            let Some(slot) = s.seats.get_mut(sv.seat.index()) else {
                continue;
            };
            let pending: BTreeMap<Tick, I> =
                sv.inputs.into_iter().filter(|(t, _)| *t >= next).collect();
            // Its inputs are due from its first one (a player seated just
            // before the host went has none for the first ticks), or, with
            // none at all, a delay from now, as a joiner's.
            let from = pending
                .first_key_value()
                .map_or(next.saturating_add(s.delay), |(t, _)| *t);
            // Its inputs, handed over by its own client, are what its runs
            // to us may be coded against; its client sends again what the
            // host that left lacked.
            let mut recent = Recent::default();
            let mut taken = Taken::new(from);
            for (t, input) in &pending {
                recent.note(*t, input);
                taken.take(*t);
            }
            *slot = Some(Seat {
                conn: None,
                token: sv.token,
                previous: sv.previous.filter(|p| *p != sv.token),
                lost: Some(now),
                from,
                pending,
                taken,
                recent,
                last: I::default(),
                slack: 0,
                last_input: now,
                waited_since: None,
                live: sv.playing,
                pause_asked: None,
                handed_over: sv.playing,
                wants: None,
                bound: sv.peer,
                name: sv.name,
                ready: false,
                ready_at: None,
            });
            s.had_player = true;
        }
        // Taken over in its lobby: nothing was sealed, so the seats'
        // `Joined` the old host held went with it. The survivors' go in
        // the first frame, and nobody who never joined leaves.
        let lobby = !s.playing;
        if lobby {
            let mut seats: Vec<PlayerId> = s
                .seats
                .iter()
                .enumerate()
                .filter(|(_, seat)| seat.is_some())
                .map(|(k, _)| PlayerId(k as u16))
                .collect();
            seats.sort_unstable();
            for player in seats {
                s.add_tick_event(next, SystemEvent::Joined { player });
            }
        }
        for ev in handover.events {
            if lobby && matches!(ev, SystemEvent::Left { .. } | SystemEvent::Abandoned { .. }) {
                continue;
            }
            s.add_tick_event(next, ev);
        }
        s.start_clock();
        Ok(s)
    }
}
