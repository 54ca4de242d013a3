//! How a room runs ([`SequencerConfig`]), what its sequencer reports
//! ([`SequencerStats`], [`SequencerError`]), and the game a server may run
//! itself ([`Simulation`]).

use super::*;

/// A game the sequencer runs itself, as a server that simulates does: it
/// steps every sealed frame, hands joiners its own state (no client is
/// asked to donate), and its state hash is the checksum reference every
/// client is compared against, whatever the players report.
///
/// ```
/// use lockstep_core::sequenced::{Sequencer, SequencerConfig, Simulation};
/// use lockstep_core::{Frame, Instant};
///
/// #[derive(Debug, Default)]
/// struct Sum(u64);
///
/// impl Simulation<u8> for Sum {
///     fn step(&mut self, frame: &Frame<u8>) {
///         self.0 += frame.inputs.iter().flatten().map(|i| u64::from(*i)).sum::<u64>();
///     }
///     fn snapshot(&self) -> Vec<u8> {
///         self.0.to_le_bytes().to_vec()
///     }
///     fn hash(&self) -> u64 {
///         self.0
///     }
/// }
///
/// let room = Sequencer::<u8>::with_simulation(
///     SequencerConfig::default(),
///     Instant::ZERO,
///     Box::new(Sum::default()),
/// )?;
/// # Ok::<(), lockstep_core::ConfigError>(())
/// ```
pub trait Simulation<I>: core::fmt::Debug + Send {
    /// Runs one sealed frame (every frame, in order, from the room's first
    /// tick).
    fn step(&mut self, frame: &Frame<I>);
    /// The state after the last frame run, as the game's clients restore it.
    fn snapshot(&self) -> Vec<u8>;
    /// The state hash clients report for the same tick.
    fn hash(&self) -> u64;
}

/// How a [`Sequencer`] runs its room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequencerConfig {
    /// When the match starts. [`Start::AtOnce`] (the default): with the
    /// first player, who plays alone until others join. Any other rule
    /// opens a lobby: players take their seats (and say whether they are
    /// ready), the roster lists them by name, and nothing is sealed until
    /// the rule holds or [`Sequencer::start_match`] is called. A match
    /// once started never goes back to its lobby.
    pub start: Start,
    /// With [`Start::Ready`]: once at least `min` seated players are
    /// ready, the match starts this long after even if others are not
    /// (they play from the start all the same), so that one player who
    /// never says ready cannot hold the lobby for good. 60 s by default;
    /// `None` waits for everyone.
    pub ready_wait: Option<Duration>,
    /// When ticks are sealed.
    pub policy: Policy,
    /// Ticks per second: the `Deadline` clock, and what clients are told.
    pub tick_rate: u32,
    /// Input delay in ticks clients are told to use; a joining seat's first
    /// `delay` ticks run neutral. With `adaptive`, the delay to start with.
    pub delay: u32,
    /// Let the input delay follow the network (`WaitForAll` only): each
    /// player's client says which delay would keep its stalls at the
    /// target rate ([`Message::DelayWanted`]), and the room plays at the
    /// largest any playing seat wants, within `min..=max`. It rises at
    /// once and falls a tick at a time, each once the wants stayed lower
    /// for a second; a change takes effect at the
    /// open tick, where a [`SystemEvent::DelayChanged`] says so in every
    /// client's stream. `None` (the default): the delay stays `delay`.
    pub adaptive: Option<AdaptiveDelay>,
    /// Seats in the room.
    pub max_seats: u16,
    /// Spectators allowed at once.
    pub max_spectators: u16,
    /// Ticks spectators watch behind the match (0, none, by default): a
    /// spectator is never sent a frame within this many ticks of the open
    /// one, nor a state newer than that when it joins (a snapshot is held
    /// until it is that old), so that nobody watching can tell a player
    /// what its opponents are doing now. Less than `history`.
    pub spectator_delay: u32,
    /// How far past the open tick (beyond `delay`) a client may stamp input.
    pub max_lead: u32,
    /// Sealed frames kept, for clients that missed some and for joiners
    /// replaying the game from its start.
    pub history: u32,
    /// The largest encoded input taken.
    pub max_input_len: usize,
    /// The largest datagram sent or taken.
    pub max_datagram: usize,
    /// Datagrams a connection may send per second (a token bucket: bursts
    /// up to a second's worth).
    pub max_datagrams_per_sec: u32,
    /// Inputs a connection may send per second, resends included (a token
    /// bucket, like datagrams).
    pub max_inputs_per_sec: u32,
    /// The game fingerprint required; `None` adopts the first client's.
    pub fingerprint: Option<u64>,
    /// Silence after which a connection is dropped.
    pub timeout: Duration,
    /// How long after its last datagram a client is sent one again when it
    /// may lack something.
    pub resend_interval: Duration,
    /// How often an idle client is sent a datagram anyway.
    /// Also how long an unacknowledged full checkpoint, and a question
    /// about the hash chain left unanswered, wait before they go again.
    pub keepalive_interval: Duration,
    /// How often round-trip time is measured.
    pub ping_interval: Duration,
    /// Votes held for checkpoints without a verdict yet.
    pub checksum_window: usize,
    /// The room's first tick.
    pub first_tick: Tick,
    /// Keys the resume tokens handed out with each seat, and the match's id
    /// ([`Sequencer::match_id`]). A server facing the internet, or a host,
    /// fills it from a CSPRNG (`lockstep_net::session_secret`): the
    /// default, all zeros, makes tokens anyone can compute and gives every
    /// match the same id (fine for tests, nothing more).
    pub secret: [u8; 32],
    /// How long a seat's connection must have been silent before its resume
    /// token moves the seat to a new connection: a live player's seat is
    /// never taken over, whoever holds its token.
    pub resume_after_silence: Duration,
    /// How long a player's seat is held for its resume token once its
    /// connection has been dropped for silence (`timeout`), counted from
    /// the last datagram heard, or once its transport closed. Meanwhile the
    /// seat runs neutral input and holds nobody up (under `WaitForAll` a
    /// silent player is abandoned after `abandon_after` while its
    /// connection is still open). When the grace ends the seat is `Left`.
    /// A grace no longer than `timeout` holds no seat.
    pub seat_grace: Duration,
    /// The longest a pause lasts: then play resumes by itself, whoever asked
    /// for it.
    pub max_pause: Duration,
    /// How many pauses each seat may ask for over the match.
    pub pauses_per_seat: u32,
    /// How a client joins a game under way. `false`: it replays the stream
    /// from the room's first tick, which only works while the history
    /// holds it. `true`: it is handed a snapshot of the game's state taken
    /// by an in-step client (the donor) right after a tick, then the frames
    /// after it; it plays once it says it caught up, and until then its
    /// seat runs neutral input and holds nobody up. The game must answer
    /// [`Event::SnapshotRequested`](crate::Event::SnapshotRequested).
    pub snapshot_join: bool,
    /// With `snapshot_join`, a client whose state the seated majority (or
    /// the server's own simulation) found diverged is resynced: told so
    /// ([`Message::Resync`](crate::wire::Message::Resync)), handed a
    /// snapshot from a client that agrees with the majority, and run on
    /// from it as a joiner is (its seat runs neutral until it caught up).
    /// After this many resyncs of the same seat it is dropped instead
    /// (its game keeps diverging); 0 never resyncs.
    pub max_resyncs: u32,
    /// With `snapshot_join`, how many ticks into the game a joiner still
    /// replays it instead (cheaper than a snapshot early on, and needs no
    /// donor).
    pub snapshot_join_after: u32,
    /// After a join, how long to wait for more joiners to share one
    /// snapshot: each new one restarts the wait, up to `join_wait_max`.
    pub join_wait: Duration,
    /// The longest the first joiner waits for others.
    pub join_wait_max: Duration,
    /// How long a donor may go without sending a chunk of its snapshot
    /// before another client is asked instead.
    pub donor_timeout: Duration,
    /// Limits on snapshots passing through.
    pub snapshot: SnapshotLimits,
    /// With a [`Simulation`], the ticks whose state hash it folds into its
    /// hash chain, whose checkpoints are the references: every tick this
    /// many ticks from the first. Clients must report the same ticks (by
    /// default every one) to be told of a divergence.
    pub sim_check_every: u32,
    /// Every seated client is sent the roster ([`Message::Member`]): each
    /// seat's holder by name, whether it is ready and playing, and a
    /// commitment to its resume token. With `share_roster` each entry also
    /// carries its holder's contact (as
    /// [`set_contact`](Sequencer::set_contact) gave it): what the players
    /// need to carry a match on without its host (host mode). It shows
    /// every player every other player's contact (an address, with UDP), so
    /// it is off by default.
    pub share_roster: bool,
}

impl Default for SequencerConfig {
    fn default() -> Self {
        Self {
            start: Start::AtOnce,
            ready_wait: Some(Duration::from_secs(60)),
            policy: Policy::WaitForAll {
                abandon_after: Duration::from_secs(10),
            },
            tick_rate: 30,
            delay: 3,
            adaptive: None,
            max_seats: 8,
            max_spectators: 8,
            spectator_delay: 0,
            max_lead: 8,
            history: 4096,
            max_input_len: 256,
            max_datagram: 1200,
            max_datagrams_per_sec: 400,
            max_inputs_per_sec: 4000,
            fingerprint: None,
            timeout: Duration::from_secs(15),
            resend_interval: Duration::from_millis(40),
            keepalive_interval: Duration::from_millis(250),
            ping_interval: Duration::from_secs(1),
            checksum_window: 512,
            first_tick: Tick::ZERO,
            secret: [0; 32],
            resume_after_silence: Duration::from_secs(1),
            seat_grace: Duration::from_secs(30),
            max_pause: Duration::from_secs(60),
            pauses_per_seat: 3,
            snapshot_join: false,
            snapshot_join_after: 90,
            max_resyncs: 3,
            join_wait: Duration::from_millis(300),
            join_wait_max: Duration::from_secs(3),
            donor_timeout: Duration::from_secs(3),
            snapshot: SnapshotLimits::default(),
            sim_check_every: 1,
            share_roster: false,
        }
    }
}

impl SequencerConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        limits::link(
            self.max_datagram,
            [
                self.resend_interval,
                self.keepalive_interval,
                self.ping_interval,
            ],
            self.checksum_window,
        )?;
        let bad = ConfigError::unless;
        limits::tick_rate(self.tick_rate)?;
        limits::delay(self.delay, self.adaptive.as_ref())?;
        limits::lead(self.max_lead)?;
        bad(
            self.max_seats == 0 || usize::from(self.max_seats) > wire::MAX_SEATS,
            "max_seats must be 1 to 256",
        )?;
        bad(self.history < 16, "history must hold at least 16 frames")?;
        bad(
            self.spectator_delay >= self.history,
            "spectator_delay must be less than history (the frames spectators are behind must be kept)",
        )?;
        limits::input_len(self.max_input_len)?;
        bad(self.timeout.is_zero(), "timeout must be positive")?;
        bad(self.max_pause.is_zero(), "max_pause must be positive")?;
        match self.start {
            Start::Seated(n) | Start::Ready { min: n } => bad(
                n == 0 || n > self.max_seats,
                "a start rule's count must be 1 to max_seats",
            ),
            _ => Ok(()),
        }
    }
}

/// Why a datagram was not taken. The sequencer's state is unchanged except
/// for what the error says (a violating connection is closed and told why).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SequencerError {
    /// The bytes are malformed or from another protocol version.
    #[error("malformed datagram: {0}")]
    Wire(#[from] WireError),
    /// A stranger sent something other than a Hello.
    #[error("{0} is not connected and sent no hello")]
    NotConnected(PeerId),
    /// The connection broke a rule and is being closed.
    #[error("{peer} dropped ({code:?}): {text}")]
    Dropped {
        /// The connection.
        peer: PeerId,
        /// The error it is told.
        code: ErrorCode,
        /// Details.
        text: String,
    },
    /// The connection was refused.
    #[error("{peer} refused: {reason}")]
    Refused {
        /// The connection.
        peer: PeerId,
        /// Why.
        reason: Rejection,
    },
    /// In host mode, a datagram for this player's own client, refused by
    /// it (see [`HostedSession`](crate::sequenced::HostedSession)).
    #[error("refused by this player's client: {0}")]
    Client(crate::DatagramError),
}

/// Counters for a sequencer.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SequencerStats {
    /// The next tick to seal.
    pub open: Tick,
    /// Ticks sealed.
    pub sealed: u64,
    /// Times sealing had to wait on a player (`WaitForAll`).
    pub stalls: u64,
    /// The input delay in force, in ticks.
    pub delay: u32,
    /// Times the input delay changed (`adaptive`).
    pub delay_changes: u64,
    /// Inputs that arrived after their tick was sealed (`Deadline`).
    pub late_inputs: u64,
    /// Inputs received again (resends).
    pub duplicate_inputs: u64,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Datagrams from clients lost on the way, as their pongs' counts
    /// show (an estimate: clients report them).
    pub datagrams_lost_in: u64,
    /// Datagrams to clients lost on the way, likewise.
    pub datagrams_lost_out: u64,
    /// Ticks sealed per second, over the last second.
    pub tick_rate: Option<f64>,
    /// Connections refused.
    pub rejects: u64,
    /// Connections dropped for breaking a rule.
    pub violations: u64,
    /// Checksum mismatches reported.
    pub desyncs: u64,
    /// Connected players.
    pub players: usize,
    /// Connected spectators.
    pub spectators: usize,
    /// Frames held in the history.
    pub history: usize,
    /// Inputs waiting to be sealed, over all seats.
    pub pending_inputs: usize,
    /// Runs of frames coded for a datagram.
    pub runs_encoded: u64,
    /// Runs of frames sent as another connection's datagram coded them
    /// (the same frames against the same reference): in a room of many,
    /// each newly sealed tick is coded about once, not once per client.
    pub runs_shared: u64,
}
