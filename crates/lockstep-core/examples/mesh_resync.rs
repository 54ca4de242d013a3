//! A mesh healing a player whose game state diverged, over the simulated
//! network.
//!
//! Three players (or up to five) play a tiny deterministic "game" at 30 Hz
//! with `MeshConfig::resync` on, reporting a state hash every tick. At tick
//! 200 one player's game changes its own state (the bug a desync is). The
//! next checkpoints differ (`Desync`), the search names tick 200
//! (`DesyncLocated`), the diverged player finds that the others agree with
//! each other and not with it (`Resyncing`), one of them hands its state
//! over (`SnapshotRequested` -> `provide_snapshot`), and the diverged player
//! compares it with its own and takes it (`Snapshot` -> `take_snapshot`).
//! At tick 1,000 every player's state must be equal; the process exits
//! non-zero otherwise.
//!
//! ```text
//! cargo run -p lockstep-core --example mesh_resync -- [players] [seed]
//! ```

use lockstep_core::sim::{LinkConditions, Outcome, Sim, SimNetwork, SimRng};
use lockstep_core::{
    Event, Frame, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, Tick,
};
use std::collections::{BTreeMap, VecDeque};
use std::process::ExitCode;
use std::time::Duration;

const BROKEN: PeerId = PeerId(1);
const BREAK_AT: u32 = 200;
const END: u32 = 1_000;
/// States kept after the ticks run: enough to find ours at the tick of a
/// state handed over (a few ticks back).
const KEPT: usize = 64;

#[derive(Default)]
struct Game {
    state: u64,
    /// This player's game has the bug: it changes its state at `BREAK_AT`.
    buggy: bool,
    /// Recent states, after the ticks run.
    recent: VecDeque<(Tick, u64)>,
    /// The state at `END`, once reached.
    at_end: Option<u64>,
    /// Between `Resyncing` and the state handed over.
    resyncing: bool,
}

impl Game {
    fn step(&mut self, frame: &Frame<u16>) {
        for (player, input) in frame.players() {
            self.state = self
                .state
                .rotate_left(5)
                .wrapping_add(u64::from(*input) * (u64::from(player.0) + 1));
        }
        if self.buggy && frame.tick.get() == BREAK_AT {
            self.state ^= 0x1000;
        }
        if self.recent.len() == KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back((frame.tick, self.state));
        if frame.tick.get() == END {
            self.at_end = Some(self.state);
        }
    }

    fn last(&self) -> Option<Tick> {
        self.recent.back().map(|(t, _)| *t)
    }

    fn at(&self, tick: Tick) -> Option<u64> {
        self.recent
            .iter()
            .find(|(t, _)| *t == tick)
            .map(|(_, s)| *s)
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let players: u32 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .clamp(3, 5);
    let seed: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let link = LinkConditions {
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(10),
        loss: 0.05,
        max_datagram: Some(1200),
        ..LinkConditions::default()
    };
    let mut roster = Roster::new();
    for i in 0..players {
        roster = roster.player(PeerId(i), PlayerId(i as u16));
    }
    let config = MeshConfig {
        delay: 3,
        resync: true,
        ..MeshConfig::default()
    };
    let mut sim = Sim::new(SimNetwork::new(seed, link));
    let mut games: BTreeMap<PeerId, Game> = BTreeMap::new();
    for i in 0..players {
        let id = PeerId(i);
        match MeshSession::<u16>::new(config.clone(), roster.clone(), id, Instant::ZERO) {
            Ok(s) => sim.add(id, s),
            Err(e) => {
                eprintln!("bad configuration: {e}");
                return ExitCode::FAILURE;
            }
        }
        let buggy = id == BROKEN;
        games.insert(
            id,
            Game {
                buggy,
                ..Game::default()
            },
        );
    }
    println!(
        "{players} players, 30 Hz, seed {seed}; {BROKEN}'s game changes its state at tick {BREAK_AT}"
    );
    let mut rng = SimRng::new(seed);

    let outcome = sim.run(
        Instant::from_millis(600_000),
        Duration::from_millis(33),
        |id, session, _| {
            let Some(game) = games.get_mut(&id) else {
                return;
            };
            let _ = session.commit_local(rng.next_u64() as u16 & 0x00ff);
            // A state handed over comes before any frame after its tick;
            // our own frames up to that tick have run, so our own state
            // there is at hand to compare.
            if let Some(snapshot) = session.take_snapshot() {
                let Some(theirs) = snapshot.bytes.get(..8).and_then(|b| b.try_into().ok())
                else {
                    eprintln!("{id}: a snapshot that is not a state of this game");
                    return;
                };
                let theirs = u64::from_le_bytes(theirs);
                if game.resyncing {
                    let ours = game.at(snapshot.tick).unwrap_or_default();
                    println!(
                        "{id}: state after tick {}: ours {ours:016x}, the majority's {theirs:016x}; taking theirs",
                        snapshot.tick
                    );
                    game.resyncing = false;
                }
                game.state = theirs;
                game.recent.clear();
                game.recent.push_back((snapshot.tick, theirs));
            }
            while let Some(frame) = session.advance() {
                game.step(&frame);
                // Every tick: the search can then name the exact tick.
                let _ = session.report_checksum(frame.tick, game.state);
            }
            while let Some(event) = session.poll_event() {
                match event {
                    Event::Desync { tick, peer, .. } => {
                        println!("{id}: checkpoint through tick {tick} differs from {peer}'s");
                    }
                    Event::DesyncLocated {
                        peer,
                        first: Some(first),
                        ..
                    } => println!(
                        "{id}: parted from {peer} after tick {} (hash {:016x}, theirs {:016x})",
                        first.tick, first.local, first.remote
                    ),
                    Event::Resyncing => {
                        println!("{id}: the others agree, and not with us: resyncing");
                        game.resyncing = true;
                    }
                    // Any state from `tick` on will do: hand over the current one.
                    Event::SnapshotRequested { tick } => {
                        if let Some(last) = game.last() {
                            println!("{id}: asked for its state (from tick {tick}), hands over tick {last}'s");
                            let bytes = game.state.to_le_bytes().to_vec();
                            if let Err(e) = session.provide_snapshot(last, bytes) {
                                eprintln!("{id}: {e}");
                            }
                        }
                    }
                    Event::DivergedTooOften { resyncs } => {
                        println!("{id}: diverged again after {resyncs} resyncs; leaving");
                    }
                    _ => {}
                }
            }
        },
        |sim| sim.endpoints().all(|(_, s)| s.frame().get() > END),
    );
    if outcome != Outcome::Done {
        eprintln!("the players did not reach tick {END}: {outcome:?}");
    }
    println!(
        "{:.1} s of virtual time",
        sim.now().as_millis() as f64 / 1e3
    );
    let mut ends = Vec::new();
    for (id, game) in &games {
        println!("{id}: state at tick {END}: {:016x?}", game.at_end);
        ends.push(game.at_end);
    }
    let agree = ends.iter().all(|e| e.is_some() && *e == ends[0]);
    println!("{}", if agree { "all equal" } else { "MISMATCH" });
    if agree {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
