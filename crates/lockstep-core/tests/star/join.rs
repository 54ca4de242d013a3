//! Joining a sequenced game under way from a snapshot, on the simulated
//! network: a donor hands its state over, the joiner restores it, catches
//! up, plays, and every machine ends on the same state.

use crate::common;
use common::join::World;
use common::props::cases;
use common::star::{Node, SERVER};
use lockstep_core::sequenced::{Policy, SequencerConfig, SequencerEvent};
use lockstep_core::sim::{LinkConditions, Outcome};
use lockstep_core::snapshot::SnapshotError;
use lockstep_core::{Event, Instant, Pacer, PacerConfig, PeerId, SystemEvent, Tick};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

fn server_config(policy: Policy) -> SequencerConfig {
    SequencerConfig {
        policy,
        snapshot_join: true,
        snapshot_join_after: 0,
        // Short history: joining by replay would be refused.
        history: 64,
        ..SequencerConfig::default()
    }
}

/// Every client runs the loop `docs/game-loop.md` shows (a `Pacer` on
/// `ready_to_pace()`, committing while `input_due()` holds), the joiner
/// too. A joiner holds nobody up, so frames beyond one did not count for
/// it: it ran at the tick rate one or two frames behind the room, never
/// reached the open tick, never went live, and none of its inputs ran, with
/// no error and no event to say so.
#[test]
fn a_paced_joiner_catches_up_and_its_inputs_run() {
    for seed in 1..=3 {
        let mut w = World::new(
            2,
            server_config(Policy::WaitForAll {
                abandon_after: Duration::from_secs(10),
            }),
            LinkConditions {
                latency: Duration::from_millis(20),
                jitter: Duration::from_millis(5),
                ..LinkConditions::default()
            },
            seed,
        );
        let paced = || Pacer::new(30, PacerConfig::default()).unwrap();
        for app in w.apps.values_mut() {
            app.pacer = Some(paced());
        }
        assert_eq!(w.run(Instant::from_millis(3_000)), Outcome::TimedOut);
        w.add_client(PeerId(3), true, false, seed);
        w.apps.get_mut(&PeerId(3)).unwrap().pacer = Some(paced());
        assert_eq!(w.run(Instant::from_millis(10_000)), Outcome::TimedOut);

        let joiner = &w.apps[&PeerId(3)];
        let live = joiner.events.iter().find_map(|e| match e {
            Event::CaughtUp { tick } => Some(*tick),
            _ => None,
        });
        let live = live.unwrap_or_else(|| panic!("seed {seed}: the joiner never went live"));
        // Every frame since it went live ran an input of its own, but for
        // the few its lead put beyond the run's end.
        let ran = joiner.own_inputs_run;
        let since = w.client(PeerId(1)).frame().since(live);
        assert!(
            ran + 10 >= u64::from(since) && since > 100,
            "seed {seed}: {ran} of the joiner's inputs ran in the {since} frames since it went live"
        );
        let ids: Vec<PeerId> = (1..=3).map(PeerId).collect();
        w.assert_states_agree(&ids, seed);
    }
}

/// A donor that hands over its state after the tick past the one asked
/// (its loop ran a frame before it read the request) is told so: the
/// state was dropped with `Ok(())` before, and the joiner closed later
/// with "nobody can hand you the game's state".
#[test]
fn a_state_for_another_tick_than_the_one_asked_is_an_error() {
    let seed = 5;
    let mut w = World::new(
        2,
        server_config(Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        }),
        LinkConditions::default(),
        seed,
    );
    for app in w.apps.values_mut() {
        app.late_donor = true;
    }
    assert_eq!(w.run(Instant::from_millis(2_000)), Outcome::TimedOut);
    w.add_client(PeerId(3), true, false, seed);
    assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
    let refused: Vec<_> = w
        .apps
        .values()
        .flat_map(|a| a.snapshot_errors.iter().cloned())
        .collect();
    assert!(!refused.is_empty(), "a donor was asked");
    for e in &refused {
        let SnapshotError::NotAsked {
            tick,
            asked: Some(asked),
        } = e
        else {
            panic!("refused for another reason: {e}");
        };
        assert_eq!(*tick, asked.saturating_add(1), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("the state after tick {asked} is"))
        );
    }
    assert!(w.apps[&PeerId(3)].restored.is_empty());
}

/// A player joining by replay (a room without snapshots) five seconds
/// late, every client running the paced loop of `docs/game-loop.md`, in
/// an adaptive room: the joiner replays the 150 ticks it missed, keeps
/// within two frames of the room and runs an input of its own in nearly
/// every frame; the room's delay stays where the network put it (3).
#[test]
fn a_paced_replay_joiner_catches_up_without_slowing_the_room() {
    for seed in 1..=3 {
        let config = SequencerConfig {
            policy: Policy::WaitForAll {
                abandon_after: Duration::from_secs(10),
            },
            adaptive: Some(lockstep_core::AdaptiveDelay::default()),
            ..SequencerConfig::default()
        };
        let link = LinkConditions {
            latency: Duration::from_millis(10),
            jitter: Duration::from_millis(8),
            ..LinkConditions::default()
        };
        let mut w = World::new(2, config, link, seed);
        let paced = || Pacer::new(30, PacerConfig::default()).unwrap();
        for app in w.apps.values_mut() {
            app.pacer = Some(paced());
        }
        assert_eq!(w.run(Instant::from_millis(5_000)), Outcome::TimedOut);
        let before = w.server().stats().delay;
        w.add_client(PeerId(3), false, false, seed);
        w.apps.get_mut(&PeerId(3)).unwrap().pacer = Some(paced());
        assert_eq!(w.run(Instant::from_millis(16_000)), Outcome::TimedOut);
        let ids: Vec<PeerId> = (1..=3).map(PeerId).collect();
        w.assert_states_agree(&ids, seed);
        let delay = w.server().stats().delay;
        let lag = w
            .client(PeerId(1))
            .frame()
            .since(w.client(PeerId(3)).frame());
        let joiner = &w.apps[&PeerId(3)];
        assert!(
            delay <= before + 1,
            "seed {seed}: delay {before} -> {delay}"
        );
        assert!(lag <= 2, "seed {seed}: the joiner is {lag} frames behind");
        assert!(
            joiner.own_inputs_run > 250,
            "seed {seed}: {} ran",
            joiner.own_inputs_run
        );
    }
}

#[test]
fn a_player_joins_a_game_under_way_from_a_snapshot_and_plays() {
    let seed = 7;
    let mut w = World::new(
        3,
        server_config(Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        }),
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(5_000)), Outcome::TimedOut);
    let before = w.client(PeerId(1)).frame();
    assert!(before.get() > 100, "the game is under way: {before}");
    w.add_client(PeerId(4), true, false, seed);
    assert_eq!(w.run(Instant::from_millis(12_000)), Outcome::TimedOut);

    let joiner = &w.apps[&PeerId(4)];
    let snap = joiner.events.iter().find_map(|e| match e {
        Event::Snapshot { tick } => Some(*tick),
        _ => None,
    });
    let snap = snap.expect("the joiner got a snapshot");
    assert!(snap >= before, "snapshot after tick {snap}");
    assert!(
        joiner
            .events
            .iter()
            .any(|e| matches!(e, Event::CaughtUp { .. })),
        "the joiner caught up: {:?}",
        joiner.events
    );
    assert!(joiner.inputs_after_live > 100, "the joiner plays");
    assert!(!w.client(PeerId(4)).joining());
    // Its first frame is the one right after the snapshot.
    assert_eq!(joiner.states.keys().next(), Some(&snap.saturating_add(1)));
    let ids: Vec<PeerId> = (1..=4).map(PeerId).collect();
    let common = w.assert_states_agree(&ids, seed);
    assert!(common > 1_000);
    // The stream says when the seat joined and when it went live.
    let events: Vec<SequencerEvent> = w.server_events.clone();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, SequencerEvent::SnapshotReady { joiners: 1, .. }))
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, SequencerEvent::CaughtUp { .. }))
    );
    let _ = SystemEvent::CaughtUp {
        player: lockstep_core::PlayerId(3),
    };
}

#[test]
fn a_donor_that_disappears_mid_transfer_is_replaced() {
    let seed = 11;
    let mut w = World::new(
        3,
        server_config(Policy::Deadline {
            missing: lockstep_core::sequenced::MissingInput::RepeatLast,
        }),
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(3_000)), Outcome::TimedOut);
    w.add_client(PeerId(4), true, false, seed);
    // The first donor asked falls dead as soon as it is asked.
    let mut first = None;
    let mut at = 3_000;
    while first.is_none() && at < 10_000 {
        at += 20;
        let o = w.run_with(Instant::from_millis(at), |ev, freeze| {
            if let SequencerEvent::SnapshotAsked { donor, .. } = ev {
                freeze.push(*donor);
            }
        });
        assert_eq!(o, Outcome::TimedOut);
        first = w.server_events.iter().find_map(|e| match e {
            SequencerEvent::SnapshotAsked { donor, .. } => Some(*donor),
            _ => None,
        });
    }
    let first = first.expect("a donor was asked");
    let o = w.run(Instant::from_millis(15_000));
    assert_eq!(o, Outcome::TimedOut);

    assert!(
        w.server_events
            .iter()
            .any(|e| matches!(e, SequencerEvent::SnapshotFailed { donor, .. } if *donor == first))
    );
    let joiner = &w.apps[&PeerId(4)];
    assert!(
        joiner
            .events
            .iter()
            .any(|e| matches!(e, Event::CaughtUp { .. }))
    );
    let ids: Vec<PeerId> = (1..=4).map(PeerId).filter(|id| *id != first).collect();
    assert!(w.assert_states_agree(&ids, seed) > 500);
}

proptest! {
    #![proptest_config(cases(24))]

    /// Players and a spectator join at random moments through loss,
    /// duplication and reordering, under either policy: every one gets a
    /// snapshot, catches up, and every machine holds the same state after
    /// every tick they both ran.
    #[test]
    fn joiners_under_loss_end_on_the_same_state(
        seed in any::<u64>(),
        deadline in any::<bool>(),
        loss in 0.0f64..0.2,
        joins in proptest::collection::vec(500u64..6_000, 1..3),
        spectator in any::<bool>(),
    ) {
        let policy = if deadline {
            Policy::Deadline { missing: lockstep_core::sequenced::MissingInput::Neutral }
        } else {
            Policy::WaitForAll { abandon_after: Duration::from_secs(10) }
        };
        let link = LinkConditions {
            latency: Duration::from_millis(15),
            jitter: Duration::from_millis(10),
            loss,
            duplicate: 0.05,
            reorder: 0.1,
            max_datagram: Some(1200),
            bandwidth: None,
        };
        let mut w = World::new(2, server_config(policy), link, seed);
        let mut joins = joins;
        joins.sort_unstable();
        let mut next_id = 3u32;
        for at in &joins {
            prop_assert_eq!(w.run(Instant::from_millis(*at)), Outcome::TimedOut);
            w.add_client(PeerId(next_id), true, false, seed);
            next_id += 1;
        }
        if spectator {
            w.add_client(PeerId(next_id), true, true, seed);
            next_id += 1;
        }
        let end = joins.last().copied().unwrap_or(0) + 15_000;
        prop_assert_eq!(w.run(Instant::from_millis(end)), Outcome::TimedOut);
        let ids: Vec<PeerId> = (1..next_id).map(PeerId).collect();
        for id in &ids[2..] {
            let app = &w.apps[id];
            prop_assert!(app.events.iter().any(|e| matches!(e, Event::CaughtUp { .. })),
                "seed {}: {} never caught up: {:?}", seed, id, app.events);
        }
        w.assert_states_agree(&ids, seed);
    }
}

/// A datagram from `from` carrying `chunk`, as a client would send it.
fn chunk_datagram(base: Tick, chunk: &lockstep_core::wire::SnapshotChunk<'_>) -> Vec<u8> {
    common::join::datagram(base, &[lockstep_core::wire::Message::SnapshotChunk(*chunk)])
}

/// A whole (one-chunk) snapshot of `bytes` after `tick` as snapshot `id`.
fn forged_snapshot(id: u32, tick: Tick, bytes: Vec<u8>) -> Vec<u8> {
    let state = lockstep_core::snapshot::Snapshot::new(tick, bytes);
    let mut tx = lockstep_core::snapshot::SnapshotSender::new(
        id,
        &state,
        1_000,
        &lockstep_core::snapshot::SnapshotLimits::default(),
    )
    .unwrap();
    let chunk = tx.next_chunk(Instant::ZERO).unwrap().as_message();
    chunk_datagram(tick, &chunk)
}

/// Attacks on the join by clients already in the room, while honest ones
/// play: chunks from a client nobody asked, a donor claiming a state over
/// the cap, a donor handing over a state for another tick. Each is ignored
/// or the donor replaced; the joiner gets in and everyone ends on one state.
#[test]
fn lying_clients_cannot_keep_a_joiner_out_or_give_it_another_tick() {
    let seed = 23;
    let mut w = World::new(
        4,
        server_config(Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        }),
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(3_000)), Outcome::TimedOut);
    w.add_client(PeerId(5), true, false, seed);
    // The first donor lies about its state's size; the second hands over a
    // state for another tick; a bystander sprays chunks of its own.
    let (first, tick, id) = w
        .run_until(10_000, |e| match e {
            SequencerEvent::SnapshotAsked { donor, tick, id } => Some((*donor, *tick, *id)),
            _ => None,
        })
        .expect("a donor was asked");
    let bystander = (1..=4).map(PeerId).find(|p| *p != first).unwrap();
    let huge = lockstep_core::wire::SnapshotChunk {
        id,
        tick,
        raw_len: 60 << 20,
        packed_len: 100,
        hash: 1,
        index: 0,
        count: 1,
        checksum: lockstep_core::snapshot::chunk_checksum(&[0; 100]),
        data: &[0; 100],
    };
    w.sim.net.send(first, SERVER, &chunk_datagram(tick, &huge));
    w.sim
        .net
        .send(bystander, SERVER, &forged_snapshot(id, tick, vec![1; 12]));
    let (second, tick2, id2) = w
        .run_until(20_000, |e| match e {
            SequencerEvent::SnapshotAsked { donor, tick, id } if *donor != first => {
                Some((*donor, *tick, *id))
            }
            _ => None,
        })
        .unwrap_or_else(|| {
            panic!(
                "another donor was asked: {:?}",
                w.server_events
                    .iter()
                    .filter(|e| !matches!(e, SequencerEvent::Joined { .. }))
                    .collect::<Vec<_>>()
            )
        });
    let wrong = tick2.saturating_sub(1);
    w.sim
        .net
        .send(second, SERVER, &forged_snapshot(id2, wrong, vec![2; 12]));
    assert_eq!(w.run(Instant::from_millis(25_000)), Outcome::TimedOut);

    let failed: Vec<PeerId> = w
        .server_events
        .iter()
        .filter_map(|e| match e {
            SequencerEvent::SnapshotFailed { donor, .. } => Some(*donor),
            _ => None,
        })
        .collect();
    assert!(
        failed.contains(&first) && failed.contains(&second),
        "{failed:?}"
    );
    let joiner = &w.apps[&PeerId(5)];
    assert!(
        joiner
            .events
            .iter()
            .any(|e| matches!(e, Event::CaughtUp { .. })),
        "the joiner got in: {:?}",
        joiner.events
    );
    let ids: Vec<PeerId> = (1..=5).map(PeerId).collect();
    assert!(w.assert_states_agree(&ids, seed) > 1_000);
}

/// A joiner that never acknowledges its snapshot would be sent the window
/// again and again; it is closed once it has acknowledged nothing new for
/// three donor timeouts, and the rest play on.
#[test]
fn a_joiner_that_never_acknowledges_is_closed() {
    let seed = 29;
    let mut w = World::new(
        2,
        server_config(Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        }),
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(2_000)), Outcome::TimedOut);
    w.add_node(PeerId(3), true, false, seed, Node::Unacking);
    let closed = w.run_until(20_000, |e| match e {
        SequencerEvent::Closed { peer, reason, .. } if *peer == PeerId(3) => Some(reason.clone()),
        _ => None,
    });
    let closed = closed.expect("the silent joiner was closed");
    assert!(
        format!("{closed:?}").contains("acknowledging"),
        "{closed:?}"
    );
    assert_eq!(w.run(Instant::from_millis(22_000)), Outcome::TimedOut);
    let ids = [PeerId(1), PeerId(2)];
    assert!(w.assert_states_agree(&ids, seed) > 500);
    let frames = w.apps[&PeerId(1)].states.len();
    assert!(frames > 600, "the others played on: {frames}");
}

/// A room past tick 100,000 (history long since trimmed) still admits a
/// player and a spectator: both from a snapshot, and both end on the state
/// everyone holds.
#[test]
fn a_room_past_tick_100_000_admits_joiners_and_spectators() {
    let seed = 31;
    let mut server = server_config(Policy::WaitForAll {
        abandon_after: Duration::from_secs(10),
    });
    server.first_tick = Tick::new(100_000);
    let mut w = World::new(2, server, LinkConditions::default(), seed);
    assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
    assert!(w.client(PeerId(1)).frame().get() > 100_100);
    w.add_client(PeerId(3), true, false, seed);
    w.add_client(PeerId(4), true, true, seed);
    assert_eq!(w.run(Instant::from_millis(12_000)), Outcome::TimedOut);
    for id in [PeerId(3), PeerId(4)] {
        assert!(
            w.apps[&id]
                .events
                .iter()
                .any(|e| matches!(e, Event::CaughtUp { .. })),
            "{id}: {:?}",
            w.apps[&id].events
        );
    }
    let ids: Vec<PeerId> = (1..=4).map(PeerId).collect();
    assert!(w.assert_states_agree(&ids, seed) > 1_000);
}

/// A player whose connection dies reconnects on a new one with its resume
/// token, long after the history stopped holding the game's start: it takes
/// its seat back from a snapshot, catches up, plays on, and ends on the
/// state everyone holds. The others were never held up for long.
#[test]
fn a_player_reconnects_from_a_snapshot_after_the_history_is_gone() {
    let seed = 37;
    let mut w = World::new(
        3,
        server_config(Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        }),
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
    let token = w.client(PeerId(1)).welcome().expect("welcomed").token;
    let seat = w.client(PeerId(1)).seat();
    w.sim.freeze(PeerId(1));
    assert_eq!(w.run(Instant::from_millis(6_000)), Outcome::TimedOut);
    let server = w.sim.endpoint(SERVER).and_then(Node::server).unwrap();
    assert!(
        !server.replayable(),
        "the history no longer holds the start"
    );
    w.reconnect(PeerId(11), token, seed);
    assert_eq!(w.run(Instant::from_millis(14_000)), Outcome::TimedOut);
    let back = &w.apps[&PeerId(11)];
    assert!(
        back.events
            .iter()
            .any(|e| matches!(e, Event::CaughtUp { .. })),
        "{:?}",
        back.events
    );
    assert_eq!(w.client(PeerId(11)).seat(), seat, "the same seat");
    assert!(back.inputs_after_live > 100, "it plays again");
    assert!(w.server_events.iter().any(
        |e| matches!(e, SequencerEvent::Resumed { previous, .. } if *previous == Some(PeerId(1)))
    ));
    let ids = [PeerId(2), PeerId(3), PeerId(11)];
    assert!(w.assert_states_agree(&ids, seed) > 1_000);
    // The crashed connection's stream agrees with everyone's as far as it
    // got.
    w.assert_states_agree(&[PeerId(1), PeerId(2)], seed);
}

/// A sequencer that runs the game itself: joiners get its state without any
/// client being asked, and its hash is the checksum authority, so a lone
/// liar is told it differs even in a room of two where no majority exists.
#[test]
fn a_server_that_simulates_hands_joiners_its_state_and_judges_checksums() {
    let seed = 41;
    let mut w = World::with(
        2,
        server_config(Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        }),
        LinkConditions::default(),
        seed,
        true,
    );
    if let Some(app) = w.apps.get_mut(&PeerId(2)) {
        app.lie = true;
    }
    assert_eq!(w.run(Instant::from_millis(3_000)), Outcome::TimedOut);
    w.add_client(PeerId(3), true, false, seed);
    assert_eq!(w.run(Instant::from_millis(8_000)), Outcome::TimedOut);
    assert!(
        !w.server_events
            .iter()
            .any(|e| matches!(e, SequencerEvent::SnapshotAsked { .. })),
        "no client was asked"
    );
    assert!(
        w.server_events
            .iter()
            .any(|e| matches!(e, SequencerEvent::SnapshotReady { joiners: 1, .. }))
    );
    let joiner = &w.apps[&PeerId(3)];
    assert!(
        joiner
            .events
            .iter()
            .any(|e| matches!(e, Event::CaughtUp { .. }))
    );
    let ids: Vec<PeerId> = (1..=3).map(PeerId).collect();
    assert!(w.assert_states_agree(&ids, seed) > 500);
    let told = |id: u32| {
        w.apps[&PeerId(id)]
            .events
            .iter()
            .any(|e| matches!(e, Event::Desync { .. }))
    };
    assert!(told(2), "the liar is told it differs");
    assert!(!told(1) && !told(3), "the honest are not");
}

proptest! {
    #![proptest_config(cases(64))]

    /// Players lose their connections at random moments and come back on
    /// new ones with their resume tokens, through loss and under either
    /// policy (a second drop of the same seat included, and the only donor
    /// dropping while the others join): a new process with the token, or
    /// the same session reconnecting on a new socket (its game checks that
    /// no frame is run twice or skipped across it). Each takes its seat
    /// back, from the history, a snapshot or, when nobody else could
    /// donate, by replaying, plays again, and every machine holds the same
    /// state after every tick they both ran.
    #[test]
    fn dropped_players_reconnect_under_loss_and_end_on_the_same_state(
        seed in any::<u64>(),
        deadline in any::<bool>(),
        loss in 0.0f64..0.15,
        drops in proptest::collection::vec((1u32..=3, 500u64..5_000, 1_200u64..4_000, any::<bool>()), 1..3),
    ) {
        let policy = if deadline {
            Policy::Deadline { missing: lockstep_core::sequenced::MissingInput::Neutral }
        } else {
            Policy::WaitForAll { abandon_after: Duration::from_secs(10) }
        };
        let link = LinkConditions {
            latency: Duration::from_millis(15),
            jitter: Duration::from_millis(10),
            loss,
            duplicate: 0.05,
            reorder: 0.1,
            max_datagram: Some(1200),
            bandwidth: None,
        };
        let mut w = World::new(3, server_config(policy), link, seed);
        // Each drop: which player, when, and how long until it is back.
        let mut drops = drops;
        drops.sort_by_key(|d| d.1);
        let end_of = Instant::from_millis(10_000_000);
        let mut current: BTreeMap<u32, PeerId> = (1..=3).map(|k| (k, PeerId(k))).collect();
        let mut next_id = 10u32;
        let mut at = 0u64;
        let mut back = Vec::new();
        for (player, when, away, same_session) in drops {
            let when = when.max(at + 100);
            prop_assert_eq!(w.run(Instant::from_millis(when)), Outcome::TimedOut);
            let id = current[&player];
            let Some(token) = w.client(id).welcome().map(|w| w.token) else {
                continue;
            };
            // Either the process dies and a new one comes back with the
            // token, or the network goes away and the same session
            // reconnects on a new socket, keeping its game.
            if same_session {
                let now = w.sim.now();
                w.sim.net.partition(&[id], &[SERVER], now, end_of);
            } else {
                w.sim.freeze(id);
            }
            let ret = when + away;
            prop_assert_eq!(w.run(Instant::from_millis(ret)), Outcome::TimedOut);
            let fresh = PeerId(next_id);
            next_id += 1;
            if same_session && w.client(id).can_reconnect() {
                w.move_client(id, fresh);
            } else {
                w.sim.freeze(id);
                w.reconnect(fresh, token, seed);
            }
            current.insert(player, fresh);
            back.push(fresh);
            at = ret;
        }
        prop_assert_eq!(w.run(Instant::from_millis(at + 12_000)), Outcome::TimedOut);
        for id in &back {
            // Frozen, or moved on to yet another socket.
            if w.sim.is_frozen(*id) || !w.apps.contains_key(id) {
                continue;
            }
            // Back from the history, a snapshot (caught up) or, when nobody
            // else could donate, by replaying the game: playing again.
            let app = &w.apps[id];
            prop_assert!(!w.client(*id).joining() && app.inputs_after_live > 50,
                "seed {}: {} is not playing: {:?}", seed, id, app.events);
        }
        let live: Vec<PeerId> = current.values().copied().collect();
        prop_assert!(w.assert_states_agree(&live, seed) > 300);
    }
}
