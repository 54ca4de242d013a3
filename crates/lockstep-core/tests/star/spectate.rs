//! Spectators of a room that watches with a delay (`spectator_delay`): every
//! datagram a spectator is sent is read as it arrives, and none carries a
//! frame, or a snapshot, within the delay of the room's open tick; the
//! spectator still ends on the players' state, and a spectator joining
//! mid-match waits for its state to be old enough.

use lockstep_core::runner::{Runner, RunnerConfig, Status};
use lockstep_core::sequenced::{
    ClientConfig, ClientSession, Policy, Sequencer, SequencerConfig, Simulation,
};
use lockstep_core::sim::{LinkConditions, Sim, SimNetwork, SimRng};
use lockstep_core::wire::{Datagram, Message};
use lockstep_core::{Endpoint, Frame, Game, Instant, PeerId, Tick, Transmit};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

const SERVER: PeerId = PeerId(0);

/// A fold of every input, logging its hash after every tick.
#[derive(Debug, Clone, Default)]
struct Fold {
    next: u32,
    acc: u64,
    log: BTreeMap<Tick, u64>,
}

impl Fold {
    fn fold(&mut self, frame: &Frame<u16>) {
        for i in &frame.inputs {
            self.acc = (self.acc ^ u64::from(i.unwrap_or(0))).wrapping_mul(0x100_0000_01B3);
        }
        self.next = frame.tick.get() + 1;
    }
}

impl Game for Fold {
    type Input = u16;
    fn step(&mut self, frame: &Frame<u16>) {
        self.fold(frame);
        self.log.insert(frame.tick, self.acc);
    }
    fn hash(&self) -> u64 {
        self.acc
    }
    fn save(&self) -> Vec<u8> {
        [self.next.to_le_bytes().as_slice(), &self.acc.to_le_bytes()].concat()
    }
    fn restore(b: &[u8]) -> Result<Self, String> {
        let (n, a) = b.split_at_checked(4).ok_or("short")?;
        Ok(Self {
            next: u32::from_le_bytes(n.try_into().map_err(|_| "next")?),
            acc: u64::from_le_bytes(a.try_into().map_err(|_| "acc")?),
            log: BTreeMap::new(),
        })
    }
}

/// The room running the game itself.
#[derive(Debug, Default)]
struct Sim1(Fold);

impl Simulation<u16> for Sim1 {
    fn step(&mut self, frame: &Frame<u16>) {
        self.0.fold(frame);
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.save()
    }
    fn hash(&self) -> u64 {
        self.0.acc
    }
}

#[derive(Debug)]
enum Node {
    /// The room, publishing its open tick whenever it may have sealed.
    Server(Sequencer<u16>, Rc<Cell<Tick>>),
    Player(Runner<Fold, ClientSession<u16>>, SimRng),
    /// A spectator, and the newest tick its datagrams revealed.
    Watcher(Runner<Fold, ClientSession<u16>>, Watch),
}

/// What a spectator was shown, checked as it arrives against the room's
/// open tick now (which only grows after the datagram was sent).
#[derive(Debug)]
struct Watch {
    open: Rc<Cell<Tick>>,
    delay: u32,
    newest: Option<Tick>,
    snapshot: Option<Tick>,
}

impl Watch {
    fn look(&mut self, d: &[u8]) {
        let Ok(d) = Datagram::decode(d, Tick::ZERO) else {
            return;
        };
        let open = self.open.get().get();
        for m in d.messages {
            let frame = matches!(m, Message::Frames(_) | Message::SnapshotChunk(_));
            let shown = match m {
                Message::Frames(f) if f.count > 0 => f.start.get() + f.count - 1,
                Message::SnapshotChunk(c) => {
                    // Held no longer than it must be: sent the moment it
                    // is the delay old (15 ticks for the link, a lost
                    // chunk resent).
                    if self.snapshot.is_none() {
                        assert!(
                            open <= c.tick.get() + self.delay + 1 + 15,
                            "a snapshot of tick {} first came with the room open at {open} (delay {})",
                            c.tick,
                            self.delay
                        );
                    }
                    self.snapshot = Some(c.tick);
                    c.tick.get()
                }
                // A state hash of a tick is news of that tick; the tick a
                // pause or the room is open at says the ticks before it
                // are sealed.
                Message::Checkpoint(cp) => cp.tick.get(),
                Message::Pause { frame } if frame.get() > 0 => frame.get() - 1,
                Message::Status(st) if st.open.get() > 0 => st.open.get() - 1,
                _ => continue,
            };
            assert!(
                shown + self.delay < open,
                "a spectator was shown tick {shown} with the room open at {open} (delay {})",
                self.delay
            );
            if frame {
                self.newest = self.newest.max(Some(Tick::new(shown)));
            }
        }
    }
}

impl Endpoint for Node {
    type Error = String;
    fn handle_datagram(&mut self, from: PeerId, d: &[u8], now: Instant) -> Result<(), String> {
        match self {
            Self::Server(s, open) => {
                let r = s.handle_datagram(from, d, now).map_err(|e| e.to_string());
                open.set(s.open_tick());
                r
            }
            Self::Player(r, _) => r.handle_datagram(from, d, now).map_err(|e| e.to_string()),
            Self::Watcher(r, w) => {
                w.look(d);
                r.handle_datagram(from, d, now).map_err(|e| e.to_string())
            }
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        match self {
            Self::Server(s, open) => {
                s.handle_timeout(now);
                open.set(s.open_tick());
            }
            Self::Player(r, _) | Self::Watcher(r, _) => Endpoint::handle_timeout(r, now),
        }
    }
    fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        match self {
            Self::Server(s, _) => s.poll_transmit(buf),
            Self::Player(r, _) | Self::Watcher(r, _) => r.poll_transmit(buf),
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Self::Server(s, _) => s.poll_timeout(),
            Self::Player(r, _) | Self::Watcher(r, _) => r.poll_timeout(),
        }
    }
}

fn runner(now: Instant, spectator: bool) -> Runner<Fold, ClientSession<u16>> {
    let config = ClientConfig {
        spectator,
        ..ClientConfig::default()
    };
    let session = ClientSession::new(config, SERVER, now).unwrap();
    Runner::new(session, Fold::default(), RunnerConfig::default()).unwrap()
}

/// Runs every node's loop until `until`.
fn run(sim: &mut Sim<Node>, until: Instant) {
    sim.run(
        until,
        Duration::from_micros(16_667),
        |_, node, now| match node {
            Node::Server(s, open) => open.set(s.open_tick()),
            Node::Player(r, rng) => {
                r.update(now, |_| (rng.next_u64() as u16) | 1)
                    .expect("the runner goes on");
            }
            Node::Watcher(r, _) => {
                r.update(now, |_| 0).expect("the runner goes on");
            }
        },
        |_| false,
    );
}

/// One room: two players from the start, a spectator from the start and
/// one joining at `join_ms` (from a snapshot, a player's or the room's
/// own game's, or by replaying the match), the room watching `delay`
/// ticks behind. Returns what the late spectator was shown.
fn watch(seed: u64, delay: u32, join_ms: u64, how: u8, link: LinkConditions) {
    let mut sim = Sim::new(SimNetwork::new(seed, link));
    let config = SequencerConfig {
        policy: Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        },
        snapshot_join: how != 0,
        snapshot_join_after: 0,
        spectator_delay: delay,
        ..SequencerConfig::default()
    };
    let server = if how == 2 {
        Sequencer::with_simulation(config, Instant::ZERO, Box::new(Sim1::default()))
    } else {
        Sequencer::new(config, Instant::ZERO)
    };
    let open = Rc::new(Cell::new(Tick::ZERO));
    sim.add(SERVER, Node::Server(server.unwrap(), open.clone()));
    let watch = || Watch {
        open: open.clone(),
        delay,
        newest: None,
        snapshot: None,
    };
    for id in 1..=2u32 {
        let r = runner(Instant::ZERO, false);
        sim.add(
            PeerId(id),
            Node::Player(r, SimRng::new(seed ^ u64::from(id))),
        );
    }
    sim.add(
        PeerId(3),
        Node::Watcher(runner(Instant::ZERO, true), watch()),
    );
    run(&mut sim, Instant::from_millis(join_ms));
    sim.add(PeerId(4), Node::Watcher(runner(sim.now(), true), watch()));
    let end = sim.now() + Duration::from_secs(8);
    run(&mut sim, end);
    let logs: BTreeMap<PeerId, &Fold> = (1..=4)
        .map(|id| {
            let game = match sim.endpoint(PeerId(id)) {
                Some(Node::Player(r, _) | Node::Watcher(r, _)) => r.game(),
                _ => panic!("a client"),
            };
            (PeerId(id), game)
        })
        .collect();
    for (id, g) in &logs {
        for (t, h) in &g.log {
            if let Some(o) = logs[&PeerId(1)].log.get(t) {
                assert_eq!(h, o, "seed {seed}: {id} after tick {t}");
            }
        }
    }
    let open = open.get().get();
    for id in [3, 4] {
        let Some(Node::Watcher(r, w)) = sim.endpoint(PeerId(id)) else {
            panic!("a spectator");
        };
        assert_eq!(r.status(), Status::Playing, "seed {seed}: spectator {id}");
        // It watches about the delay behind, and not much more.
        let newest = w.newest.map_or(0, Tick::get);
        assert!(
            newest + delay + 90 > open,
            "seed {seed}: spectator {id} at {newest}, the room at {open}, delay {delay}"
        );
        if id == 4 && how != 0 {
            assert!(w.snapshot.is_some(), "seed {seed}: joined from a snapshot");
        }
    }
}

proptest::proptest! {
    #![proptest_config(crate::common::props::cases(16))]

    /// Any link (up to 60 +- 20 ms, 8% loss), a delay of 1 to 120 ticks,
    /// a spectator joining at any time by replay, from a player's
    /// snapshot or from the room's own game: no spectator datagram ever
    /// shows a tick within the delay of the open one, and every spectator
    /// ends on the players' state, watching the delay behind.
    #[test]
    fn spectators_never_see_within_the_delay(
        seed in proptest::num::u64::ANY,
        delay in 1u32..120,
        join_ms in 300u64..5_000,
        how in 0u8..3,
        latency in 0u64..60,
        jitter in 0u64..20,
        loss in 0.0f64..0.08,
    ) {
        let link = LinkConditions {
            latency: Duration::from_millis(latency),
            jitter: Duration::from_millis(jitter),
            loss,
            ..LinkConditions::default()
        };
        watch(seed, delay, join_ms, how, link);
    }
}

/// A delay the history cannot hold is refused when the room is made.
#[test]
fn a_delay_past_the_history_is_refused() {
    let config = SequencerConfig {
        spectator_delay: 4096,
        history: 4096,
        ..SequencerConfig::default()
    };
    assert!(Sequencer::<u16>::new(config, Instant::ZERO).is_err());
}

/// Thirty spectators and two players: each newly sealed tick is coded
/// about once, not once per client (the runs sent are shared), and every
/// spectator ends on the players' state.
#[test]
fn many_spectators_share_the_frames_coded_once() {
    let mut sim = Sim::new(SimNetwork::new(7, LinkConditions::default()));
    let config = SequencerConfig {
        max_spectators: 64,
        ..SequencerConfig::default()
    };
    let open = Rc::new(Cell::new(Tick::ZERO));
    sim.add(
        SERVER,
        Node::Server(Sequencer::new(config, Instant::ZERO).unwrap(), open.clone()),
    );
    for id in 1..=2u32 {
        sim.add(
            PeerId(id),
            Node::Player(runner(Instant::ZERO, false), SimRng::new(u64::from(id))),
        );
    }
    for id in 3..33u32 {
        let w = Watch {
            open: open.clone(),
            delay: 0,
            newest: None,
            snapshot: None,
        };
        sim.add(PeerId(id), Node::Watcher(runner(Instant::ZERO, true), w));
    }
    run(&mut sim, Instant::from_millis(6_000));
    let Some(Node::Server(s, _)) = sim.endpoint(SERVER) else {
        panic!("the room");
    };
    let stats = s.stats();
    assert!(
        stats.runs_shared > 10 * stats.runs_encoded,
        "{} runs coded, {} shared",
        stats.runs_encoded,
        stats.runs_shared
    );
    let theirs = match sim.endpoint(PeerId(1)) {
        Some(Node::Player(r, _)) => r.game().log.clone(),
        _ => panic!("a player"),
    };
    for id in 3..33u32 {
        let Some(Node::Watcher(r, _)) = sim.endpoint(PeerId(id)) else {
            panic!("a spectator");
        };
        assert!(r.game().log.len() > 100, "spectator {id} watched");
        for (t, h) in &r.game().log {
            assert_eq!(theirs.get(t), Some(h), "spectator {id} after tick {t}");
        }
    }
}

/// Spectators joining one after another, every 1.5 s, while the room
/// watches 3 s behind: the first still gets its state and watches (each
/// newer snapshot held kept pushing every release back, and it never did).
#[test]
fn spectators_joining_one_after_another_do_not_starve_each_other() {
    let delay = 90;
    let mut sim = Sim::new(SimNetwork::new(5, LinkConditions::default()));
    let config = SequencerConfig {
        policy: Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        },
        snapshot_join: true,
        snapshot_join_after: 0,
        spectator_delay: delay,
        max_spectators: 64,
        ..SequencerConfig::default()
    };
    let open = Rc::new(Cell::new(Tick::ZERO));
    sim.add(
        SERVER,
        Node::Server(Sequencer::new(config, Instant::ZERO).unwrap(), open.clone()),
    );
    let watch = || Watch {
        open: open.clone(),
        delay,
        newest: None,
        snapshot: None,
    };
    for id in 1..=2u32 {
        sim.add(
            PeerId(id),
            Node::Player(runner(Instant::ZERO, false), SimRng::new(u64::from(id))),
        );
    }
    run(&mut sim, Instant::from_millis(2_000));
    sim.add(PeerId(3), Node::Watcher(runner(sim.now(), true), watch()));
    let mut t = 2_000;
    let mut next = 100u32;
    while t < 20_000 {
        t += 1_500;
        sim.add(
            PeerId(next),
            Node::Watcher(runner(sim.now(), true), watch()),
        );
        run(&mut sim, Instant::from_millis(t));
        next += 1;
    }
    let Some(Node::Watcher(r, w)) = sim.endpoint(PeerId(3)) else {
        panic!("the first spectator");
    };
    assert!(w.snapshot.is_some(), "the first spectator got no state");
    assert_eq!(r.status(), Status::Playing);
    let behind = open.get().get() - w.newest.map_or(0, Tick::get);
    assert!(behind < delay + 60, "{behind} ticks behind");
}
