//! Relay configuration: defaults, a TOML file, and per-room settings.

use crate::ticket::{ShortSecret, TicketKey};
use lockstep_core::AdaptiveDelay;
use lockstep_core::sequenced::{MissingInput, Policy, SequencerConfig, Start};
use serde::Deserialize;
use std::time::Duration;

/// Everything a relay needs to know besides its sockets.
///
/// ```
/// let config: lockstep_relay::RelayConfig = toml::from_str(r#"
///     [limits]
///     max_rooms = 10
///     [room_defaults]
///     policy = "deadline"
///     tick_rate = 60
///     [[rooms]]
///     name = "finals"
///     max_seats = 2
/// "#)?;
/// assert_eq!(config.limits.max_rooms, 10);
/// assert_eq!(config.room("finals").max_seats, 2);
/// assert_eq!(config.room("anything").tick_rate, 60);
/// # Ok::<(), toml::de::Error>(())
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RelayConfig {
    /// Server-wide limits.
    pub limits: Limits,
    /// Join tickets.
    pub tickets: Tickets,
    /// Settings for rooms not declared in `rooms`.
    pub room_defaults: RoomSettings,
    /// Rooms with their own settings (opened by their first client, closed
    /// when empty like any other; the next client opens a fresh one).
    pub rooms: Vec<DeclaredRoom>,
    /// Whether a Hello naming an undeclared room creates it.
    pub create_rooms_on_demand: Option<bool>,
    /// The game fingerprint every room requires; unset, each room adopts
    /// its first client's.
    pub fingerprint: Option<u64>,
    /// Also take UDP clients that do not seal their datagrams (a LAN, a
    /// test). Off by default: a plain UDP player is only its source
    /// address, which anyone can forge to speak for it.
    pub plain_udp: bool,
    /// Serve the WebSocket listener over TLS (`wss://`) with this
    /// certificate and key.
    pub tls: Option<crate::tls::TlsFiles>,
    /// Recording every match into a replay file.
    pub record: crate::record::RecordSettings,
    /// On shutdown (SIGTERM, Ctrl-C), drain for at most this many seconds
    /// first: take no new rooms, fail `/readyz`, say `draining` in a
    /// fleet's directory, let running matches end, and stop once the last
    /// room closes (0, the default: stop at once). At the deadline every
    /// client left is told goodbye (a failover room's players carry their
    /// match on among themselves).
    pub drain_secs: u64,
    /// A game the relay runs itself in every room of `PlayerInputs`
    /// clients (set in code, not in the file): it hands joiners its own
    /// state and is the checksum authority. Without one the relay knows
    /// nothing of the game.
    #[serde(skip)]
    pub game: Option<GameFactory>,
}

/// Makes a room's [`Simulation`](lockstep_core::sequenced::Simulation): the
/// game's state at the room's first tick.
///
/// ```
/// use lockstep_core::sequenced::Simulation;
/// use lockstep_core::{Frame, PlayerInputs};
/// use lockstep_relay::GameFactory;
///
/// #[derive(Debug, Default)]
/// struct Ticks(u64);
/// impl Simulation<PlayerInputs> for Ticks {
///     fn step(&mut self, _: &Frame<PlayerInputs>) { self.0 += 1 }
///     fn snapshot(&self) -> Vec<u8> { self.0.to_le_bytes().to_vec() }
///     fn hash(&self) -> u64 { self.0 }
/// }
/// let game = GameFactory::new(|| Box::new(Ticks::default()));
/// assert_eq!(game.make().hash(), 0);
/// ```
#[derive(Clone)]
pub struct GameFactory(
    std::sync::Arc<
        dyn Fn() -> Box<dyn lockstep_core::sequenced::Simulation<lockstep_core::PlayerInputs>>
            + Send
            + Sync,
    >,
);

impl GameFactory {
    /// A factory calling `make` for each new room.
    pub fn new(
        make: impl Fn() -> Box<dyn lockstep_core::sequenced::Simulation<lockstep_core::PlayerInputs>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self(std::sync::Arc::new(make))
    }

    /// A new room's game.
    pub fn make(
        &self,
    ) -> Box<dyn lockstep_core::sequenced::Simulation<lockstep_core::PlayerInputs>> {
        (self.0)()
    }
}

impl std::fmt::Debug for GameFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GameFactory(..)")
    }
}

impl PartialEq for GameFactory {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Server-wide limits. A connection breaking one gets an `Error` naming it
/// and is closed; nobody else notices.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Rooms at once.
    pub max_rooms: usize,
    /// Connections at once, over all rooms.
    pub max_connections: usize,
    /// The largest datagram or WebSocket message taken.
    pub max_message: usize,
    /// Datagrams a connection may send per second.
    pub max_datagrams_per_sec: u32,
    /// Inputs a connection may send per second (resends included).
    pub max_inputs_per_sec: u32,
    /// Seconds of silence after which a connection is dropped.
    pub timeout_secs: u64,
    /// Answers (challenges, refusals, errors) sent per second to addresses
    /// that have not completed the handshake, over all of them.
    pub stranger_replies_per_sec: u32,
    /// The same, per source IP address.
    pub stranger_replies_per_addr: u32,
    /// Seconds a seat's connection must have been silent before its resume
    /// token moves the seat to a new connection.
    pub resume_after_silence_secs: u64,
    /// Seconds a dropped player's seat is held for its resume token,
    /// counted from its last datagram (see
    /// [`SequencerConfig::seat_grace`](lockstep_core::sequenced::SequencerConfig::seat_grace)).
    pub seat_grace_secs: u64,
    /// UDP connections open at once from one IP address (sealed ones may
    /// share an address).
    pub max_udp_per_addr: usize,
    /// Sealed handshakes (an X25519 computation each) per second, over all
    /// addresses.
    pub handshakes_per_sec: u32,
    /// The same, per source IP address.
    pub handshakes_per_addr: u32,
    /// WebSocket connections open at once, Hello or not.
    pub max_ws_connections: usize,
    /// WebSocket connections open at once from one IP address.
    pub max_ws_per_addr: usize,
    /// Seconds a WebSocket connection has to send its first message after
    /// its handshake.
    pub ws_hello_timeout_secs: u64,
    /// Milliseconds the main loop may fall behind its timers before
    /// `/healthz` says it is unhealthy.
    pub max_loop_lag_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_rooms: 1000,
            max_connections: 10_000,
            max_message: 1200,
            max_datagrams_per_sec: 400,
            max_inputs_per_sec: 4000,
            timeout_secs: 15,
            stranger_replies_per_sec: 1000,
            stranger_replies_per_addr: 5,
            resume_after_silence_secs: 1,
            seat_grace_secs: 30,
            max_udp_per_addr: 16,
            handshakes_per_sec: 2000,
            handshakes_per_addr: 20,
            max_ws_connections: 4096,
            max_ws_per_addr: 16,
            ws_hello_timeout_secs: 5,
            max_loop_lag_ms: 500,
        }
    }
}

/// Join tickets (see [`ticket`](crate::ticket)). With any key set, every
/// Hello must carry a valid ticket.
///
/// ```
/// let config: lockstep_relay::RelayConfig = toml::from_str(r#"
///     [tickets]
///     keys = [{ id = 1, secret = "the old secret, retired soon" },
///             { id = 2, secret = "the new secret, signing now!" }]
///     max_uses = 1
/// "#)?;
/// assert_eq!(config.ticket_keys()?.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Tickets {
    /// A signing secret with key id 0 (shorthand for one entry of `keys`).
    pub secret: Option<String>,
    /// Signing secrets by key id: two are valid at once during a rotation.
    pub keys: Vec<TicketKeyConfig>,
    /// How many connections one ticket may open.
    pub max_uses: u32,
    /// The longest a ticket may be valid for, in seconds from when it is
    /// presented: spent tickets are remembered until they expire.
    pub max_lifetime_secs: u64,
    /// Unexpired spent tickets remembered at once; past it, new tickets are
    /// refused rather than the memory grown.
    pub ledger_capacity: usize,
}

impl Default for Tickets {
    fn default() -> Self {
        Self {
            secret: None,
            keys: Vec::new(),
            max_uses: 1,
            max_lifetime_secs: 24 * 3600,
            ledger_capacity: 1_000_000,
        }
    }
}

/// One ticket-signing secret.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TicketKeyConfig {
    /// The id tickets name it by.
    pub id: u8,
    /// The secret, at least 16 bytes.
    pub secret: String,
}

/// How a room runs.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RoomSettings {
    /// `"wait-for-all"` or `"deadline"`.
    pub policy: PolicyName,
    /// Ticks per second.
    pub tick_rate: u32,
    /// Input delay in ticks (with `adaptive_delay`, the one to start at).
    pub delay: u32,
    /// `wait-for-all`: the delay follows the network, within
    /// `min_delay..=max_delay` (each player's client says which delay
    /// keeps its stalls under 0.5% of frames; the room plays at the
    /// largest). Off: always `delay`.
    pub adaptive_delay: bool,
    /// The smallest adaptive delay, in ticks.
    pub min_delay: u32,
    /// The largest adaptive delay, in ticks.
    pub max_delay: u32,
    /// Seats.
    pub max_seats: u16,
    /// Spectators.
    pub max_spectators: u16,
    /// Seconds spectators watch behind the match (0: none): they are never
    /// sent a frame newer, nor join from a state newer (the snapshot is
    /// held until it is that old), against a spectator telling a player
    /// what its opponents do. Must stay under `history` ticks.
    pub spectator_delay_secs: u32,
    /// `wait-for-all`: seconds of silence before a player holding up the
    /// room is abandoned.
    pub abandon_after_secs: u64,
    /// `deadline`: what a missing input becomes, `"neutral"` or
    /// `"repeat-last"`.
    pub missing: MissingName,
    /// Frames kept for resends and replaying joiners.
    pub history: u32,
    /// Seconds a pause lasts at most before play resumes by itself.
    pub max_pause_secs: u64,
    /// Pauses each seat may ask for over a match.
    pub pauses_per_seat: u32,
    /// How a client joins a game under way: `false` replays it from its
    /// first tick (while the history holds it), `true` hands it a snapshot
    /// of the game's state from an in-step client (every client of the
    /// room must then answer snapshot requests).
    pub snapshot_join: bool,
    /// With `snapshot_join`, how many ticks into a game a joiner still
    /// replays it instead.
    pub snapshot_join_after: u32,
    /// The largest snapshot passed on, in MiB.
    pub max_snapshot_mib: u32,
    /// Failover: the room shares its roster (every seat's address as the
    /// relay sees it, and a commitment to its resume token) with its
    /// players, so that if the relay disappears they carry the match on
    /// under one of them (host migration, as in host mode). Only players
    /// that run a host-mode session against the relay can; the addresses
    /// must reach each other (a LAN, or players with public addresses).
    pub failover: bool,
    /// When a match starts: `"at-once"` with its first player (who plays
    /// alone until others join), `"seated"` once `start_players` seats are
    /// taken, `"ready"` once at least `start_players` are seated and every
    /// seated player said it is ready. Any but `"at-once"` opens the room
    /// with a lobby: nothing runs until the match starts, and players see
    /// each other by name meanwhile.
    pub start: StartName,
    /// The count `start` names (1 to `max_seats`).
    pub start_players: u16,
    /// With `start = "ready"`: seconds after `start_players` are ready that
    /// the match starts without those not ready yet (0: it waits for
    /// everyone seated).
    pub ready_wait_secs: u64,
}

impl Default for RoomSettings {
    fn default() -> Self {
        Self {
            policy: PolicyName::WaitForAll,
            tick_rate: 30,
            delay: 3,
            adaptive_delay: true,
            min_delay: 1,
            max_delay: 16,
            max_seats: 8,
            max_spectators: 8,
            spectator_delay_secs: 0,
            abandon_after_secs: 10,
            missing: MissingName::Neutral,
            history: 4096,
            max_pause_secs: 60,
            pauses_per_seat: 3,
            snapshot_join: false,
            snapshot_join_after: 90,
            max_snapshot_mib: 16,
            failover: false,
            start: StartName::AtOnce,
            start_players: 2,
            ready_wait_secs: 60,
        }
    }
}

/// A room's start rule by name (see [`RoomSettings::start`]).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum StartName {
    /// With the first player: no lobby.
    #[default]
    AtOnce,
    /// Once `start_players` seats are taken.
    Seated,
    /// Once at least `start_players` are seated and all are ready.
    Ready,
}

/// A sealing policy by name.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyName {
    /// Wait for every seated player's input.
    #[default]
    WaitForAll,
    /// Seal on the clock.
    Deadline,
}

/// What a missing input becomes under `deadline`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum MissingName {
    /// The neutral input.
    #[default]
    Neutral,
    /// The player's last input.
    RepeatLast,
}

/// A room declared in the configuration.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeclaredRoom {
    /// Its name.
    pub name: String,
    /// Overrides of the defaults.
    #[serde(flatten)]
    pub settings: RoomOverrides,
}

/// Per-room overrides; anything unset comes from `room_defaults`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RoomOverrides {
    /// See [`RoomSettings::policy`].
    pub policy: Option<PolicyName>,
    /// See [`RoomSettings::tick_rate`].
    pub tick_rate: Option<u32>,
    /// See [`RoomSettings::delay`].
    pub delay: Option<u32>,
    /// See [`RoomSettings::adaptive_delay`].
    pub adaptive_delay: Option<bool>,
    /// See [`RoomSettings::min_delay`].
    pub min_delay: Option<u32>,
    /// See [`RoomSettings::max_delay`].
    pub max_delay: Option<u32>,
    /// See [`RoomSettings::max_seats`].
    pub max_seats: Option<u16>,
    /// See [`RoomSettings::max_spectators`].
    pub max_spectators: Option<u16>,
    /// See [`RoomSettings::spectator_delay_secs`].
    pub spectator_delay_secs: Option<u32>,
    /// See [`RoomSettings::abandon_after_secs`].
    pub abandon_after_secs: Option<u64>,
    /// See [`RoomSettings::missing`].
    pub missing: Option<MissingName>,
    /// See [`RoomSettings::history`].
    pub history: Option<u32>,
    /// See [`RoomSettings::max_pause_secs`].
    pub max_pause_secs: Option<u64>,
    /// See [`RoomSettings::pauses_per_seat`].
    pub pauses_per_seat: Option<u32>,
    /// See [`RoomSettings::failover`].
    pub failover: Option<bool>,
    /// See [`RoomSettings::snapshot_join`].
    pub snapshot_join: Option<bool>,
    /// See [`RoomSettings::snapshot_join_after`].
    pub snapshot_join_after: Option<u32>,
    /// See [`RoomSettings::start`].
    pub start: Option<StartName>,
    /// See [`RoomSettings::start_players`].
    pub start_players: Option<u16>,
    /// See [`RoomSettings::ready_wait_secs`].
    pub ready_wait_secs: Option<u64>,
}

/// A configuration that cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RelayConfigError {
    /// A ticket secret is too short to sign anything.
    #[error(transparent)]
    ShortSecret(#[from] ShortSecret),
    /// Two ticket secrets share an id.
    #[error("two ticket secrets have id {0}")]
    DuplicateKeyId(u8),
    /// A limit is zero or out of range.
    #[error("invalid limit: {0}")]
    Limit(&'static str),
    /// A room's settings are invalid.
    #[error("room {room:?}: {error}")]
    Room {
        /// The room (empty for the defaults).
        room: String,
        /// What is wrong.
        error: lockstep_core::ConfigError,
    },
}

impl RelayConfig {
    /// The ticket-signing keys, checked: every secret long enough, ids
    /// unique. Empty when tickets are not required.
    pub fn ticket_keys(&self) -> Result<Vec<TicketKey>, RelayConfigError> {
        let t = &self.tickets;
        let mut keys = Vec::new();
        let named = t.keys.iter().map(|k| (k.id, k.secret.as_str()));
        for (id, secret) in t.secret.iter().map(|s| (0, s.as_str())).chain(named) {
            if keys.iter().any(|k: &TicketKey| k.id() == id) {
                return Err(RelayConfigError::DuplicateKeyId(id));
            }
            keys.push(TicketKey::new(id, secret)?);
        }
        Ok(keys)
    }

    /// Checks everything that can be checked before the relay starts.
    pub fn validate(&self) -> Result<(), RelayConfigError> {
        self.ticket_keys()?;
        let l = &self.limits;
        let bad = |broken: bool, why| {
            if broken {
                Err(RelayConfigError::Limit(why))
            } else {
                Ok(())
            }
        };
        bad(l.max_rooms == 0, "max_rooms must be positive")?;
        bad(l.max_connections == 0, "max_connections must be positive")?;
        bad(
            l.max_datagrams_per_sec == 0,
            "max_datagrams_per_sec must be positive",
        )?;
        bad(l.timeout_secs == 0, "timeout_secs must be positive")?;
        bad(
            l.max_ws_per_addr == 0 || l.max_ws_connections == 0,
            "WebSocket connection limits must be positive",
        )?;
        bad(
            self.tickets.max_uses == 0,
            "tickets.max_uses must be positive",
        )?;
        let rooms = std::iter::once(String::new()).chain(self.rooms.iter().map(|r| r.name.clone()));
        for room in rooms {
            let seq = self.sequencer(&room, [0; 32]);
            lockstep_core::sequenced::Sequencer::<Vec<u8>>::new(seq, lockstep_core::Instant::ZERO)
                .map_err(|error| RelayConfigError::Room { room, error })?;
        }
        Ok(())
    }

    /// Whether undeclared rooms are created on first join (default: yes).
    pub fn on_demand(&self) -> bool {
        self.create_rooms_on_demand.unwrap_or(true)
    }

    /// The settings of room `name`.
    pub fn room(&self, name: &str) -> RoomSettings {
        let mut s = self.room_defaults.clone();
        if let Some(r) = self.rooms.iter().find(|r| r.name == name) {
            let o = &r.settings;
            s.policy = o.policy.unwrap_or(s.policy);
            s.tick_rate = o.tick_rate.unwrap_or(s.tick_rate);
            s.delay = o.delay.unwrap_or(s.delay);
            s.adaptive_delay = o.adaptive_delay.unwrap_or(s.adaptive_delay);
            s.min_delay = o.min_delay.unwrap_or(s.min_delay);
            s.max_delay = o.max_delay.unwrap_or(s.max_delay);
            s.max_seats = o.max_seats.unwrap_or(s.max_seats);
            s.max_spectators = o.max_spectators.unwrap_or(s.max_spectators);
            s.spectator_delay_secs = o.spectator_delay_secs.unwrap_or(s.spectator_delay_secs);
            s.abandon_after_secs = o.abandon_after_secs.unwrap_or(s.abandon_after_secs);
            s.missing = o.missing.unwrap_or(s.missing);
            s.history = o.history.unwrap_or(s.history);
            s.max_pause_secs = o.max_pause_secs.unwrap_or(s.max_pause_secs);
            s.pauses_per_seat = o.pauses_per_seat.unwrap_or(s.pauses_per_seat);
            s.failover = o.failover.unwrap_or(s.failover);
            s.snapshot_join = o.snapshot_join.unwrap_or(s.snapshot_join);
            s.snapshot_join_after = o.snapshot_join_after.unwrap_or(s.snapshot_join_after);
            s.start = o.start.unwrap_or(s.start);
            s.start_players = o.start_players.unwrap_or(s.start_players);
            s.ready_wait_secs = o.ready_wait_secs.unwrap_or(s.ready_wait_secs);
        }
        s
    }

    /// The sequencer configuration for room `name`.
    /// `secret` keys the room's resume tokens (32 bytes from a CSPRNG).
    pub fn sequencer(&self, name: &str, secret: [u8; 32]) -> SequencerConfig {
        let s = self.room(name);
        let l = &self.limits;
        SequencerConfig {
            start: match s.start {
                StartName::AtOnce => Start::AtOnce,
                StartName::Seated => Start::Seated(s.start_players),
                StartName::Ready => Start::Ready {
                    min: s.start_players,
                },
            },
            ready_wait: (s.ready_wait_secs > 0).then(|| Duration::from_secs(s.ready_wait_secs)),
            policy: match s.policy {
                PolicyName::WaitForAll => Policy::WaitForAll {
                    abandon_after: Duration::from_secs(s.abandon_after_secs),
                },
                PolicyName::Deadline => Policy::Deadline {
                    missing: match s.missing {
                        MissingName::Neutral => MissingInput::Neutral,
                        MissingName::RepeatLast => MissingInput::RepeatLast,
                    },
                },
            },
            tick_rate: s.tick_rate,
            delay: if s.adaptive_delay {
                s.delay.clamp(s.min_delay, s.max_delay.max(s.min_delay))
            } else {
                s.delay
            },
            adaptive: (s.adaptive_delay && s.policy == PolicyName::WaitForAll).then(|| {
                AdaptiveDelay {
                    min: s.min_delay,
                    max: s.max_delay,
                    ..AdaptiveDelay::default()
                }
            }),
            max_seats: s.max_seats,
            max_spectators: s.max_spectators,
            spectator_delay: s.spectator_delay_secs.saturating_mul(s.tick_rate),
            history: s.history,
            // Sealing adds its overhead on the way out; what is inside is
            // held to the same size either way.
            max_datagram: l
                .max_message
                .saturating_sub(lockstep_core::secure::SEALED_OVERHEAD),
            max_datagrams_per_sec: l.max_datagrams_per_sec,
            max_inputs_per_sec: l.max_inputs_per_sec,
            timeout: Duration::from_secs(l.timeout_secs.max(1)),
            fingerprint: self.fingerprint,
            secret,
            resume_after_silence: Duration::from_secs(l.resume_after_silence_secs),
            seat_grace: Duration::from_secs(l.seat_grace_secs),
            max_pause: Duration::from_secs(s.max_pause_secs),
            pauses_per_seat: s.pauses_per_seat,
            snapshot_join: s.snapshot_join,
            snapshot_join_after: s.snapshot_join_after,
            share_roster: s.failover,
            snapshot: lockstep_core::snapshot::SnapshotLimits {
                max_len: (s.max_snapshot_mib as usize) << 20,
                ..Default::default()
            },
            ..SequencerConfig::default()
        }
    }
}
