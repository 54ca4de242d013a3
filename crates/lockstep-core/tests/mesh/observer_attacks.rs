//! Attacks on mesh observers catching up from a snapshot, and the honest
//! corner cases a review found with them: an abandoned seat or a stray
//! chunk holding an observer off the feeder's snapshot, datagrams from
//! before an observer's jump read against it, a snapshot far in the
//! future, forged Hellos. Each asserts what the protocol promises while the
//! players play on.

use crate::common;
use common::observe::{
    clean, forged, join_observer, mid_transfer, reach, until_caught_up, wait_for,
};
use common::{Harness, Scenario, outcome_ok};
use lockstep_core::snapshot::{Snapshot, SnapshotLimits, SnapshotSender};
use lockstep_core::wire::{Hello, Message, SnapshotAck, SnapshotChunk};
use lockstep_core::{Event, Instant, PeerId, Tick};
use std::time::Duration;

fn requests(h: &Harness, p: PeerId) -> usize {
    h.records[&p]
        .events
        .iter()
        .filter(|e| matches!(e, Event::SnapshotRequested { .. }))
        .count()
}

/// Three players; seat 0 crashes and is abandoned; the players run on past
/// the observer window. Returns the harness, ready for a late observer.
fn seat_zero_abandoned(seed: u64, bulk: usize) -> (Scenario, Harness) {
    seat_zero_abandoned_with(seed, bulk, 64, 600)
}

fn seat_zero_abandoned_with(
    seed: u64,
    bulk: usize,
    window: u32,
    ticks: u32,
) -> (Scenario, Harness) {
    let mut sc = clean(3, seed, 16);
    sc.config.observer_window = window;
    let mut h = sc.build_with_bulk(bulk);
    reach(&mut h, 200, Duration::from_secs(30), "200 ticks");
    h.sim.freeze(PeerId(0));
    let first = h.first;
    let o = h.run(
        h.sim.now() + Duration::from_secs(30),
        |_, _, _, _| {},
        |sim| {
            sim.live()
                .all(|(_, s)| !s.abandoned().is_empty() && s.frame().since(first) >= ticks)
        },
    );
    outcome_ok(o, "seat 0 abandoned, 600 ticks", seed);
    (sc, h)
}

/// A bogus chunk 0 of a 1000-chunk snapshot, as seat 0 would send it.
fn junk_chunk(tick: Tick) -> (SnapshotChunk<'static>, &'static [u8]) {
    let mut rng = lockstep_core::sim::SimRng::new(99);
    let bytes: Vec<u8> = (0..1_000_000).map(|_| rng.next_u64() as u8).collect();
    let bogus = Snapshot::new(tick, bytes);
    let mut tx = SnapshotSender::new(0, &bogus, 1000, &SnapshotLimits::default()).unwrap();
    let c = tx.next_chunk(Instant::ZERO).unwrap().as_message();
    let data: &'static [u8] = Box::leak(c.data.to_vec().into_boxed_slice());
    (SnapshotChunk { data, ..c }, data)
}

/// An abandoned player (seat 0, lower than the feeder, seat 1, and not
/// known to be abandoned by a late observer) keeps sending the observer one
/// chunk of a snapshot that never completes, every 100 ms. It makes no
/// progress, so the feeder's snapshot takes over and the observer catches
/// up. (Found in review when a lower seat's chunks took over at once: the
/// observer at tick 2 after 20 s, the players at 1,850.)
#[test]
fn an_abandoned_lower_seat_cannot_hold_a_late_observer_off_the_feeder() {
    let (sc, mut h) = seat_zero_abandoned(31, 20_000);
    let observer = PeerId(3);
    join_observer(&mut h, &sc, observer);
    let (chunk, _) = junk_chunk(h.session(PeerId(1)).frame().saturating_add(10));
    let first = h.first;
    let mut caught_up_at = None;
    for k in 0..200 {
        let now = h.sim.now();
        let base = h.session(PeerId(1)).frame();
        let hello = Hello {
            resume_from: Some(base),
            spectator: false,
            ..Hello::default()
        };
        let d = forged(
            base,
            &[Message::Hello(hello), Message::SnapshotChunk(chunk)],
        );
        let s = h.sim.endpoint_mut(observer).unwrap();
        let _ = s.handle_datagram(PeerId(0), &d, now);
        if caught_up_at.is_none() && s.frame().since(first) > 600 {
            caught_up_at = Some(k);
        }
        let now = h.sim.now() + Duration::from_millis(100);
        h.run(now, |_, _, _, _| {}, |_| false);
    }
    let obs = h.session(observer);
    eprintln!(
        "after 20 s the observer is at tick {} (players at {}), progress {:?}, \
         feeder requests {}",
        obs.frame().since(first),
        h.session(PeerId(1)).frame().since(first),
        obs.snapshot_progress(),
        requests(&h, PeerId(1)),
    );
    assert!(
        caught_up_at.is_some(),
        "held off by the abandoned seat's chunks"
    );
}

/// A single stray chunk from a lower seat (a crashed feeder's chunk
/// delivered late, or an abandoned player's) arriving mid-transfer is
/// ignored while the feeder's transfer progresses. (Found in review: the
/// observer dropped what it had, the feeder never sent again what it saw
/// acknowledged, and the observer waited a whole `observer_window`: 16.5 s
/// instead of 96 ms.)
#[test]
fn one_stray_chunk_from_another_seat_costs_nothing() {
    let measure = |inject: bool| -> (Duration, usize) {
        // The default window, 1 024 ticks (16 s at this 16 ms period).
        let (sc, mut h) = seat_zero_abandoned_with(37, 200_000, 1024, 1_300);
        let observer = PeerId(3);
        join_observer(&mut h, &sc, observer);
        let joined = h.sim.now();
        let o = h.run(
            joined + Duration::from_secs(10),
            |_, _, _, _| {},
            |sim| {
                sim.endpoint(observer)
                    .and_then(|s| s.snapshot_progress())
                    .is_some_and(|(have, of)| have >= 60 && have < of)
            },
        );
        outcome_ok(o, "half the snapshot", 37);
        if inject {
            let (chunk, _) = junk_chunk(h.session(PeerId(1)).frame());
            let base = h.session(PeerId(1)).frame();
            let d = forged(base, &[Message::SnapshotChunk(chunk)]);
            let now = h.sim.now();
            let s = h.sim.endpoint_mut(observer).unwrap();
            // Seat 0 greeted the observer? It never did (it crashed before
            // the observer joined): add its Hello, as a late datagram would
            // carry had it been sent earlier.
            let hello = Hello {
                resume_from: Some(base),
                ..Hello::default()
            };
            let d2 = forged(
                base,
                &[Message::Hello(hello), Message::SnapshotChunk(chunk)],
            );
            let _ = s.handle_datagram(PeerId(0), &d, now);
            let _ = s.handle_datagram(PeerId(0), &d2, now);
        }
        until_caught_up(
            &mut h,
            observer,
            PeerId(1),
            5,
            Duration::from_secs(120),
            "caught up",
        );
        (h.sim.now() - joined, requests(&h, PeerId(1)))
    };
    let (clean_took, clean_asked) = measure(false);
    let (hit_took, hit_asked) = measure(true);
    eprintln!(
        "caught up in {clean_took:?} ({clean_asked} requests) without, \
         {hit_took:?} ({hit_asked} requests) with one stray chunk"
    );
    assert!(
        hit_took < clean_took + Duration::from_secs(2),
        "{hit_took:?} against {clean_took:?}"
    );
}

/// A stale datagram from an observer, sent before it restored a snapshot
/// and delivered after its post-restore Hello (reordering), is read against
/// the new position: more than 32,768 ticks apart, the 16-bit header tick
/// lands anywhere. An observer's position is its latest datagram's, never
/// past the reader's, so the next datagram puts it right and the observer
/// goes on. (Found in review: a maximum kept it 25,500 ticks ahead.)
#[test]
fn a_datagram_from_before_an_observers_jump_does_not_lose_it_frames() {
    let sc = clean(2, 41, 1);
    let mut h = sc.build();
    reach(&mut h, 40_000, Duration::from_secs(200), "40 000 ticks");
    let observer = PeerId(2);
    join_observer(&mut h, &sc, observer);
    let first = h.first;
    wait_for(&mut h, observer, Duration::from_secs(10), "restored", |s| {
        s.frame().since(first) > 40_000
    });
    // Let its post-restore Hello land.
    let now = h.sim.now() + Duration::from_millis(20);
    h.run(now, |_, _, _, _| {}, |_| false);
    // What it sent before restoring: an acknowledgement, from tick 0.
    let stale = forged(
        first,
        &[Message::SnapshotAck(SnapshotAck {
            id: 0,
            next: 1,
            bits: 0,
        })],
    );
    let feeder = h.sim.endpoint_mut(PeerId(0)).unwrap();
    feeder.handle_datagram(observer, &stale, now).unwrap();
    let seen = feeder
        .stats()
        .peers
        .iter()
        .find(|p| p.peer == observer)
        .unwrap()
        .next_tick;
    let at = h.session(observer).frame();
    eprintln!("observer at {at:?}; the feeder now thinks it is at {seen:?}");
    let target = h.session(PeerId(0)).frame().since(first) + 200;
    let o = h.run(
        h.sim.now() + Duration::from_secs(5),
        |_, _, _, _| {},
        |sim| {
            sim.endpoint(observer)
                .is_some_and(|s| s.frame().since(first) >= target)
        },
    );
    let stuck = h.session(observer).frame();
    eprintln!(
        "5 s later the observer is at {stuck:?}, the players at {:?} ({o:?})",
        h.session(PeerId(0)).frame()
    );
    assert_eq!(o, lockstep_core::sim::Outcome::Done, "the observer stalled");
}

/// Someone forging a caught-up observer's address (a mesh checks no
/// address) with a Hello claiming tick 0 every 500 ms: the feeder pauses
/// the transfer whenever the real observer's datagrams say where it is, so
/// its game is asked for its state at most once per `observer_window` (a
/// snapshot lasts that long) and the observer is sent one transfer's
/// chunks, with backoff, per window. (A known limit: see the security
/// document.)
#[test]
fn forged_hellos_cost_one_state_per_observer_window() {
    let sc = clean(2, 43, 16);
    let mut h = sc.build_with_bulk(200_000);
    reach(&mut h, 1_100, Duration::from_secs(60), "1 100 ticks");
    let observer = PeerId(2);
    join_observer(&mut h, &sc, observer);
    let first = h.first;
    wait_for(
        &mut h,
        observer,
        Duration::from_secs(10),
        "caught up",
        |s| s.frame().since(first) > 1_100,
    );
    let asked0 = requests(&h, PeerId(0));
    let sent0 = h.session(PeerId(0)).stats().bytes_sent;
    let got0 = h.session(PeerId(1)).stats().bytes_received;
    let mut forged_bytes = 0u64;
    for _ in 0..120 {
        let now = h.sim.now() + Duration::from_millis(500);
        h.run(now, |_, _, _, _| {}, |_| false);
        let hello = Hello {
            resume_from: Some(first),
            spectator: true,
            ..Hello::default()
        };
        let d = forged(first, &[Message::Hello(hello)]);
        forged_bytes += d.len() as u64;
        let r = h
            .sim
            .endpoint_mut(PeerId(0))
            .unwrap()
            .handle_datagram(observer, &d, now);
        assert!(r.is_ok(), "{r:?}");
    }
    let asked = requests(&h, PeerId(0)) - asked0;
    let to_observer = (h.session(PeerId(0)).stats().bytes_sent - sent0)
        - (h.session(PeerId(1)).stats().bytes_received - got0);
    let restores = h.records[&observer]
        .events
        .iter()
        .filter(|e| matches!(e, Event::Snapshot { .. }))
        .count();
    eprintln!(
        "{forged_bytes} forged bytes in 60 s: the feeder's game asked {asked} times, \
         {to_observer} bytes to the observer, {restores} restores"
    );
    h.assert_streams_agree(&[PeerId(0), PeerId(1), observer]);
    // 60 s at 16 ms a tick is 3.7 windows of 1,024 ticks: one state a
    // window, rounded up at both ends.
    assert!(asked <= 6, "the game serialized its state {asked} times");
}

/// The same on the simulated network alone: reordering on the observer's
/// link, a late observer 40,000 ticks in, twelve seeds. (Found in review:
/// three of them stalled.)
#[test]
fn late_observers_catch_up_on_a_reordering_link() {
    let mut stalled = Vec::new();
    for seed in 0..12u64 {
        let mut sc = clean(2, 1000 + seed, 1);
        let mut h = sc.build_with_bulk(50_000);
        reach(&mut h, 40_000, Duration::from_secs(200), "40 000 ticks");
        let observer = PeerId(2);
        sc.link.reorder = 0.3;
        sc.link.jitter = Duration::from_millis(3);
        h.sim.net.set_link(observer, PeerId(0), sc.link.clone());
        join_observer(&mut h, &sc, observer);
        let first = h.first;
        let o = h.run(
            h.sim.now() + Duration::from_secs(10),
            |_, _, _, _| {},
            |sim| {
                let lead = sim.endpoint(PeerId(0)).map_or(first, |s| s.frame());
                sim.endpoint(observer).is_some_and(|s| {
                    s.frame().since(first) > 40_000 && s.frame().saturating_add(50) >= lead
                }) && lead.since(first) > 45_000
            },
        );
        if o != lockstep_core::sim::Outcome::Done {
            let seen = h
                .session(PeerId(0))
                .stats()
                .peers
                .iter()
                .find(|p| p.peer == observer)
                .unwrap()
                .next_tick;
            stalled.push((
                1000 + seed,
                h.session(observer).frame(),
                seen,
                h.session(PeerId(0)).frame(),
            ));
        }
    }
    eprintln!("stalled (seed, observer at, feeder thinks, players at): {stalled:?}");
    assert!(stalled.is_empty());
}

/// A snapshot ready but not taken by the observer's game for 5 s (five
/// observer windows): once taken, the observer catches up (from a fresher
/// snapshot if the frames after it are gone).
#[test]
fn a_snapshot_taken_late_still_leads_to_catching_up() {
    let (sc, mut h) = seat_zero_abandoned(47, 20_000);
    let observer = PeerId(3);
    join_observer(&mut h, &sc, observer);
    let first = h.first;
    let release = h.sim.now() + Duration::from_secs(5);
    let every = h.checksum_every;
    {
        let Harness {
            sim,
            records,
            period,
            ..
        } = &mut h;
        sim.run(
            release,
            *period,
            |id, s, now| {
                if id == observer && now < release {
                    return; // the game is busy: it neither takes nor runs
                }
                common::play(s, records.get_mut(&id).unwrap(), every);
            },
            |_| false,
        );
    }
    let waiting = h.session(observer).frame();
    let target = h.session(PeerId(1)).frame().since(first) + 50;
    let o = h.run(
        release + Duration::from_secs(30),
        |_, _, _, _| {},
        |sim| {
            sim.endpoint(observer)
                .is_some_and(|s| s.frame().since(first) >= target)
        },
    );
    eprintln!(
        "observer at {waiting:?} on release, caught up {:?} later ({o:?}); feeder asked {}",
        h.sim.now() - release,
        requests(&h, PeerId(1))
    );
    outcome_ok(o, "caught up after a late take", 47);
    h.assert_streams_agree(&[PeerId(1), PeerId(2), observer]);
}

/// A seated peer's snapshot for a tick near `u32::MAX`, complete and well
/// formed, to an observer being fed frames: refused as no feeder's (past
/// the sender's and the other players' positions). (Found in review: the
/// observer jumped to the end of time and never got another frame.)
#[test]
fn a_snapshot_far_in_the_future_is_refused() {
    for tick in [u32::MAX - 1, u32::MAX] {
        let mut sc = clean(2, 53, 16);
        sc.observers = 1;
        let mut h = sc.build();
        reach(&mut h, 100, Duration::from_secs(30), "100 ticks");
        let observer = PeerId(2);
        // The envelope: version 1, no empty seats, then 8 bytes of state.
        let mut bytes = vec![1, 0, 0];
        bytes.extend_from_slice(&h.records[&PeerId(1)].state.to_le_bytes());
        let s = Snapshot::new(Tick::new(tick), bytes);
        let mut tx = SnapshotSender::new(5, &s, 1000, &SnapshotLimits::default()).unwrap();
        let c = tx.next_chunk(h.sim.now()).unwrap().as_message();
        let base = h.session(PeerId(1)).frame();
        let d = forged(base, &[Message::SnapshotChunk(c)]);
        let now = h.sim.now();
        let r = h
            .sim
            .endpoint_mut(observer)
            .unwrap()
            .handle_datagram(PeerId(1), &d, now);
        let every = h.checksum_every;
        let mut taken = None;
        let o = {
            let Harness {
                sim,
                records,
                period,
                ..
            } = &mut h;
            sim.run(
                now + Duration::from_secs(5),
                *period,
                |id, s, _| {
                    if id == observer {
                        if let Some(snap) = s.take_snapshot() {
                            taken = Some(snap.tick);
                        }
                        while s.advance().is_some() {}
                        while s.poll_event().is_some() {}
                        return;
                    }
                    common::play(s, records.get_mut(&id).unwrap(), every);
                },
                |_| false,
            )
        };
        eprintln!("taken {taken:?}");
        let obs = h.session(observer);
        eprintln!(
            "tick {tick}: {r:?}, observer at {:?} (players {:?}), {o:?}, poll_timeout {:?}",
            obs.frame(),
            h.session(PeerId(0)).frame(),
            obs.poll_timeout()
        );
        assert_ne!(
            obs.frame(),
            Tick::new(tick).saturating_add(1),
            "observer jumped to the end of time"
        );
    }
}

/// An observer removed mid-transfer by every player, then added again (a
/// fresh session): it catches up; the players keep within their bound.
#[test]
fn an_observer_removed_mid_transfer_and_added_again_catches_up() {
    let mut sc = clean(2, 59, 16);
    sc.config.observer_window = 64;
    sc.config.snapshot.window = 4;
    let mut h = sc.build_with_bulk(200_000);
    reach(&mut h, 300, Duration::from_secs(30), "300 ticks");
    let observer = PeerId(2);
    join_observer(&mut h, &sc, observer);
    mid_transfer(&mut h, observer, "mid-transfer");
    for p in sc.player_ids() {
        assert!(h.sim.endpoint_mut(p).unwrap().remove_observer(observer));
    }
    h.sim.remove(observer);
    h.records.remove(&observer);
    reach(&mut h, 600, Duration::from_secs(30), "players alone");
    for p in sc.player_ids() {
        let s = h.session(p);
        assert!(s.stats().buffered_ticks <= s.buffer_bound());
        assert!(
            s.poll_timeout()
                .is_some_and(|t| t + Duration::from_secs(1) > h.sim.now())
        );
    }
    join_observer(&mut h, &sc, observer);
    let target = h.session(PeerId(0)).frame().since(h.first) + 100;
    reach(
        &mut h,
        target,
        Duration::from_secs(30),
        "the observer again",
    );
    h.assert_streams_agree(&[PeerId(0), PeerId(1), observer]);
}

/// The observer saw seat 0 abandoned (in the frames it ran), then was cut
/// off past its window: the abandoned seat's chunks are refused outright.
#[test]
fn a_seat_the_observer_knows_is_abandoned_feeds_it_nothing() {
    let mut sc = clean(3, 61, 16);
    sc.observers = 1;
    sc.config.observer_window = 64;
    let mut h = sc.build_with_bulk(20_000);
    reach(&mut h, 200, Duration::from_secs(30), "200 ticks");
    h.sim.freeze(PeerId(0));
    let observer = PeerId(3);
    wait_for(
        &mut h,
        observer,
        Duration::from_secs(30),
        "the observer saw seat 0 abandoned",
        |s| !s.abandoned().is_empty(),
    );
    let now = h.sim.now();
    h.sim.net.partition(
        &[PeerId(1), PeerId(2)],
        &[observer],
        now,
        now + Duration::from_secs(3),
    );
    let (chunk, _) = junk_chunk(h.session(PeerId(1)).frame().saturating_add(300));
    let first = h.first;
    let mut caught_up = false;
    for _ in 0..200 {
        let now = h.sim.now() + Duration::from_millis(100);
        h.run(now, |_, _, _, _| {}, |_| false);
        let base = h.session(PeerId(1)).frame();
        let d = forged(base, &[Message::SnapshotChunk(chunk)]);
        let s = h.sim.endpoint_mut(observer).unwrap();
        let _ = s.handle_datagram(PeerId(0), &d, now);
        let lead = h.session(PeerId(1)).frame();
        if h.sim.now() > now + Duration::from_secs(4)
            || h.session(observer).frame().saturating_add(10) >= lead && h.sim.now() > Instant::ZERO
        {
            caught_up |=
                h.session(observer).frame().saturating_add(10) >= lead && h.sim.now() > now;
        }
    }
    let obs = h.session(observer);
    eprintln!(
        "the observer knows {:?}; after 20 s it is at {} (players {}), progress {:?}",
        obs.abandoned(),
        obs.frame().since(first),
        h.session(PeerId(1)).frame().since(first),
        obs.snapshot_progress()
    );
    assert!(
        obs.frame().saturating_add(10) >= h.session(PeerId(1)).frame(),
        "held off by a seat it knows is abandoned"
    );
    let _ = caught_up;
}
