//! A sequencer inside a player's process: the listen-server arrangement.

use super::{
    ClientConfig, ClientSession, Sequencer, SequencerConfig, SequencerError, SequencerEvent,
};
use crate::endpoint::Transmit;
use crate::error::{ChecksumError, CommitError, ConfigError, PauseError};
use crate::snapshot::{Snapshot, SnapshotError};
use crate::{Event, Frame, Input, Instant, PeerId, PlayerId, Tick};

/// The id the host's own client has inside its sequencer. Remote peers must
/// not use it.
pub const HOST_PEER: PeerId = PeerId(u32::MAX);

/// A player that also sequences: the room lives in this process, the host
/// plays an ordinary seat through an in-process client, and every other
/// player connects to it as to a relay. Nobody pays an extra hop.
///
/// Drive it like a [`ClientSession`] for the game (commit, advance, events)
/// and like a [`Sequencer`] for the network: every datagram from a remote
/// player goes to `handle_datagram`, and `poll_transmit` yields datagrams
/// for remote players only (the host's own traffic never leaves the
/// process).
///
/// ```
/// use lockstep_core::sequenced::{ClientConfig, HostSession, SequencerConfig};
/// use lockstep_core::{Instant, PlayerId};
///
/// let mut host = HostSession::<u8>::new(SequencerConfig::default(), ClientConfig::default(), Instant::ZERO)?;
/// let mut buf = Vec::new();
/// host.handle_timeout(Instant::ZERO);
/// while host.poll_transmit(&mut buf).is_some() {}
/// assert_eq!(host.seat(), Some(PlayerId(0)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct HostSession<I: Input> {
    sequencer: Sequencer<I>,
    client: ClientSession<I>,
    /// Scratch for the host's own datagrams.
    scratch: Vec<u8>,
    now: Instant,
}

impl<I: Input> HostSession<I> {
    /// A room sequenced here, with the host connected to it.
    pub fn new(
        sequencer: SequencerConfig,
        client: ClientConfig,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            sequencer: Sequencer::new(sequencer, now)?,
            client: ClientSession::new(client, HOST_PEER, now)?,
            scratch: Vec::new(),
            now,
        })
    }

    /// A host made of a sequencer and the host's own client, which must
    /// talk to it as [`HOST_PEER`] (a client reconnected to `HOST_PEER`,
    /// say): a player taking over a match with
    /// [`Sequencer::take_over`].
    pub fn from_parts(sequencer: Sequencer<I>, client: ClientSession<I>, now: Instant) -> Self {
        Self {
            sequencer,
            client,
            scratch: Vec::new(),
            now,
        }
    }

    /// The sequencer (connections, stats, kick, pause).
    pub fn sequencer(&mut self) -> &mut Sequencer<I> {
        &mut self.sequencer
    }

    /// See [`Sequencer::set_contact`]: how other players reach `peer`, for
    /// the roster.
    pub fn set_contact(&mut self, peer: PeerId, contact: &[u8]) -> Result<(), SequencerError> {
        self.sequencer.set_contact(peer, contact)
    }

    /// The host's own client, to change.
    pub(crate) fn client_mut(&mut self) -> &mut ClientSession<I> {
        &mut self.client
    }

    /// Says whether the host's own player is ready to start (see
    /// [`ClientSession::set_ready`]). To start the match whatever its
    /// rule says: `sequencer().start_match()`.
    pub fn set_ready(&mut self, ready: bool) {
        self.client.set_ready(ready);
    }

    /// The host's own client.
    pub fn client(&self) -> &ClientSession<I> {
        &self.client
    }

    /// The host's seat, once connected.
    pub fn seat(&self) -> Option<PlayerId> {
        self.client.seat()
    }

    /// The next frame the host runs.
    pub fn frame(&self) -> Tick {
        self.client.frame()
    }

    /// See [`ClientSession::commit_local`].
    pub fn commit_local(&mut self, input: I) -> Result<Tick, CommitError> {
        let r = self.client.commit_local(input);
        self.pump();
        r
    }

    /// See [`ClientSession::ready_to_pace`]. The host's own clock is one of
    /// the players': it counts as any other's.
    pub fn ready_to_pace(&self) -> usize {
        self.client.ready_to_pace()
    }

    /// See [`ClientSession::input_due`].
    pub fn input_due(&self) -> bool {
        self.client.input_due()
    }

    /// See [`ClientSession::advance`].
    pub fn advance(&mut self) -> Option<Frame<I>> {
        self.pump();
        self.client.advance()
    }

    /// See [`ClientSession::awaiting`].
    pub fn awaiting(&self) -> Vec<PlayerId> {
        self.sequencer.waiting().to_vec()
    }

    /// See [`ClientSession::stalled`].
    pub fn stalled(&self) -> bool {
        self.client.stalled()
    }

    /// See [`ClientSession::report_checksum`].
    pub fn report_checksum(&mut self, tick: Tick, hash: u64) -> Result<(), ChecksumError> {
        self.client.report_checksum(tick, hash)
    }

    /// Pauses the room.
    pub fn request_pause(&mut self) -> Result<(), PauseError> {
        self.sequencer.pause();
        Ok(())
    }

    /// Resumes the room.
    pub fn resume(&mut self) {
        self.sequencer.resume();
    }

    /// See [`ClientSession::provide_snapshot`]: the host's game donates its
    /// state to a joiner (or a diverged player) through its own client.
    pub fn provide_snapshot(&mut self, tick: Tick, bytes: Vec<u8>) -> Result<(), SnapshotError> {
        let r = self.client.provide_snapshot(tick, bytes);
        self.pump();
        r
    }

    /// See [`ClientSession::take_snapshot`].
    pub fn take_snapshot(&mut self) -> Option<Snapshot> {
        let s = self.client.take_snapshot();
        self.pump();
        s
    }

    /// The host's next game event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.client.poll_event()
    }

    /// The sequencer's next event (joins, leaves, desyncs).
    pub fn poll_sequencer_event(&mut self) -> Option<SequencerEvent> {
        self.sequencer.poll_event()
    }

    /// Takes a datagram from a remote player.
    pub fn handle_datagram(
        &mut self,
        from: PeerId,
        datagram: &[u8],
        now: Instant,
    ) -> Result<(), SequencerError> {
        self.now = self.now.max(now);
        if from == HOST_PEER {
            return Err(SequencerError::NotConnected(from));
        }
        let r = self.sequencer.handle_datagram(from, datagram, self.now);
        self.pump();
        r
    }

    /// Lets both halves' timers fire.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        self.client.handle_timeout(self.now);
        self.sequencer.handle_timeout(self.now);
        self.pump();
    }

    /// The next datagram for a remote player.
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.pump();
        loop {
            let t = self.sequencer.poll_transmit(buf)?;
            if t.destination != HOST_PEER {
                return Some(t);
            }
            // A refusal for the host's own Hello, say: it never leaves.
            let _ = self
                .client
                .handle_datagram(HOST_PEER, &buf[..t.len], self.now);
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) next needs calling.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.client.poll_timeout(), self.sequencer.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Passes the host's own datagrams across until both sides are quiet.
    /// Datagrams for remote players stay due in the sequencer (at most one
    /// per connection) until [`poll_transmit`](Self::poll_transmit).
    fn pump(&mut self) {
        let buf = &mut self.scratch;
        for _ in 0..64 {
            let mut moved = false;
            while let Some(t) = self.client.poll_transmit(buf) {
                let _ = self
                    .sequencer
                    .handle_datagram(HOST_PEER, &buf[..t.len], self.now);
                moved = true;
            }
            while let Some(t) = self.sequencer.poll_transmit_to(HOST_PEER, buf) {
                let _ = self
                    .client
                    .handle_datagram(HOST_PEER, &buf[..t.len], self.now);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }
}

crate::endpoint::forward_to_inherent!(HostSession, SequencerError);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SystemEvent;
    use crate::sequenced::sequencer::{Handover, Survivor};
    use core::time::Duration;
    use std::collections::BTreeMap;

    #[allow(clippy::large_enum_variant)] // four of them, never moved in bulk
    enum Node {
        Host(HostSession<u16>),
        Client(ClientSession<u16>),
        Dead,
    }

    struct Room {
        nodes: Vec<Node>,
        /// Frames each node ran, by tick.
        ran: Vec<BTreeMap<Tick, Frame<u16>>>,
        /// Inputs each node committed, by stamp.
        committed: Vec<BTreeMap<Tick, u16>>,
        /// Where each client's sequencer is.
        server: Vec<PeerId>,
        now: Instant,
    }

    impl Room {
        /// One 33 ms step: every node commits, runs its frames, and every
        /// datagram is delivered (none to the dead).
        fn step(&mut self) {
            self.now += Duration::from_millis(33);
            let now = self.now;
            let mut buf = Vec::new();
            let mut out: Vec<(PeerId, PeerId, Vec<u8>)> = Vec::new();
            for (k, node) in self.nodes.iter_mut().enumerate() {
                let me = PeerId(k as u32);
                let input = (now.as_millis() as u16)
                    .wrapping_mul(4)
                    .wrapping_add(k as u16)
                    | 1;
                let (stamp, frames) = match node {
                    Node::Host(h) => {
                        h.handle_timeout(now);
                        let stamp = h.commit_local(input).ok();
                        let mut f = Vec::new();
                        while let Some(x) = h.advance() {
                            f.push(x);
                        }
                        while let Some(t) = h.poll_transmit(&mut buf) {
                            out.push((me, t.destination, buf[..t.len].to_vec()));
                        }
                        (stamp, f)
                    }
                    Node::Client(c) => {
                        c.handle_timeout(now);
                        let stamp = c.commit_local(input).ok();
                        let mut f = Vec::new();
                        while let Some(x) = c.advance() {
                            f.push(x);
                        }
                        while let Some(t) = c.poll_transmit(&mut buf) {
                            out.push((me, t.destination, buf[..t.len].to_vec()));
                        }
                        (stamp, f)
                    }
                    Node::Dead => (None, Vec::new()),
                };
                if let Some(t) = stamp {
                    self.committed[k].insert(t, input);
                }
                for f in frames {
                    self.ran[k].insert(f.tick, f);
                }
            }
            for (from, to, bytes) in out {
                match self.nodes.get_mut(to.0 as usize) {
                    Some(Node::Host(h)) => {
                        let _ = h.handle_datagram(from, &bytes, now);
                    }
                    Some(Node::Client(c)) if self.server[to.0 as usize] == from => {
                        let _ = c.handle_datagram(from, &bytes, now);
                    }
                    _ => {}
                }
            }
        }

        /// A host and three clients, playing from now.
        fn of_four(config: &SequencerConfig, client: &ClientConfig) -> Self {
            let now = Instant::ZERO;
            let host = HostSession::new(config.clone(), client.clone(), now).unwrap();
            let mut room = Self {
                nodes: vec![Node::Host(host)],
                ran: vec![BTreeMap::new(); 4],
                committed: vec![BTreeMap::new(); 4],
                server: vec![HOST_PEER, PeerId(0), PeerId(0), PeerId(0)],
                now,
            };
            for _ in 1..4 {
                room.nodes.push(Node::Client(
                    ClientSession::new(client.clone(), PeerId(0), now).unwrap(),
                ));
            }
            room
        }

        /// Every survivor ran one gap-free stream, the successor's; the
        /// first new frame (`next`) says the host left and who hosts; every
        /// input committed from `next` on ran at its stamp.
        fn assert_one_stream(
            &self,
            survivors: &[usize],
            successor: usize,
            next: Tick,
            host_seat: PlayerId,
        ) {
            let room = self;
            let reference = &room.ran[successor];
            for &k in survivors {
                let ran = &room.ran[k];
                let ticks: Vec<u32> = ran.keys().map(|t| t.get()).collect();
                assert_eq!(
                    ticks,
                    (0..ticks.len() as u32).collect::<Vec<_>>(),
                    "{k} has gaps"
                );
                for (t, f) in ran {
                    if let Some(r) = reference.get(t) {
                        assert_eq!(f, r, "{k} ran tick {t} differently");
                    }
                }
            }
            let first_new = &reference[&next];
            assert!(
                first_new
                    .events
                    .contains(&SystemEvent::Abandoned { player: host_seat })
            );
            assert!(
                first_new
                    .events
                    .iter()
                    .any(|e| matches!(e, SystemEvent::HostChanged { .. }))
            );
            // Every input committed for a tick after the takeover's first runs
            // there, for every survivor.
            for &k in survivors {
                let seat = room.client(k).seat().unwrap().index();
                for (t, input) in room.committed[k].range(next..) {
                    if let Some(f) = reference.get(t) {
                        assert_eq!(f.inputs[seat], Some(*input), "{k}'s input for {t}");
                    }
                }
            }
        }

        fn client(&self, k: usize) -> &ClientSession<u16> {
            match &self.nodes[k] {
                Node::Client(c) => c,
                Node::Host(h) => h.client(),
                Node::Dead => panic!("dead"),
            }
        }
    }

    /// A host crashes; the lowest surviving seat takes over with what the
    /// survivors hold (the handover built here by hand, as the takeover
    /// exchange will): every survivor ends with one gap-free stream, the
    /// frames sealed before kept exactly, the first new frame saying who
    /// left and who hosts, and every input committed after the last frame
    /// any survivor held running at its stamp.
    #[test]
    fn a_sequencer_taking_over_keeps_the_stream_and_every_input() {
        let config = SequencerConfig::default();
        let client = ClientConfig {
            keep_frames: 256,
            ..ClientConfig::default()
        };
        let mut room = Room::of_four(&config, &client);
        while room.ran[0].len() < 100 {
            room.step();
        }
        // The host crashes.
        let host_seat = room.client(0).seat().unwrap();
        room.nodes[0] = Node::Dead;
        for _ in 0..3 {
            room.step();
        }
        // Take over: the lowest surviving seat.
        let survivors: Vec<usize> = (1..4).collect();
        let successor = *survivors
            .iter()
            .min_by_key(|&&k| room.client(k).seat())
            .unwrap();
        let last = survivors
            .iter()
            .map(|&k| room.client(k).lacks())
            .max()
            .unwrap()
            .saturating_sub(1);
        let from = survivors
            .iter()
            .map(|&k| room.client(k).lacks())
            .min()
            .unwrap();
        let donor = *survivors
            .iter()
            .max_by_key(|&&k| room.client(k).lacks())
            .unwrap();
        let d = room.client(donor);
        let frames = d.frames_held(d.held_from(), usize::MAX);
        assert_eq!(frames.last().map(|f| f.tick), Some(last));
        assert!(frames.first().is_some_and(|f| f.tick <= from));
        let next = last.saturating_add(1);
        let handover = Handover {
            frames,
            next,
            survivors: survivors
                .iter()
                .map(|&k| {
                    let c = room.client(k);
                    Survivor {
                        seat: c.seat().unwrap(),
                        token: c.welcome().unwrap().token,
                        previous: None,
                        peer: None,
                        playing: true,
                        inputs: c.inputs_after(last),
                        name: String::new(),
                    }
                })
                .collect(),
            events: vec![
                SystemEvent::Abandoned { player: host_seat },
                SystemEvent::HostChanged {
                    player: room.client(successor).seat().unwrap(),
                },
            ],
            fingerprint: 0,
            match_id: 0,
        };
        let now = room.now;
        let sequencer = Sequencer::take_over(config, handover, now).unwrap();
        let Node::Client(mut own) = std::mem::replace(&mut room.nodes[successor], Node::Dead)
        else {
            panic!("not a client");
        };
        own.reconnect(HOST_PEER, None, now).unwrap();
        room.nodes[successor] = Node::Host(HostSession::from_parts(sequencer, own, now));
        room.server[successor] = HOST_PEER;
        for &k in &survivors {
            if k != successor {
                room.server[k] = PeerId(successor as u32);
                if let Node::Client(c) = &mut room.nodes[k] {
                    c.reconnect(PeerId(successor as u32), None, now).unwrap();
                }
            }
        }
        while survivors.iter().any(|&k| room.ran[k].len() < 300) {
            room.step();
            assert!(room.now < Instant::from_millis(120_000), "stuck");
        }
        room.assert_one_stream(&survivors, successor, next, host_seat);
    }
}
