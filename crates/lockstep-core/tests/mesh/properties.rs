//! Property tests of the mesh over many random network conditions.
//!
//! Each case builds a session of several peers on the seeded simulated
//! network and checks one of the engine's promises. A failing case prints
//! its parameters, seed included; running it again reproduces it exactly.
//! `PROPTEST_CASES` overrides the number of cases.

use crate::common;
use common::props::{cases, link};
use common::{Harness, Scenario, outcome_ok, secs};
use lockstep_core::sim::Outcome;
use lockstep_core::{Event, PeerId, PlayerId, SystemEvent, Tick};
use proptest::prelude::*;
use std::time::Duration;

prop_compose! {
    fn scenario(max_players: usize)(
        players in 2..=max_players,
        observers in 0usize..=1,
        delay in 0u32..5,
        max_lead in 1u32..10,
        period in 16u64..50,
        link in link(150, 60),
        seed in any::<u64>(),
        first in prop_oneof![
            6 => Just(0u32),
            2 => 65_236u32..65_536,
            1 => (u32::MAX - 5_000)..(u32::MAX - 4_000),
        ],
    ) -> Scenario {
        let mut s = Scenario::new(players, seed);
        s.observers = observers;
        s.config.delay = delay;
        s.config.max_lead = max_lead;
        s.config.abandon_after = None;
        s.config.first_tick = Tick::new(first);
        s.link = link;
        s.period = Duration::from_millis(period);
        s
    }
}

proptest! {
    #![proptest_config(cases(500))]

    /// (a) safety and (b) liveness: with loss below 50% and no partition,
    /// every peer, observers included, reaches tick 300 within a bounded
    /// virtual time, and all confirmed streams are identical.
    #[test]
    fn all_peers_agree_and_reach_tick_300(sc in scenario(6)) {
        let mut h = sc.build();
        // 300 ticks at the slowest period is 15 s. The worst configuration
        // generated (no input delay, a lead of 1, loss near 50%) needs a
        // round trip per tick, about 0.6 s; allow twice that.
        let outcome = h.run_until_tick(300, secs(360));
        h.assert_streams_agree(&sc.peer_ids());
        h.assert_no_desync();
        prop_assert_eq!(outcome, Outcome::Done, "seed {}: stalled at {:?}", sc.seed,
            h.sim.live().map(|(id, s)| (id, s.frame(), s.awaiting())).collect::<Vec<_>>());
        for id in sc.peer_ids() {
            let st = h.session(id).stats();
            prop_assert!(st.buffered_ticks <= h.session(id).buffer_bound());
        }
    }
}

proptest! {
    #![proptest_config(cases(150))]

    /// Safety under partitions: peers cut off from each other for a while
    /// never disagree, and make progress again once the partition heals.
    #[test]
    fn partitions_never_break_agreement(
        sc in scenario(5),
        cut_at in 0u64..5_000,
        cut_for in 100u64..8_000,
        split in 1usize..4,
    ) {
        let mut h = sc.build();
        let ids = sc.peer_ids();
        let split = split.min(ids.len() - 1);
        h.sim.net.partition(
            &ids[..split],
            &ids[split..],
            lockstep_core::Instant::from_millis(cut_at),
            lockstep_core::Instant::from_millis(cut_at + cut_for),
        );
        // An observer cut off for longer than the frames kept for it
        // catches up from a snapshot.
        let first = h.first;
        // The liveness bound of the test above, counted from the heal: the
        // slowest generated room (5 players, no delay, a lead of 1, 44% loss)
        // needs 237 s of virtual time for 300 ticks without any partition.
        let until = lockstep_core::Instant::from_millis(cut_at + cut_for) + Duration::from_secs(360);
        let outcome = h.run(until, |_, _, _, _| {}, |sim| {
            sim.live().all(|(_, s)| s.frame().since(first) >= 300)
        });
        h.assert_streams_agree(&ids);
        h.assert_no_desync();
        outcome_ok(outcome, "progress after the partition healed", sc.seed);
    }
}

proptest! {
    #![proptest_config(cases(100))]

    /// (c) bounded memory: one player freezes for good and is never
    /// abandoned; every other peer keeps running, stalls, and its buffers stay
    /// under the stated bound however long that lasts.
    #[test]
    fn a_frozen_peer_cannot_grow_anyones_buffers(
        sc in scenario(5),
        victim in 0usize..5,
        freeze_at in 0u64..3_000,
    ) {
        let mut h = sc.build();
        let victim = PeerId((victim % sc.players) as u32);
        let members = sc.peer_ids().len();
        let window = sc.config.checksum_window;
        let check = |s: &common::Session| {
            let st = s.stats();
            assert!(st.buffered_ticks <= s.buffer_bound(),
                "seed {}: {} ticks buffered, bound {}", sc.seed, st.buffered_ticks, s.buffer_bound());
            assert!(st.buffered_checksums <= window * members,
                "seed {}: {} checksums buffered", sc.seed, st.buffered_checksums);
        };
        let first = h.run(lockstep_core::Instant::from_millis(freeze_at),
            |_, s, _, _| check(s), |_| false);
        prop_assert_eq!(first, Outcome::TimedOut);
        h.sim.freeze(victim);
        let stalled_at: Vec<Tick> = h.sim.live().map(|(_, s)| s.frame()).collect();
        let second = h.run(secs(60), |_, s, _, _| check(s), |_| false);
        prop_assert_eq!(second, Outcome::TimedOut);
        // Nobody can have got more than a lead past the frozen peer.
        let limit = sc.config.delay + sc.config.max_lead;
        let frozen_at = h.session(victim).frame();
        for (id, s) in h.sim.live() {
            prop_assert!(s.frame().since(frozen_at) <= limit + 1,
                "{id} at {} ran away from the frozen peer at {frozen_at}", s.frame());
            prop_assert!(s.stats().datagrams_sent > 0);
        }
        let _ = stalled_at;
        h.assert_streams_agree(&sc.peer_ids());
    }
}

proptest! {
    #![proptest_config(cases(150))]

    /// (d) pause: several players call a pause at the same moment; every
    /// peer, observers included, freezes on the same frame. A resume by any
    /// one of them then restarts everyone.
    #[test]
    fn simultaneous_pauses_converge_on_one_frame(
        sc in scenario(5),
        pause_at in 200u64..4_000,
        callers in 1u32..32,
        resumer in 0usize..5,
    ) {
        let mut h = sc.build();
        let players = sc.players;
        let first = h.run(lockstep_core::Instant::from_millis(pause_at), |_, _, _, _| {}, |_| false);
        prop_assert_eq!(first, Outcome::TimedOut);
        let mut called = Vec::new();
        for i in 0..players {
            if callers & (1 << i) != 0 || called.is_empty() && i + 1 == players {
                let id = PeerId(i as u32);
                if let Some(s) = h.sim.endpoint_mut(id) {
                    called.push(s.request_pause().map_err(|e| TestCaseError::fail(e.to_string()))?);
                }
            }
        }
        let ids = sc.peer_ids();
        let settled = h.run(secs(120), |_, _, _, _| {}, |sim| {
            let frames: Vec<_> = sim.live().map(|(_, s)| (s.frozen(), s.pause_frame())).collect();
            frames.iter().all(|(frozen, f)| *frozen && *f == frames[0].1)
        });
        outcome_ok(settled, "all peers frozen on one frame", sc.seed);
        let frame = h.session(ids[0]).pause_frame();
        prop_assert_eq!(frame, called.iter().min().copied(), "the earliest proposal wins");
        // Frozen really means frozen: more time passes, nothing runs.
        let before: Vec<Tick> = h.sim.live().map(|(_, s)| s.frame()).collect();
        let idle = h.run(h.sim.now() + Duration::from_secs(2), |_, _, _, _| {}, |_| false);
        prop_assert_eq!(idle, Outcome::TimedOut);
        let after: Vec<Tick> = h.sim.live().map(|(_, s)| s.frame()).collect();
        prop_assert_eq!(before, after);

        let resumer = PeerId((resumer % players) as u32);
        if let Some(s) = h.sim.endpoint_mut(resumer) {
            prop_assert_eq!(s.resume(), frame);
        }
        let target = frame.map_or(0, |f| f.since(h.first)) + 60;
        let resumed = h.run_until_tick(target, h.sim.now() + Duration::from_secs(120));
        outcome_ok(resumed, "progress after resume", sc.seed);
        for (_, s) in h.sim.live() {
            prop_assert!(!s.paused());
        }
        h.assert_streams_agree(&ids);
        h.assert_no_desync();
    }
}

proptest! {
    #![proptest_config(cases(150))]

    /// (e) abandon: a player goes silent, after some peers stopped hearing it
    /// before others did (so the rest hold different amounts of its input,
    /// and some may have run ticks the others cannot). It is abandoned; the
    /// rest advance to tick 300 and still agree, on one abandonment tick,
    /// marked in every stream. The silent peer's own stream agrees with
    /// theirs as far as it got.
    #[test]
    fn a_silent_player_is_abandoned_and_the_rest_agree(
        sc in scenario(6),
        victim in 0usize..6,
        partial_at in 100u64..4_000,
        partial_for in 0u64..1_500,
        deaf in any::<u8>(),
    ) {
        let mut sc = sc;
        sc.config.abandon_after = Some(Duration::from_secs(2));
        // A lost-cause link would abandon healthy players too.
        sc.link.loss = sc.link.loss.min(0.3);
        let mut h = sc.build();
        let victim_seat = (victim % sc.players) as u16;
        let victim = PeerId(u32::from(victim_seat));
        let ids = sc.peer_ids();
        let first = h.run(lockstep_core::Instant::from_millis(partial_at), |_, _, _, _| {}, |_| false);
        prop_assert_eq!(first, Outcome::TimedOut);
        // Partial delivery: some peers stop hearing the victim first.
        for (k, &id) in ids.iter().enumerate() {
            if id != victim && deaf & (1 << (k % 8)) != 0 {
                let mut cut = sc.link.clone();
                cut.loss = 1.0;
                h.sim.net.set_link(victim, id, cut);
            }
        }
        let second = h.run(
            lockstep_core::Instant::from_millis(partial_at + partial_for), |_, _, _, _| {}, |_| false);
        prop_assert_eq!(second, Outcome::TimedOut);
        h.sim.freeze(victim);
        // 300 ticks past where anyone got, so nobody finishes without the
        // abandonment (the victim may have frozen well into the game).
        let reached = h.sim.endpoints().map(|(_, s)| s.frame().since(h.first)).max().unwrap_or(0);
        let done = h.run_until_tick(reached + 300, secs(300));
        outcome_ok(done, "survivors reach 300 ticks past the freeze", sc.seed);

        let survivors: Vec<PeerId> = ids.iter().copied().filter(|&id| id != victim).collect();
        h.assert_streams_agree(&survivors);
        h.assert_no_desync();
        let player = PlayerId(victim_seat);
        let mut decided = None;
        for (id, s) in h.sim.live() {
            let d: Vec<_> = s.abandoned().iter().filter(|(p, _)| *p == player).collect();
            prop_assert_eq!(d.len(), 1, "{} knows the decision once", id);
            prop_assert!(decided.is_none_or(|t| t == d[0].1));
            decided = Some(d[0].1);
            let rec = &h.records[&id];
            let conflict = rec.events.iter().any(|e| matches!(e, Event::AbandonConflict { .. }));
            prop_assert!(!conflict, "{} saw a conflicting decision", id);
            let marked = rec.system.iter().find(|(_, evs)| evs.contains(&SystemEvent::Abandoned { player }));
            prop_assert_eq!(marked.map(|(t, _)| *t), decided);
        }
        // The victim may have run ticks on inputs of its own that never
        // reached anyone; up to the decision it agrees with everybody.
        let decided = decided.map_or(0, |t| t.since(h.first) as usize);
        let vchain = &h.records[&victim].chain;
        let common = vchain.len().min(decided);
        for id in &survivors {
            let chain = &h.records[id].chain;
            prop_assert!(common == 0 || chain[common - 1] == vchain[common - 1],
                "seed {}: victim disagrees with {} before the decision", sc.seed, id);
        }
    }
}

proptest! {
    #![proptest_config(cases(60))]

    /// A player leaves (says goodbye, keeps its session a moment, then its
    /// process ends) under loss, the decider as often as not, and with
    /// `crash` another player falls silent meanwhile: the others empty
    /// each seat at one tick, recorded as `Left` wherever the deciding
    /// peer heard the goodbye (`Abandoned` after silence otherwise), the
    /// same on every peer; the decider's role passes to the next lowest
    /// live seat; they advance and agree.
    #[test]
    fn a_player_that_leaves_is_emptied_alike_everywhere(
        sc in scenario(6),
        leaver in prop_oneof![Just(0usize), 0usize..6],
        crash in any::<bool>(),
        other in 0usize..6,
        at in 100u64..3_000,
    ) {
        prop_assume!(sc.players >= 3 + usize::from(crash));
        a_player_leaves(sc, leaver, crash, other, at)?;
    }
}

/// The body of `a_player_that_leaves_is_emptied_alike_everywhere`, so that a
/// case it found can be kept as a test of its own.
fn a_player_leaves(
    mut sc: Scenario,
    leaver: usize,
    crash: bool,
    other: usize,
    at: u64,
) -> Result<(), TestCaseError> {
    sc.config.abandon_after = Some(Duration::from_secs(2));
    sc.link.loss = sc.link.loss.min(0.3);
    let mut h = sc.build();
    let gone = PeerId((leaver % sc.players) as u32);
    let warmup = h.run(
        lockstep_core::Instant::from_millis(at),
        |_, _, _, _| {},
        |_| false,
    );
    prop_assert_eq!(warmup, Outcome::TimedOut);
    let crashed = PeerId(((leaver + 1 + other % (sc.players - 1)) % sc.players) as u32);
    leave_then_play_on(&mut h, gone, crash.then_some(crashed), sc.seed);
    let rest: Vec<PeerId> = sc
        .peer_ids()
        .into_iter()
        .filter(|id| *id != gone && (!crash || *id != crashed))
        .collect();
    h.assert_streams_agree(&rest);
    h.assert_no_desync();
    // The same decisions everywhere (learned in any order).
    let decided: Vec<Vec<(PlayerId, Tick)>> = rest
        .iter()
        .filter(|id| h.session(**id).seat().is_some())
        .map(|id| {
            let mut d = h.session(*id).abandoned().to_vec();
            d.sort();
            d
        })
        .collect();
    let n = 1 + usize::from(crash);
    prop_assert!(
        decided.iter().all(|d| d.len() == n && *d == decided[0]),
        "seed {}: {:?}",
        sc.seed,
        decided
    );
    Ok(())
}

/// `gone` says goodbye and keeps its session 300 ms before its process
/// ends, `crashed` (if any) falls silent at the goodbye; the others must
/// reach tick 300.
fn leave_then_play_on(h: &mut Harness, gone: PeerId, crashed: Option<PeerId>, seed: u64) {
    h.sim.endpoint_mut(gone).unwrap().leave();
    if let Some(c) = crashed {
        h.sim.freeze(c);
    }
    let later = h.sim.now() + Duration::from_millis(300);
    let _ = h.run(later, |_, _, _, _| {}, |_| false);
    h.sim.freeze(gone);
    let done = h.run_until_tick(300, secs(300));
    outcome_ok(done, "the others reach tick 300", seed);
}

/// A case the property found: the decider (seat 0) says goodbye at 900 ms
/// on a link losing 30% with 43 ms of jitter, and the other three must
/// still reach tick 300.
#[test]
fn the_decider_leaving_on_a_lossy_link_stalls_nobody() {
    let mut sc = Scenario::new(4, 15_199_780_144_667_957_923);
    sc.config.delay = 3;
    sc.config.max_lead = 9;
    sc.link = lockstep_core::sim::LinkConditions {
        latency: Duration::from_millis(20),
        jitter: Duration::from_millis(43),
        loss: 0.3,
        duplicate: 0.100_865_949_273_102_94,
        reorder: 0.111_358_905_255_252_22,
        max_datagram: Some(1200),
        bandwidth: None,
    };
    sc.period = Duration::from_millis(30);
    if let Err(e) = a_player_leaves(sc, 0, false, 0, 900) {
        panic!("{e}");
    }
}

proptest! {
    #![proptest_config(cases(60))]

    /// Two players fall silent at the same moment (the decider may be one of
    /// them): both are abandoned, and the rest advance and agree.
    #[test]
    fn two_silent_players_are_both_abandoned(
        sc in scenario(6),
        first in 0usize..6,
        second in 0usize..6,
        at in 100u64..4_000,
    ) {
        prop_assume!(sc.players >= 4);
        let mut sc = sc;
        sc.config.abandon_after = Some(Duration::from_secs(2));
        sc.link.loss = sc.link.loss.min(0.3);
        let mut h = sc.build();
        let a = first % sc.players;
        let b = (a + 1 + second % (sc.players - 1)) % sc.players;
        let victims = [PeerId(a as u32), PeerId(b as u32)];
        let warmup = h.run(lockstep_core::Instant::from_millis(at), |_, _, _, _| {}, |_| false);
        prop_assert_eq!(warmup, Outcome::TimedOut);
        for v in victims {
            h.sim.freeze(v);
        }
        let done = h.run_until_tick(300, secs(300));
        outcome_ok(done, "survivors reach tick 300", sc.seed);
        let survivors: Vec<PeerId> =
            sc.peer_ids().into_iter().filter(|id| !victims.contains(id)).collect();
        h.assert_streams_agree(&survivors);
        h.assert_no_desync();
        for id in &survivors {
            let s = h.session(*id);
            prop_assert_eq!(s.abandoned().len(), 2, "{} knows both decisions", id);
        }
    }
}

proptest! {
    #![proptest_config(cases(60))]

    /// A player whose game stops sending input while its session keeps the
    /// connection alive (keepalives, acks) is abandoned like a silent one,
    /// and the rest advance and agree.
    #[test]
    fn a_player_that_only_keeps_its_connection_alive_is_abandoned(
        sc in scenario(5),
        victim in 0usize..5,
        at in 100u64..3_000,
    ) {
        prop_assume!(sc.players >= 3);
        let mut sc = sc;
        sc.config.abandon_after = Some(Duration::from_secs(2));
        sc.link.loss = sc.link.loss.min(0.3);
        let mut h = sc.build();
        let victim = PeerId((victim % sc.players) as u32);
        let warmup = h.run(lockstep_core::Instant::from_millis(at), |_, _, _, _| {}, |_| false);
        prop_assert_eq!(warmup, Outcome::TimedOut);
        if let Some(r) = h.records.get_mut(&victim) {
            r.mute = true;
        }
        let survivors: Vec<PeerId> =
            sc.peer_ids().into_iter().filter(|id| *id != victim).collect();
        let base: Vec<Tick> = survivors.iter().map(|id| h.session(*id).frame()).collect();
        let target = base.iter().copied().max().unwrap_or(Tick::ZERO).saturating_add(200);
        let done = h.run(secs(300), |_, _, _, _| {}, |sim| {
            sim.live().filter(|(id, _)| *id != victim).all(|(_, s)| s.frame() >= target)
        });
        outcome_ok(done, "the rest go on past a keepalive-only player", sc.seed);
        h.assert_streams_agree(&survivors);
        h.assert_no_desync();
        let player = PlayerId(victim.0 as u16);
        for id in &survivors {
            let s = h.session(*id);
            prop_assert!(s.abandoned().iter().any(|(p, _)| *p == player), "{} abandoned it", id);
        }
    }
}

/// What a mesh did, as far as the network and the games can tell: what
/// crossed the network, and every peer's frames and the stream it ran.
fn mesh_run(sc: &Scenario, wake: Duration) -> Vec<String> {
    let mut h = sc.build();
    let tick = h.period;
    h.period = wake;
    let every = h.checksum_every;
    let records = &mut h.records;
    let o = h.sim.run(
        secs(20),
        wake,
        |id, s, now| {
            // The game runs at the same instants either way.
            if (now - lockstep_core::Instant::ZERO)
                .as_micros()
                .is_multiple_of(tick.as_micros())
            {
                let rec = records.get_mut(&id).expect("a record");
                common::play(s, rec, every);
            }
        },
        |_| false,
    );
    assert_eq!(o, Outcome::TimedOut);
    let mut out: Vec<String> = sc
        .peer_ids()
        .iter()
        .map(|id| {
            let r = &h.records[id];
            format!("{id}: {} frames, chain {:?}", r.frames(), r.chain.last())
        })
        .collect();
    out.push(format!("{:?}", h.sim.net.stats()));
    out
}

proptest! {
    #![proptest_config(cases(12))]

    /// A mesh whose loops sleep until `poll_timeout` (waking besides only
    /// for the game's ticks) sends the same datagrams and runs the same
    /// frames as one whose loops call `handle_timeout` every millisecond
    /// besides, with checkpoints, an observer and the adaptive delay in
    /// play: a timer `poll_timeout` leaves out shows as a datagram the busy
    /// loop sends sooner.
    #[test]
    fn sleeping_until_poll_timeout_is_polling_every_millisecond(
        players in 2usize..=4,
        observers in 0usize..=1,
        adaptive in any::<bool>(),
        link in link(100, 30),
        seed in any::<u64>(),
    ) {
        let mut sc = Scenario::new(players, seed);
        sc.observers = observers;
        sc.link = link;
        // A period of whole milliseconds, so both loops run the game at
        // the same instants.
        sc.period = Duration::from_millis(40);
        sc.config.tick_rate = 25;
        if adaptive {
            sc.config.adaptive = Some(lockstep_core::AdaptiveDelay::default());
        }
        let slept = mesh_run(&sc, sc.period);
        let polled = mesh_run(&sc, Duration::from_millis(1));
        prop_assert_eq!(slept, polled, "seed {}", seed);
    }
}

/// The case the property above once found: early in a 4-player game, one
/// player leaves while another crashes. A third, as far ahead of the
/// crashed one as its lead limit allows, could commit nothing and lacked
/// only its own input for its next tick, so its datagrams said it waited
/// on itself alone; the fourth, lacking only that input, took it for a
/// player that stopped sending input and, the only voter left, voted it
/// out at a tick it had already run (their streams parted there). A peer
/// held back by the lead limit now names the slowest players too.
#[test]
fn a_player_held_back_by_a_crashed_one_is_not_voted_out() {
    let mut sc = Scenario::new(4, 10_383_610_256_795_929_918);
    sc.config.delay = 0;
    sc.config.max_lead = 2;
    sc.config.abandon_after = Some(Duration::from_secs(2));
    sc.link = lockstep_core::sim::LinkConditions {
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(30),
        loss: 0.284_842_644_587_927_5,
        duplicate: 0.004_735_054_041_123_335_5,
        reorder: 0.246_858_492_624_174_78,
        max_datagram: Some(1200),
        bandwidth: None,
    };
    sc.period = Duration::from_millis(16);
    let mut h = sc.build();
    let warmup = h.run(
        lockstep_core::Instant::from_millis(279),
        |_, _, _, _| {},
        |_| false,
    );
    assert_eq!(warmup, Outcome::TimedOut);
    let (gone, crashed) = (PeerId(1), PeerId(0));
    leave_then_play_on(&mut h, gone, Some(crashed), sc.seed);
    let rest = [PeerId(2), PeerId(3)];
    h.assert_streams_agree(&rest);
    h.assert_no_desync();
    for id in rest {
        let mut d = h.session(id).abandoned().to_vec();
        d.sort();
        let seats: Vec<PlayerId> = d.iter().map(|(p, _)| *p).collect();
        assert_eq!(seats, [PlayerId(0), PlayerId(1)], "{id}: {d:?}");
        let conflict = h.records[&id]
            .events
            .iter()
            .any(|e| matches!(e, Event::AbandonConflict { .. }));
        assert!(!conflict, "{id} saw a conflicting decision");
    }
}

/// A case the property above found once inputs went in any order: a
/// player that crashed had sent some peers an input of its own past a tick
/// that never reached them. The decider proposed the first tick no peer
/// held contiguously, and a peer holding the crashed player's own input for
/// that very tick (past its gap) could not endorse it, as it could have run
/// it: the abandonment stalled for good. A peer now forgets a frozen
/// seat's own input past the first it lacks.
#[test]
fn a_crashed_players_inputs_past_a_gap_do_not_stall_its_abandonment() {
    let mut sc = Scenario::new(6, 14_983_659_269_773_433_312);
    sc.config.delay = 3;
    sc.config.max_lead = 2;
    sc.config.abandon_after = Some(Duration::from_secs(2));
    sc.link = lockstep_core::sim::LinkConditions {
        latency: Duration::from_millis(61),
        jitter: Duration::ZERO,
        loss: 0.3,
        duplicate: 0.062_558_930_127_332_23,
        reorder: 0.124_103_122_638_439_77,
        max_datagram: Some(1200),
        bandwidth: None,
    };
    sc.period = Duration::from_millis(42);
    let mut h = sc.build();
    let warmup = h.run(
        lockstep_core::Instant::from_millis(294),
        |_, _, _, _| {},
        |_| false,
    );
    assert_eq!(warmup, Outcome::TimedOut);
    h.sim.freeze(PeerId(1));
    h.sim.freeze(PeerId(2));
    let done = h.run_until_tick(300, secs(300));
    outcome_ok(done, "survivors reach tick 300", sc.seed);
    let survivors = [PeerId(0), PeerId(3), PeerId(4), PeerId(5)];
    h.assert_streams_agree(&survivors);
    h.assert_no_desync();
    for id in survivors {
        assert_eq!(h.session(id).abandoned().len(), 2, "{id}");
    }
}
