//! Who plays: each seat and each remote peer, which seats are live, how
//! far every live player is, and the history kept for them.

use super::*;
use crate::link::AckWatch;

#[derive(Debug, Clone)]
pub(super) struct Seat {
    /// The peer playing this seat.
    pub(super) peer: Option<PeerId>,
    /// The first tick the seat is empty: abandoned, or never taken.
    pub(super) empty_from: Option<Tick>,
    /// It was emptied because its player said goodbye.
    pub(super) left: bool,
}

/// The event that empties `player`'s seat: it said goodbye, or it was
/// given up.
pub(super) fn departure(player: PlayerId, left: bool) -> SystemEvent {
    if left {
        SystemEvent::Left { player }
    } else {
        SystemEvent::Abandoned { player }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Peer {
    pub(super) id: PeerId,
    pub(super) seat: Option<PlayerId>,
    pub(super) next_tick: Tick,
    /// Per seat: the lowest tick of that seat's input this peer lacks, as it
    /// last told us.
    pub(super) acks: Vec<Option<Tick>>,
    /// How its acknowledgement of our own input moves (see
    /// [`link::reference`](crate::link::reference)).
    pub(super) ack_watch: AckWatch,
    /// Which of our own inputs went to it how often, from the first it
    /// lacks (see [`link::Resend`](crate::link::Resend)).
    pub(super) inputs_sent: crate::link::Resend,
    /// The seats it votes to abandon, as of its latest packet.
    pub(super) votes: Vec<PlayerId>,
    /// Per seat it voted against lately: whether its latest packet has the
    /// vote, and since when that has been so (see [`VoteWord`]).
    pub(super) vote_word: BTreeMap<PlayerId, VoteWord>,
    /// The seats it has frozen and how far it held their own input then,
    /// as of its latest packet.
    pub(super) frozen: Vec<(PlayerId, Tick)>,
    /// The abandonment decisions it endorses, as of its latest packet.
    pub(super) endorsed: Vec<Endorsement>,
    /// Since when each of `endorsed` has been in every packet from it.
    pub(super) endorsed_since: Vec<Instant>,
    /// When it last sent us an input of its own seat we did not have.
    pub(super) last_input: Option<Instant>,
    /// Whether its latest datagram said its game waits on its own input
    /// alone (it holds everyone else's).
    pub(super) waits_on_itself: bool,
    /// Whether its latest datagram said its game waits on our input.
    pub(super) waits_on_us: bool,
    /// Since when our next tick has waited on its input while others' is
    /// in: with `last_input`, what makes a peer that keeps its connection
    /// alive but sends no input silent all the same.
    pub(super) waited_since: Option<Instant>,
    /// Our next tick as of the last packet sent to it.
    pub(super) told_next: Tick,
    /// It sent inputs we have not acknowledged yet.
    pub(super) ack_pending: bool,
    /// Its Hello showed the same game: its datagrams are taken.
    pub(super) greeted: bool,
    /// It answered our Hello: no need to send it again.
    pub(super) welcomed: bool,
    /// Its latest datagram carried a Hello, which we answer.
    pub(super) owe_welcome: bool,
    /// We refused it, and tell it why in every datagram.
    pub(super) refused: Option<Refusal>,
    /// It cannot play with us (either side found out).
    pub(super) incompatible: Option<Incompatibility>,
    /// It said goodbye.
    pub(super) left: bool,
    /// When it was heard, the send schedule, ping and pong, its traffic
    /// (silence counts from when it was added until it is heard).
    pub(super) link: Link,
    /// The highest lifted pause it told us of.
    pub(super) lifted_known: Option<Tick>,
    pub(super) checks: RemoteChecks,
    /// The snapshot we send it, an observer too far behind for frames.
    pub(super) outgoing: Option<Box<SnapshotSender>>,
    /// A player that diverged: its request for our state, accepted.
    pub(super) giving: Option<resync::Giving>,
    /// When we accepted its requests for our state (our next tick then),
    /// within the last [`resync::MEMORY`] ticks.
    pub(super) donated: VecDeque<Tick>,
    /// Its latest request's id: an older one (replayed, reordered) is not
    /// taken.
    pub(super) last_request: Option<u32>,
}

impl Peer {
    /// The first tick of `seat`'s input it lacks: what it acknowledged,
    /// and nothing before the frames it ran.
    pub(super) fn lacks(&self, seat: PlayerId) -> Tick {
        self.acks[seat.index()]
            .unwrap_or(self.next_tick)
            .max(self.next_tick)
    }

    pub(super) fn new(
        id: PeerId,
        seat: Option<PlayerId>,
        width: usize,
        first: Tick,
        now: Instant,
    ) -> Self {
        Self {
            id,
            seat,
            next_tick: first,
            acks: vec![None; width],
            ack_watch: AckWatch::default(),
            inputs_sent: crate::link::Resend::new(first),
            votes: Vec::new(),
            vote_word: BTreeMap::new(),
            frozen: Vec::new(),
            endorsed: Vec::new(),
            endorsed_since: Vec::new(),
            last_input: None,
            waits_on_itself: false,
            waits_on_us: false,
            waited_since: None,
            told_next: first,
            ack_pending: false,
            greeted: false,
            welcomed: false,
            owe_welcome: false,
            refused: None,
            incompatible: None,
            left: false,
            link: Link::new(now),
            lifted_known: None,
            checks: RemoteChecks::default(),
            outgoing: None,
            giving: None,
            donated: VecDeque::new(),
            last_request: None,
        }
    }
}

pub(super) fn seat_id(i: usize) -> Option<PlayerId> {
    u16::try_from(i).ok().map(PlayerId)
}

/// A fresh slot for `tick`: unknown for seats in play, empty otherwise, with
/// the membership events that take effect at that tick.
pub(super) fn new_slot<I: Clone>(seats: &[Seat], start: Tick, tick: Tick) -> Slot<I> {
    let mut slot = Slot {
        cells: seats
            .iter()
            .map(|s| {
                if s.empty_from.is_some_and(|e| e <= tick) {
                    Cell::Empty
                } else {
                    Cell::Unknown
                }
            })
            .collect(),
        events: Vec::new(),
    };
    for (i, s) in seats.iter().enumerate() {
        let Some(player) = seat_id(i) else { continue };
        if s.peer.is_none() {
            continue;
        }
        if tick == start {
            slot.add_event(SystemEvent::Joined { player });
        }
        if s.empty_from == Some(tick) {
            slot.add_event(departure(player, s.left));
        }
    }
    slot
}

impl<I: Input> MeshSession<I> {
    pub(super) fn seat_empty_at(&self, seat: usize, tick: Tick) -> bool {
        self.seats[seat].empty_from.is_some_and(|e| e <= tick)
    }

    /// Whether `seat` is played, not abandoned and not frozen.
    pub(super) fn seat_live(&self, seat: PlayerId) -> bool {
        let s = &self.seats[seat.index()];
        s.peer.is_some() && s.empty_from.is_none() && !self.frozen.contains_key(&seat)
    }

    /// The remote peer playing `seat`.
    pub(super) fn peer_of(&self, seat: PlayerId) -> Option<&Peer> {
        self.peers.iter().find(|p| p.seat == Some(seat))
    }

    pub(super) fn live_seats(&self) -> impl Iterator<Item = PlayerId> + '_ {
        (0..self.seats.len())
            .filter_map(seat_id)
            .filter(|s| self.seat_live(*s))
    }

    /// Whether silence of `seat` would still give us a reason to vote.
    pub(super) fn can_auto_abandon(&self, seat: PlayerId) -> bool {
        self.local_seat
            .is_some_and(|me| me != seat && self.seats[me.index()].empty_from.is_none())
            && self.seat_live(seat)
            && !self.votes.contains(&seat)
    }

    /// The lowest next tick among live players, this one included.
    pub(super) fn min_live_next(&self) -> Tick {
        self.peers
            .iter()
            .filter(|p| p.seat.is_some_and(|s| self.seat_live(s)))
            .map(|p| p.next_tick)
            .fold(self.next_tick, Tick::min)
    }

    /// How far our commits may run ahead of the slowest live player: the
    /// delay and `max_lead`.
    pub(super) fn lead_limit(&self) -> u32 {
        self.delays.delay + self.config.max_lead
    }

    /// Whether our next commit waits on the slowest live player (the lead
    /// limit holds it).
    pub(super) fn lead_held(&self) -> bool {
        self.next_commit.since(self.min_live_next()) >= self.lead_limit()
    }

    /// Inputs at or after this tick cannot come from a peer in step with us.
    pub(super) fn horizon(&self) -> Tick {
        self.next_tick
            .saturating_add(self.delay_cap() + self.config.max_lead)
    }

    /// Whether this peer sends confirmed frames to observers: the lowest
    /// live seat does.
    pub(super) fn is_feeder(&self) -> bool {
        self.local_seat.is_some() && self.live_seats().next() == self.local_seat
    }

    /// The lowest tick of `seat`'s own input (not forwarded) not held, from
    /// the next tick on: what the player itself is told, and how far a
    /// peer held it when it froze the seat.
    pub(super) fn held_own(&self, seat: PlayerId) -> Tick {
        let mut t = self.next_tick;
        while self
            .store
            .cell(t, seat.index())
            .is_some_and(Cell::is_settled)
        {
            match t.next() {
                Some(n) => t = n,
                None => break,
            }
        }
        t
    }

    /// The lowest tick of `seat`'s input not held, from the next tick on.
    pub(super) fn contiguous(&self, seat: PlayerId) -> Tick {
        let mut t = self.next_tick;
        while self
            .store
            .cell(t, seat.index())
            .is_some_and(|c| !c.is_unknown())
        {
            match t.next() {
                Some(n) => t = n,
                None => break,
            }
        }
        t
    }

    pub(super) fn prune(&mut self) {
        let window = self.config.observer_window;
        let mut floor = self.next_tick;
        if self.local_seat.is_some() {
            for p in &self.peers {
                let keep = match p.seat {
                    Some(s) if self.seat_live(s) => p.next_tick,
                    Some(_) => continue,
                    // An observer being sent a snapshot needs the frames
                    // after it, whatever position it claims meanwhile.
                    None => {
                        let sent = p.outgoing.as_ref().map(|tx| tx.tick().saturating_add(1));
                        let want = sent.map_or(p.next_tick, |t| t.min(p.next_tick));
                        want.max(self.next_tick.saturating_sub(window))
                    }
                };
                floor = floor.min(keep);
            }
        }
        // The abandon window is kept whatever happens: peers compare it.
        floor = floor.min(self.next_tick.saturating_sub(self.abandon_window()));
        self.store.prune_below(floor);
        self.delays.prune_below(self.store.base());
    }
}

/// A peer's word on one seat's abandonment, as its packets said it: whether
/// its latest packet votes against the seat, and since when that has been
/// so. A packet forged in the peer's name says something only until the
/// peer's next packet; so a vote counts towards freezing a seat once every
/// packet from the voter has carried it for `vote_hold`, and a vote gone
/// from its packets stops counting towards keeping a seat frozen once it
/// has been gone that long (a packet sent before the vote may come after
/// one carrying it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct VoteWord {
    /// The latest packet votes against the seat.
    pub(super) votes: bool,
    /// Since when the packets have said so.
    pub(super) since: Instant,
}

impl Peer {
    /// Takes the votes of its latest packet (`votes`), read at `now`.
    pub(super) fn hear_votes(&mut self, now: Instant, hold: Duration) {
        let votes = &self.votes;
        for (seat, word) in &mut self.vote_word {
            let says = votes.contains(seat);
            if word.votes != says {
                *word = VoteWord {
                    votes: says,
                    since: now,
                };
            }
        }
        for &seat in votes {
            self.vote_word.entry(seat).or_insert(VoteWord {
                votes: true,
                since: now,
            });
        }
        // A vote gone for good counts no more either way.
        self.vote_word
            .retain(|_, w| w.votes || now < w.since + hold);
    }

    /// Whether its vote against `seat` has stood for `hold`: it counts
    /// towards freezing the seat.
    pub(super) fn vote_stands(&self, seat: PlayerId, now: Instant, hold: Duration) -> bool {
        self.vote_word
            .get(&seat)
            .is_some_and(|w| w.votes && now >= w.since + hold)
    }

    /// Whether its vote against `seat` is in its latest packet, or has been
    /// gone for less than `hold`: it counts towards keeping the seat frozen.
    pub(super) fn vote_lingers(&self, seat: PlayerId, now: Instant, hold: Duration) -> bool {
        self.vote_word
            .get(&seat)
            .is_some_and(|w| w.votes || now < w.since + hold)
    }

    /// Takes the endorsements of its latest packet, read at `now`: one it
    /// has sent all along keeps its time.
    pub(super) fn hear_endorsements(&mut self, endorsements: &[Endorsement], now: Instant) {
        // The common case: the same as its packet before (nothing to do,
        // and nothing to allocate for each datagram).
        if self.endorsed == endorsements {
            return;
        }
        let mut since = Vec::with_capacity(endorsements.len());
        for e in endorsements {
            let kept = self
                .endorsed
                .iter()
                .zip(&self.endorsed_since)
                .find_map(|(x, t)| (x == e).then_some(*t));
            since.push(kept.unwrap_or(now));
        }
        self.endorsed.clear();
        self.endorsed.extend_from_slice(endorsements);
        self.endorsed_since = since;
    }

    /// Its endorsement of a decision on `seat`, once every packet from it
    /// has carried it for `hold` (a packet forged in its name says
    /// something only until its next one).
    pub(super) fn endorsement(
        &self,
        seat: PlayerId,
        now: Instant,
        hold: Duration,
    ) -> Option<Endorsement> {
        let i = self.endorsed.iter().position(|e| e.seat == seat)?;
        let since = *self.endorsed_since.get(i)?;
        (now >= since + hold).then_some(self.endorsed[i])
    }

    /// The next moment one of its votes or endorsements starts or stops
    /// counting, if any.
    pub(super) fn vote_word_due(&self, now: Instant, hold: Duration) -> Option<Instant> {
        self.vote_word
            .values()
            .map(|w| w.since)
            .chain(self.endorsed_since.iter().copied())
            .map(|since| since + hold)
            .filter(|&t| t > now)
            .min()
    }
}
