//! How play feels under a network: a sequenced `WaitForAll` room on the
//! seeded simulated network (virtual time), its players running the
//! classic lockstep loop on a steady clock.
//!
//! Each player's loop, every tick period: run the next frame if it is
//! there, then commit the input for the tick `delay` ahead; if it is not
//! there, the tick *stalls* (the picture waits) and the loop looks again a
//! quarter tick later, catching up at most two ticks per look afterwards.
//! That is the loop a game runs, and the one GGRS's lockstep mode runs.
//!
//! Figures per run: the share of ticks that stalled, the mean time from
//! committing an input to running its tick, ticks run per second, and the
//! delay in force at the end. Every player's stream is hashed, and a run
//! whose streams differ is reported as such.
//!
//! With [`Setup::runner`], each player is instead a
//! [`Runner`](lockstep_core::runner::Runner) updated every quarter tick,
//! which paces and commits by itself: what a game built on the library
//! runs. Its stalls are the session's (no frame for two tick periods,
//! [`ClientStats::stalls`](lockstep_core::sequenced::ClientStats::stalls)),
//! which every run also reports for the classic loop.

use lockstep_core::runner::{Runner, RunnerConfig};
use lockstep_core::sequenced::{ClientConfig, ClientSession, Policy, Sequencer, SequencerConfig};
use lockstep_core::sim::{LinkConditions, Sim, SimNetwork, StarNode};
use lockstep_core::{
    AdaptiveDelay, Endpoint, Frame, Game, Instant, PeerId, StreamHash, SystemEvent, Tick, Transmit,
};
use std::time::Duration;

/// The network between each player and the sequencer (both directions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Network {
    /// Round-trip time, split evenly between the two directions.
    pub rtt: Duration,
    /// Each datagram's one-way delay varies uniformly by up to this much
    /// either way.
    pub jitter: Duration,
    /// Probability a datagram is lost, each direction.
    pub loss: f64,
}

impl Network {
    /// The simulated link for one direction.
    pub fn link(&self) -> LinkConditions {
        LinkConditions {
            latency: self.rtt / 2,
            jitter: self.jitter,
            loss: self.loss,
            ..LinkConditions::default()
        }
    }
}

/// A change of network at a moment of the match.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    /// When, from the start.
    pub at: Duration,
    /// The network from then on.
    pub network: Network,
}

/// Input delay: fixed, or adapting from a starting value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delay {
    /// Always this many ticks.
    Fixed(u32),
    /// Adaptive with the default settings, starting here.
    Adaptive(u32),
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Feel {
    /// Stalled ticks over ticks run, over all players.
    pub stall_rate: f64,
    /// Mean time from commit to running the tick, over all players.
    pub latency: Duration,
    /// Ticks run per second of match, per player.
    pub ticks_per_sec: f64,
    /// The delay in force at the end.
    pub final_delay: u32,
    /// Every player's stream hashed equal over the ticks all ran.
    pub streams_equal: bool,
    /// (tick, delay) for every `DelayChanged` in the stream.
    pub changes: Vec<(Tick, u32)>,
    /// Per tick-period slot: when the first player ran each tick, from the
    /// start (for following a change over time).
    pub ran_at: Vec<Duration>,
    /// The stalls, as (when, tick) of each stalled look.
    pub stalls_at: Vec<Duration>,
    /// Bytes each player received per tick run, on average (the
    /// sequencer's datagrams to it), counted after the warm-up.
    pub down_per_tick: f64,
    /// Bytes each player sent per tick run, on average.
    pub up_per_tick: f64,
    /// The sessions' own stalls (no frame for two tick periods) over ticks
    /// run, over all players: the one stall figure both loops share.
    pub session_stall_rate: f64,
}

/// The game a runner plays here: the stream hashed, as the classic loop
/// hashes it, with what the loop's player records.
#[derive(Debug, Clone, Default)]
struct Stream {
    hash: StreamHash,
    hashes: Vec<u64>,
    ran: u64,
    input: u16,
    seed: u64,
    changes: Vec<(Tick, u32)>,
}

impl Game for Stream {
    type Input = u16;

    fn step(&mut self, frame: &Frame<u16>) {
        self.hash.push(frame);
        if self.hashes.len() < 100_000 {
            self.hashes.push(self.hash.value());
        }
        for ev in &frame.events {
            if let SystemEvent::DelayChanged { delay } = ev {
                self.changes.push((frame.tick, *delay));
            }
        }
        self.ran += 1;
        // Held controls: a new value now and then, as the classic loop's.
        if (u64::from(frame.tick.get()) ^ self.seed).is_multiple_of(7) {
            self.input = self.input.wrapping_add(1);
        }
    }

    fn hash(&self) -> u64 {
        self.hash.value()
    }

    fn save(&self) -> Vec<u8> {
        Vec::new()
    }

    fn restore(_: &[u8]) -> Result<Self, String> {
        Err("no player here joins late".into())
    }
}

/// A node of a run: the sequencer, or a player's client, driven by the
/// classic loop or inside a runner.
#[allow(clippy::large_enum_variant)]
enum Node {
    Star(StarNode<u16>),
    Runner(Box<Runner<Stream, ClientSession<u16>>>),
}

impl Node {
    fn client(&self) -> Option<&ClientSession<u16>> {
        match self {
            Self::Star(n) => n.client(),
            Self::Runner(r) => Some(r.session()),
        }
    }
}

impl Endpoint for Node {
    type Error = String;
    fn handle_datagram(&mut self, from: PeerId, d: &[u8], now: Instant) -> Result<(), String> {
        match self {
            Self::Star(n) => n.handle_datagram(from, d, now),
            Self::Runner(r) => r.handle_datagram(from, d, now).map_err(|e| e.to_string()),
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        match self {
            Self::Star(n) => n.handle_timeout(now),
            Self::Runner(r) => Endpoint::handle_timeout(r.as_mut(), now),
        }
    }
    fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        match self {
            Self::Star(n) => n.poll_transmit(buf),
            Self::Runner(r) => r.poll_transmit(buf),
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Self::Star(n) => n.poll_timeout(),
            Self::Runner(r) => r.poll_timeout(),
        }
    }
}

/// The counts at the end of the warm-up: each player's, and each
/// client's inputs timed, their latency summed, and its bytes received
/// and sent.
type Warmup = (Vec<Player>, Vec<(u64, Duration, u64, u64, u64)>);

/// A player's game loop and what it saw.
struct Player {
    due: Option<Instant>,
    hash: StreamHash,
    /// Hash after each of the first ticks (for comparing players).
    hashes: Vec<u64>,
    ran: u64,
    stalled: u64,
    /// The tick already counted as stalled.
    stalled_tick: Option<Tick>,
    input: u16,
    changes: Vec<(Tick, u32)>,
    ran_at: Vec<Duration>,
    stalls_at: Vec<Duration>,
}

impl Player {
    /// Its counts so far, to subtract the warm-up's.
    fn counts(&self) -> Self {
        Self {
            ran: self.ran,
            stalled: self.stalled,
            ..Self::new()
        }
    }

    fn new() -> Self {
        Self {
            due: None,
            hash: StreamHash::new(),
            hashes: Vec::new(),
            ran: 0,
            stalled: 0,
            stalled_tick: None,
            input: 0,
            changes: Vec::new(),
            ran_at: Vec::new(),
            stalls_at: Vec::new(),
        }
    }

    /// One look of the loop at `now`.
    fn look(&mut self, c: &mut ClientSession<u16>, now: Instant, period: Duration, seed: u64) {
        if !c.connected() || c.seat().is_none() {
            return;
        }
        let due = *self.due.get_or_insert(now);
        let mut ran_now = 0;
        let mut due_at = due;
        while due_at <= now && ran_now < 2 {
            let Some(frame) = c.advance() else {
                // The tick is due and its frame is not here: the picture
                // waits.
                let waiting = c.stats().next_tick;
                if self.stalled_tick != Some(waiting) {
                    self.stalled_tick = Some(waiting);
                    self.stalled += 1;
                    self.stalls_at.push(now - Instant::ZERO);
                }
                break;
            };
            self.hash.push(&frame);
            if self.hashes.len() < 100_000 {
                self.hashes.push(self.hash.value());
            }
            for ev in &frame.events {
                if let SystemEvent::DelayChanged { delay } = ev {
                    self.changes.push((frame.tick, *delay));
                }
            }
            self.ran += 1;
            self.ran_at.push(now - Instant::ZERO);
            // Held controls: a new value now and then.
            self.input = if (frame.tick.get() as u64 ^ seed).is_multiple_of(7) {
                self.input.wrapping_add(1)
            } else {
                self.input
            };
            if c.input_due() {
                let _ = c.commit_local(self.input);
            }
            ran_now += 1;
            due_at += period;
        }
        // After a stall the clock does not owe more than two ticks.
        self.due = Some(if due_at + period * 2 < now {
            Instant::from_duration((now - Instant::ZERO).saturating_sub(period * 2))
        } else {
            due_at
        });
    }
}

/// A run: who plays, how fast, over what, for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    /// Players in the room.
    pub players: u32,
    /// Ticks per second.
    pub tick_rate: u32,
    /// The network at the start.
    pub network: Network,
    /// Changes of network during the match.
    pub script: Vec<Change>,
    /// The input delay.
    pub delay: Delay,
    /// Seconds of match counted, after the warm-up.
    pub seconds: u32,
    /// Seconds played first and not counted (joining, and an adaptive
    /// delay finding its level).
    pub warmup: u32,
    /// Seeds the network.
    pub seed: u64,
    /// Each player a `Runner` instead of the classic loop.
    pub runner: bool,
}

/// Runs `setup` on the simulated network (no real time passes).
pub fn run(setup: &Setup) -> Feel {
    let Setup {
        players,
        tick_rate,
        network,
        ref script,
        delay,
        seconds,
        warmup,
        seed,
        runner,
    } = *setup;
    let period = Duration::from_secs(1) / tick_rate;
    let mut sim = Sim::new(SimNetwork::new(seed, network.link()));
    let (start, adaptive) = match delay {
        Delay::Fixed(d) => (d, None),
        Delay::Adaptive(d) => (d, Some(AdaptiveDelay::default())),
    };
    let config = SequencerConfig {
        policy: Policy::WaitForAll {
            abandon_after: Duration::from_secs(30),
        },
        tick_rate,
        delay: start,
        adaptive,
        max_seats: u16::try_from(players).unwrap_or(u16::MAX),
        max_lead: 16,
        ..SequencerConfig::default()
    };
    let server = Sequencer::<u16>::new(config, Instant::ZERO).expect("a valid room");
    sim.add(PeerId(0), Node::Star(StarNode::Server(Box::new(server))));
    for i in 1..=players {
        let c = ClientSession::new(
            ClientConfig {
                max_lead: 16,
                ..ClientConfig::default()
            },
            PeerId(0),
            Instant::ZERO,
        )
        .expect("a valid client");
        let node = if runner {
            let game = Stream {
                seed,
                ..Stream::default()
            };
            let r = Runner::new(c, game, RunnerConfig::default()).expect("a valid runner");
            Node::Runner(Box::new(r))
        } else {
            Node::Star(StarNode::Client(Box::new(c)))
        };
        sim.add(PeerId(i), node);
    }
    let mut games: Vec<Player> = (0..=players).map(|_| Player::new()).collect();
    let look = period / 4;
    let counted = Instant::ZERO + Duration::from_secs(u64::from(warmup));
    let end = counted + Duration::from_secs(u64::from(seconds));
    let mut next_change = 0;
    let mut at_warmup: Option<Warmup> = None;
    loop {
        let until = script
            .get(next_change)
            .map_or(end, |c| (Instant::ZERO + c.at).min(end));
        let until = match at_warmup {
            None if counted < until => counted,
            _ => until,
        };
        sim.run(
            until,
            look,
            |id, n, now| {
                let g = &mut games[id.0 as usize];
                match n {
                    Node::Star(StarNode::Client(c)) => g.look(c, now, period, seed),
                    Node::Runner(r) => {
                        let _ = r.update(now, |game| game.input);
                        g.ran = r.game().ran;
                    }
                    Node::Star(StarNode::Server(_)) => {}
                }
            },
            |_| false,
        );
        if at_warmup.is_none() && sim.now() >= counted {
            let timed = sim
                .endpoints()
                .filter_map(|(_, n)| n.client().map(|c| c.stats()))
                .map(|s| {
                    (
                        s.inputs_timed,
                        s.input_latency_sum,
                        s.bytes_received,
                        s.bytes_sent,
                        s.stalls,
                    )
                })
                .collect();
            at_warmup = Some((games.iter().map(Player::counts).collect(), timed));
            continue;
        }
        match script.get(next_change) {
            Some(c) if Instant::ZERO + c.at < end => {
                for i in 1..=players {
                    sim.net
                        .set_link_both(PeerId(0), PeerId(i), c.network.link());
                }
                next_change += 1;
            }
            _ => break,
        }
    }
    let clients: Vec<_> = sim
        .endpoints()
        .filter_map(|(_, n)| n.client().map(|c| c.stats()))
        .collect();
    let (before, timed_before) = at_warmup.unwrap_or_default();
    let g = &games[1..];
    let ran: u64 =
        g.iter().map(|p| p.ran).sum::<u64>() - before.iter().skip(1).map(|p| p.ran).sum::<u64>();
    let stalled: u64 = g.iter().map(|p| p.stalled).sum::<u64>()
        - before.iter().skip(1).map(|p| p.stalled).sum::<u64>();
    let timed: u64 = clients.iter().map(|s| s.inputs_timed).sum::<u64>()
        - timed_before.iter().map(|t| t.0).sum::<u64>();
    let lat: Duration = clients
        .iter()
        .map(|s| s.input_latency_sum)
        .sum::<Duration>()
        - timed_before.iter().map(|t| t.1).sum::<Duration>();
    let down: u64 = clients.iter().map(|s| s.bytes_received).sum::<u64>()
        - timed_before.iter().map(|t| t.2).sum::<u64>();
    let up: u64 = clients.iter().map(|s| s.bytes_sent).sum::<u64>()
        - timed_before.iter().map(|t| t.3).sum::<u64>();
    let session_stalls: u64 = clients.iter().map(|s| s.stalls).sum::<u64>()
        - timed_before.iter().map(|t| t.4).sum::<u64>();
    let per_tick = |b: u64| if ran == 0 { 0.0 } else { b as f64 / ran as f64 };
    // The streams run: the classic loop's players', or the runners' games'.
    let runners: Vec<&Stream> = sim
        .endpoints()
        .filter_map(|(_, n)| match n {
            Node::Runner(r) => Some(r.game()),
            Node::Star(_) => None,
        })
        .collect();
    let streams: Vec<&[u64]> = if runner {
        runners.iter().map(|r| r.hashes.as_slice()).collect()
    } else {
        g.iter().map(|p| p.hashes.as_slice()).collect()
    };
    let common = streams.iter().map(|h| h.len()).min().unwrap_or(0);
    let streams_equal = common > 0
        && streams
            .iter()
            .all(|h| h[common - 1] == streams[0][common - 1]);
    let changes = match runners.first() {
        Some(r) => r.changes.clone(),
        None => g[0].changes.clone(),
    };
    let final_delay = clients.first().map_or(0, |s| s.delay);
    let rate = |n: u64| if ran == 0 { 1.0 } else { n as f64 / ran as f64 };
    Feel {
        stall_rate: if runner {
            rate(session_stalls)
        } else {
            rate(stalled)
        },
        session_stall_rate: rate(session_stalls),
        latency: if timed == 0 {
            Duration::ZERO
        } else {
            lat / u32::try_from(timed).unwrap_or(u32::MAX)
        },
        ticks_per_sec: ran as f64 / f64::from(players) / f64::from(seconds),
        final_delay,
        streams_equal,
        changes,
        ran_at: g[0].ran_at.clone(),
        stalls_at: g.iter().flat_map(|p| p.stalls_at.iter().copied()).collect(),
        down_per_tick: per_tick(down),
        up_per_tick: per_tick(up),
    }
}
