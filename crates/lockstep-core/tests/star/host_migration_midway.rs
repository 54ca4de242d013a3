//! Host migration in the middle of something else, on the simulated
//! network: the host dies while a player waits for its snapshot, while the
//! room is paused, while a diverged player is being resynced. Each game
//! keeps a real state (a fold of every frame it ran), handed over as
//! snapshots; the survivors must end on equal states, tick for tick.

use crate::common;
use common::hosted::{Hosted, contacts, lossy};
use common::props::cases;
use common::toy::App;
use lockstep_core::sequenced::HostedConfig;
use lockstep_core::sim::{LinkConditions, Outcome, Sim, SimNetwork};
use lockstep_core::{Event, Instant, PeerId, Tick};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// Bytes of bulk in each game's state: a snapshot takes a few chunks.
const BULK: usize = 3_000;

struct Room {
    sim: Sim<Hosted>,
    apps: BTreeMap<PeerId, App>,
    config: HostedConfig,
    seed: u64,
}

impl Room {
    /// `players` playing from the start, the host at `PeerId(0)`.
    fn new(players: u32, config: HostedConfig, link: LinkConditions, seed: u64) -> Self {
        let mut room = Self {
            sim: Sim::new(SimNetwork::new(seed, link)),
            apps: BTreeMap::new(),
            config,
            seed,
        };
        let host = Hosted::host(room.config.clone(), Instant::ZERO).unwrap();
        room.sim.add(PeerId(0), host);
        room.apps
            .insert(PeerId(0), App::new(seed, false, Tick::ZERO, BULK));
        for k in 1..players {
            room.add(PeerId(k), false);
        }
        room
    }

    /// A player joining the host at `PeerId(0)` (from a snapshot if
    /// `joining`).
    fn add(&mut self, id: PeerId, joining: bool) {
        let now = self.sim.now();
        let s = Hosted::join(self.config.clone(), PeerId(0), now).unwrap();
        self.sim.add(id, s);
        let app = App::new(self.seed ^ u64::from(id.0) << 32, joining, Tick::ZERO, BULK);
        self.apps.insert(id, app);
    }

    /// Runs until `done` (checked every 100 ms of virtual time), at most
    /// `limit`; says whether it was done.
    fn until(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let end = self.sim.now() + limit;
        loop {
            if done(self) {
                return true;
            }
            if self.sim.now() >= end {
                return false;
            }
            let step = (self.sim.now() + Duration::from_millis(100)).min(end);
            let apps = &mut self.apps;
            let o = self.sim.run(
                step,
                Duration::from_millis(33),
                |id, s, _| {
                    contacts(s);
                    if let Some(app) = apps.get_mut(&id) {
                        app.play(s);
                    }
                },
                |_| false,
            );
            if matches!(o, Outcome::Livelock { .. }) {
                for (id, s) in self.sim.endpoints() {
                    eprintln!(
                        "{id}: hosting {} taking {} paused {} timeout {:?} frame {} connected {} closed {:?} roster {} stats {:?}",
                        s.hosting(),
                        s.taking_over(),
                        s.client().paused(),
                        lockstep_core::Endpoint::poll_timeout(s),
                        s.frame(),
                        s.client().connected(),
                        s.client().closed(),
                        s.client().roster().count(),
                        s.client().stats()
                    );
                }
            }
            assert!(!matches!(o, Outcome::Livelock { .. }), "{o:?}");
        }
    }

    fn ran(&self, id: PeerId) -> usize {
        self.apps[&id].states.len()
    }

    /// Runs until every player of `ids` ran `frames` frames, or panics.
    fn play_to(&mut self, ids: &[PeerId], frames: usize) {
        let ok = self.until(Duration::from_secs(60), |r| {
            ids.iter().all(|id| r.ran(*id) >= frames)
        });
        let at: Vec<usize> = ids.iter().map(|id| self.ran(*id)).collect();
        assert!(ok, "stuck at {at:?}");
    }

    /// Every pair of `ids` had equal states at every tick both ran since
    /// the last snapshot each restored (a joiner's, a healed player's, or
    /// one's that came back behind the kept frames); and each ran those
    /// ticks without a gap. Returns the fewest ticks one had in common
    /// with the first.
    fn agree(&self, ids: &[PeerId]) -> usize {
        let since = |id: &PeerId| {
            self.apps[id]
                .restored
                .last()
                .map_or(Tick::ZERO, |t| t.saturating_add(1))
        };
        for id in ids {
            let ticks: Vec<u32> = self.apps[id]
                .states
                .range(since(id)..)
                .map(|(t, _)| t.get())
                .collect();
            let first = ticks[0];
            assert_eq!(
                ticks,
                (first..first + ticks.len() as u32).collect::<Vec<_>>(),
                "{id} has gaps"
            );
        }
        let reference = &self.apps[&ids[0]].states;
        let mut common = usize::MAX;
        for id in ids {
            let mut n = 0;
            for (t, s) in self.apps[id].states.range(since(id).max(since(&ids[0]))..) {
                if let Some(r) = reference.get(t) {
                    assert_eq!(s, r, "{id} differs at {t}");
                    n += 1;
                }
            }
            common = common.min(n);
        }
        common
    }

    /// The players of `ids` hosting now.
    fn hosts(&self, ids: &[PeerId]) -> Vec<PeerId> {
        ids.iter()
            .copied()
            .filter(|id| self.sim.endpoint(*id).is_some_and(Hosted::hosting))
            .collect()
    }
}

fn link() -> LinkConditions {
    LinkConditions {
        latency: Duration::from_millis(10),
        ..LinkConditions::default()
    }
}

/// A player joining a game under way waits for a snapshot when the host
/// dies: it reports like every survivor, and finishes its join on the new
/// host from another survivor's state.
#[test]
fn a_joiner_waiting_for_its_snapshot_finishes_on_the_new_host() {
    let mut config = HostedConfig::default();
    config.sequencer.snapshot_join = true;
    config.sequencer.snapshot_join_after = 0;
    // Long enough that the host dies before asking anyone for a state.
    config.sequencer.join_wait = Duration::from_millis(600);
    let mut room = Room::new(4, config, link(), 3);
    let all: Vec<PeerId> = (0..4).map(PeerId).collect();
    room.play_to(&all, 90);
    let joiner = PeerId(4);
    room.add(joiner, true);
    assert!(room.until(Duration::from_secs(5), |r| {
        r.sim
            .endpoint(joiner)
            .is_some_and(|s| s.seat().is_some() && s.client().joining())
    }));
    room.sim.freeze(PeerId(0));
    let crashed = Tick::new(room.ran(PeerId(0)) as u32);
    let survivors: Vec<PeerId> = (1..=4).map(PeerId).collect();
    let n = room.ran(PeerId(1)) + 300;
    room.play_to(&survivors[..3], n);
    assert!(
        room.until(Duration::from_secs(20), |r| r.apps[&joiner].caught_up()
            && r.ran(joiner) >= 100),
        "the joiner never caught up: {:?}",
        room.apps[&joiner].events
    );
    let snap = room.apps[&joiner]
        .events
        .iter()
        .find_map(|e| match e {
            Event::Snapshot { tick } => Some(*tick),
            _ => None,
        })
        .expect("a snapshot");
    assert_eq!(
        room.apps[&joiner].states.keys().next(),
        Some(&snap.saturating_add(1))
    );
    assert_eq!(room.hosts(&survivors).len(), 1);
    let common = room.agree(&survivors);
    // The state came from a survivor, after the takeover.
    assert!(snap > crashed, "snapshot {snap}, crash {crashed}");
    assert!(common >= 100);
}

/// The host dies while the room is paused: the new host keeps the room
/// paused (nobody runs a frame the pause held back), and it goes on when a
/// player resumes it.
#[test]
fn a_pause_outlives_its_host() {
    let mut room = Room::new(4, HostedConfig::default(), link(), 5);
    let all: Vec<PeerId> = (0..4).map(PeerId).collect();
    room.play_to(&all, 90);
    room.sim
        .endpoint_mut(PeerId(2))
        .unwrap()
        .request_pause()
        .unwrap();
    assert!(room.until(Duration::from_secs(5), |r| {
        all.iter()
            .all(|id| r.sim.endpoint(*id).is_some_and(|s| s.client().paused()))
    }));
    room.sim.freeze(PeerId(0));
    let survivors = &all[1..];
    let at: Vec<usize> = survivors.iter().map(|id| room.ran(*id)).collect();
    // Long past any takeover.
    assert!(!room.until(Duration::from_secs(3), |r| r.hosts(survivors).len() > 1));
    assert_eq!(room.hosts(survivors).len(), 1);
    let still: Vec<usize> = survivors.iter().map(|id| room.ran(*id)).collect();
    assert!(
        still.iter().zip(&at).all(|(s, a)| s <= &(a + 1)),
        "paused at {at:?}, ran on to {still:?}"
    );
    room.sim.endpoint_mut(PeerId(3)).unwrap().resume();
    let n = still.iter().max().unwrap() + 300;
    room.play_to(survivors, n);
    assert!(room.agree(survivors) >= 300);
}

/// The host dies while a diverged player waits for the state that heals
/// it: the new host resyncs it from a survivor's state, and every
/// survivor ends equal.
#[test]
fn a_resync_under_way_finishes_on_the_new_host() {
    let mut config = HostedConfig::default();
    config.sequencer.snapshot_join = true;
    config.sequencer.snapshot_join_after = 0;
    config.sequencer.join_wait = Duration::from_millis(600);
    let mut room = Room::new(4, config, link(), 9);
    let all: Vec<PeerId> = (0..4).map(PeerId).collect();
    room.play_to(&all, 90);
    let diverged = PeerId(3);
    if let Some(g) = room.apps.get_mut(&diverged).unwrap().game.as_mut() {
        g.acc ^= 0xDEAD;
    }
    let resyncing = |r: &Room| {
        r.apps[&diverged]
            .events
            .iter()
            .any(|e| matches!(e, Event::Resyncing))
    };
    assert!(room.until(Duration::from_secs(10), resyncing));
    assert!(room.sim.endpoint(diverged).unwrap().client().joining());
    room.sim.freeze(PeerId(0));
    let crashed = Tick::new(room.ran(PeerId(0)) as u32);
    let survivors = &all[1..];
    let n = room.ran(PeerId(1)) + 300;
    room.play_to(survivors, n);
    let snap = room.apps[&diverged]
        .events
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::Snapshot { tick } => Some(*tick),
            _ => None,
        })
        .expect("a snapshot");
    assert!(snap > crashed, "snapshot {snap}, crash {crashed}");
    assert_eq!(room.hosts(survivors).len(), 1);
    assert!(room.agree(survivors) >= 200);
    assert!(!room.sim.endpoint(diverged).unwrap().client().joining());
}

/// What the room is doing when its host dies.
#[derive(Debug, Clone, Copy)]
enum During {
    /// A player joins from a snapshot.
    Join,
    /// The room is paused.
    Pause,
    /// A diverged player is being resynced.
    Resync,
    /// The survivors are taking over (the first candidate dies too).
    Takeover,
}

fn snapshots() -> HostedConfig {
    let mut config = HostedConfig::default();
    config.sequencer.snapshot_join = true;
    config.sequencer.snapshot_join_after = 0;
    config
}

proptest! {
    #![proptest_config(cases(12))]

    /// The host dies at a random moment of a join, a pause, a resync or a
    /// takeover, under loss, duplication, reordering and jitter. The
    /// survivors keep one host and equal states tick for tick, a joiner or
    /// a diverged player finishes on the new host, and the match moves on
    /// within 5 s of the crash (of the resume, for a pause; 15 s when half
    /// the seats are gone, which a player cannot tell from a partition).
    #[test]
    fn a_host_dying_in_the_middle_of_anything_leaves_one_match(
        during in prop_oneof![Just(During::Join), Just(During::Pause), Just(During::Resync), Just(During::Takeover)],
        players in 3u32..=4,
        wait in 0u64..1_000,
        link in lossy(0.10),
        seed in any::<u64>(),
    ) {
        let players = if matches!(during, During::Takeover) { players + 1 } else { players };
        let mut room = Room::new(players, snapshots(), link, seed);
        let all: Vec<PeerId> = (0..players).map(PeerId).collect();
        room.play_to(&all, 60);
        let mut survivors: Vec<PeerId> = all[1..].to_vec();
        let last = all[all.len() - 1];
        // Set the scene, then let `wait` ms pass.
        match during {
            During::Join => {
                let joiner = PeerId(players);
                room.add(joiner, true);
                survivors.push(joiner);
                prop_assert!(room.until(Duration::from_secs(10), |r| r.sim.endpoint(joiner).is_some_and(|s| s.seat().is_some())), "seed {seed}: never welcomed");
            }
            During::Pause => {
                room.sim.endpoint_mut(last).unwrap().request_pause().unwrap();
                prop_assert!(room.until(Duration::from_secs(10), |r| r.sim.endpoint(last).is_some_and(|s| s.client().paused())), "seed {seed}: never paused");
            }
            During::Resync => {
                if let Some(g) = room.apps.get_mut(&last).unwrap().game.as_mut() {
                    g.acc ^= 0xDEAD;
                }
                prop_assert!(room.until(Duration::from_secs(10), |r| r.apps[&last].events.iter().any(|e| matches!(e, Event::Resyncing))), "seed {seed}: never resyncing");
            }
            During::Takeover => {}
        }
        let _ = room.until(Duration::from_millis(wait), |_| false);
        room.sim.freeze(PeerId(0));
        let mut crashed = room.sim.now();
        if let During::Takeover = during {
            // The first candidate (the lowest seat left) dies up to 300 ms
            // into the takeover.
            let first = *survivors.iter().min_by_key(|id| room.sim.endpoint(**id).unwrap().seat()).unwrap();
            prop_assert!(room.until(Duration::from_secs(5), |r| r.sim.endpoint(first).is_some_and(|s| s.taking_over() || s.hosting())), "seed {seed}: no takeover");
            let _ = room.until(Duration::from_millis(wait % 300), |_| false);
            room.sim.freeze(first);
            survivors.retain(|id| *id != first);
            crashed = room.sim.now();
        }
        if let During::Pause = during {
            // Resumed by another player, once the takeover is surely over.
            let _ = room.until(Duration::from_secs(3), |_| false);
            room.sim.endpoint_mut(survivors[0]).unwrap().resume();
            crashed = room.sim.now();
        }
        let at: Vec<usize> = survivors.iter().map(|id| room.ran(*id)).collect();
        // Half the seats gone silent (four players, the host and the first
        // candidate dead) cannot be told from a partition: the rest wait
        // `takeover_alone` before they go on.
        let bound = if survivors.len() * 2 > players as usize { 5 } else { 15 };
        let moved = room.until(Duration::from_secs(bound), |r| survivors.iter().zip(&at).all(|(id, a)| r.ran(*id) > *a + 30));
        let now: Vec<usize> = survivors.iter().map(|id| room.ran(*id)).collect();
        prop_assert!(moved, "seed {seed}: stuck {:?} since {:?}: {:?} -> {:?}", room.sim.now() - crashed, crashed, at, now);
        let n = room.ran(survivors[0]) + 200;
        room.play_to(&survivors, n);
        prop_assert_eq!(room.hosts(&survivors).len(), 1, "seed {}", seed);
        let snaps: Vec<usize> = survivors.iter().map(|id| room.apps[id].restored.len()).collect();
        let told: Vec<usize> = survivors.iter().map(|id| room.apps[id].events.iter().filter(|e| matches!(e, Event::Snapshot { .. })).count()).collect();
        prop_assert_eq!(&snaps, &told, "seed {}: every snapshot restored was announced", seed);
        prop_assert!(room.agree(&survivors) >= 150, "seed {}", seed);
        for id in &survivors {
            prop_assert!(!room.sim.endpoint(*id).unwrap().client().joining(), "seed {seed}: {id} still joining");
        }
    }
}

/// Five players; the host dies `wait` ms after tick 60, and the first
/// candidate dies `wait` ms after it began taking over (or hosting). The
/// three left must play on as one.
fn second_host_dies(link: LinkConditions, seed: u64, wait: u64) {
    let mut room = Room::new(5, snapshots(), link, seed);
    let all: Vec<PeerId> = (0..5).map(PeerId).collect();
    room.play_to(&all, 60);
    let _ = room.until(Duration::from_millis(wait), |_| false);
    room.sim.freeze(PeerId(0));
    let mut survivors: Vec<PeerId> = all[1..].to_vec();
    let first = *survivors
        .iter()
        .min_by_key(|id| room.sim.endpoint(**id).unwrap().seat())
        .unwrap();
    assert!(room.until(Duration::from_secs(5), |r| {
        r.sim
            .endpoint(first)
            .is_some_and(|s| s.taking_over() || s.hosting())
    }));
    let _ = room.until(Duration::from_millis(wait), |_| false);
    room.sim.freeze(first);
    survivors.retain(|id| *id != first);
    let n = room.ran(survivors[0]) + 300;
    room.play_to(&survivors, n);
    assert_eq!(room.hosts(&survivors).len(), 1);
    assert!(room.agree(&survivors) >= 300);
}

/// The second host died just after the survivors took their seats on it,
/// each with a new token. Every host keys its tokens with the same
/// secret, and the second minted the very tokens the first had handed out
/// for other seats: a survivor's token named another's seat, which was
/// busy, and it was refused for good.
#[test]
fn tokens_minted_at_a_takeover_are_new() {
    let link = LinkConditions {
        latency: Duration::from_millis(15),
        jitter: Duration::from_millis(2),
        duplicate: 0.006,
        reorder: 0.05,
        max_datagram: Some(1200),
        ..LinkConditions::default()
    };
    second_host_dies(link, 10177316721702395551, 274);
}

/// The second host died before its roster, with a survivor's new token,
/// reached the others: the next candidate's roster still committed to the
/// survivor's old token, and its reports (with the new one) were ignored
/// until the match went on without it. A report now names the token
/// before as well.
#[test]
fn a_report_proves_its_seat_with_a_roster_behind_its_token() {
    let link = LinkConditions {
        latency: Duration::from_millis(15),
        jitter: Duration::from_millis(8),
        duplicate: 0.048,
        reorder: 0.05,
        max_datagram: Some(1200),
        ..LinkConditions::default()
    };
    second_host_dies(link, 12708707093459370347, 14);
}
