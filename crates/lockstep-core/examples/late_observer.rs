//! An observer joining a mesh match under way, over the simulated network.
//!
//! Three players play a tiny deterministic "game" at 30 Hz. At tick 1,500,
//! far past the frames the players keep for observers, a fourth peer starts
//! watching: every player adds it (`add_observer`), its own session joins
//! under way (`join_under_way`), the feeder's game hands over its state
//! (`SnapshotRequested` -> `provide_snapshot`), and the observer restores
//! it (`Snapshot` -> `take_snapshot`) and runs on. At tick 2,000 every
//! peer's state must be equal; the process exits non-zero otherwise.
//!
//! ```text
//! cargo run -p lockstep-core --example late_observer -- [seed]
//! ```

use lockstep_core::sim::{LinkConditions, Sim, SimNetwork, SimRng};
use lockstep_core::{
    Event, Frame, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, Tick,
};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

const PLAYERS: u32 = 3;
const JOIN_AT: u32 = 1_500;
const END: u32 = 2_000;
const OBSERVER: PeerId = PeerId(9);

/// A game whose whole state is one number, padded to the size of a real
/// one (20 KB) when saved.
#[derive(Default)]
struct Game {
    state: u64,
    /// The last tick run, or restored.
    last: Option<Tick>,
    /// The state at `END`, once reached.
    at_end: Option<u64>,
}

impl Game {
    fn step(&mut self, frame: &Frame<u16>) {
        for (player, input) in frame.players() {
            self.state = self
                .state
                .rotate_left(5)
                .wrapping_add(u64::from(*input) * (u64::from(player.0) + 1));
        }
        self.last = Some(frame.tick);
        if frame.tick.get() == END {
            self.at_end = Some(self.state);
        }
    }

    fn save(&self) -> Vec<u8> {
        let mut bytes = self.state.to_le_bytes().to_vec();
        bytes.resize(20_000, 0xAB);
        bytes
    }

    fn load(tick: Tick, bytes: &[u8]) -> Option<Self> {
        let state = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
        Some(Self {
            state,
            last: Some(tick),
            at_end: None,
        })
    }
}

fn main() -> ExitCode {
    let seed: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let link = LinkConditions {
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(10),
        loss: 0.05,
        max_datagram: Some(1200),
        ..LinkConditions::default()
    };
    let mut roster = Roster::new();
    for i in 0..PLAYERS {
        roster = roster.player(PeerId(i), PlayerId(i as u16));
    }
    let config = MeshConfig {
        delay: 3,
        observer_window: 300,
        ..MeshConfig::default()
    };
    let mut sim = Sim::new(SimNetwork::new(seed, link));
    let mut games: BTreeMap<PeerId, Game> = BTreeMap::new();
    for i in 0..PLAYERS {
        let id = PeerId(i);
        match MeshSession::<u16>::new(config.clone(), roster.clone(), id, Instant::ZERO) {
            Ok(s) => sim.add(id, s),
            Err(e) => {
                eprintln!("bad configuration: {e}");
                return ExitCode::FAILURE;
            }
        }
        games.insert(id, Game::default());
    }
    let mut rng = SimRng::new(seed);

    // One game-loop iteration, the same for players and the observer.
    let mut iteration = |id: PeerId,
                         session: &mut MeshSession<u16>,
                         games: &mut BTreeMap<PeerId, Game>| {
        // Observers commit nothing (the session refuses, harmlessly).
        let _ = session.commit_local(rng.next_u64() as u16 & 0x00ff);
        // A snapshot to restore comes before any frame after it.
        if let Some(snapshot) = session.take_snapshot() {
            match Game::load(snapshot.tick, &snapshot.bytes) {
                Some(game) => {
                    println!("{id}: restored the state after tick {}", snapshot.tick);
                    games.insert(id, game);
                }
                None => eprintln!("{id}: a snapshot that is not a state of this game"),
            }
        }
        let game = games.entry(id).or_default();
        while let Some(frame) = session.advance() {
            game.step(&frame);
        }
        while let Some(event) = session.poll_event() {
            match event {
                // Any state from `tick` on will do: hand over the current one.
                Event::SnapshotRequested { tick } => {
                    if let Some(last) = game.last {
                        println!(
                            "{id}: asked for its state (from tick {tick}), hands over tick {last}'s"
                        );
                        if let Err(e) = session.provide_snapshot(last, game.save()) {
                            eprintln!("{id}: {e}");
                        }
                    }
                }
                Event::Snapshot { tick } => println!("{id}: the state after tick {tick} arrived"),
                Event::Desync { tick, .. } => eprintln!("{id}: desync at tick {tick}"),
                _ => {}
            }
        }
    };

    let period = Duration::from_millis(33);
    let _ = sim.run(
        Instant::from_millis(600_000),
        period,
        |id, s, _| iteration(id, s, &mut games),
        |sim| sim.endpoints().all(|(_, s)| s.frame().get() >= JOIN_AT),
    );
    println!("the players are at tick {JOIN_AT}; {OBSERVER} starts watching");
    for i in 0..PLAYERS {
        if let Some(s) = sim.endpoint_mut(PeerId(i))
            && let Err(e) = s.add_observer(OBSERVER)
        {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    }
    let late = roster.clone().observer(OBSERVER);
    match MeshSession::join_under_way(config, late, OBSERVER, sim.now()) {
        Ok(s) => sim.add(OBSERVER, s),
        Err(e) => {
            eprintln!("bad configuration: {e}");
            return ExitCode::FAILURE;
        }
    }
    let _ = sim.run(
        Instant::from_millis(600_000),
        period,
        |id, s, _| iteration(id, s, &mut games),
        |sim| sim.endpoints().all(|(_, s)| s.frame().get() > END),
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
