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
//! Once it also knows the first divergent tick, it prints its desync report
//! (`Report::from_match`). At tick 1,000 every player's state must be
//! equal; the process exits non-zero otherwise.
//!
//! ```text
//! cargo run -p lockstep-core --example mesh_resync -- [players 3..=5] [seed]
//! ```

use lockstep_core::desync::{FieldDiff, FirstDifference, Report};
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
/// States and frames kept after the ticks run: enough to find ours at the
/// tick of a state handed over, and the frames up to the first divergent
/// tick when its search ends (which may be well after the state arrived).
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
    /// Recent frames run, for the report.
    frames: VecDeque<Frame<u16>>,
    /// Between `Resyncing` and the state handed over.
    resyncing: bool,
    /// What the report of the current desync needs, as it comes.
    report: Pending,
}

/// A desync report in the making. The searches for the first divergent
/// tick (one per peer we differ from) run beside the resync and may end
/// before or after the state arrives, so the report is written once both
/// are in.
#[derive(Default)]
struct Pending {
    /// Searches about checkpoints up to this tick belong to an earlier
    /// desync (the tick of the last state taken): ignored.
    after: Option<Tick>,
    /// The earliest checkpoint found different.
    checkpoint: Option<Tick>,
    /// Searches begun and not ended.
    searching: u32,
    /// The first divergent tick, from the first search that found it.
    first: Option<FirstDifference>,
    /// The fields compared with the majority's state, and its tick.
    fields: Option<(Tick, Vec<FieldDiff>)>,
}

impl Pending {
    fn current(&self, checkpoint: Tick) -> bool {
        self.after.is_none_or(|a| checkpoint > a)
    }

    /// The report, once the fields are in and a search found the tick (or
    /// every search ended without one).
    fn take(&mut self, who: PeerId, frames: &VecDeque<Frame<u16>>) -> Option<Report> {
        let (fields_tick, _) = self.fields.as_ref()?;
        if self.first.is_none() && self.searching > 0 {
            return None;
        }
        let fields_tick = *fields_tick;
        let checkpoint = self.checkpoint.unwrap_or(fields_tick);
        let (_, fields) = self.fields.take()?;
        let first = self.first.take();
        let upto = first.map_or(checkpoint, |f| f.tick);
        let frames: Vec<&Frame<u16>> = frames.iter().filter(|f| f.tick <= upto).collect();
        let last_few = frames.len().saturating_sub(8);
        *self = Self {
            after: Some(fields_tick),
            ..Self::default()
        };
        Some(Report::from_match(
            &format!("{who}, against the majority"),
            "mesh_resync example",
            checkpoint,
            first,
            fields_tick,
            fields,
            frames[last_few..].iter().copied(),
        ))
    }
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
        if self.frames.len() == KEPT {
            self.frames.pop_front();
        }
        self.frames.push_back(frame.clone());
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
    let players: u32 = match args.next().map(|s| s.parse()) {
        None => 3,
        Some(Ok(n @ 3..=5)) => n,
        Some(_) => {
            eprintln!("players: 3, 4 or 5 (a state needs a majority to be copied)");
            return ExitCode::FAILURE;
        }
    };
    let seed: u64 = match args.next().map(|s| s.parse()) {
        None => 1,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("seed: {e}");
            return ExitCode::FAILURE;
        }
    };
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
                    // Frames stopped at the snapshot's tick: our state is
                    // the one to compare.
                    let ours = game.at(snapshot.tick).unwrap_or_default();
                    println!(
                        "{id}: state after tick {}: ours {ours:016x}, the majority's {theirs:016x}; taking theirs",
                        snapshot.tick
                    );
                    let diff = FieldDiff {
                        path: "state".into(),
                        expected: Some(format!("{theirs:016x}")),
                        found: Some(format!("{ours:016x}")),
                    };
                    game.report.fields = Some((snapshot.tick, vec![diff]));
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
                        if game.report.current(tick) {
                            let p = &mut game.report;
                            p.checkpoint = Some(p.checkpoint.map_or(tick, |c| c.min(tick)));
                            p.searching += 1;
                        }
                    }
                    Event::DesyncLocated {
                        peer,
                        checkpoint,
                        first,
                    } => {
                        if let Some(f) = first {
                            println!(
                                "{id}: parted from {peer} after tick {} (hash {:016x}, theirs {:016x})",
                                f.tick, f.local, f.remote
                            );
                        }
                        if game.report.current(checkpoint) {
                            let p = &mut game.report;
                            p.searching = p.searching.saturating_sub(1);
                            p.first = p.first.or(first);
                        }
                    }
                    Event::DesyncEnded { peer, from } => {
                        println!("{id}: agrees with {peer} again from tick {from}");
                    }
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
            if let Some(report) = game.report.take(id, &game.frames) {
                println!("{id}: desync report\n{}", report.render());
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
