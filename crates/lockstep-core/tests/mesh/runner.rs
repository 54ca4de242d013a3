//! The runner driving mesh players on the simulated network: each player's
//! game loop is nothing but `Runner::update` once a render frame, and a
//! player whose game parts from the others' is healed with no code of the
//! game's (the runner hands its state over when asked and restores the one
//! it is sent).

use crate::common::record::{Shared, header, verified};
use lockstep_core::replay::Topology;
use lockstep_core::runner::{Runner, RunnerConfig, Status};
use lockstep_core::sim::{LinkConditions, Sim, SimNetwork, SimRng};
use lockstep_core::{
    Endpoint, Event, Frame, Game, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, Tick,
    Transmit,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// A game whose state folds every frame; a copy made with `part_at` adds
/// one to its state after that tick (a bug in one build), which a restored
/// copy no longer does. It logs its hash after every tick it runs.
#[derive(Debug, Clone, Default)]
struct Fold {
    next: u32,
    acc: u64,
    part_at: Option<u32>,
    log: BTreeMap<Tick, u64>,
}

impl Game for Fold {
    type Input = u16;
    fn step(&mut self, frame: &Frame<u16>) {
        assert_eq!(
            frame.tick.get(),
            self.next,
            "frames run in order, none missed"
        );
        for input in &frame.inputs {
            self.acc = (self.acc ^ u64::from(input.unwrap_or(0))).wrapping_mul(0x100_0000_01B3);
        }
        if self.part_at == Some(frame.tick.get()) {
            self.acc += 1;
        }
        self.next += 1;
        self.log.insert(frame.tick, self.acc);
    }
    fn hash(&self) -> u64 {
        self.acc
    }
    fn save(&self) -> Vec<u8> {
        [&self.next.to_le_bytes()[..], &self.acc.to_le_bytes()].concat()
    }
    fn restore(b: &[u8]) -> Result<Self, String> {
        let (next, acc) = b.split_at_checked(4).ok_or("short")?;
        Ok(Self {
            next: u32::from_le_bytes(next.try_into().map_err(|_| "next")?),
            acc: u64::from_le_bytes(acc.try_into().map_err(|_| "acc")?),
            ..Self::default()
        })
    }
}

#[derive(Debug)]
struct Player(Runner<Fold, MeshSession<u16>>, SimRng);

impl Endpoint for Player {
    type Error = String;
    fn handle_datagram(&mut self, from: PeerId, d: &[u8], now: Instant) -> Result<(), String> {
        self.0
            .handle_datagram(from, d, now)
            .map_err(|e| e.to_string())
    }
    fn handle_timeout(&mut self, now: Instant) {
        Endpoint::handle_timeout(&mut self.0, now);
    }
    fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.0.poll_transmit(buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.0.poll_timeout()
    }
}

/// Three mesh players at 40 ms each way and 3% loss; one's game parts
/// from the others' at tick 200. It hears `Resyncing`, the runner restores
/// the state a majority player's runner handed over, and from then on all
/// three agree; nobody leaves, and the others never resync.
#[test]
fn a_runner_heals_a_mesh_player_whose_game_parted() {
    for seed in 1..=4u64 {
        let link = LinkConditions {
            latency: Duration::from_millis(40),
            jitter: Duration::from_millis(10),
            loss: 0.03,
            ..LinkConditions::default()
        };
        heal(seed, link, 3, 200);
    }
}

proptest::proptest! {
    #![proptest_config(crate::common::props::cases(16))]

    /// The same over random links (up to 80 +- 30 ms, 8% loss), three to
    /// five players, the parting at a random tick.
    #[test]
    fn runners_heal_a_parted_mesh_player_over_any_link(
        seed in proptest::num::u64::ANY,
        players in 3u32..=5,
        part_at in 60u32..400,
        latency in 0u64..80,
        jitter in 0u64..30,
        loss in 0.0f64..0.08,
    ) {
        let link = LinkConditions {
            latency: Duration::from_millis(latency),
            jitter: Duration::from_millis(jitter),
            loss,
            ..LinkConditions::default()
        };
        heal(seed, link, players, part_at);
    }
}

/// `players` mesh players whose last one's game parts at `part_at`: it is
/// healed by the runners alone, and all agree from then on. Every player
/// records the match: each recording verifies, the parted player's naming
/// `part_at` exactly, healed by the resync.
fn heal(seed: u64, link: LinkConditions, players: u32, part_at: u32) {
    let mut sim = Sim::new(SimNetwork::new(seed, link));
    let mut roster = Roster::new();
    for i in 0..players {
        roster = roster.player(PeerId(i), PlayerId(i as u16));
    }
    // The delay follows the links, as a game's would: a fixed one of 2
    // ticks under 80 ms links stalls most ticks.
    let config = MeshConfig {
        resync: true,
        adaptive: Some(lockstep_core::AdaptiveDelay::default()),
        fingerprint: 0xF00D,
        ..MeshConfig::default()
    };
    let odd = players - 1;
    let mut files = Vec::new();
    for i in 0..players {
        let session =
            MeshSession::new(config.clone(), roster.clone(), PeerId(i), Instant::ZERO).unwrap();
        let game = Fold {
            part_at: (i == odd).then_some(part_at),
            ..Fold::default()
        };
        let mut runner = Runner::new(session, game, RunnerConfig::default()).unwrap();
        let file = Shared::default();
        runner
            .record(
                header(players as u16, Topology::Mesh),
                Box::new(file.clone()),
            )
            .unwrap();
        files.push(file);
        sim.add(
            PeerId(i),
            Player(runner, SimRng::new(seed.wrapping_mul(7) ^ u64::from(i))),
        );
    }
    let mut events: BTreeMap<PeerId, Vec<Event>> = BTreeMap::new();
    let mut replaced: BTreeMap<PeerId, Vec<Fold>> = BTreeMap::new();
    sim.run(
        Instant::from_millis(30_000),
        Duration::from_micros(16_667),
        |id, p, now| {
            p.0.update(now, |_| (p.1.next_u64() as u16) | 1)
                .expect("the runner goes on");
            while let Some(e) = p.0.poll_event() {
                events.entry(id).or_default().push(e);
            }
            if let Some(old) = p.0.take_replaced() {
                replaced.entry(id).or_default().push(old);
            }
        },
        |_| false,
    );
    for i in 0..players {
        let r = &mut sim.endpoint_mut(PeerId(i)).unwrap().0;
        r.stop_recording().expect("recording").expect("written");
        let (replay, found) = verified(&files[i as usize].bytes(), Fold::default(), "a player's");
        // The header named no fingerprint: the session's went in.
        assert_eq!(replay.header.as_ref().map(|h| h.fingerprint), Some(0xF00D));
        assert!(replay.frame_count() as u32 > part_at + 250, "seed {seed}");
        assert!(found.matches(), "seed {seed}: player {i}: {found:?}");
        if i == odd {
            let p = &found.parted[0];
            assert_eq!(
                (p.first, p.exact),
                (Tick::new(part_at), true),
                "seed {seed}: {found:?}"
            );
            assert!(
                p.resynced.is_some_and(|t| t.get() >= part_at),
                "seed {seed}"
            );
        } else {
            assert!(
                found.parted.is_empty(),
                "seed {seed}: player {i}: {found:?}"
            );
        }
    }
    let logs: Vec<&BTreeMap<Tick, u64>> = (0..players)
        .map(|i| &sim.endpoint(PeerId(i)).unwrap().0.game().log)
        .collect();
    let last = logs[0].keys().next_back().copied().unwrap();
    assert!(
        last.get() > part_at + 250,
        "seed {seed}: the match went on to {last}"
    );
    // Those whose games agree agree on every tick.
    for other in &logs[1..odd as usize] {
        for (t, h) in logs[0] {
            if let Some(o) = other.get(t) {
                assert_eq!(h, o, "seed {seed}: after {t}");
            }
        }
    }
    // The one that parted agrees again, on the last 100 ticks both ran.
    let both: Vec<_> = logs[odd as usize]
        .iter()
        .filter(|(t, _)| logs[0].contains_key(t))
        .rev()
        .take(100)
        .collect();
    assert_eq!(both.len(), 100, "seed {seed}");
    for (t, h) in both {
        assert_eq!(logs[0].get(t), Some(h), "seed {seed}: after {t}");
    }
    // The game its state replaced is handed back once, as it was: the
    // copy of the build that parts, past the parting.
    let old = replaced
        .get(&PeerId(odd))
        .expect("the parted game handed back");
    assert!(
        old.iter()
            .all(|g| g.part_at == Some(part_at) && g.next > part_at),
        "seed {seed}"
    );
    assert_eq!(replaced.len(), 1, "seed {seed}: nobody else was replaced");
    let saw =
        |id: u32, f: fn(&Event) -> bool| events.get(&PeerId(id)).is_some_and(|e| e.iter().any(f));
    assert!(saw(odd, |e| matches!(e, Event::Resyncing)), "seed {seed}");
    for i in 0..players {
        if i != odd {
            assert!(
                !saw(i, |e| matches!(e, Event::Resyncing)),
                "seed {seed}: {i}"
            );
        }
        assert_eq!(
            sim.endpoint(PeerId(i)).unwrap().0.status(),
            Status::Playing,
            "seed {seed}: peer {i}"
        );
    }
}

/// A runner dropped while it records (a game that never called
/// `stop_recording`) finishes the recording: the file is whole, with
/// every frame run (it held the header alone, which read as a replay of
/// no frames that verified; found by a newcomer).
#[test]
fn a_runner_dropped_while_recording_leaves_a_whole_file() {
    let roster = Roster::new().player(PeerId(0), PlayerId(0));
    let session =
        MeshSession::new(MeshConfig::default(), roster, PeerId(0), Instant::ZERO).unwrap();
    let mut runner = Runner::new(session, Fold::default(), RunnerConfig::default()).unwrap();
    let file = Shared::default();
    runner
        .record(header(1, Topology::Mesh), Box::new(file.clone()))
        .unwrap();
    let mut now = Instant::ZERO;
    while runner.game().next < 100 {
        now += Duration::from_micros(16_667);
        assert!(now < Instant::from_millis(10_000), "a player alone plays");
        runner.update(now, |_| 7).unwrap();
    }
    let ran = runner.game().next;
    drop(runner);
    let (replay, found) = verified(&file.bytes(), Fold::default(), "a dropped runner's");
    assert_eq!(replay.frame_count() as u32, ran);
    assert!(
        found.matches() && found.whole && found.checkpoints > 0,
        "{found:?}"
    );
    // Cut short, it verifies as far as it goes, and says it is not whole.
    let bytes = file.bytes();
    let cut = lockstep_core::replay::Replay::<u16>::read(&bytes[..bytes.len() - 20]);
    let found = lockstep_core::replay::verify(&cut, Fold::default()).unwrap();
    assert!(found.matches() && !found.whole, "{found:?}");
    // A record that does not read is no match (a file read as another
    // game's, stopped at its first record, matched with nothing compared;
    // found by a newcomer), nor is another game's run.
    let mut corrupt = bytes.clone();
    corrupt[bytes.len() / 2] ^= 0x5a;
    let found = lockstep_core::replay::verify(
        &lockstep_core::replay::Replay::<u16>::read(&corrupt),
        Fold::default(),
    )
    .unwrap();
    assert!(!found.matches() && found.unread.is_some(), "{found:?}");
    let other = lockstep_core::replay::Replay::<lockstep_core::PlayerInputs>::read(&bytes);
    let found = lockstep_core::replay::verify(&other, Other).unwrap();
    assert!(!found.matches(), "{found:?}");
}

/// A game of `PlayerInputs`, to read a `u16` game's recording as.
#[derive(Debug, Default)]
struct Other;

impl Game for Other {
    type Input = lockstep_core::PlayerInputs;
    fn step(&mut self, _: &Frame<lockstep_core::PlayerInputs>) {}
    fn hash(&self) -> u64 {
        0
    }
    fn save(&self) -> Vec<u8> {
        Vec::new()
    }
    fn restore(_: &[u8]) -> Result<Self, String> {
        Ok(Self)
    }
}

/// Four mesh players, one runner each; `out` either leaves at 3 s (and
/// keeps its loop running), or is cut off from the others from 3 s to
/// 20 s (they vote it out after `abandon_after`, and it hears so when the
/// link comes back; it votes nobody out itself). Returns each runner's status at 30 s, the frames the
/// others ran, and the tick `out`'s seat was emptied from on each.
/// Per player: its runner's status, its next frame, the tick it has `out`'s
/// seat empty from, and the events it heard.
type Outcomes = (Vec<Status>, Vec<u32>, Vec<Option<Tick>>, Vec<Vec<Event>>);

fn one_goes(leave: bool) -> Outcomes {
    let link = LinkConditions {
        latency: Duration::from_millis(20),
        ..LinkConditions::default()
    };
    let mut sim = Sim::new(SimNetwork::new(7, link));
    let mut roster = Roster::new();
    for i in 0..4 {
        roster = roster.player(PeerId(i), PlayerId(i as u16));
    }
    let config = MeshConfig {
        abandon_after: Some(Duration::from_secs(2)),
        ..MeshConfig::default()
    };
    for i in 0..4 {
        // Cut off, `out` votes nobody out, as a process that hung would
        // not (one that votes the others out plays on alone: a split).
        let config = MeshConfig {
            abandon_after: config.abandon_after.filter(|_| leave || i != 2),
            ..config.clone()
        };
        let session = MeshSession::new(config, roster.clone(), PeerId(i), Instant::ZERO)
            .expect("valid config");
        let runner =
            Runner::new(session, Fold::default(), RunnerConfig::default()).expect("runner");
        sim.add(PeerId(i), Player(runner, SimRng::new(u64::from(i) + 1)));
    }
    let out = PeerId(2);
    if !leave {
        sim.net.partition(
            &[out],
            &[PeerId(0), PeerId(1), PeerId(3)],
            Instant::from_millis(3_000),
            Instant::from_millis(20_000),
        );
    }
    let mut left = false;
    let mut events = vec![Vec::new(); 4];
    let mut app = |id: PeerId, p: &mut Player, now: Instant| {
        if leave && id == out && !left && now >= Instant::from_millis(3_000) {
            p.0.session_mut().leave();
            left = true;
        }
        if p.0.status() != Status::Ended {
            p.0.update(now, |_| (p.1.next_u64() as u16) | 1)
                .expect("the runner goes on");
        }
        while let Some(e) = p.0.poll_event() {
            events[id.0 as usize].push(e);
        }
    };
    let period = Duration::from_micros(16_667);
    sim.run(Instant::from_millis(8_000), period, &mut app, |_| false);
    if leave {
        // Its game over, the leaver's process ends.
        assert_eq!(sim.endpoint(out).map(|p| p.0.status()), Some(Status::Ended));
        sim.freeze(out);
    }
    sim.run(Instant::from_millis(30_000), period, &mut app, |_| false);
    let players: Vec<&Player> = (0..4)
        .map(|i| sim.endpoint(PeerId(i)).expect("a player"))
        .collect();
    let statuses = players.iter().map(|p| p.0.status()).collect();
    let frames = players
        .iter()
        .map(|p| p.0.session().frame().get())
        .collect();
    let emptied = players
        .iter()
        .map(|p| {
            let seats = p.0.session().abandoned();
            seats.iter().find(|(s, _)| s.index() == 2).map(|(_, t)| *t)
        })
        .collect();
    (statuses, frames, emptied, events)
}

/// A mesh player that leaves ends: its runner's status turns `Ended` once
/// the others have emptied its seat (it stayed `Playing` for good, running
/// the others' frames, so a loop waiting for `Ended` never stopped: found
/// by a newcomer's review). The others play on.
#[test]
fn a_mesh_player_that_leaves_ends() {
    let (status, frames, emptied, events) = one_goes(true);
    out_alone_ended(&status, &frames, &emptied, 800);
    for i in [0, 1, 3] {
        // Gone, not a lost connection: no `Interrupted` for a HUD to show
        // once its process stops sending.
        assert!(
            events[i]
                .iter()
                .any(|e| matches!(e, Event::PeerLeft { peer, .. } if *peer == PeerId(2))),
            "{i}: {:?}",
            events[i]
        );
        assert!(
            !events[i]
                .iter()
                .any(|e| matches!(e, Event::Interrupted { peer, .. } if *peer == PeerId(2))),
            "{i}: {:?}",
            events[i]
        );
    }
}

/// A player the others voted out while it was cut off hears so when the
/// link comes back, and its runner ends (it sat at its last tick,
/// `Playing`, waiting on players who had moved on).
#[test]
fn a_mesh_player_voted_out_ends() {
    let (status, frames, emptied, _) = one_goes(false);
    out_alone_ended(&status, &frames, &emptied, 700);
}

/// Player 2 alone is `Ended`; the others play on (past `min_frames`), and
/// every player has its seat empty from one tick.
fn out_alone_ended(status: &[Status], frames: &[u32], emptied: &[Option<Tick>], min_frames: u32) {
    assert_eq!(status[2], Status::Ended);
    for i in [0, 1, 3] {
        assert_eq!(status[i], Status::Playing, "{i}");
        assert!(frames[i] > min_frames, "{i} ran {}", frames[i]);
    }
    assert!(
        emptied.iter().all(|e| e.is_some() && *e == emptied[0]),
        "{emptied:?}"
    );
}
