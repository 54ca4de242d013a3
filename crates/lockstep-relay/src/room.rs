//! A room: one sequencer, typed by the input codec its clients use.

use lockstep_core::sequenced::{
    Sequencer, SequencerConfig, SequencerError, SequencerEvent, SequencerStats,
};
use lockstep_core::wire::{Hello, InputCodec};
use lockstep_core::{ConfigError, Instant, PeerId, PlayerInputs, Transmit};

/// The relay reads inputs only to re-code them, never to judge them: a room
/// of opaque inputs holds raw bytes, a room of `PlayerInputs` holds those.
#[derive(Debug)]
pub(crate) enum Engine {
    Opaque(Sequencer<Vec<u8>>),
    Player(Sequencer<PlayerInputs>),
}

macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Engine::Opaque($s) => $e,
            Engine::Player($s) => $e,
        }
    };
}

impl Engine {
    /// A room whose clients code inputs with `codec`.
    pub(crate) fn new(
        config: SequencerConfig,
        codec: InputCodec,
        now: Instant,
        game: Option<&crate::GameFactory>,
    ) -> Result<Self, ConfigError> {
        Ok(match (codec, game) {
            (InputCodec::PlayerInputs, Some(g)) => {
                Self::Player(Sequencer::with_simulation(config, now, g.make())?)
            }
            (InputCodec::PlayerInputs, None) => Self::Player(Sequencer::new(config, now)?),
            _ => Self::Opaque(Sequencer::new(config, now)?),
        })
    }

    pub(crate) fn handle_datagram(
        &mut self,
        from: PeerId,
        d: &[u8],
        now: Instant,
    ) -> Result<(), SequencerError> {
        each!(self, s => s.handle_datagram(from, d, now))
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        each!(self, s => s.handle_timeout(now));
    }

    pub(crate) fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        each!(self, s => s.poll_transmit(buf))
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        each!(self, s => s.poll_timeout())
    }

    pub(crate) fn poll_event(&mut self) -> Option<SequencerEvent> {
        each!(self, s => s.poll_event())
    }

    /// Ticks sealed and stalls so far, without building the full stats.
    pub(crate) fn counters(&self) -> (u64, u64) {
        each!(self, s => s.counters())
    }

    pub(crate) fn stats(&self) -> SequencerStats {
        each!(self, s => s.stats())
    }

    pub(crate) fn is_connected(&self, peer: PeerId) -> bool {
        each!(self, s => s.is_connected(peer))
    }

    pub(crate) fn would_resume(&self, hello: &Hello<'_>, now: Instant) -> bool {
        each!(self, s => s.would_resume(hello, now))
    }

    pub(crate) fn resend_welcome(&mut self, peer: PeerId) {
        each!(self, s => s.resend_welcome(peer));
    }

    pub(crate) fn match_over(&self) -> bool {
        each!(self, s => s.match_over())
    }

    pub(crate) fn spectators_behind(&self) -> bool {
        each!(self, s => s.spectators_behind())
    }

    pub(crate) fn is_empty(&self) -> bool {
        each!(self, s => s.is_empty())
    }

    pub(crate) fn disconnect(&mut self, peer: PeerId) {
        each!(self, s => s.disconnect(peer));
    }

    pub(crate) fn shutdown(&mut self, text: &str) {
        each!(self, s => s.shutdown(text));
    }

    pub(crate) fn shares_roster(&self) -> bool {
        each!(self, s => s.config().share_roster)
    }

    pub(crate) fn connections(&self) -> Vec<PeerId> {
        each!(self, s => s.connections().map(|(p, _)| p).collect())
    }

    pub(crate) fn set_contact(&mut self, peer: PeerId, contact: &[u8]) {
        each!(self, s => { let _ = s.set_contact(peer, contact); });
    }
}

/// A room's name, shared by the room, its connections and the deadline
/// index without copying the string per datagram.
pub(crate) type RoomName = std::sync::Arc<str>;

#[derive(Debug)]
pub(crate) struct Room {
    pub(crate) name: RoomName,
    pub(crate) engine: Engine,
    pub(crate) sealed: u64,
    pub(crate) stalls: u64,
    /// Delay changes and datagrams lost each way, as last added to the
    /// relay's metrics.
    pub(crate) reported: (u64, u64, u64),
    /// The timeout this room is filed under in the relay's deadline index.
    pub(crate) scheduled: Option<u64>,
    /// Failover rooms: the address each connection was last named in the
    /// roster with.
    pub(crate) contacts: std::collections::HashMap<PeerId, std::net::SocketAddr>,
    /// Its match's recording, if the relay records.
    pub(crate) recording: crate::record::RoomRecording,
    /// When its match was first seen over, while spectators still catch
    /// up with it.
    pub(crate) over_since: Option<std::time::Instant>,
}

impl Room {
    pub(crate) fn new(name: RoomName, engine: Engine) -> Self {
        Self {
            name,
            engine,
            sealed: 0,
            stalls: 0,
            reported: (0, 0, 0),
            scheduled: None,
            contacts: std::collections::HashMap::new(),
            recording: crate::record::RoomRecording::default(),
            over_since: None,
        }
    }
}
