//! How a client plays ([`ClientConfig`]), what it reports
//! ([`ClientStats`]), and what it learns of the roster ([`SeatInfo`]).

use super::*;

/// A seat of the room's roster, as the sequencer shared it: its player by
/// name, ready or not, and (with
/// [`SequencerConfig::share_roster`](crate::sequenced::SequencerConfig::share_roster))
/// what a player needs to carry the match on if the host leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SeatInfo {
    /// The seat.
    pub seat: PlayerId,
    /// It plays (it is not catching up from a snapshot).
    pub playing: bool,
    /// It hosts the room.
    pub hosts: bool,
    /// A commitment to its resume token
    /// ([`token_commitment`](crate::admission::token_commitment)).
    pub commitment: [u8; 16],
    /// How to reach it, as the host's application saw it; empty if not
    /// known or not shared.
    pub contact: Vec<u8>,
    /// The name its player gave (display only: anyone may give any name).
    pub name: String,
    /// Its player said it is ready to start.
    pub ready: bool,
}

/// How a [`ClientSession`] connects and behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// A hash of the game's build and content; the sequencer refuses a
    /// different one. Give every build its own: with the default (0) for
    /// all, builds whose inputs differ share a room, and each runs the
    /// others' inputs as neutral ([`Event::InputUndecodable`](crate::Event::InputUndecodable)).
    pub fingerprint: u64,
    /// The room to join.
    pub room: String,
    /// A display name.
    pub name: String,
    /// A join ticket, if the server requires one.
    pub ticket: Vec<u8>,
    /// Join as a spectator: receive every frame, send no input.
    pub spectator: bool,
    /// A token from an earlier Welcome, to take that seat back (the Hello
    /// carries proof of it, never the token).
    pub resume: Option<ResumeToken>,
    /// The largest datagram to send, seal included (what is inside is
    /// `max_datagram - SEALED_OVERHEAD`, sealed or not).
    pub max_datagram: usize,
    /// The largest encoded input the game may commit.
    pub max_input_len: usize,
    /// How many ticks beyond the input delay a client may commit ahead of
    /// the frames it has run.
    pub max_lead: u32,
    /// How many frames past the next one are held when they arrive out of
    /// order or during catch-up.
    pub window: u32,
    /// Most committed inputs kept until the sequencer acknowledges them.
    /// Under `Deadline` frames keep coming while our uplink may be failing,
    /// so beyond this the oldest are dropped (they could only run late).
    pub max_unacked: usize,
    /// How often the Hello is repeated until answered.
    pub hello_interval: Duration,
    /// How long after the last datagram news not yet answered (a frame we
    /// lack, a pause asked for, a goodbye) goes again. Also how long after
    /// its last copy an input with copies left makes a datagram go, and
    /// how long past the round trip the sequencer may take to acknowledge
    /// an input before it is resent (both at least a tick).
    pub resend_interval: Duration,
    /// How often an idle connection is sent a datagram anyway.
    /// Also how long an unacknowledged full checkpoint, and a question
    /// about the hash chain left unanswered, wait before they go again.
    pub keepalive_interval: Duration,
    /// Silence after which [`Event::Interrupted`] is raised.
    pub interrupt_after: Duration,
    /// Silence after which the connection is given up.
    pub timeout: Duration,
    /// How often round-trip time is measured.
    pub ping_interval: Duration,
    /// Checksums held.
    pub checksum_window: usize,
    /// A key for sealed datagrams: 32 bytes from a CSPRNG, new for every
    /// connection. With it the Hello offers a public key, and once a
    /// server answers with its own, every datagram after the handshake is
    /// authenticated and encrypted (see [`secure`](crate::secure)); check
    /// [`ClientSession::sealed`] if you must not play without. `None`:
    /// plain datagrams (LAN, WebSocket, tests).
    ///
    /// Sealing is the relay's job (host mode and the mesh do not seal), not the
    /// [`Sequencer`](crate::sequenced::Sequencer)'s: a client with a secret
    /// never gets into a room served by a bare `Sequencer`, since it takes
    /// no plain `Welcome` once it offered a key (anyone can forge one).
    /// Each refused datagram counts in
    /// [`ClientStats::datagrams_rejected`](crate::sequenced::ClientStats)
    /// and the session ends with [`Event::Closed`](crate::Event) after
    /// `timeout`. Leave it `None` for a bare `Sequencer`.
    pub secret: Option<[u8; 32]>,
    /// Limits on snapshots received (joining a game under way) and sent
    /// (for someone else joining).
    pub snapshot: SnapshotLimits,
    /// Frames kept after they ran, at most (and the inputs sent whose tick
    /// has not run yet): what a player taking over as host needs to serve
    /// the players behind it (host mode). 0 keeps none.
    pub keep_frames: u32,
    /// How the input delay this player wants is judged (see
    /// [`DelayTracker`](crate::DelayTracker)): in a room whose delay
    /// adapts, every datagram says it. `None` says nothing, and the room
    /// goes by the other players. The room's own bounds apply.
    pub adaptive: Option<AdaptiveDelay>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            fingerprint: 0,
            room: String::new(),
            name: String::new(),
            ticket: Vec::new(),
            spectator: false,
            resume: None,
            max_datagram: 1200,
            max_input_len: 256,
            max_lead: 8,
            window: 4096,
            max_unacked: 256,
            hello_interval: Duration::from_millis(250),
            resend_interval: Duration::from_millis(40),
            keepalive_interval: Duration::from_millis(250),
            interrupt_after: Duration::from_secs(1),
            timeout: Duration::from_secs(15),
            ping_interval: Duration::from_secs(1),
            checksum_window: 512,
            secret: None,
            snapshot: SnapshotLimits::default(),
            keep_frames: 0,
            adaptive: Some(AdaptiveDelay::default()),
        }
    }
}

impl ClientConfig {
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
        bad(self.room.len() > wire::MAX_ROOM, "room name over 64 bytes")?;
        bad(self.name.len() > wire::MAX_NAME, "name over 32 bytes")?;
        bad(
            self.ticket.len() > wire::MAX_TICKET,
            "ticket over 512 bytes",
        )?;
        limits::input_len(self.max_input_len)?;
        bad(
            self.max_input_len + 128 + secure::SEALED_OVERHEAD > self.max_datagram,
            "max_datagram must leave room for a maximum-size input",
        )?;
        limits::lead(self.max_lead)?;
        bad(self.window < 16, "window must hold at least 16 frames")?;
        bad(self.max_unacked < 16, "max_unacked must be at least 16")?;
        bad(
            self.hello_interval.is_zero(),
            "hello_interval must be positive",
        )?;
        bad(self.timeout.is_zero(), "timeout must be positive")?;
        self.adaptive
            .as_ref()
            .map_or(Ok(()), AdaptiveDelay::validate)
    }
}

/// Counters and figures for a client.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ClientStats {
    /// The next frame to run.
    pub next_tick: Tick,
    /// The tick the next input will be stamped for.
    pub next_commit: Tick,
    /// The sequencer's open tick, as last told.
    pub server_open: Tick,
    /// How early (+) or late (-) our latest input reached the sequencer.
    pub slack: i32,
    /// The lead our inputs are stamped at, ticks past the next frame: the
    /// room's delay, or in a `Deadline` room our own (see
    /// [`ClientSession::input_due`]).
    pub lead: u32,
    /// Times our own lead fell because inputs arrived with ticks to
    /// spare (`Deadline`).
    pub lead_cuts: u64,
    /// Frames handed to the game.
    pub frames: u64,
    /// Times the picture stopped: no frame for two tick periods. (Steady
    /// latency beyond the input delay is not a stall: frames still come
    /// every tick.)
    pub stalls: u64,
    /// Time spent stalled.
    pub stalled_for: Duration,
    /// Commits refused.
    pub commits_refused: u64,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Datagrams rejected.
    pub datagrams_rejected: u64,
    /// Inputs in the room's frames that did not decode as the game's input
    /// type, run as the neutral input (see [`Event::InputUndecodable`](crate::Event::InputUndecodable)).
    pub inputs_undecodable: u64,
    /// Frames held ahead of the next one.
    pub buffered_frames: usize,
    /// Inputs sent but not acknowledged.
    pub unacked_inputs: usize,
    /// Inputs dropped unacknowledged because `max_unacked` was reached.
    pub inputs_dropped: u64,
    /// Smoothed round-trip time to the sequencer.
    pub rtt: Option<Duration>,
    /// The round trip's jitter (its mean deviation), once measured.
    pub rtt_jitter: Option<Duration>,
    /// Loss each way and bytes per second each way ("up" is to the
    /// sequencer).
    pub traffic: Traffic,
    /// Frames run per second, over the last second: the tick rate
    /// achieved.
    pub tick_rate: Option<f64>,
    /// How many tick periods before it was due (the commit of our input
    /// for it plus the delay) each frame arrived, smoothed; negative when
    /// frames come late. A seated player's figure (`slack` is the
    /// sequencer's view of our inputs).
    pub input_slack: Option<f64>,
    /// Snapshot chunks refused (bad checksum, inconsistent, over the cap).
    pub snapshot_errors: u64,
    /// Our inputs whose frame ran, timed from commit to run.
    pub inputs_timed: u64,
    /// The time from committing each of those inputs to running the frame
    /// of its tick, summed (see
    /// [`mean_input_latency`](Self::mean_input_latency)).
    pub input_latency_sum: Duration,
    /// The input delay in force, in ticks (0 until the sequencer's
    /// Welcome; once the session has left or closed, or while it
    /// reconnects, the last one in force).
    pub delay: u32,
    /// The input delay this player wants (with
    /// [`ClientConfig::adaptive`]).
    pub delay_wanted: Option<u32>,
    /// Frames that came late: later after our input for them was
    /// committed than the input delay (see
    /// [`DelayTracker`](crate::DelayTracker)).
    pub late_frames: u64,
}

impl ClientStats {
    /// On average, how long after the game committed an input the frame of
    /// its tick ran: the delay the player feels (input delay, the trip to
    /// the sequencer and back, and stalls).
    pub fn mean_input_latency(&self) -> Option<Duration> {
        let n = u32::try_from(self.inputs_timed).ok().filter(|n| *n > 0)?;
        Some(self.input_latency_sum / n)
    }

    /// Stalls per frame run (0.005: one stall in 200 frames).
    pub fn stall_rate(&self) -> f64 {
        if self.frames == 0 {
            0.0
        } else {
            self.stalls as f64 / self.frames as f64
        }
    }
}
