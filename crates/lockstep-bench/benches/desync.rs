//! What desync detection costs on the wire and how soon it finds a
//! divergence, on the seeded simulated network (virtual time: the figures
//! do not depend on the machine).
//!
//! - Bytes: the same 4-player match run twice, once with every tick's state
//!   hash reported and once without; the difference is what checkpoints,
//!   their acknowledgements and verdicts cost, per player per tick. The
//!   baseline is the simplest scheme that finds every divergence at once:
//!   a full 64-bit hash sent for every tick (one `Checkpoint` message per
//!   tick, encoded here in the same run).
//! - Latency: desyncs injected at random ticks into one machine's hashes;
//!   how many ticks the machine that finds it has run past the injected
//!   tick when it does, and whether the search then names the injected
//!   tick exactly.
//! - Healing: desyncs injected at random ticks into one machine's state
//!   itself, with healing on (a mesh with `resync`, a room with
//!   `snapshot_join`); how many ticks past the injected one the machine
//!   replaced its state, how long it waited for it, and whether every
//!   machine ended on the same state.

use lockstep_core::desync::FirstDifference;
use lockstep_core::sequenced::{ClientConfig, ClientSession, Sequencer, SequencerConfig};
use lockstep_core::sim::{LinkConditions, Sim, SimNetwork, StarNode as Node};
use lockstep_core::wire::{Checkpoint, DatagramWriter, Message};
use lockstep_core::{
    Event, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, StreamHash, Tick,
};
use std::collections::VecDeque;
use std::time::Duration;

const PLAYERS: u32 = 4;
const PERIOD: Duration = Duration::from_micros(33_333);
const SKEW: u64 = 0x5A5A_5A5A;

/// A desync injected into one machine at a tick: into the hashes it
/// reports, or (`state`) into its state itself, with healing on.
#[derive(Clone, Copy)]
struct Injection {
    peer: PeerId,
    at: Tick,
    state: bool,
}

/// What one machine's game saw. Its state is the hash of every frame run.
#[derive(Default)]
struct Game {
    hash: StreamHash,
    /// From this tick on, the hashes it reports are wrong.
    skew: Option<Tick>,
    /// At this tick its state changes.
    corrupt: Option<Tick>,
    /// Its state is replaced by a snapshot's from then on.
    restored: Option<u64>,
    /// Its states after the recent ticks, for a snapshot asked of it.
    recent: VecDeque<(Tick, u64)>,
    owed: Option<Tick>,
    /// Ticks run past the skew when a desync was first heard of, and where
    /// the search ended.
    found: Option<(u32, Option<Option<FirstDifference>>)>,
    /// When it heard it was being resynced; then ticks run past the
    /// injection when its state was replaced, and how long after.
    resyncing: Option<Instant>,
    healed: Option<(u32, Duration)>,
    last: Option<Tick>,
}

impl Game {
    fn state(&self) -> u64 {
        self.hash.value() ^ self.restored.unwrap_or(0)
    }

    fn run(&mut self, tick: Tick, frame: &lockstep_core::Frame<u16>) -> u64 {
        self.hash.push(frame);
        self.last = Some(tick);
        if self.corrupt == Some(tick) {
            self.corrupt = None;
            self.restored = Some(self.restored.unwrap_or(0) ^ SKEW);
        }
        let h = self.state();
        if self.recent.len() >= 128 {
            self.recent.pop_front();
        }
        self.recent.push_back((tick, h));
        if self.skew.is_some_and(|s| tick >= s) {
            h ^ SKEW
        } else {
            h
        }
    }

    /// Takes a snapshot's state, after `tick`.
    fn restore(&mut self, bytes: &[u8], injected: Tick, now: Instant) {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&bytes[..8]);
        // The hash of the frames run so far, turned into the donor's state.
        self.restored = Some(self.hash.value() ^ u64::from_le_bytes(raw));
        let ran = self.last.map_or(0, |l| l.since(injected));
        let waited = self.resyncing.map_or(Duration::ZERO, |t| now - t);
        self.healed = Some((ran, waited));
    }

    /// The state after `tick`, if it is one of the recent ones.
    fn state_after(&self, tick: Tick) -> Option<Vec<u8>> {
        let (_, h) = self.recent.iter().find(|(t, _)| *t == tick)?;
        Some(h.to_le_bytes().to_vec())
    }

    fn heard(&mut self, ev: &Event, injected: Tick, now: Instant) {
        let ran = self
            .last
            .map_or(0, |l| l.get().saturating_sub(injected.get()));
        match ev {
            Event::Desync { .. } if self.found.is_none() => self.found = Some((ran, None)),
            Event::DesyncLocated { first, .. } => {
                if let Some((_, located @ None)) = &mut self.found {
                    *located = Some(*first);
                }
            }
            Event::Resyncing => self.resyncing = Some(now),
            Event::SnapshotRequested { tick } => self.owed = Some(*tick),
            _ => {}
        }
    }

    /// The snapshot owed, once its tick has run (and it is still held).
    fn owed_state(&mut self) -> Option<(Tick, Vec<u8>)> {
        let t = self.owed?;
        let bytes = self.state_after(t)?;
        self.owed = None;
        Some((t, bytes))
    }
}

fn link(loss: f64) -> LinkConditions {
    LinkConditions {
        latency: Duration::from_millis(20),
        jitter: Duration::from_millis(5),
        loss,
        max_datagram: Some(1200),
        ..LinkConditions::default()
    }
}

/// A 4-player mesh for `ticks` ticks; `report` says whether games report
/// their hashes; `skew` injects a desync into one peer. Returns the bytes
/// sent per player per tick to one other player (and the same, for the
/// mesh, again) and each peer's game.
fn mesh(
    seed: u64,
    loss: f64,
    ticks: u32,
    report: bool,
    inject: Option<Injection>,
) -> ((f64, f64), Vec<Game>) {
    let mut roster = Roster::new();
    for i in 0..PLAYERS {
        roster = roster.player(PeerId(i), PlayerId(i as u16));
    }
    let config = MeshConfig {
        abandon_after: None,
        resync: inject.is_some_and(|i| i.state),
        ..MeshConfig::default()
    };
    let mut sim = Sim::new(SimNetwork::new(seed, link(loss)));
    for i in 0..PLAYERS {
        let s = MeshSession::<u16>::new(config.clone(), roster.clone(), PeerId(i), Instant::ZERO)
            .expect("a valid mesh");
        sim.add(PeerId(i), s);
    }
    let mut games = games(PLAYERS as usize, inject);
    let injected = inject.map_or(Tick::ZERO, |i| i.at);
    let until = Instant::ZERO + PERIOD * (ticks * 4);
    sim.run(
        until,
        PERIOD,
        |id, s, now| {
            let g = &mut games[id.0 as usize];
            if let Some(snap) = s.take_snapshot() {
                g.restore(&snap.bytes, injected, now);
            }
            let _ = s.commit_local((g.hash.frames() % 7) as u16);
            while let Some(f) = s.advance() {
                let h = g.run(f.tick, &f);
                if report {
                    let _ = s.report_checksum(f.tick, h);
                }
            }
            while let Some(ev) = s.poll_event() {
                g.heard(&ev, injected, now);
            }
            if let Some((t, bytes)) = g.owed_state() {
                let _ = s.provide_snapshot(t, bytes);
            }
        },
        |sim| sim.live().all(|(_, s)| s.frame().get() >= ticks),
    );
    let bytes: u64 = sim.endpoints().map(|(_, s)| s.stats().bytes_sent).sum();
    let link = bytes as f64 / f64::from(PLAYERS * (PLAYERS - 1)) / f64::from(ticks);
    ((link, link), games)
}

/// As [`mesh`], through a sequencer at peer 0: bytes per player per tick
/// from the client to the sequencer, and back.
fn star(
    seed: u64,
    loss: f64,
    ticks: u32,
    report: bool,
    inject: Option<Injection>,
) -> ((f64, f64), Vec<Game>) {
    let mut sim = Sim::new(SimNetwork::new(seed, link(loss)));
    let config = SequencerConfig {
        snapshot_join: inject.is_some_and(|i| i.state),
        ..SequencerConfig::default()
    };
    let server = Sequencer::<u16>::new(config, Instant::ZERO).expect("a valid room");
    sim.add(PeerId(0), Node::Server(Box::new(server)));
    for i in 1..=PLAYERS {
        let c = ClientSession::new(ClientConfig::default(), PeerId(0), Instant::ZERO)
            .expect("a valid client");
        sim.add(PeerId(i), Node::Client(Box::new(c)));
    }
    let mut games = games(PLAYERS as usize + 1, inject);
    let injected = inject.map_or(Tick::ZERO, |i| i.at);
    let until = Instant::ZERO + PERIOD * (ticks * 4);
    sim.run(
        until,
        PERIOD,
        |id, n, now| {
            let Node::Client(c) = n else { return };
            let g = &mut games[id.0 as usize];
            if let Some(snap) = c.take_snapshot() {
                g.restore(&snap.bytes, injected, now);
            }
            let _ = c.commit_local((g.hash.frames() % 7) as u16);
            while let Some(f) = c.advance() {
                let h = g.run(f.tick, &f);
                if report {
                    let _ = c.report_checksum(f.tick, h);
                }
            }
            while let Some(ev) = c.poll_event() {
                g.heard(&ev, injected, now);
            }
            if let Some((t, bytes)) = g.owed_state() {
                let _ = c.provide_snapshot(t, bytes);
            }
        },
        |sim| {
            sim.live().all(|(_, n)| match n {
                Node::Client(c) => c.stats().frames >= u64::from(ticks),
                Node::Server(_) => true,
            })
        },
    );
    let (mut up, mut down) = (0u64, 0u64);
    for (_, n) in sim.endpoints() {
        match n.client() {
            Some(_) => up += n.bytes_sent(),
            None => down += n.bytes_sent(),
        }
    }
    let per = |b: u64| b as f64 / f64::from(PLAYERS) / f64::from(ticks);
    ((per(up), per(down)), games)
}

/// `n` games, one of them with the desync injected.
fn games(n: usize, inject: Option<Injection>) -> Vec<Game> {
    let mut games: Vec<Game> = (0..n).map(|_| Game::default()).collect();
    if let Some(i) = inject {
        let g = &mut games[i.peer.0 as usize];
        if i.state {
            g.corrupt = Some(i.at);
        } else {
            g.skew = Some(i.at);
        }
    }
    games
}

/// The bytes a full 64-bit hash for every tick would add, per tick, on one
/// link one way: one full `Checkpoint` (with an acknowledgement) per tick.
fn every_tick_full() -> f64 {
    let mut buf = Vec::new();
    let mut w = DatagramWriter::new(&mut buf, Tick::new(1_000), 1200);
    let before = w.len();
    w.put(Message::Checkpoint(Checkpoint {
        tick: Tick::new(999),
        full: true,
        value: u64::MAX,
        ack: Some(Tick::new(998)),
    }));
    (w.len() - before) as f64
}

fn main() {
    const TICKS: u32 = 1_800;
    println!("desync detection, 4 players, 30 Hz, 20 ms +- 5 ms each way, {TICKS} ticks");
    println!();
    println!(
        "| topology | link, one way | loss | checks bytes / player / tick | full hash every tick | vs that |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    let naive = every_tick_full();
    for (name, is_mesh) in [("mesh", true), ("sequenced", false)] {
        for loss in [0.0, 0.1] {
            let run = if is_mesh { mesh } else { star };
            let (without, _) = run(1, loss, TICKS, false, None);
            let (with, _) = run(1, loss, TICKS, true, None);
            let ways: &[(&str, f64)] = if is_mesh {
                &[("to each other player", with.0 - without.0)]
            } else {
                &[
                    ("client to relay", with.0 - without.0),
                    ("relay to client", with.1 - without.1),
                ]
            };
            for (way, checks) in ways {
                println!(
                    "| {name} | {way} | {:.0}% | {checks:.2} | {naive:.2} | {:.3}x |",
                    loss * 100.0,
                    checks / naive
                );
            }
        }
    }
    println!();
    println!(
        "| topology | loss | injections | found by | ticks past injection: mean | max | search named the tick |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|");
    for (name, is_mesh) in [("mesh", true), ("sequenced", false)] {
        for loss in [0.0, 0.1] {
            let mut ran = Vec::new();
            let mut exact = 0usize;
            let mut total = 0usize;
            let n = 100u64;
            for k in 0..n {
                let at = Tick::new(100 + (k * 37 % 300) as u32);
                let skewed = if is_mesh {
                    PeerId((k % 4) as u32)
                } else {
                    PeerId(1 + (k % 4) as u32)
                };
                let run = if is_mesh { mesh } else { star };
                let inject = Injection {
                    peer: skewed,
                    at,
                    state: false,
                };
                let (_, games) = run(1_000 + k, loss, at.get() + 400, true, Some(inject));
                // In the mesh every peer compares with the skewed one; in the
                // star, the skewed client hears from the sequencer.
                for (i, g) in games.iter().enumerate() {
                    let finder = if is_mesh {
                        i as u32 != skewed.0
                    } else {
                        i as u32 == skewed.0
                    };
                    if !finder {
                        continue;
                    }
                    total += 1;
                    if let Some((t, located)) = g.found {
                        ran.push(t);
                        if located.flatten().is_some_and(|f| f.tick == at) {
                            exact += 1;
                        }
                    }
                }
            }
            let mean = ran.iter().map(|t| f64::from(*t)).sum::<f64>() / ran.len().max(1) as f64;
            let max = ran.iter().max().copied().unwrap_or(0);
            println!(
                "| {name} | {:.0}% | {n} | {} of {total} | {mean:.1} | {max} | {exact} of {total} |",
                loss * 100.0,
                ran.len(),
            );
        }
    }
    println!();
    println!(
        "| topology | loss | injections | healed | ticks past injection when replaced: mean | max | waited for the state, ms: mean | max | all equal at the end |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, is_mesh) in [("mesh", true), ("sequenced", false)] {
        for loss in [0.0, 0.1] {
            let n = 50u64;
            let (mut ticks, mut waits, mut equal) = (Vec::new(), Vec::new(), 0);
            for k in 0..n {
                let at = Tick::new(100 + (k * 37 % 300) as u32);
                let peer = if is_mesh {
                    PeerId((k % 4) as u32)
                } else {
                    PeerId(1 + (k % 4) as u32)
                };
                let run = if is_mesh { mesh } else { star };
                let inject = Injection {
                    peer,
                    at,
                    state: true,
                };
                let (_, games) = run(2_000 + k, loss, at.get() + 600, true, Some(inject));
                if let Some((t, w)) = games[peer.0 as usize].healed {
                    ticks.push(t);
                    waits.push(w.as_millis() as u32);
                }
                // Each client's state after the same tick, the last all ran.
                let players = if is_mesh { &games[..] } else { &games[1..] };
                let common = players.iter().filter_map(|g| g.last).min();
                let states: Vec<Option<u64>> = players
                    .iter()
                    .map(|g| {
                        let t = common?;
                        g.recent.iter().find(|(x, _)| *x == t).map(|(_, h)| *h)
                    })
                    .collect();
                if states.iter().all(|s| s.is_some() && *s == states[0]) {
                    equal += 1;
                }
            }
            let mean =
                |v: &[u32]| v.iter().map(|t| f64::from(*t)).sum::<f64>() / v.len().max(1) as f64;
            let max = |v: &[u32]| v.iter().max().copied().unwrap_or(0);
            println!(
                "| {name} | {:.0}% | {n} | {} | {:.1} | {} | {:.0} | {} | {equal} of {n} |",
                loss * 100.0,
                ticks.len(),
                mean(&ticks),
                max(&ticks),
                mean(&waits),
                max(&waits),
            );
        }
    }
}
