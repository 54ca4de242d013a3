//! Mesh observers catching up from a snapshot: one cut off for longer than
//! the frames kept for it, one that joins a mesh under way, one whose donor
//! vanishes mid-transfer, and what a hostile or oversized snapshot changes
//! (nothing, for anyone).
//!
//! The test game's state is a hash folded over every frame run, so an
//! observer that restored a snapshot and ran on agrees with the players
//! tick for tick from the snapshot on, and a wrong snapshot shows.

use crate::common;
use common::observe::{
    all_reached, assert_bounded, clean, forged, join_observer, live_ids, mid_transfer, reach,
    until_caught_up,
};
use common::props::{cases, link};
use common::{Harness, Scenario, outcome_ok};
use lockstep_core::snapshot::{Snapshot, SnapshotError, SnapshotLimits, SnapshotSender};
use lockstep_core::wire::{Hello, Message, SnapshotChunk};
use lockstep_core::{Event, Instant, PeerId, Tick};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::time::Duration;

prop_compose! {
    fn scenario(max_players: usize)(
        players in 2..=max_players,
        delay in 0u32..4,
        max_lead in 1u32..8,
        window in 64u32..256,
        period in 16u64..50,
        link in link(100, 40),
        seed in any::<u64>(),
    ) -> Scenario {
        let mut s = Scenario::new(players, seed);
        s.config.delay = delay;
        s.config.max_lead = max_lead;
        // The window must cover a transfer (it starts at 4 chunks and
        // doubles each round trip): 64 ticks of 16 ms is one second.
        s.config.observer_window = window;
        s.config.abandon_after = Some(Duration::from_secs(2));
        s.link = link;
        s.period = Duration::from_millis(period);
        s
    }
}

/// The case's event at `at` (`None`) and, if any, the crash of a player
/// other than the first (someone must play on), in time order.
fn schedule(at: u64, crash: Option<(usize, u64)>, players: usize) -> Vec<(u64, Option<PeerId>)> {
    let mut steps = vec![(at, None)];
    if let Some((who, when)) = crash {
        steps.push((when, Some(PeerId((who % (players - 1)) as u32 + 1))));
    }
    steps.sort();
    steps
}

/// Runs until every live peer is 300 ticks past where the players are
/// (within 400 s of `from_ms`), then checks what every case must: they got
/// there, their streams agree, nobody saw a desync, buffers stayed bounded.
fn play_on(h: &mut Harness, seed: u64, from_ms: u64) -> Result<(), TestCaseError> {
    let first = h.first;
    let target = h.session(PeerId(0)).frame().since(first) + 300;
    let until = Instant::from_millis(from_ms) + Duration::from_secs(400);
    let outcome = h.run(
        until,
        |_, _, _, _| {},
        |sim| sim.live().all(|(_, s)| s.frame().since(first) >= target),
    );
    h.assert_streams_agree(&live_ids(h));
    h.assert_no_desync();
    assert_bounded(h, seed);
    let at: Vec<_> = h
        .sim
        .live()
        .map(|(id, s)| {
            (
                id,
                s.frame(),
                s.stats().snapshot_errors,
                s.snapshot_progress(),
            )
        })
        .collect();
    prop_assert!(
        all_reached(h, target),
        "seed {seed}: {outcome:?}, stalled at {at:?}"
    );
    Ok(())
}

proptest! {
    #![proptest_config(cases(60))]

    /// An observer cut off from every player for longer than the frames
    /// kept for it catches up from a snapshot, and from there runs exactly
    /// the players' frames; a player crashing meanwhile (and abandoned)
    /// changes nothing to that.
    #[test]
    fn an_observer_cut_off_past_its_window_catches_up(
        sc in scenario(4),
        observers in 1usize..=2,
        cut_at in 200u64..3_000,
        cut_for in 1_000u64..6_000,
        crash in proptest::option::of((0usize..4, 0u64..8_000)),
        bulk in prop_oneof![Just(0usize), 1_000usize..30_000],
    ) {
        let mut sc = sc;
        sc.observers = observers;
        let mut h = sc.build_with_bulk(bulk);
        let ids = sc.peer_ids();
        let (players, watchers) = ids.split_at(sc.players);
        let heal = cut_at + cut_for;
        h.sim.net.partition(players, watchers,
            Instant::from_millis(cut_at), Instant::from_millis(heal));
        let steps = schedule(heal, crash, sc.players);
        // How far behind the players each observer is when the cut heals.
        let mut behind_at_heal = Vec::new();
        for (at, victim) in steps {
            h.run(Instant::from_millis(at), |_, _, _, _| {}, |_| false);
            match victim {
                Some(v) => h.sim.freeze(v),
                None => {
                    let lead = h.sim.live().filter(|(_, s)| !s.watching()).map(|(_, s)| s.frame()).min();
                    for w in watchers {
                        let o = h.session(*w).frame();
                        behind_at_heal.push((*w, lead.map_or(0, |l| l.since(o.min(l)))));
                    }
                }
            }
        }
        // Well past the heal and every abandonment.
        play_on(&mut h, sc.seed, heal)?;
        // Behind every frame the players still held: only a snapshot
        // could bring it back.
        let kept = sc.config.observer_window.max(h.session(PeerId(0)).abandon_window());
        for (w, behind) in behind_at_heal {
            if behind > kept + sc.config.delay + sc.config.max_lead + 2 {
                prop_assert!(h.records[&w].restored.is_some(),
                    "seed {}: {w} was {behind} ticks behind and caught up without a snapshot", sc.seed);
            }
        }
        // The observers learned every abandonment, from the snapshot or
        // the frames.
        let players_view = h.session(PeerId(0)).abandoned().to_vec();
        for w in watchers {
            let mut got = h.session(*w).abandoned().to_vec();
            got.sort();
            let mut want = players_view.clone();
            want.sort();
            prop_assert_eq!(got, want, "seed {}", sc.seed);
        }
    }
}

proptest! {
    #![proptest_config(cases(40))]

    /// An observer that joins a mesh under way (its session created late,
    /// every player adding it) is sent the game's state, with the seats
    /// abandoned before it, and from there runs exactly the players'
    /// frames. Started at `first_tick` near 2^16 and 2^32 too, where the
    /// 16-bit tick in the datagram header is read across its wrap.
    #[test]
    fn an_observer_joining_a_mesh_under_way_catches_up(
        sc in scenario(4),
        join_at in 500u64..6_000,
        crash in proptest::option::of((0usize..4, 0u64..6_000)),
        bulk in prop_oneof![Just(0usize), 1_000usize..30_000],
        first in prop_oneof![
            3 => Just(0u32),
            1 => 65_300u32..65_536,
            1 => (u32::MAX - 5_000)..(u32::MAX - 4_500),
        ],
    ) {
        let mut sc = sc;
        sc.config.first_tick = Tick::new(first);
        let mut h = sc.build_with_bulk(bulk);
        let observer = PeerId(sc.players as u32);
        let steps = schedule(join_at, crash, sc.players);
        let mut gone = false;
        for (at, victim) in steps {
            h.run(Instant::from_millis(at), |_, _, _, _| {}, |_| false);
            match victim {
                Some(v) => h.sim.freeze(v),
                None => {
                    // Whether the players dropped the opening frames.
                    let p0 = h.session(PeerId(0));
                    gone = p0.frame().since(h.first) > sc.config.observer_window.max(p0.abandon_window());
                    join_observer(&mut h, &sc, observer);
                }
            }
        }
        play_on(&mut h, sc.seed, join_at)?;
        // The players no longer held the opening frames: a snapshot.
        if gone {
            prop_assert!(h.records[&observer].restored.is_some(), "seed {}: joined without a snapshot", sc.seed);
        }
        let mut want = h.session(PeerId(0)).abandoned().to_vec();
        let mut got = h.session(observer).abandoned().to_vec();
        want.sort();
        got.sort();
        prop_assert_eq!(got, want, "seed {}", sc.seed);
    }
}

/// An observer joining 70 000 ticks into a match (past 2^16: its own
/// first datagrams and the players' differ by more than the 16-bit header
/// tick can tell) reads them right from the full tick its Hello and their
/// Welcome carry, and catches up.
#[test]
fn an_observer_joining_70_000_ticks_in_reads_the_wrapped_header_tick() {
    let sc = clean(2, 11, 1);
    let mut h = sc.build();
    reach(
        &mut h,
        70_000,
        Duration::from_secs(200),
        "the players' first 70 000 ticks",
    );
    let observer = PeerId(2);
    join_observer(&mut h, &sc, observer);
    reach(
        &mut h,
        70_300,
        Duration::from_secs(30),
        "the observer catching up",
    );
    let rec = &h.records[&observer];
    assert!(
        rec.restored.is_some_and(|at| at >= 70_000),
        "restored at {:?}",
        rec.restored
    );
    h.assert_streams_agree(&live_ids(&h));
    h.assert_no_desync();
    assert_eq!(h.sim.rejected(observer), 0);
    assert_eq!(h.sim.rejected(PeerId(0)), 0);
}

/// The feeder crashes while its snapshot is half sent: the next player
/// becomes the feeder once the crash is abandoned, sends its own, and the
/// observer (which takes a second donor's chunks once the first has been
/// quiet a while) catches up from it.
#[test]
fn a_donor_that_vanishes_mid_transfer_is_replaced() {
    let mut sc = clean(3, 5, 16);
    // A small window of chunks: the transfer takes a while.
    sc.config.snapshot.window = 4;
    let mut h = sc.build_with_bulk(200_000);
    reach(
        &mut h,
        200,
        Duration::from_secs(30),
        "the players' first 200 ticks",
    );
    let observer = PeerId(3);
    join_observer(&mut h, &sc, observer);
    mid_transfer(&mut h, observer, "half the snapshot");
    h.sim.freeze(PeerId(0));
    let target = h.session(PeerId(1)).frame().since(h.first) + 300;
    reach(
        &mut h,
        target,
        Duration::from_secs(60),
        "the observer catching up from the next donor",
    );
    assert!(h.records[&observer].restored.is_some());
    assert!(
        h.records[&PeerId(1)]
            .events
            .iter()
            .any(|e| matches!(e, Event::SnapshotRequested { .. })),
        "the next player donated"
    );
    h.assert_streams_agree(&live_ids(&h));
    h.assert_no_desync();
    // The crash is in the observer's membership, from the snapshot or the
    // frames after it.
    assert_eq!(
        h.session(observer).abandoned(),
        h.session(PeerId(1)).abandoned()
    );
    assert_eq!(h.session(observer).abandoned().len(), 1);
}

/// A player sends an observer chunks with a wrong checksum, over the
/// observer's cap, a whole snapshot whose envelope does not decode, and
/// one for a tick the observer has passed: each is refused (counted in
/// `snapshot_errors`, or ignored), changes nothing, and play goes on
/// identical for everyone.
#[test]
fn hostile_snapshot_chunks_change_nothing() {
    let mut sc = clean(2, 9, 16);
    sc.observers = 1;
    sc.config.snapshot.max_len = 100_000;
    let mut h = sc.build();
    reach(&mut h, 100, Duration::from_secs(30), "100 ticks");
    let observer = PeerId(2);
    let before = h.session(observer).frame();
    let liar = h.session(PeerId(1)).frame();
    let data = [7u8; 100];
    let chunk = |tick: Tick, raw_len: u32, checksum: u32| SnapshotChunk {
        id: 99,
        tick,
        raw_len,
        packed_len: 100,
        hash: 0,
        index: 0,
        count: 1,
        checksum,
        data: &data,
    };
    let good_sum = lockstep_core::snapshot::chunk_checksum(&data);
    // A tick the observer has not run and the players have: what a
    // feeder's snapshot could be of.
    let ahead = h.session(observer).frame();
    assert!(ahead < liar);
    // A wrong checksum; a snapshot over the cap.
    let attacks = [
        forged(
            liar,
            &[Message::SnapshotChunk(chunk(ahead, 1_000, good_sum ^ 1))],
        ),
        forged(
            liar,
            &[Message::SnapshotChunk(chunk(ahead, 200_000, good_sum))],
        ),
    ];
    let now = h.sim.now();
    for (k, a) in attacks.iter().enumerate() {
        let s = h.sim.endpoint_mut(observer).unwrap();
        s.handle_datagram(PeerId(1), a, now).unwrap();
        assert_eq!(s.stats().snapshot_errors, k as u64 + 1);
    }
    // A whole snapshot, sound as chunks go, whose envelope is not one.
    let limits = SnapshotLimits::default();
    let bogus = Snapshot::new(ahead, vec![9, 0, 0, 1, 2, 3]);
    let mut tx = SnapshotSender::new(7, &bogus, 1000, &limits).unwrap();
    let c = tx.next_chunk(now).unwrap().as_message();
    let s = h.sim.endpoint_mut(observer).unwrap();
    s.handle_datagram(PeerId(1), &forged(liar, &[Message::SnapshotChunk(c)]), now)
        .unwrap();
    assert_eq!(s.stats().snapshot_errors, 3);
    // A sound snapshot of a tick the observer has passed: ignored.
    let old = Snapshot::new(Tick::new(5), vec![1, 0, 0]);
    let mut tx = SnapshotSender::new(8, &old, 1000, &limits).unwrap();
    let c = tx.next_chunk(now).unwrap().as_message();
    s.handle_datagram(PeerId(1), &forged(liar, &[Message::SnapshotChunk(c)]), now)
        .unwrap();
    assert_eq!(s.stats().snapshot_errors, 3);
    assert_eq!(s.take_snapshot(), None);
    assert_eq!(s.frame(), before);
    assert!(
        !h.records[&observer]
            .events
            .iter()
            .any(|e| matches!(e, Event::Snapshot { .. }))
    );
    reach(&mut h, 400, Duration::from_secs(30), "play going on");
    h.assert_streams_agree(&sc.peer_ids());
    h.assert_no_desync();
    assert_eq!(h.records[&observer].restored, None);
}

/// A game state over the configured cap is refused with a typed error
/// where it is handed over; the observer that needed it waits, and nobody
/// else notices.
#[test]
fn a_snapshot_over_the_cap_is_refused_with_a_typed_error() {
    let mut sc = clean(2, 13, 16);
    sc.config.snapshot.max_len = 1_000;
    sc.config.observer_window = 16;
    let mut h = sc.build_with_bulk(5_000);
    reach(&mut h, 100, Duration::from_secs(30), "100 ticks");
    let observer = PeerId(2);
    join_observer(&mut h, &sc, observer);
    let first = h.first;
    let o = h.run(
        h.sim.now() + Duration::from_secs(10),
        |_, _, _, _| {},
        |sim| {
            sim.live()
                .filter(|(_, s)| !s.watching())
                .all(|(_, s)| s.frame().since(first) >= 400)
        },
    );
    outcome_ok(o, "the players playing on", 13);
    let refusals = &h.records[&PeerId(0)].snapshot_refusals;
    assert!(!refusals.is_empty());
    assert!(
        refusals
            .iter()
            .all(|e| matches!(e, SnapshotError::TooLarge { max: 1_000, .. }))
    );
    assert!(h.session(PeerId(0)).frame().since(h.first) >= 400);
    assert!(h.session(observer).frame().since(h.first) < 100);
    h.assert_streams_agree(&sc.player_ids());
    h.assert_no_desync();
}

/// What a feeder sends, in 10 s, to an observer (or someone forging its
/// address) that acknowledges nothing and sends a Hello every 20 ms
/// naming `position(k, feeder's frame)`; and whether the feeder's game was
/// asked for its state, and how often.
fn cost_of_an_observer(position: impl Fn(u32, Tick) -> Tick) -> (u64, u64, usize) {
    let sc = clean(2, 17, 16);
    let mut h = sc.build_with_bulk(200_000);
    reach(&mut h, 1_100, Duration::from_secs(60), "1 100 ticks");
    let liar = PeerId(9);
    for p in sc.player_ids() {
        h.sim.endpoint_mut(p).unwrap().add_observer(liar).unwrap();
    }
    let stats = |h: &Harness| {
        (
            h.session(PeerId(0)).stats().bytes_sent,
            h.session(PeerId(1)).stats().bytes_received,
        )
    };
    let (sent0, received0) = stats(&h);
    let mut from_liar = 0;
    for k in 0..500 {
        let now = h.sim.now() + Duration::from_millis(20);
        h.run(now, |_, _, _, _| {}, |_| false);
        let pos = position(k, h.session(PeerId(0)).frame());
        let hello = Hello {
            resume_from: Some(pos),
            spectator: true,
            ..Hello::default()
        };
        let d = forged(pos, &[Message::Hello(hello)]);
        from_liar += d.len() as u64;
        let feeder = h.sim.endpoint_mut(PeerId(0)).unwrap();
        feeder.handle_datagram(liar, &d, now).unwrap();
    }
    let (sent1, received1) = stats(&h);
    let target = h.session(PeerId(0)).frame().since(h.first) + 100;
    reach(&mut h, target, Duration::from_secs(10), "play going on");
    h.assert_streams_agree(&sc.player_ids());
    let asked = h.records[&PeerId(0)]
        .events
        .iter()
        .filter(|e| matches!(e, Event::SnapshotRequested { .. }))
        .count();
    // What the feeder sent beyond what the other player got from it.
    (from_liar, (sent1 - sent0) - (received1 - received0), asked)
}

/// An observer that flips its position between far behind and caught up
/// every 20 ms, acknowledging nothing, costs the feeder its first chunks of
/// one snapshot and then a probe every 1.6 s over what a caught-up observer
/// that acknowledges nothing costs; its game is asked for its state once;
/// the players play on. (Found in review: a fresh window of chunks per
/// flip, 1.3 MB in 10 s, and a state asked of the game every flip once
/// the claimed position let the frames after it go.)
#[test]
fn an_observer_flipping_its_position_gets_no_burst_per_flip() {
    let (sent, flipping, asked) =
        cost_of_an_observer(|k, frame| if k % 2 == 0 { Tick::ZERO } else { frame });
    let (_, steady, never) = cost_of_an_observer(|_, frame| frame);
    eprintln!("a flipping observer sent {sent} bytes and got {flipping}; a steady one {steady}");
    assert_eq!((asked, never), (1, 0));
    // Four chunks, four again, two, one, then a probe every 1.6 s.
    assert!(
        flipping < steady + 17 * 1_200,
        "{flipping} bytes against {steady}"
    );
}

/// A player that is not the feeder sends a late observer chunks of a
/// snapshot that never completes, every 20 ms, starting before the
/// feeder's: the feeder (the lowest live seat) takes over the transfer at
/// once, and the observer catches up on the players' state.
#[test]
fn a_higher_seat_cannot_hold_an_observer_with_chunks_of_its_own() {
    let sc = clean(3, 21, 16);
    let mut h = sc.build_with_bulk(50_000);
    reach(&mut h, 1_100, Duration::from_secs(60), "1 100 ticks");
    let observer = PeerId(3);
    // The feeder hears the observer last: the liar's chunks come first.
    let now = h.sim.now();
    h.sim.net.partition(
        &[PeerId(0)],
        &[observer],
        now,
        now + Duration::from_millis(500),
    );
    join_observer(&mut h, &sc, observer);
    let bogus = Snapshot::new(h.session(PeerId(2)).frame(), vec![3; 500_000]);
    let mut tx = SnapshotSender::new(77, &bogus, 1000, &SnapshotLimits::default()).unwrap();
    let first = tx.next_chunk(h.sim.now()).unwrap().as_message();
    let junk: Vec<u8> = first.data.to_vec();
    let first = SnapshotChunk {
        data: &junk,
        ..first
    };
    let first_tick = h.first;
    let mut caught_up = false;
    for _ in 0..200 {
        let now = h.sim.now() + Duration::from_millis(20);
        h.run(now, |_, _, _, _| {}, |_| false);
        let base = h.session(PeerId(2)).frame();
        let d = forged(base, &[Message::SnapshotChunk(first)]);
        let s = h.sim.endpoint_mut(observer).unwrap();
        // Before the observer's Hello got through, it is not greeted yet.
        let _ = s.handle_datagram(PeerId(2), &d, now);
        if s.frame().since(first_tick) > 1_100 {
            caught_up = true;
            break;
        }
    }
    assert!(caught_up, "held by the liar's chunks");
    let target = h.session(PeerId(0)).frame().since(h.first) + 100;
    reach(
        &mut h,
        target,
        Duration::from_secs(10),
        "the observer catching up",
    );
    assert!(h.records[&observer].restored.is_some());
    h.assert_streams_agree(&live_ids(&h));
}

/// The time a late observer takes, in virtual time on the simulated
/// network, from its session's start to running the players' frames:
/// four players at 30 Hz, a 200 KB state that does not compress, 20 ms
/// each way. (Reported in docs/benchmarks.md.)
#[test]
fn a_late_observer_of_a_200_kb_state_is_live_within_a_second() {
    let mut sc = clean(4, 23, 33);
    sc.link.latency = Duration::from_millis(20);
    let mut h = sc.build_with_bulk(200_000);
    reach(&mut h, 3_000, Duration::from_secs(200), "3 000 ticks");
    let observer = PeerId(4);
    let joined = h.sim.now();
    join_observer(&mut h, &sc, observer);
    until_caught_up(
        &mut h,
        observer,
        PeerId(0),
        3,
        Duration::from_secs(5),
        "the observer caught up",
    );
    let took = h.sim.now() - joined;
    let sent = h.session(PeerId(0)).stats().bytes_sent;
    eprintln!(
        "a late observer of a 200 KB state ran the players' frames {took:?} after it started ({sent} bytes sent by the feeder in all)"
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(h.records[&observer].restored.is_some());
    h.assert_streams_agree(&live_ids(&h));
}

/// An observer added a minute into a match is not reported silent for that
/// minute: its silence counts from when it was added. A late observer runs
/// no frame before the feeder's snapshot.
#[test]
fn a_late_observer_is_silent_only_from_when_it_was_added() {
    let sc = clean(2, 29, 16);
    let mut h = sc.build();
    reach(&mut h, 3_750, Duration::from_secs(70), "a minute of play");
    let observer = PeerId(2);
    join_observer(&mut h, &sc, observer);
    let now = h.sim.now() + Duration::from_millis(5);
    h.run(now, |_, _, _, _| {}, |_| false);
    // Nothing run of its own making: the feeder's state comes first.
    assert_eq!(h.session(observer).frame(), h.first);
    reach(
        &mut h,
        3_900,
        Duration::from_secs(10),
        "the observer catching up",
    );
    for p in sc.player_ids() {
        let silent = h.records[&p].events.iter().find_map(|e| match e {
            Event::Interrupted {
                peer, silent_for, ..
            } if *peer == observer => Some(*silent_for),
            _ => None,
        });
        assert_eq!(silent, None, "{p} reported the observer silent");
    }
}

/// A state nobody asked for is refused by name: it used to be dropped with
/// `Ok(())`.
#[test]
fn a_state_nobody_asked_for_is_an_error() {
    let sc = clean(2, 17, 16);
    let mut h = sc.build();
    let err = h
        .sim
        .endpoint_mut(PeerId(0))
        .unwrap()
        .provide_snapshot(Tick::ZERO, vec![1, 2, 3]);
    assert_eq!(
        err,
        Err(SnapshotError::NotAsked {
            tick: Tick::ZERO,
            asked: None
        })
    );
    assert!(
        err.unwrap_err()
            .to_string()
            .contains("no state is wanted now")
    );
}
