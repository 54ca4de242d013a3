//! What `lockstep demo` is told: its flags, and how it fails.

use super::*;

/// A game of swarm between bots, through a relay, all on this machine.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Bot players (1 to 64).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) players: u16,
    /// Ticks every client must run.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) ticks: u32,
    /// Ticks per second (1 to 240).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=240))]
    pub(crate) tick_rate: u32,
    /// How the relay seals ticks.
    #[arg(long, value_enum, default_value_t = Policy::WaitForAll)]
    pub(crate) policy: Policy,
    /// How the bots connect.
    #[arg(long, value_enum, default_value_t = TransportKind::Mixed)]
    pub(crate) transport: TransportKind,
    /// Puts a `lockstep netsim` between the UDP bots and the relay,
    /// impairing both ways as this script says (with `--transport udp`),
    /// e.g. `"latency=80ms jitter=20ms loss=5%"`; see `lockstep netsim
    /// --help` for the script.
    #[arg(long, value_name = "SCRIPT")]
    pub(crate) netsim: Option<String>,
    /// Packet loss each way, in percent (0 to 95: at 100 nothing could
    /// ever finish).
    #[arg(long, default_value_t = 0.0, value_parser = percent)]
    pub(crate) loss: f64,
    /// Added one-way latency, in milliseconds (at most 10,000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub(crate) latency: u64,
    /// Latency varies by up to this much either way, in milliseconds (at
    /// most 10,000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub(crate) jitter: u64,
    /// Seeds the game and the bots.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Input delay in ticks: where the delay starts, kept within 1 to 16
    /// as it follows the network; with `--fixed-delay`, the delay for good
    /// (0 to 1024).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub(crate) delay: u32,
    /// Keep the input delay at `--delay` (by default a wait-for-all room's
    /// delay follows the network, from 1 to 16 ticks).
    #[arg(long)]
    pub(crate) fixed_delay: bool,
    /// Bots that join the match while it runs (0 to 8), spread over its
    /// middle: each gets the game's state from a snapshot, catches up and
    /// plays (before tick 90 it replays the match instead).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=8))]
    pub(crate) late_joiners: u16,
    /// Bots whose connection is cut in the middle of the match (0 to 8):
    /// each reconnects 1.5 s later on a new socket, takes its seat back with
    /// its resume token, is sent the frames it missed, and plays on.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=8))]
    pub(crate) drop_reconnect: u16,
    /// A swarm of this many creeps from the first wave on (16 to 4,000),
    /// instead of waves that grow: a bigger game for late joiners to
    /// receive and for every client to run.
    #[arg(long, value_parser = clap::value_parser!(u32).range(16..=4000))]
    pub(crate) creeps: Option<u32>,
    /// Records the match as bot0 runs it (with `--inject-desync`, the bot
    /// whose game breaks) into this replay file (relay topology);
    /// `lockstep replay verify FILE --seed N` checks it.
    #[arg(long, value_name = "FILE")]
    pub(crate) record: Option<std::path::PathBuf>,
    /// The relay records the match too, into this directory (as
    /// `lockstep relay --record DIR`); with `--server-sim` its own game's
    /// state hashes go in with the frames.
    #[arg(long, value_name = "DIR")]
    pub(crate) relay_record: Option<std::path::PathBuf>,
    /// The relay runs the game too: it hands late joiners its own state and
    /// is the checksum authority.
    #[arg(long)]
    pub(crate) server_sim: bool,
    /// No network: run swarm twice in this process on the bots' frames, one
    /// copy through a snapshot round trip every EVERY ticks (30 if not
    /// given), and report the first tick and field where the two differ.
    /// What finds non-determinism (iteration order, state a snapshot
    /// forgets) before any match is played. Uses --players, --ticks,
    /// --seed and --creeps.
    #[arg(long, value_name = "EVERY", num_args = 0..=1, default_missing_value = "30",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) self_check: Option<u32>,
    /// Breaks one bot on purpose: at tick TICK (or the first tick after it
    /// that its ship is in the game) the bot playing seat SEAT changes its
    /// own score, a field no other client changes. The relay's
    /// majority finds the divergence at the next checkpoint; the bot finds
    /// the first divergent tick, writes a desync report (read it with
    /// `lockstep desync show`), is resynced from another bot's state and
    /// plays on; the match must still end with equal hashes.
    #[arg(long, value_name = "SEAT@TICK", value_parser = seat_at_tick)]
    pub(crate) inject_desync: Option<(u16, u32)>,
    /// Who sequences: a relay (`relay`), or the first bot's own process
    /// (`host`: the bots talk plain UDP to it over loopback, and carry the
    /// match on under another bot if it goes).
    #[arg(long, value_enum, default_value_t = Topology::Relay)]
    pub(crate) topology: Topology,
    /// With `--topology host`: the hosting bot's process dies at this tick
    /// (session and socket gone, no goodbye); the others must take over
    /// and end on the same state.
    #[arg(long, value_name = "TICK", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) kill_host_at: Option<u32>,
    /// With `--topology relay`: the relay's room runs with failover on, and
    /// the relay's process dies at this tick (no goodbye); the bots carry
    /// the match on under one of them, directly between themselves over
    /// loopback UDP, and must end on the same state.
    #[arg(long, value_name = "TICK", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) kill_relay_at: Option<u32>,
}

/// Who sequences the demo's match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Topology {
    /// A relay on this machine.
    Relay,
    /// One of the bots.
    Host,
}

pub(super) fn seat_at_tick(s: &str) -> Result<(u16, u32), String> {
    let (seat, tick) = s
        .split_once('@')
        .ok_or_else(|| format!("{s:?} is not SEAT@TICK (say 1@200)"))?;
    let seat = seat
        .parse()
        .map_err(|_| format!("{seat:?} is not a seat number"))?;
    let tick = tick
        .parse()
        .map_err(|_| format!("{tick:?} is not a tick number"))?;
    Ok((seat, tick))
}

pub(super) fn percent(s: &str) -> Result<f64, String> {
    crate::netsim::percent_up_to(s, 95.0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TransportKind {
    Udp,
    Ws,
    Mixed,
}

/// What went wrong, for the exit message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    #[error("{0}")]
    Setup(String),
    #[error("the clients ended on different states")]
    Desync,
    #[error("the game did not finish in time")]
    Timeout,
    #[error("{0} was turned away: {1}")]
    Refused(String, String),
    #[error("{0} joined but was not playing when the match ended (give it more --ticks)")]
    NotCaughtUp(String),
    #[error("swarm is {0}")]
    NotDeterministic(Box<lockstep_core::desync::Divergence>),
    #[error("the desync injected into {0} was not {1}")]
    NotHealed(String, &'static str),
}
