//! Swarms on the seeded simulated network, through a sequencer and as a
//! mesh, one player's game broken on purpose (one field of its own ship
//! changed at a random tick): the majority finds it, the player's search
//! names the tick it was broken at, the fields that differ between its
//! state and the state it is resynced to name the field changed, and every
//! player ends on the same state.

use lockstep_core::Game as _;
use lockstep_core::desync::{FieldDiff, Fields};
use lockstep_core::sequenced::{ClientConfig, ClientSession, Sequencer, SequencerConfig};
use lockstep_core::sim::{LinkConditions, Outcome, Sim, SimNetwork, StarNode as Node};
use lockstep_core::{
    Event, Frame, Instant, MeshConfig, MeshSession, PeerId, PlayerId, PlayerInputs, Roster, Tick,
};
use lockstep_demo::{Bot, Game};
use proptest::prelude::*;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

const SERVER: PeerId = PeerId(0);
const PLAYERS: u32 = 4;

/// Which field of its own ship the broken client changes: counters the
/// game never resets (a position can heal by itself, a ship respawning
/// where every copy puts it, and then nothing is left to show).
#[derive(Debug, Clone, Copy)]
enum Field {
    Score,
    Deaths,
}

impl Field {
    fn path(self, seat: u16) -> String {
        let name = match self {
            Self::Score => "score",
            Self::Deaths => "deaths",
        };
        format!("ships[{seat}].{name}")
    }
}

/// One client's game and what it heard.
struct Player {
    game: Game,
    bot: Option<Bot>,
    /// Its states after the recent ticks.
    recent: VecDeque<Game>,
    /// The tick whose state was asked of it.
    owed: Option<Tick>,
    /// Break its own ship at this tick.
    inject: Option<(Tick, Field)>,
    located: Option<Option<Tick>>,
    resyncing: bool,
    /// The fields that differed when it was resynced.
    diff: Option<Vec<FieldDiff>>,
}

fn fields(g: &Game) -> Fields {
    let mut f = Fields::new();
    g.fields(&mut f);
    f
}

/// What the game loop below needs of a session, in either topology.
trait Session {
    fn take_snapshot(&mut self) -> Option<lockstep_core::snapshot::Snapshot>;
    fn seat(&self) -> Option<PlayerId>;
    fn commit(&mut self, input: PlayerInputs);
    fn advance(&mut self) -> Option<Frame<PlayerInputs>>;
    fn report(&mut self, tick: Tick, hash: u64);
    fn poll_event(&mut self) -> Option<Event>;
    fn provide(&mut self, tick: Tick, bytes: Vec<u8>);
}

/// The two sessions' own methods, as [`Session`].
macro_rules! session {
    ($t:ty) => {
        impl Session for $t {
            fn take_snapshot(&mut self) -> Option<lockstep_core::snapshot::Snapshot> {
                Self::take_snapshot(self)
            }
            fn seat(&self) -> Option<PlayerId> {
                Self::seat(self)
            }
            fn commit(&mut self, input: PlayerInputs) {
                let _ = self.commit_local(input);
            }
            fn advance(&mut self) -> Option<Frame<PlayerInputs>> {
                Self::advance(self)
            }
            fn report(&mut self, tick: Tick, hash: u64) {
                let _ = self.report_checksum(tick, hash);
            }
            fn poll_event(&mut self) -> Option<Event> {
                Self::poll_event(self)
            }
            fn provide(&mut self, tick: Tick, bytes: Vec<u8>) {
                let _ = self.provide_snapshot(tick, bytes);
            }
        }
    };
}
session!(ClientSession<PlayerInputs>);
session!(MeshSession<PlayerInputs>);

fn play(c: &mut dyn Session, p: &mut Player) {
    if let Some(s) = c.take_snapshot() {
        let theirs = Game::restore(&s.bytes).expect("a state that restores");
        if p.resyncing {
            let ours = p.recent.iter().find(|g| g.tick == s.tick.saturating_add(1));
            p.diff = Some(
                fields(&theirs).diff(&fields(ours.expect("our own state at the snapshot's tick"))),
            );
            p.resyncing = false;
        }
        p.game = theirs;
        p.recent.clear();
    }
    if p.bot.is_none() {
        p.bot = c.seat().map(|s| Bot::new(s, u64::from(s.0) + 1));
    }
    if let Some(bot) = &mut p.bot {
        let input = bot.input(&p.game);
        c.commit(input);
    }
    while let Some(f) = c.advance() {
        p.game.step(&f);
        if let (Some((at, field)), Some(seat)) = (p.inject, c.seat())
            && f.tick == at
            && let Some(ship) = p.game.ships.iter_mut().find(|s| s.player == seat)
        {
            match field {
                Field::Score => ship.score += 1000,
                Field::Deaths => ship.deaths += 7,
            }
            p.inject = None;
        }
        c.report(f.tick, p.game.hash());
        if p.recent.len() >= 64 {
            p.recent.pop_front();
        }
        p.recent.push_back(p.game.clone());
    }
    while let Some(ev) = c.poll_event() {
        match ev {
            Event::SnapshotRequested { tick } => p.owed = Some(tick),
            Event::DesyncLocated { first, .. } => p.located = Some(first.map(|f| f.tick)),
            Event::Resyncing => p.resyncing = true,
            _ => {}
        }
    }
    // The state right after the tick asked for: now, or from the recent ones.
    if let Some(t) = p.owed {
        let after = t.saturating_add(1);
        if let Some(g) = p.recent.iter().find(|g| g.tick == after) {
            c.provide(t, g.snapshot());
            p.owed = None;
        } else if p.recent.front().is_some_and(|g| g.tick > after) {
            p.owed = None;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(12),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_broken_client_is_found_explained_and_healed(
        seed in any::<u64>(),
        broken in 1..=PLAYERS,
        at in 100u32..300,
        field in prop_oneof![Just(Field::Score), Just(Field::Deaths)],
        loss in 0.0f64..0.15,
    ) {
        broken_client(seed, broken, at, field, loss)?;
    }

    #[test]
    fn a_broken_mesh_player_is_found_explained_and_healed(
        seed in any::<u64>(),
        players in 3u32..=5,
        broken in 0..5u32,
        at in 100u32..300,
        field in prop_oneof![Just(Field::Score), Just(Field::Deaths)],
        loss in 0.0f64..0.15,
    ) {
        broken_mesh_player(seed, players, broken % players, at, field, loss)?;
    }
}

impl Player {
    fn new(seed: u64, bot: Option<Bot>) -> Self {
        Self {
            game: Game::new(seed),
            bot,
            recent: VecDeque::new(),
            owed: None,
            inject: None,
            located: None,
            resyncing: false,
            diff: None,
        }
    }
}

fn link(loss: f64) -> LinkConditions {
    LinkConditions {
        latency: Duration::from_millis(25),
        jitter: Duration::from_millis(10),
        loss,
        max_datagram: Some(1200),
        ..LinkConditions::default()
    }
}

/// Runs every player's game loop until each has run past `end`.
fn run<E: lockstep_core::Endpoint>(
    sim: &mut Sim<E>,
    players: BTreeMap<PeerId, Player>,
    end: u32,
    session: impl Fn(&mut E) -> Option<&mut dyn Session>,
) -> (Outcome, BTreeMap<PeerId, Player>) {
    let cell = std::cell::RefCell::new(players);
    let outcome = sim.run(
        Instant::ZERO + Duration::from_secs(600),
        Duration::from_micros(33_333),
        |id, node, _| {
            if let (Some(p), Some(s)) = (cell.borrow_mut().get_mut(&id), session(node)) {
                play(s, p);
            }
        },
        |_| cell.borrow().values().all(|p| p.game.tick.get() >= end),
    );
    (outcome, cell.into_inner())
}

/// Every player ended on the same state after `end`; the broken one's
/// search named `at`, and the fields it was resynced across name the one
/// changed; nobody else was resynced.
fn healed(
    players: &BTreeMap<PeerId, Player>,
    broken: PeerId,
    seat: u16,
    at: Tick,
    field: Field,
    end: u32,
    seed: u64,
) -> Result<(), TestCaseError> {
    let hashes: Vec<Option<u64>> = players
        .values()
        .map(|p| {
            p.recent
                .iter()
                .find(|g| g.tick.get() == end)
                .map(Game::hash)
        })
        .collect();
    prop_assert!(
        hashes.iter().all(|h| h.is_some() && *h == hashes[0]),
        "seed {}: {:?}",
        seed,
        hashes
    );
    let p = &players[&broken];
    prop_assert_eq!(p.located, Some(Some(at)), "seed {}", seed);
    let path = field.path(seat);
    let diff = p
        .diff
        .as_ref()
        .unwrap_or_else(|| panic!("seed {seed}: never resynced"));
    prop_assert!(
        diff.iter().any(|d| d.path == path),
        "seed {}: {} not in {:?}",
        seed,
        path,
        diff
    );
    for (id, q) in players {
        if *id != broken {
            prop_assert!(q.diff.is_none(), "seed {}: {} was resynced", seed, id);
        }
    }
    Ok(())
}

/// One case of the sequenced property.
fn broken_client(
    seed: u64,
    broken: u32,
    at: u32,
    field: Field,
    loss: f64,
) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(SimNetwork::new(seed, link(loss)));
    let config = SequencerConfig {
        snapshot_join: true,
        ..SequencerConfig::default()
    };
    sim.add(
        SERVER,
        Node::Server(Box::new(Sequencer::new(config, Instant::ZERO).unwrap())),
    );
    let mut players: BTreeMap<PeerId, Player> = BTreeMap::new();
    for k in 1..=PLAYERS {
        let c = ClientSession::new(ClientConfig::default(), SERVER, Instant::ZERO).unwrap();
        sim.add(PeerId(k), Node::Client(Box::new(c)));
        players.insert(PeerId(k), Player::new(seed, None));
    }
    let at = Tick::new(at);
    players.get_mut(&PeerId(broken)).unwrap().inject = Some((at, field));
    let end = at.get() + 500;
    let (outcome, players) = run(&mut sim, players, end, |n| match n {
        Node::Client(c) => Some(&mut **c as &mut dyn Session),
        Node::Server(_) => None,
    });
    prop_assert_eq!(outcome, Outcome::Done, "seed {}", seed);
    let seat = sim
        .endpoint(PeerId(broken))
        .and_then(Node::client)
        .and_then(|c| c.seat());
    healed(
        &players,
        PeerId(broken),
        seat.map_or(0, |s| s.0),
        at,
        field,
        end,
        seed,
    )?;
    // Only the broken client heard of it: the others were not compared
    // with it.
    for (id, q) in &players {
        if *id != PeerId(broken) {
            prop_assert!(q.located.is_none(), "seed {}: {} heard of it", seed, id);
        }
    }
    Ok(())
}

/// One case of the mesh property: player `i` is peer `i` on seat `i`.
fn broken_mesh_player(
    seed: u64,
    count: u32,
    broken: u32,
    at: u32,
    field: Field,
    loss: f64,
) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(SimNetwork::new(seed, link(loss)));
    let mut roster = Roster::new();
    for k in 0..count {
        roster = roster.player(PeerId(k), PlayerId(k as u16));
    }
    let config = MeshConfig {
        abandon_after: None,
        resync: true,
        ..MeshConfig::default()
    };
    let mut players: BTreeMap<PeerId, Player> = BTreeMap::new();
    for k in 0..count {
        let s = MeshSession::new(config.clone(), roster.clone(), PeerId(k), Instant::ZERO).unwrap();
        sim.add(PeerId(k), s);
        let seat = PlayerId(k as u16);
        players.insert(
            PeerId(k),
            Player::new(seed, Some(Bot::new(seat, u64::from(k) + 1))),
        );
    }
    let at = Tick::new(at);
    players.get_mut(&PeerId(broken)).unwrap().inject = Some((at, field));
    let end = at.get() + 500;
    let (outcome, players) = run(&mut sim, players, end, |s| Some(s as &mut dyn Session));
    prop_assert_eq!(outcome, Outcome::Done, "seed {}", seed);
    healed(
        &players,
        PeerId(broken),
        broken as u16,
        at,
        field,
        end,
        seed,
    )
}
