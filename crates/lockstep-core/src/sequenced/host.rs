//! A sequencer inside a player's process: the listen-server arrangement.

use super::{
    ClientConfig, ClientSession, Sequencer, SequencerConfig, SequencerError, SequencerEvent,
};
use crate::endpoint::Transmit;
use crate::error::{ChecksumError, CommitError, ConfigError, PauseError};
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

    /// The sequencer (connections, stats, kick, pause).
    pub fn sequencer(&mut self) -> &mut Sequencer<I> {
        &mut self.sequencer
    }

    /// See [`Sequencer::set_contact`]: how other players reach `peer`, for
    /// the roster.
    pub fn set_contact(&mut self, peer: PeerId, contact: &[u8]) -> Result<(), SequencerError> {
        self.sequencer.set_contact(peer, contact)
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
