//! Relay configuration: defaults, a TOML file, and per-room settings.

use lockstep_core::sequenced::{MissingInput, Policy, SequencerConfig};
use lockstep_core::wire::InputCodec;
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
    /// Rooms with their own settings (created at start, kept while idle).
    pub rooms: Vec<DeclaredRoom>,
    /// Whether a Hello naming an undeclared room creates it.
    pub create_rooms_on_demand: Option<bool>,
    /// The game fingerprint every room requires; unset, each room adopts
    /// its first client's.
    pub fingerprint: Option<u64>,
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
    /// Seconds an empty room is kept before it is removed.
    pub idle_room_secs: u64,
    /// Seconds of silence after which a connection is dropped.
    pub timeout_secs: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_rooms: 1000,
            max_connections: 10_000,
            max_message: 1200,
            max_datagrams_per_sec: 400,
            max_inputs_per_sec: 4000,
            idle_room_secs: 60,
            timeout_secs: 15,
        }
    }
}

/// Join tickets (see [`ticket`](crate::ticket)).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Tickets {
    /// The shared secret; when set, every Hello must carry a valid ticket.
    pub secret: Option<String>,
}

/// How a room runs.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RoomSettings {
    /// `"wait-for-all"` or `"deadline"`.
    pub policy: PolicyName,
    /// Ticks per second.
    pub tick_rate: u32,
    /// Input delay in ticks.
    pub delay: u32,
    /// Seats.
    pub max_seats: u16,
    /// Spectators.
    pub max_spectators: u16,
    /// `wait-for-all`: seconds of silence before a player holding up the
    /// room is abandoned.
    pub abandon_after_secs: u64,
    /// `deadline`: what a missing input becomes, `"neutral"` or
    /// `"repeat-last"`.
    pub missing: MissingName,
    /// Frames kept for resends and replaying joiners.
    pub history: u32,
}

impl Default for RoomSettings {
    fn default() -> Self {
        Self {
            policy: PolicyName::WaitForAll,
            tick_rate: 30,
            delay: 3,
            max_seats: 8,
            max_spectators: 8,
            abandon_after_secs: 10,
            missing: MissingName::Neutral,
            history: 4096,
        }
    }
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
    /// See [`RoomSettings::max_seats`].
    pub max_seats: Option<u16>,
    /// See [`RoomSettings::max_spectators`].
    pub max_spectators: Option<u16>,
    /// See [`RoomSettings::abandon_after_secs`].
    pub abandon_after_secs: Option<u64>,
    /// See [`RoomSettings::missing`].
    pub missing: Option<MissingName>,
    /// See [`RoomSettings::history`].
    pub history: Option<u32>,
}

impl RelayConfig {
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
            s.max_seats = o.max_seats.unwrap_or(s.max_seats);
            s.max_spectators = o.max_spectators.unwrap_or(s.max_spectators);
            s.abandon_after_secs = o.abandon_after_secs.unwrap_or(s.abandon_after_secs);
            s.missing = o.missing.unwrap_or(s.missing);
            s.history = o.history.unwrap_or(s.history);
        }
        s
    }

    /// The sequencer configuration for room `name` with clients coding
    /// inputs with `codec`.
    pub fn sequencer(&self, name: &str, codec: InputCodec, seed: u64) -> SequencerConfig {
        let s = self.room(name);
        let l = &self.limits;
        SequencerConfig {
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
            delay: s.delay,
            max_seats: s.max_seats,
            max_spectators: s.max_spectators,
            history: s.history,
            max_datagram: l.max_message,
            max_datagrams_per_sec: l.max_datagrams_per_sec,
            max_inputs_per_sec: l.max_inputs_per_sec,
            timeout: Duration::from_secs(l.timeout_secs.max(1)),
            fingerprint: self.fingerprint,
            codec,
            seed,
            ..SequencerConfig::default()
        }
    }
}
