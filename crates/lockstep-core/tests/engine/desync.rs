//! Property tests of desync detection over random network conditions: a
//! desync injected into one machine's state hashes at a random tick, for
//! good or for that tick alone, is caught by a checkpoint of the block it
//! happened in, only between the machines that differ, and the search that
//! follows names exactly the injected tick, with both hashes.
//!
//! `PROPTEST_CASES` overrides the number of cases.

use crate::common;
use common::props::{cases, link};
use common::star::{Node, SERVER, StarScenario};
use common::{Record, SKEW, Scenario, secs};
use lockstep_core::desync::BLOCK;
use lockstep_core::sequenced::SequencerEvent;
use lockstep_core::sim::{LinkConditions, Outcome};
use lockstep_core::{Event, PeerId, Tick};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// A desync injected into `peer`'s hashes, `after` ticks into the game.
#[derive(Debug, Clone)]
struct Injection {
    peer: u32,
    after: u32,
    lasting: bool,
}

prop_compose! {
    fn injection(players: u32)(
        peer in 0..players,
        after in 20u32..300,
        lasting in any::<bool>(),
    ) -> Injection {
        Injection { peer, after, lasting }
    }
}

/// A link short of a partition, with at most 30% loss.
fn lossy() -> impl Strategy<Value = LinkConditions> {
    link(120, 40).prop_map(|mut l| {
        l.loss = l.loss.min(0.3);
        l
    })
}

/// What `rec`'s game heard about `peer`: the checkpoint that differed and
/// where the search ended.
fn heard(
    rec: &Record,
    peer: PeerId,
) -> (
    Vec<Tick>,
    Vec<Option<lockstep_core::desync::FirstDifference>>,
) {
    let mut desyncs = Vec::new();
    let mut located = Vec::new();
    for e in &rec.events {
        match e {
            Event::Desync { tick, peer: p, .. } if *p == peer => desyncs.push(*tick),
            Event::DesyncLocated { peer: p, first, .. } if *p == peer => located.push(*first),
            _ => {}
        }
    }
    (desyncs, located)
}

/// Whether `checkpoint` is the first, or under loss one of the first,
/// checkpoints after `at`: in its block, or in the next when the block's
/// last checkpoints were lost on the way.
fn soon_after(checkpoint: Tick, at: Tick) -> bool {
    checkpoint >= at && checkpoint.get() / BLOCK <= at.get() / BLOCK + 1
}

/// The injected tick was found: one mismatch, at one of the first
/// checkpoints after it, and a search that names it with both hashes.
fn found(
    seed: u64,
    records: &BTreeMap<PeerId, Record>,
    who: PeerId,
    peer: PeerId,
    skewed: PeerId,
    at: Tick,
) -> Result<(), TestCaseError> {
    let rec = &records[&who];
    let (desyncs, located) = heard(rec, peer);
    prop_assert_eq!(
        desyncs.len(),
        1,
        "seed {}: {} about {}: {:?}",
        seed,
        who,
        peer,
        rec.events
    );
    let checkpoint = desyncs[0];
    prop_assert!(
        soon_after(checkpoint, at),
        "seed {}: {} caught the desync at {} (injected at {})",
        seed,
        who,
        checkpoint,
        at
    );
    prop_assert_eq!(located.len(), 1, "seed {}: {:?}", seed, rec.events);
    let first = located[0].unwrap_or_else(|| panic!("seed {seed}: {who} could not locate it"));
    prop_assert_eq!(first.tick, at, "seed {}", seed);
    let index = at.since(rec.first) as usize;
    let (ours, theirs) = (rec.chain[index], records[&skewed].chain[index]);
    prop_assert_eq!(ours, theirs, "seed {}: the states themselves agree", seed);
    let (local, remote) = if who == skewed {
        (ours ^ SKEW, ours)
    } else {
        (ours, ours ^ SKEW)
    };
    prop_assert_eq!(
        (first.local, first.remote),
        (local, remote),
        "seed {}",
        seed
    );
    Ok(())
}

proptest! {
    #![proptest_config(cases(40))]

    /// Mesh: every peer finds the injected tick with the skewed peer, and
    /// nobody else differs.
    #[test]
    fn a_mesh_finds_the_first_divergent_tick(
        players in 2u32..=4,
        inj in injection(4),
        link in lossy(),
        period in 16u64..40,
        seed in any::<u64>(),
        first in prop_oneof![3 => Just(0u32), 1 => 65_400u32..65_536],
    ) {
        let mut sc = Scenario::new(players as usize, seed);
        sc.config.abandon_after = None;
        sc.config.first_tick = Tick::new(first);
        sc.link = link;
        sc.period = Duration::from_millis(period);
        let mut h = sc.build();
        h.checksum_every = 1;
        let skewed = PeerId(inj.peer % players);
        let at = Tick::new(first).saturating_add(inj.after);
        h.records.get_mut(&skewed).unwrap().skew = Some((at, inj.lasting));
        // Time for the search too, over lossy links.
        let until = inj.after + 2 * BLOCK + 200;
        let outcome = h.run_until_tick(until, secs(600));
        prop_assert_eq!(outcome, Outcome::Done, "seed {}", seed);
        h.assert_streams_agree(&sc.peer_ids());
        for who in sc.peer_ids() {
            for peer in sc.peer_ids().into_iter().filter(|p| *p != who) {
                if who == skewed || peer == skewed {
                    found(seed, &h.records, who, peer, skewed, at)?;
                } else {
                    let (desyncs, _) = heard(&h.records[&who], peer);
                    prop_assert!(desyncs.is_empty(), "seed {}: {} and {} agree", seed, who, peer);
                }
            }
        }
    }

    /// Sequenced: the skewed client is told by the sequencer (the seated
    /// majority's verdict) and finds the injected tick by asking a client
    /// that voted with the majority; nobody else is told anything.
    #[test]
    fn a_sequenced_room_finds_the_first_divergent_tick(
        players in 3u32..=4,
        inj in injection(4),
        link in lossy(),
        seed in any::<u64>(),
    ) {
        let mut sc = StarScenario::new(players as usize, seed);
        sc.link = link;
        let mut h = sc.build();
        let skewed = PeerId(1 + inj.peer % players);
        let at = Tick::new(inj.after);
        h.records.get_mut(&skewed).unwrap().skew = Some((at, inj.lasting));
        let outcome = h.run_until_frames(u64::from(inj.after + 2 * BLOCK + 300), secs(600));
        prop_assert_eq!(outcome, Outcome::Done, "seed {}", seed);
        h.assert_streams_agree(&sc.client_ids());
        for who in sc.client_ids() {
            if who == skewed {
                let rec = &h.records[&who];
                let (desyncs, located) = heard(rec, SERVER);
                prop_assert_eq!(desyncs.len(), 1, "seed {}: {:?}", seed, rec.events);
                prop_assert!(soon_after(desyncs[0], at),
                    "seed {}: told at {} (injected at {})", seed, desyncs[0], at);
                prop_assert_eq!(located.len(), 1, "seed {}: {:?}", seed, rec.events);
                let first = located[0].unwrap_or_else(|| panic!("seed {seed}: not located"));
                prop_assert_eq!(first.tick, at, "seed {}", seed);
                let state = rec.chain[at.get() as usize];
                prop_assert_eq!((first.local, first.remote), (state ^ SKEW, state), "seed {}", seed);
            } else {
                let (desyncs, located) = heard(&h.records[&who], SERVER);
                prop_assert!(desyncs.is_empty() && located.is_empty(), "seed {}: {} was told", seed, who);
            }
        }
        let mut blamed = Vec::new();
        if let Some(Node::Server(server)) = h.sim.endpoint_mut(SERVER) {
            while let Some(e) = server.poll_event() {
                if let SequencerEvent::Desync { peer, .. } = e {
                    blamed.push(peer);
                }
            }
        }
        prop_assert!(!blamed.is_empty() && blamed.iter().all(|p| *p == skewed), "seed {}: {:?}", seed, blamed);
    }

    /// Sequenced healing: a client whose state itself diverged is resynced
    /// from a client that agrees with the majority, runs on from the
    /// snapshot, and ends in the same state as everyone; nobody else is
    /// resynced.
    #[test]
    fn a_diverged_client_is_resynced_and_agrees_again(
        players in 3u32..=4,
        inj in injection(4),
        link in lossy(),
        seed in any::<u64>(),
    ) {
        let mut sc = StarScenario::new(players as usize, seed);
        sc.link = link;
        sc.server.snapshot_join = true;
        let mut h = sc.build();
        let skewed = PeerId(1 + inj.peer % players);
        let at = Tick::new(inj.after);
        h.records.get_mut(&skewed).unwrap().corrupt = Some(at);
        let outcome = h.run_until_frames(u64::from(inj.after + 2 * BLOCK + 600), secs(900));
        prop_assert_eq!(outcome, Outcome::Done, "seed {}: {:?}; frames {:?}", seed, h.records[&skewed].events,
            sc.client_ids().iter().map(|id| h.client(*id).stats().frames).collect::<Vec<_>>());
        h.assert_streams_agree(&sc.client_ids());
        healed_alone(seed, &h.records, &sc.client_ids(), skewed, &["resyncing", "snapshot", "caught up"])?;
    }
}

proptest! {
    #![proptest_config(cases(30))]

    /// Mesh healing: a player whose state itself diverged finds its
    /// checkpoints differ from a strict majority's, is handed a majority
    /// peer's state, and ends in the same state as everyone; nobody else
    /// is resynced, and every stream stays whole.
    #[test]
    fn a_diverged_mesh_player_is_resynced_and_agrees_again(
        players in 3u32..=5,
        inj in injection(5),
        link in lossy(),
        seed in any::<u64>(),
    ) {
        let mut sc = Scenario::new(players as usize, seed);
        sc.config.abandon_after = None;
        sc.config.resync = true;
        sc.link = link;
        let mut h = sc.build();
        h.checksum_every = 1;
        let bad = PeerId(inj.peer % players);
        let at = Tick::new(inj.after);
        h.records.get_mut(&bad).unwrap().corrupt = Some(at);
        let outcome = h.run_until_tick(inj.after + 2 * BLOCK + 300, secs(900));
        prop_assert_eq!(outcome, Outcome::Done, "seed {}: {:?}", seed, h.records[&bad].events);
        h.assert_streams_agree(&sc.peer_ids());
        healed_alone(seed, &h.records, &sc.peer_ids(), bad, &["resyncing", "snapshot"])?;
    }
}

/// Every machine of `ids` ended on the same state; `bad` alone was
/// resynced, once, hearing `order` of the resync's events.
fn healed_alone(
    seed: u64,
    records: &BTreeMap<PeerId, Record>,
    ids: &[PeerId],
    bad: PeerId,
    order: &[&str],
) -> Result<(), TestCaseError> {
    let n = ids
        .iter()
        .map(|id| records[id].chain.len())
        .min()
        .unwrap_or(0);
    let good = ids.iter().copied().find(|id| *id != bad).unwrap_or(bad);
    for id in ids {
        let rec = &records[id];
        prop_assert_eq!(
            rec.chain[n - 1],
            records[&good].chain[n - 1],
            "seed {}: {} ends apart: {:?}",
            seed,
            id,
            rec.events
        );
        let resynced = rec
            .events
            .iter()
            .filter(|e| matches!(e, Event::Resyncing))
            .count();
        prop_assert_eq!(
            resynced,
            usize::from(*id == bad),
            "seed {}: {}: {:?}",
            seed,
            id,
            rec.events
        );
    }
    let heard: Vec<&str> = records[&bad]
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Resyncing => Some("resyncing"),
            Event::Snapshot { .. } => Some("snapshot"),
            Event::CaughtUp { .. } => Some("caught up"),
            _ => None,
        })
        .collect();
    prop_assert_eq!(heard, order.to_vec(), "seed {}", seed);
    Ok(())
}

/// Two players that part have no majority: each hears of the desync and
/// where it began, and neither takes the other's state.
#[test]
fn two_mesh_players_that_part_are_told_and_left_alone() {
    let mut sc = Scenario::new(2, 3);
    sc.config.abandon_after = None;
    sc.config.resync = true;
    sc.link = LinkConditions {
        latency: Duration::from_millis(20),
        jitter: Duration::from_millis(5),
        loss: 0.05,
        ..LinkConditions::default()
    };
    let mut h = sc.build();
    h.checksum_every = 1;
    h.records.get_mut(&PeerId(1)).unwrap().corrupt = Some(Tick::new(90));
    let outcome = h.run_until_tick(600, secs(120));
    assert_eq!(outcome, Outcome::Done);
    for id in sc.peer_ids() {
        let rec = &h.records[&id];
        let (desyncs, located) = heard(rec, PeerId(1 - id.0));
        assert_eq!(desyncs.len(), 1, "{id}: {:?}", rec.events);
        assert_eq!(located, vec![Some(located[0].unwrap())], "{id}");
        assert_eq!(located[0].map(|f| f.tick), Some(Tick::new(90)));
        assert!(
            !rec.events
                .iter()
                .any(|e| matches!(e, Event::Resyncing | Event::Snapshot { .. })),
            "{id}: {:?}",
            rec.events
        );
    }
}

/// Two relay clients that part have no majority either: each is told (a
/// checkpoint of the other's that differs from its own), finds where it
/// began by asking the other through the sequencer, and neither is
/// resynced. Before, neither heard anything: only the relay's log said so.
#[test]
fn two_relay_clients_that_part_are_told_and_left_alone() {
    for seed in [3, 4, 5] {
        let mut sc = StarScenario::new(2, seed);
        sc.link = LinkConditions {
            latency: Duration::from_millis(20),
            jitter: Duration::from_millis(5),
            loss: 0.05,
            ..LinkConditions::default()
        };
        let mut h = sc.build();
        let skewed = sc.client_ids()[1];
        let at = Tick::new(90);
        h.records.get_mut(&skewed).unwrap().skew = Some((at, true));
        let outcome = h.run_until_frames(600, secs(120));
        assert_eq!(outcome, Outcome::Done, "seed {seed}");
        h.assert_streams_agree(&sc.client_ids());
        for who in sc.client_ids() {
            let rec = &h.records[&who];
            let (desyncs, located) = heard(rec, SERVER);
            assert_eq!(desyncs.len(), 1, "seed {seed}: {who}: {:?}", rec.events);
            assert!(
                soon_after(desyncs[0], at),
                "seed {seed}: {who} told at {} (injected at {at})",
                desyncs[0]
            );
            assert_eq!(located.len(), 1, "seed {seed}: {who}: {:?}", rec.events);
            let first = located[0].unwrap_or_else(|| panic!("seed {seed}: {who}: not located"));
            assert_eq!(first.tick, at, "seed {seed}: {who}");
            let state = rec.chain[at.get() as usize];
            let skew = if who == skewed {
                (state ^ SKEW, state)
            } else {
                (state, state ^ SKEW)
            };
            assert_eq!((first.local, first.remote), skew, "seed {seed}: {who}");
            assert!(
                !rec.events
                    .iter()
                    .any(|e| matches!(e, Event::Resyncing | Event::Snapshot { .. })),
                "seed {seed}: {who}: {:?}",
                rec.events
            );
        }
    }
}

/// A mesh player whose game keeps diverging (its hashes differ however
/// often its state is replaced) is resynced `max_resyncs` times, then
/// leaves; the others abandon its seat, play on and agree.
#[test]
fn a_mesh_player_that_keeps_diverging_leaves() {
    let mut sc = Scenario::new(4, 11);
    sc.config.resync = true;
    sc.config.max_resyncs = 2;
    sc.link = LinkConditions {
        latency: Duration::from_millis(20),
        jitter: Duration::from_millis(5),
        loss: 0.05,
        ..LinkConditions::default()
    };
    let mut h = sc.build();
    h.checksum_every = 1;
    let bad = PeerId(2);
    h.records.get_mut(&bad).unwrap().skew = Some((Tick::new(40), true));
    let honest = [PeerId(0), PeerId(1), PeerId(3)];
    let outcome = h.run(
        secs(120),
        |_, _, _, _| {},
        |sim| {
            honest
                .iter()
                .all(|id| sim.endpoint(*id).is_some_and(|s| s.stats().frames >= 1_500))
        },
    );
    assert_eq!(outcome, Outcome::Done);
    h.assert_streams_agree(&sc.peer_ids());
    let events = &h.records[&bad].events;
    let resyncs = events
        .iter()
        .filter(|e| matches!(e, Event::Resyncing))
        .count();
    assert_eq!(resyncs, 2, "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::DivergedTooOften { resyncs: 2 })),
        "{events:?}"
    );
    for id in honest {
        let rec = &h.records[&id];
        assert!(
            rec.events
                .iter()
                .any(|e| matches!(e, Event::Abandoned { player, .. } if player.0 == 2)),
            "{id}: {:?}",
            rec.events
        );
        assert!(
            !rec.events.iter().any(|e| matches!(e, Event::Resyncing)),
            "{id}: {:?}",
            rec.events
        );
    }
}

/// A client whose game keeps diverging (its hashes differ however often
/// its state is replaced) is resynced `max_resyncs` times, then dropped;
/// the others play on and agree.
#[test]
fn a_client_that_keeps_diverging_is_dropped() {
    let mut sc = StarScenario::new(3, 7);
    sc.link = LinkConditions {
        latency: Duration::from_millis(20),
        jitter: Duration::from_millis(5),
        loss: 0.05,
        ..LinkConditions::default()
    };
    sc.server.snapshot_join = true;
    sc.server.max_resyncs = 2;
    let mut h = sc.build();
    let bad = PeerId(2);
    h.records.get_mut(&bad).unwrap().skew = Some((Tick::new(40), true));
    let honest = [PeerId(1), PeerId(3)];
    let outcome = h.run(
        secs(120),
        |_, _, _| {},
        |sim| {
            honest.iter().all(|id| {
                sim.endpoint(*id)
                    .and_then(Node::client)
                    .is_some_and(|c| c.stats().frames >= 1_500)
            })
        },
    );
    assert_eq!(outcome, Outcome::Done);
    h.assert_streams_agree(&honest);
    let resyncs = h.records[&bad]
        .events
        .iter()
        .filter(|e| matches!(e, Event::Resyncing))
        .count();
    assert_eq!(resyncs, 2, "{:?}", h.records[&bad].events);
    assert!(
        h.records[&bad]
            .events
            .iter()
            .any(|e| matches!(e, Event::Closed { .. })),
        "dropped: {:?}",
        h.records[&bad].events
    );
    for id in honest {
        assert!(
            !h.records[&id].events.iter().any(|e| matches!(
                e,
                Event::Resyncing | Event::Desync { .. } | Event::Closed { .. }
            )),
            "{id}: {:?}",
            h.records[&id].events
        );
    }
}

/// A resynced client whose inputs ran ahead of the tick its seat plays
/// again from (a large delay, a resync that took less than it): the
/// sequencer, which dropped those inputs, takes them again, and the room
/// does not wait on it for good.
#[test]
fn a_resynced_client_whose_inputs_ran_ahead_plays_on() {
    let mut sc = StarScenario::new(3, 7);
    sc.link = LinkConditions {
        latency: Duration::from_millis(5),
        ..LinkConditions::default()
    };
    sc.server.snapshot_join = true;
    sc.server.adaptive = None;
    let mut h = sc.build();
    // The room waits on a far player: the others' inputs run ahead of the
    // open tick by their whole lead.
    let far = LinkConditions {
        latency: Duration::from_millis(300),
        ..sc.link.clone()
    };
    h.sim.net.set_link_both(SERVER, PeerId(1), far);
    let skewed = PeerId(2);
    h.records.get_mut(&skewed).unwrap().corrupt = Some(Tick::new(100));
    let outcome = h.run_until_frames(600, secs(120));
    assert_eq!(
        outcome,
        Outcome::Done,
        "{:?}; frames {:?}",
        h.records[&skewed].events,
        sc.client_ids()
            .iter()
            .map(|id| h.client(*id).stats().frames)
            .collect::<Vec<_>>()
    );
    h.assert_streams_agree(&sc.client_ids());
    healed_alone(
        7,
        &h.records,
        &sc.client_ids(),
        skewed,
        &["resyncing", "snapshot", "caught up"],
    )
    .unwrap();
}
