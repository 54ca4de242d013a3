//! The adaptive input delay of a mesh: every peer works the delay out of
//! the same input streams, so a change lands at the same tick everywhere,
//! no tick runs twice or is skipped, and every input a game committed
//! runs at the tick it was stamped for.

use crate::common;
use common::hand::{Net, adaptive_mesh, datagram, set_wants};
use common::props::{cases, link};
use common::{Harness, Record, Scenario, Session, secs};
use lockstep_core::sim::{LinkConditions, Outcome};
use lockstep_core::wire::{Datagram, Message};
use lockstep_core::{
    AdaptiveDelay, Event, Instant, PacerConfig, PeerId, PlayerId, SystemEvent, Tick,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// What one player committed, by tick, and how much of it was checked.
#[derive(Default)]
struct Ledger {
    committed: BTreeMap<Tick, u16>,
    checked: u64,
}

/// A peer's game loop: a pacer at the tick rate says how many frames to
/// run now. `classic`: after each frame run, commit while the input is
/// due (the lead follows the delay); otherwise commit once per tick on the
/// game's own clock.
struct Loop {
    pacer: lockstep_core::Pacer,
    ledger: Ledger,
    classic: bool,
}

impl Loop {
    fn new(tick_rate: u32, classic: bool) -> Self {
        let config = PacerConfig {
            target: 1,
            ..PacerConfig::default()
        };
        Self {
            pacer: lockstep_core::Pacer::new(tick_rate, config).expect("a pacer"),
            ledger: Ledger::default(),
            classic,
        }
    }

    fn commit(&mut self, s: &mut Session, rec: &mut Record) {
        let input = rec.input();
        match s.commit_local(input) {
            Ok(tick) => {
                rec.committed();
                assert!(
                    self.ledger.committed.insert(tick, input).is_none(),
                    "tick {tick} committed twice"
                );
            }
            Err(_) => rec.refused += 1,
        }
    }

    fn step(&mut self, s: &mut Session, rec: &mut Record, now: Instant) {
        let seat = s.seat();
        let due = self.pacer.ticks_due(now, s.ready_to_pace());
        // A commit refused (the lead limit) is offered again.
        if self.classic && s.input_due() {
            self.commit(s, rec);
        }
        for _ in 0..due {
            if !self.classic && seat.is_some() {
                self.commit(s, rec);
            }
            let Some(frame) = s.advance() else { break };
            rec.record(&frame);
            if let Some(p) = seat {
                let ran = frame.input(p).copied();
                match self.ledger.committed.remove(&frame.tick) {
                    Some(v) => {
                        assert_eq!(ran, Some(v), "tick {}: our input", frame.tick);
                        self.ledger.checked += 1;
                    }
                    // Primed, or filled after a rise: neutral.
                    None => assert!(
                        ran.is_none_or(|v| v == 0),
                        "tick {}: {ran:?} nobody committed",
                        frame.tick
                    ),
                }
                if let Some((t, _)) = self.ledger.committed.first_key_value() {
                    assert!(*t > frame.tick, "input for tick {t} never ran");
                }
            }
            if frame.tick.since(rec.first).is_multiple_of(10) {
                let _ = s.report_checksum(frame.tick, rec.reported(frame.tick));
            }
            if self.classic && s.input_due() {
                self.commit(s, rec);
            }
        }
        while let Some(ev) = s.poll_event() {
            rec.events.push(ev);
        }
    }
}

fn adaptive() -> AdaptiveDelay {
    AdaptiveDelay {
        window: 60,
        ..AdaptiveDelay::default()
    }
}

fn scenario(players: usize, observers: usize, delay: u32, rate: u32, seed: u64) -> Scenario {
    let mut sc = Scenario::new(players, seed);
    sc.observers = observers;
    sc.config.delay = delay;
    sc.config.tick_rate = rate;
    sc.config.adaptive = Some(adaptive());
    sc.config.abandon_after = None;
    sc.period = Duration::from_millis(5);
    sc
}

/// Runs `h` with a [`Loop`] per peer until every live peer ran `frames`
/// more frames or `until`.
fn run(
    h: &mut Harness,
    loops: &mut BTreeMap<PeerId, Loop>,
    frames: u64,
    until: Instant,
) -> Outcome {
    let target: BTreeMap<PeerId, u64> = h
        .sim
        .live()
        .map(|(id, s)| (id, s.stats().frames + frames))
        .collect();
    let records = &mut h.records;
    h.sim.run(
        until,
        Duration::from_millis(5),
        |id, s, now| {
            let rec = records.get_mut(&id).expect("a record");
            loops.get_mut(&id).expect("a loop").step(s, rec, now);
        },
        |sim| {
            sim.live()
                .all(|(id, s)| s.stats().frames >= target.get(&id).copied().unwrap_or(0))
        },
    )
}

fn loops(sc: &Scenario, classic: bool) -> BTreeMap<PeerId, Loop> {
    sc.peer_ids()
        .into_iter()
        .map(|id| (id, Loop::new(sc.config.tick_rate, classic)))
        .collect()
}

/// Every peer's `DelayChanged` events, by tick.
fn changes(h: &Harness, ids: &[PeerId]) -> Vec<Vec<(Tick, u32)>> {
    ids.iter()
        .map(|id| {
            h.records[id]
                .system
                .iter()
                .flat_map(|(t, evs)| evs.iter().map(move |e| (*t, *e)))
                .filter_map(|(t, e)| match e {
                    SystemEvent::DelayChanged { delay } => Some((t, delay)),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// The changes agree up to the shortest stream.
fn assert_changes_agree(h: &Harness, ids: &[PeerId], seed: u64) {
    let all = changes(h, ids);
    let shortest = ids
        .iter()
        .map(|id| h.records[id].frames())
        .min()
        .unwrap_or(0) as u32;
    let upto = |c: &Vec<(Tick, u32)>| -> Vec<(Tick, u32)> {
        c.iter()
            .copied()
            .filter(|(t, _)| t.since(h.first) < shortest)
            .collect()
    };
    for w in all.windows(2) {
        assert_eq!(
            upto(&w[0]),
            upto(&w[1]),
            "seed {seed}: delay changes differ"
        );
    }
}

prop_compose! {
    fn world()(
        players in 2usize..=5,
        observer in any::<bool>(),
        delay in 1u32..6,
        rate in prop_oneof![Just(30u32), Just(60)],
        first in link(60, 20),
        later in link(150, 40),
        change_at in 2u64..8,
        seed in any::<u64>(),
    ) -> (Scenario, LinkConditions, u64) {
        let mut sc = scenario(players, usize::from(observer), delay, rate, seed);
        sc.link = LinkConditions { loss: first.loss.min(0.2), ..first };
        (sc, LinkConditions { loss: later.loss.min(0.2), ..later }, change_at)
    }
}

proptest! {
    #![proptest_config(cases(16))]

    /// Whatever the network does, and whichever way the games commit, the
    /// delay's changes are the same on every machine (observers too),
    /// every frame runs once in order, and every input committed runs at
    /// the tick it was stamped for.
    #[test]
    fn delay_changes_keep_every_mesh_peer_identical(
        (sc, later, change_at) in world(),
        classic in any::<bool>(),
    ) {
        let mut h = sc.build();
        let mut loops = loops(&sc, classic);
        run(&mut h, &mut loops, u64::MAX, secs(change_at));
        let ids = sc.peer_ids();
        for a in &ids {
            for b in &ids {
                if a < b {
                    h.sim.net.set_link_both(*a, *b, later.clone());
                }
            }
        }
        let o = run(&mut h, &mut loops, 300, secs(change_at + 300));
        prop_assert_eq!(o, Outcome::Done, "seed {}: play went on", sc.seed);
        h.assert_streams_agree(&ids);
        h.assert_no_desync();
        assert_changes_agree(&h, &ids, sc.seed);
        let checked: u64 = loops.values().map(|l| l.ledger.checked).sum();
        prop_assert!(checked > 0);
    }
}

/// Latency jumps from 10 to 120 ms each way and back: the delay rises to
/// cover it within a few ticks, falls back once it has a window of spare
/// frames, and every peer sees the same changes at the same ticks.
#[test]
fn the_delay_follows_a_latency_jump_both_ways() {
    let mut sc = scenario(3, 0, 2, 30, 11);
    sc.link = LinkConditions {
        latency: Duration::from_millis(10),
        jitter: Duration::from_millis(2),
        ..LinkConditions::default()
    };
    let mut h = sc.build();
    let mut loops = loops(&sc, true);
    let ids = sc.peer_ids();
    assert_eq!(run(&mut h, &mut loops, 300, secs(60)), Outcome::Done);
    let low = h.session(PeerId(0)).delay();
    assert!(low <= 2, "a clean 20 ms round trip needs little: {low}");
    let slow = LinkConditions {
        latency: Duration::from_millis(120),
        ..sc.link.clone()
    };
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        h.sim.net.set_link_both(PeerId(a), PeerId(b), slow.clone());
    }
    let jump = h.session(PeerId(0)).frame();
    assert_eq!(run(&mut h, &mut loops, 400, secs(200)), Outcome::Done);
    let high = h.session(PeerId(0)).delay();
    // A frame is complete once the others' inputs for it arrive, a
    // one-way trip after they were committed, with ours: 120 ms at 33 ms
    // a tick needs 4 ticks.
    assert!(high >= 4, "the delay rose to {high}");
    let rose_at = changes(&h, &[PeerId(0)])[0]
        .iter()
        .find(|(t, d)| *t >= jump && *d >= 4)
        .map(|(t, _)| t.since(jump))
        .expect("a rise");
    assert!(rose_at < 60, "covered {rose_at} ticks after the jump");
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        h.sim
            .net
            .set_link_both(PeerId(a), PeerId(b), sc.link.clone());
    }
    assert_eq!(run(&mut h, &mut loops, 900, secs(400)), Outcome::Done);
    let back = h.session(PeerId(0)).delay();
    assert!(back <= 2, "the delay fell back to {back}");
    h.assert_streams_agree(&ids);
    h.assert_no_desync();
    assert_changes_agree(&h, &ids, sc.seed);
    for id in &ids {
        let st = h.session(*id).stats();
        assert_eq!(st.delay, back);
        assert!(st.delay_changes >= 2, "{id}: {st:?}");
    }
}

/// A player goes silent while the delay is high because of it: it is
/// abandoned, its wants stop counting where its input does, and the delay
/// falls for the players left, the same everywhere.
#[test]
fn an_abandoned_players_wants_stop_counting() {
    let mut sc = scenario(3, 1, 2, 30, 5);
    sc.config.abandon_after = Some(Duration::from_secs(2));
    sc.link = LinkConditions {
        latency: Duration::from_millis(10),
        ..LinkConditions::default()
    };
    let mut h = sc.build();
    let mut loops = loops(&sc, true);
    // Player 2 is far away.
    let far = LinkConditions {
        latency: Duration::from_millis(150),
        ..sc.link.clone()
    };
    for p in [0, 1, 3] {
        h.sim.net.set_link_both(PeerId(2), PeerId(p), far.clone());
    }
    assert_eq!(run(&mut h, &mut loops, 600, secs(120)), Outcome::Done);
    // 150 ms one way at 33 ms a tick: 5 ticks.
    let high = h.session(PeerId(0)).delay();
    assert!(high >= 5, "the far player raised the delay to {high}");
    h.sim.freeze(PeerId(2));
    let left = [PeerId(0), PeerId(1), PeerId(3)];
    let o = run(&mut h, &mut loops, 900, secs(400));
    assert_eq!(o, Outcome::Done);
    assert!(
        h.session(PeerId(0))
            .abandoned()
            .iter()
            .any(|(p, _)| *p == PlayerId(2))
    );
    let low = h.session(PeerId(0)).delay();
    assert!(low <= 2, "the delay fell to {low} without it");
    h.assert_streams_agree(&left);
    assert_changes_agree(&h, &left, sc.seed);
    for id in left {
        assert!(
            !h.records[&id]
                .events
                .iter()
                .any(|e| matches!(e, Event::Desync { .. })),
            "{id} desynced"
        );
    }
}

/// A seated player that always wants the largest delay there is gets the
/// session's `max` and nothing beyond, and the honest peers, who all see
/// the same wants, agree on every change.
#[test]
fn a_greedy_player_raises_the_delay_to_max_and_no_further() {
    let mut h = Net::new(3, &adaptive_mesh());
    for _ in 0..300 {
        h.tick(&mut |from, to, b, net| {
            if from == 1 {
                let r = net.s[to].frame();
                vec![(1, to, set_wants(&b, r, PlayerId(1), false, &|_| Some(1024)))]
            } else {
                vec![(from, to, b)]
            }
        });
    }
    let (a, b) = (h.changes(0), h.changes(2));
    assert_eq!(a, b, "the honest peers agree");
    assert_eq!(a.first().map(|c| c.1), Some(16), "{a:?}");
    assert!(a.iter().all(|(_, d)| *d <= 16), "{a:?}");
    assert_eq!(h.s[0].delay(), 16);
    assert!(
        h.frames[0].len() > 200,
        "play goes on: {}",
        h.frames[0].len()
    );
    h.assert_inputs_agree(0, 2);
}

/// Wants that come without their input, for a seat not the sender's, or
/// from an observer, are not taken: nothing changes.
#[test]
fn wants_without_their_input_or_from_the_wrong_peer_are_ignored() {
    let mut h = Net::new(3, &adaptive_mesh());
    for _ in 0..300 {
        h.tick(&mut |from, to, b, net| {
            let d = Datagram::decode(&b, net.s[to].frame()).expect("our own datagram");
            // Every peer claims a want of 1024 for the seat after its own,
            // for ticks ahead, with no input to go with it.
            let other = PlayerId(((from + 1) % 3) as u16);
            let claim = Message::DelayWants {
                seat: other,
                changes: vec![(d.base.saturating_add(3), 1024)],
            };
            let mut msgs = d.messages.clone();
            msgs.push(claim);
            vec![(from, to, datagram(d.base, &msgs))]
        });
    }
    for i in 0..3 {
        assert!(
            h.changes(i).iter().all(|(_, d)| *d < 16),
            "{:?}",
            h.changes(i)
        );
        assert!(h.frames[i].len() > 250);
    }
}
