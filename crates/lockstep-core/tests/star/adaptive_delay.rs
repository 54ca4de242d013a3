//! The adaptive input delay of a `WaitForAll` room: the delay follows the
//! network, and a change never runs a tick twice, never skips one, never
//! loses an input a game committed, and leaves every machine identical.

use crate::common;
use common::props::{cases, link};
use common::star::{Node, SERVER, StarScenario};
use common::{Record, secs};
use lockstep_core::sequenced::{ClientSession, Policy};
use lockstep_core::sim::{LinkConditions, Outcome};
use lockstep_core::{AdaptiveDelay, Instant, PeerId, SystemEvent, Tick};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// What one player committed, by tick, and what ran for it.
#[derive(Default)]
struct Ledger {
    committed: BTreeMap<Tick, u16>,
    /// Ticks run whose input for our seat was ours, checked.
    checked: u64,
}

/// One game-loop iteration. `classic`: run the frames there are, and after
/// each commit while the input is due (the lead stays the delay);
/// otherwise commit once per call and run whatever arrived.
fn play(c: &mut ClientSession<u16>, rec: &mut Record, ledger: &mut Ledger, classic: bool) {
    let seat = c.seat();
    let commit = |c: &mut ClientSession<u16>, rec: &mut Record, ledger: &mut Ledger| {
        let input = rec.input();
        match c.commit_local(input) {
            Ok(tick) => {
                rec.committed();
                assert!(
                    ledger.committed.insert(tick, input).is_none(),
                    "tick {tick} committed twice"
                );
            }
            Err(_) => rec.refused += 1,
        }
    };
    if !classic && seat.is_some() {
        commit(c, rec, ledger);
    }
    while let Some(frame) = c.advance() {
        rec.record(&frame);
        if let Some(p) = seat
            && frame.tick >= c.welcome().map_or(Tick::ZERO, |w| w.tick)
        {
            let ran = frame.input(p).copied();
            match ledger.committed.remove(&frame.tick) {
                // Ours, at the tick it was stamped for.
                Some(v) => {
                    assert_eq!(ran, Some(v), "tick {}: our input", frame.tick);
                    ledger.checked += 1;
                }
                // Not ours: a tick before our first, or one a rise added.
                None => assert!(
                    ran.is_none_or(|v| v == 0),
                    "tick {}: {ran:?} nobody committed",
                    frame.tick
                ),
            }
            // Nothing committed for an earlier tick is left unrun.
            if let Some((t, _)) = ledger.committed.first_key_value() {
                assert!(*t > frame.tick, "input for tick {t} never ran");
            }
        }
        let _ = c.report_checksum(frame.tick, rec.reported(frame.tick));
        if classic && c.input_due() {
            commit(c, rec, ledger);
        }
    }
    // A classic loop's first commit, before any frame ran.
    if classic && c.input_due() && c.stats().frames == 0 {
        commit(c, rec, ledger);
    }
    while let Some(ev) = c.poll_event() {
        rec.events.push(ev);
    }
}

prop_compose! {
    fn scenario()(
        players in 2usize..=5,
        delay in 1u32..6,
        rate in prop_oneof![Just(30u32), Just(60)],
        link in link(60, 20),
        later in link(150, 40),
        change_at in 2u64..8,
        seed in any::<u64>(),
    ) -> (StarScenario, LinkConditions, u64) {
        let mut s = StarScenario::new(players, seed);
        s.server.delay = delay;
        s.server.tick_rate = rate;
        s.server.adaptive = Some(AdaptiveDelay { window: 60, ..AdaptiveDelay::default() });
        s.server.policy = Policy::WaitForAll { abandon_after: Duration::from_secs(600) };
        s.client.adaptive = Some(AdaptiveDelay { window: 60, ..AdaptiveDelay::default() });
        s.link = LinkConditions { loss: link.loss.min(0.2), ..link };
        (s, LinkConditions { loss: later.loss.min(0.2), ..later }, change_at)
    }
}

/// Runs `sc`, its network becoming `later` after `change_at` seconds.
fn run(
    sc: &StarScenario,
    later: &LinkConditions,
    change_at: u64,
    classic: bool,
    joiner: bool,
) -> (Vec<Vec<(Tick, SystemEvent)>>, u64) {
    let mut h = sc.build();
    let mut ids = sc.client_ids();
    let mut ledgers: BTreeMap<PeerId, Ledger> =
        ids.iter().map(|i| (*i, Ledger::default())).collect();
    let step = |h: &mut common::star::StarHarness,
                ledgers: &mut BTreeMap<PeerId, Ledger>,
                until: Instant,
                frames: u64| {
        h.run_clients(
            until,
            |id, c, rec| play(c, rec, ledgers.get_mut(&id).expect("a ledger"), classic),
            |sim| {
                sim.live()
                    .filter_map(|(_, n)| n.client())
                    .all(|c| c.stats().frames >= frames)
            },
        )
    };
    step(
        &mut h,
        &mut ledgers,
        Instant::ZERO + Duration::from_secs(change_at),
        u64::MAX,
    );
    for id in &ids {
        h.sim.net.set_link_both(SERVER, *id, later.clone());
    }
    // A player joins while the delay moves, replaying the game so far.
    if joiner {
        let id = PeerId(ids.len() as u32 + 1);
        let c = ClientSession::new(sc.client.clone(), SERVER, h.sim.now()).expect("a client");
        h.sim.add(id, Node::Client(c));
        h.sim.net.set_link_both(SERVER, id, later.clone());
        h.records
            .insert(id, Record::new(sc.seed ^ 0x99, sc.server.first_tick));
        ledgers.insert(id, Ledger::default());
        ids.push(id);
    }
    let target = h.client(ids[0]).stats().frames + 300;
    let outcome = step(&mut h, &mut ledgers, secs(change_at + 300), target);
    if outcome != Outcome::Done {
        for id in &ids {
            eprintln!("{id}: {:?}", h.client(*id).stats());
        }
        eprintln!(
            "server: {:?} at {:?}: {outcome:?}",
            h.server().stats(),
            h.sim.now()
        );
    }
    assert_eq!(outcome, Outcome::Done, "seed {}: play went on", sc.seed);
    h.assert_streams_agree(&ids);
    h.assert_no_desync();
    let changes = ids
        .iter()
        .map(|id| {
            h.records[id]
                .system
                .iter()
                .flat_map(|(t, evs)| evs.iter().map(|e| (*t, *e)))
                .filter(|(_, e)| matches!(e, SystemEvent::DelayChanged { .. }))
                .collect()
        })
        .collect();
    let checked = ledgers.values().map(|l| l.checked).sum();
    (changes, checked)
}

proptest! {
    #![proptest_config(cases(24))]

    /// Whatever the network does, and whichever way the game commits, the
    /// delay's changes are the same on every machine, every frame runs
    /// once in order, and every input a game committed runs at its tick.
    #[test]
    fn delay_changes_keep_every_machine_identical(
        (sc, later, change_at) in scenario(),
        classic in any::<bool>(),
        joiner in any::<bool>(),
    ) {
        let (changes, checked) = run(&sc, &later, change_at, classic, joiner);
        prop_assert!(changes.windows(2).all(|w| w[0].len().min(w[1].len()) == 0
            || w[0][..w[0].len().min(w[1].len())] == w[1][..w[0].len().min(w[1].len())]));
        prop_assert!(checked > 0);
    }
}

/// Latency jumps from 20 to 100 ms each way: the delay rises within a
/// second, and the frames keep coming; back at 20 ms, it falls again.
#[test]
fn the_delay_follows_a_jump_in_latency_both_ways() {
    let mut sc = StarScenario::new(3, 11);
    sc.server.delay = 2;
    sc.server.adaptive = Some(AdaptiveDelay::default());
    sc.link = LinkConditions {
        latency: Duration::from_millis(20),
        jitter: Duration::from_millis(2),
        ..LinkConditions::default()
    };
    let up = LinkConditions {
        latency: Duration::from_millis(100),
        ..sc.link.clone()
    };
    let (changes, checked) = run(&sc, &up, 5, true, false);
    let rises: Vec<_> = changes[0]
        .iter()
        .filter_map(|(t, e)| match e {
            SystemEvent::DelayChanged { delay } => Some((*t, *delay)),
            _ => None,
        })
        .collect();
    // 5 s in at 30 Hz: tick 150. 200 ms round trip needs 7 ticks or more.
    let risen = rises.iter().find(|(t, d)| t.get() >= 150 && *d >= 7);
    assert!(risen.is_some_and(|(t, _)| t.get() <= 150 + 30), "{rises:?}");
    assert!(checked > 900);
}

/// A delay more than the network needs falls, and a game committing once
/// per frame run commits nothing until its lead is down to it.
#[test]
fn a_delay_more_than_the_network_needs_falls() {
    let mut sc = StarScenario::new(2, 5);
    sc.server.delay = 8;
    let fast = AdaptiveDelay {
        window: 30,
        ..AdaptiveDelay::default()
    };
    sc.server.adaptive = Some(fast.clone());
    sc.client.adaptive = Some(fast);
    sc.link = LinkConditions {
        latency: Duration::from_millis(5),
        ..LinkConditions::default()
    };
    // A tick a second, each after a second of lower wants: 8 to 2 in 7 s.
    let (changes, _) = run(&sc, &sc.link.clone(), 10, true, false);
    let last = changes[0].iter().rev().find_map(|(_, e)| match e {
        SystemEvent::DelayChanged { delay } => Some(*delay),
        _ => None,
    });
    assert!(last.is_some_and(|d| d <= 2), "{:?}", changes[0]);
}

/// A datagram from `from` to the sequencer carrying only `DelayWanted`.
fn forge_want(h: &mut common::star::StarHarness, from: PeerId, delay: u32) {
    use lockstep_core::wire::{DatagramWriter, Message};
    let base = h.client(from).stats().next_tick;
    let mut buf = Vec::new();
    let mut w = DatagramWriter::new(&mut buf, base, 1200);
    w.push(&Message::DelayWanted { delay }).expect("fits");
    w.finish();
    h.sim.net.send(from, SERVER, &buf);
}

/// Hostile wants: a player that always wants the protocol's largest delay
/// (its client built to), and a spectator forging one every tick. The room
/// plays at its own `max`, never beyond, the spectator counts for nothing,
/// and the honest players' streams stay one.
#[test]
fn a_player_wanting_the_largest_delay_gets_the_rooms_max_and_a_spectator_nothing() {
    let mut sc = StarScenario::new(3, 21);
    sc.spectators = 1;
    sc.server.delay = 2;
    sc.server.adaptive = Some(AdaptiveDelay {
        max: 6,
        ..AdaptiveDelay::default()
    });
    let mut h = sc.build();
    let ids = sc.client_ids();
    let spectator = ids[3];
    // Player 3's client wants 1024 whatever happens.
    let greedy = lockstep_core::sequenced::ClientConfig {
        name: "greedy".into(),
        adaptive: Some(AdaptiveDelay {
            min: 1024,
            max: 1024,
            ..AdaptiveDelay::default()
        }),
        ..sc.client.clone()
    };
    h.sim.remove(ids[2]);
    h.sim.add(
        ids[2],
        Node::Client(ClientSession::new(greedy, SERVER, Instant::ZERO).expect("a client")),
    );
    let mut seen_max = 0;
    for step in 0..60u64 {
        let until = Instant::ZERO + Duration::from_millis(500 * (step + 1));
        h.run(until, |_, _, _| {}, |_| false);
        if h.client(spectator).connected() {
            forge_want(&mut h, spectator, 1024);
        }
        seen_max = seen_max.max(h.server().stats().delay);
    }
    assert_eq!(seen_max, 6, "the room's max, no more");
    assert!(h.client(ids[0]).stats().frames > 500);
    h.assert_streams_agree(&ids[..3]);
    h.assert_no_desync();
}

/// A player whose wants swing from the top to the bottom every tick: the
/// room rises at most once per frame and falls at most once a second, and
/// play goes on as one stream.
#[test]
fn a_player_flapping_its_want_changes_the_delay_at_most_once_a_second_down() {
    let mut sc = StarScenario::new(3, 22);
    sc.server.delay = 2;
    sc.server.adaptive = Some(AdaptiveDelay::default());
    let mut h = sc.build();
    let ids = sc.client_ids();
    let mut flip = false;
    for step in 0..600u64 {
        let until = Instant::ZERO + Duration::from_millis(33 * (step + 1));
        h.run(until, |_, _, _| {}, |_| false);
        if h.client(ids[2]).connected() {
            flip = !flip;
            forge_want(&mut h, ids[2], if flip { 16 } else { 1 });
        }
    }
    let secs = 600 * 33 / 1000;
    let delays: Vec<u32> = h.records[&ids[0]]
        .system
        .iter()
        .flat_map(|(_, evs)| evs.iter())
        .filter_map(|e| match e {
            SystemEvent::DelayChanged { delay } => Some(*delay),
            _ => None,
        })
        .collect();
    let falls = delays.windows(2).filter(|w| w[1] < w[0]).count();
    assert!(falls <= secs + 1, "{falls} falls in {secs} s: {delays:?}");
    assert!(delays.iter().all(|d| (1..=16).contains(d)));
    assert!(h.client(ids[0]).stats().frames > 400);
    h.assert_streams_agree(&ids);
    h.assert_no_desync();
}

/// A rise past what a client may hold unacknowledged (`max_unacked`, 256):
/// the neutral inputs that top each lead up go out over several commits
/// instead of the oldest being dropped unsent (the room waited on them for
/// good, found in review).
#[test]
fn a_rise_past_max_unacked_is_topped_up_over_several_commits() {
    let mut sc = StarScenario::new(3, 31);
    sc.server.delay = 2;
    sc.server.adaptive = Some(AdaptiveDelay {
        max: 400,
        ..AdaptiveDelay::default()
    });
    // Honest players say nothing: only the greedy want counts.
    sc.client.adaptive = None;
    let mut h = sc.build();
    let ids = sc.client_ids();
    h.run(secs(3), |_, _, _| {}, |_| false);
    let before = h.client(ids[0]).stats().frames;
    forge_want(&mut h, ids[2], 1024);
    h.run(secs(60), |_, _, _| {}, |_| false);
    assert_eq!(h.server().stats().delay, 400);
    let after = h.client(ids[0]).stats().frames;
    assert_eq!(h.client(ids[0]).stats().inputs_dropped, 0);
    // 57 s at 30 Hz, less the 400 ticks (13 s) the rise adds.
    assert!(
        after > before + 900,
        "frames {before} -> {after}: the room stalled"
    );
    h.assert_streams_agree(&ids);
}

/// Runs the room until `until`, `hold` running its frames but committing
/// nothing.
fn drive(h: &mut common::star::StarHarness, until: Instant, hold: Option<PeerId>) {
    h.run_clients(
        until,
        |id, c, rec| {
            if Some(id) != hold {
                return common::star::play(c, rec);
            }
            while let Some(f) = c.advance() {
                rec.record(&f);
                let _ = c.report_checksum(f.tick, rec.reported(f.tick));
            }
            while c.poll_event().is_some() {}
        },
        |_| false,
    );
}

/// A player moves the delay down, holds the open tick and moves the delay
/// up while a snapshot joiner catches up: the change after the joiner's Welcome lies
/// in a frame before its snapshot, which it never runs. The frame the
/// joiner goes live at states the delay its inputs are due by, so its
/// client plays at the room's delay (it kept the Welcome's, 10 ticks
/// short, found in review).
#[test]
fn a_snapshot_joiner_goes_live_at_the_rooms_delay_whatever_it_missed() {
    let mut sc = StarScenario::new(3, 41);
    sc.server.delay = 8;
    sc.server.snapshot_join = true;
    sc.server.adaptive = Some(AdaptiveDelay::default());
    sc.server.policy = Policy::WaitForAll {
        abandon_after: Duration::from_secs(600),
    };
    sc.client.adaptive = None;
    let mut h = sc.build();
    let ids = sc.client_ids();
    let x = ids[2];
    h.run(secs(3), |_, _, _| {}, |_| false);
    // X wants less: a tick a second of play, each after a second of lower
    // wants.
    for s in 4..=11 {
        forge_want(&mut h, x, 2);
        drive(&mut h, secs(s), None);
    }
    assert_eq!(h.server().stats().delay, 2, "fell");
    // X holds the room.
    drive(&mut h, secs(13), Some(x));
    let held = h.server().stats().open;
    // A joiner, by snapshot, catches up with the held tick.
    let j = PeerId(4);
    let c = ClientSession::new(sc.client.clone(), SERVER, h.sim.now()).expect("a client");
    h.sim.add(j, Node::Client(c));
    h.records
        .insert(j, Record::new(sc.seed ^ 0x99, sc.server.first_tick));
    drive(&mut h, secs(23), Some(x));
    assert_eq!(h.server().stats().open, held, "still held");
    forge_want(&mut h, x, 12);
    drive(&mut h, secs(23) + Duration::from_millis(100), Some(x));
    assert_eq!(h.server().stats().delay, 12, "rose");
    // X lets go.
    let before = h.client(ids[0]).stats().frames;
    drive(&mut h, secs(48), None);
    let after = h.client(ids[0]).stats().frames;
    let all = [ids[0], ids[1], ids[2], j];
    h.assert_streams_agree(&all);
    assert!(
        after > before + 300,
        "frames {before} -> {after}: the room stalled"
    );
    for id in all {
        assert_eq!(
            h.client(id).stats().delay,
            h.server().stats().delay,
            "{id}'s delay"
        );
    }
}

/// A snapshot joiner in an adaptive room whose delay never moved goes live
/// without the frame stream restating the delay: every game saw
/// `DelayChanged { delay: 8 }` at the joiner's live tick when the delay
/// already was 8. (The restatement stays for a joiner the delay moved
/// under: the test above.)
#[test]
fn a_joiner_the_delay_did_not_move_under_adds_no_delay_change() {
    let mut sc = StarScenario::new(2, 43);
    sc.server.delay = 8;
    sc.server.snapshot_join = true;
    sc.server.adaptive = Some(AdaptiveDelay::default());
    sc.client.adaptive = None;
    let mut h = sc.build();
    h.run(secs(3), |_, _, _| {}, |_| false);
    let j = PeerId(3);
    let c = ClientSession::new(sc.client.clone(), SERVER, h.sim.now()).expect("a client");
    h.sim.add(j, Node::Client(c));
    h.records
        .insert(j, Record::new(sc.seed ^ 0x99, sc.server.first_tick));
    drive(&mut h, secs(10), None);
    let mut all = sc.client_ids();
    all.push(j);
    h.assert_streams_agree(&all);
    let live = h.records[&sc.client_ids()[0]]
        .system
        .iter()
        .find(|(_, evs)| {
            evs.iter()
                .any(|e| matches!(e, SystemEvent::CaughtUp { .. }))
        })
        .map(|(t, _)| *t);
    assert!(live.is_some(), "the joiner went live");
    for id in all {
        let changes: Vec<_> = h.records[&id]
            .system
            .iter()
            .flat_map(|(t, evs)| evs.iter().map(|e| (*t, *e)))
            .filter(|(_, e)| matches!(e, SystemEvent::DelayChanged { .. }))
            .collect();
        assert_eq!(changes, [], "{id} (the joiner went live at {live:?})");
        assert_eq!(h.client(id).stats().delay, 8);
    }
}

/// In a `Deadline` room each client keeps its own lead from the slack the
/// sequencer reports: it rises when inputs come late (far players) and
/// falls back when they arrive with ticks to spare; once settled, no input
/// is late, and every input runs at the tick it was stamped for.
#[test]
fn a_deadline_client_lowers_its_lead_when_its_inputs_have_ticks_to_spare() {
    let mut sc = StarScenario::new(2, 21);
    sc.server.delay = 2;
    sc.server.policy = Policy::Deadline {
        missing: lockstep_core::sequenced::MissingInput::Neutral,
    };
    sc.link = LinkConditions {
        latency: Duration::from_millis(90),
        jitter: Duration::from_millis(4),
        ..LinkConditions::default()
    };
    let mut h = sc.build();
    let ids = sc.client_ids();
    // The classic loop; from `judge` on, each input committed must run at
    // its tick.
    let mut ledgers: BTreeMap<PeerId, BTreeMap<Tick, u16>> = BTreeMap::new();
    let mut checked = 0u64;
    let mut go = |h: &mut common::star::StarHarness, until, judge: bool| {
        h.run_clients(
            until,
            |id, c, rec| {
                let ledger = ledgers.entry(id).or_default();
                let commit = |c: &mut ClientSession<u16>,
                              rec: &mut Record,
                              ledger: &mut BTreeMap<Tick, u16>| {
                    let input = rec.input();
                    if let Ok(t) = c.commit_local(input) {
                        rec.committed();
                        if judge {
                            ledger.insert(t, input);
                        }
                    }
                };
                if c.input_due() {
                    commit(c, rec, ledger);
                }
                while let Some(f) = c.advance() {
                    rec.record(&f);
                    if let Some(v) = ledger.remove(&f.tick) {
                        assert_eq!(f.input(c.seat().expect("seated")).copied(), Some(v));
                        checked += 1;
                    }
                    if c.input_due() {
                        commit(c, rec, ledger);
                    }
                }
                while c.poll_event().is_some() {}
            },
            |_| false,
        )
    };
    go(&mut h, secs(20), false);
    let far: Vec<u32> = ids.iter().map(|id| h.client(*id).stats().lead).collect();
    // 90 ms each way at 33 ms a tick: the open tick is 3 ahead of the
    // frames we run, and an input takes 3 to reach it.
    assert!(far.iter().all(|l| *l >= 5), "leads {far:?}");
    let near_link = LinkConditions {
        latency: Duration::from_millis(5),
        ..sc.link.clone()
    };
    for id in &ids {
        h.sim.net.set_link_both(SERVER, *id, near_link.clone());
    }
    go(&mut h, secs(40), false);
    let late_before = h.server().stats().late_inputs;
    go(&mut h, secs(60), true);
    let near: Vec<u32> = ids.iter().map(|id| h.client(*id).stats().lead).collect();
    assert!(
        near.iter().zip(&far).all(|(n, f)| n < f && *n <= 2),
        "leads {far:?} then {near:?}"
    );
    for id in &ids {
        assert!(h.client(*id).stats().lead_cuts > 0);
    }
    assert_eq!(
        h.server().stats().late_inputs,
        late_before,
        "no input late once settled"
    );
    h.assert_streams_agree(&ids);
    assert!(checked > 1000, "{checked} inputs checked");
}

/// A host taking over goes on at the delay the frames handed over last
/// set, even one in a frame it has not run itself (its own view of the
/// delay comes from the frames it ran), and widens its adaptive bounds to
/// a delay past them rather than fail to take over.
#[test]
fn a_new_host_takes_the_delay_the_handed_over_frames_set() {
    use lockstep_core::sequenced::{Handover, Sequencer, SequencerConfig, Survivor};
    use lockstep_core::wire::ResumeToken;
    use lockstep_core::{Frame, PlayerId};
    let frames_with = |changes: &[(u32, u32)]| -> Vec<Frame<u16>> {
        (0..10u32)
            .map(|t| Frame {
                tick: Tick::new(t),
                inputs: vec![Some(1), Some(2)],
                events: changes
                    .iter()
                    .filter(|(at, _)| *at == t)
                    .map(|(_, d)| SystemEvent::DelayChanged { delay: *d })
                    .collect(),
            })
            .collect()
    };
    let config = SequencerConfig {
        delay: 3,
        adaptive: Some(AdaptiveDelay::default()),
        ..SequencerConfig::default()
    };
    for (changes, want) in [(vec![], 3), (vec![(2, 5), (8, 7)], 7), (vec![(9, 20)], 20)] {
        let handover = Handover {
            frames: frames_with(&changes),
            next: Tick::new(10),
            survivors: vec![Survivor {
                seat: PlayerId(1),
                token: ResumeToken([7; 16]),
                previous: None,
                peer: None,
                playing: true,
                inputs: Vec::new(),
                name: String::new(),
            }],
            events: Vec::new(),
            fingerprint: 0,
            match_id: 0,
        };
        let s = Sequencer::take_over(config.clone(), handover, secs(1)).expect("taken over");
        assert_eq!(s.stats().delay, want, "{changes:?}");
    }
}

/// The delay's fall counts a second of play in the ticks the room seals,
/// as a mesh counts it in the ticks it runs: a `WaitForAll` room held up
/// by a player who commits nothing for five seconds keeps its delay
/// through the wait (it fell a tick a second of wall clock before, so a
/// room held up came back five ticks lower than its players last asked
/// for).
#[test]
fn a_room_held_up_does_not_count_the_wait_toward_a_fall() {
    let mut sc = StarScenario::new(2, 6);
    sc.server.delay = 16;
    let fast = AdaptiveDelay {
        window: 30,
        ..AdaptiveDelay::default()
    };
    sc.server.adaptive = Some(fast.clone());
    sc.client.adaptive = Some(fast);
    sc.link = LinkConditions {
        latency: Duration::from_millis(5),
        ..LinkConditions::default()
    };
    let mut h = sc.build();
    let ids = sc.client_ids();
    let mut ledgers: BTreeMap<PeerId, Ledger> =
        ids.iter().map(|i| (*i, Ledger::default())).collect();
    // `hold` runs its frames and commits nothing.
    let mut drive = |h: &mut common::star::StarHarness, until: u64, hold: Option<PeerId>| {
        h.run_clients(
            secs(until),
            |id, c, rec| {
                let ledger = ledgers.get_mut(&id).expect("a ledger");
                if Some(id) == hold {
                    while let Some(f) = c.advance() {
                        rec.record(&f);
                        ledger.committed.retain(|t, _| *t > f.tick);
                        let _ = c.report_checksum(f.tick, rec.reported(f.tick));
                    }
                    while c.poll_event().is_some() {}
                } else {
                    play(c, rec, ledger, true);
                }
            },
            |_| false,
        );
    };
    // A second of play: the wants are down and the delay is falling (the
    // loop runs frames as fast as they come, so that is more than a
    // second of ticks).
    drive(&mut h, 1, None);
    // Held up: the open tick stops once the held seat's lead is used up,
    // and then for five seconds nothing is sealed and nothing falls.
    drive(&mut h, 2, Some(ids[1]));
    let (open, before) = (h.server().stats().open, h.server().stats().delay);
    assert!(before < 16 && before > 1, "delay {before} before the wait");
    drive(&mut h, 7, Some(ids[1]));
    assert_eq!(h.server().stats().open, open, "the room waited");
    assert_eq!(h.server().stats().delay, before, "no fall while held up");
    h.assert_streams_agree(&ids);
    h.assert_no_desync();
}
