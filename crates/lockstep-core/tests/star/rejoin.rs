//! Reconnecting from a snapshot, and a sequencer that runs the game, in the
//! corners a review found them broken.

use crate::common;
use common::join::World;
use common::star::{Node, SERVER};
use common::toy::Game;
use lockstep_core::sequenced::{
    ClientConfig, ClientSession, Policy, Sequencer, SequencerConfig, SequencerEvent,
};
use lockstep_core::sim::{LinkConditions, Outcome};
use lockstep_core::{Event, Instant, PeerId, Tick};
use std::time::Duration;

fn server_config() -> SequencerConfig {
    SequencerConfig {
        policy: Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        },
        snapshot_join: true,
        snapshot_join_after: 0,
        history: 64,
        ..SequencerConfig::default()
    }
}

/// A joiner says it caught up while the room is paused (the CaughtUp event
/// waits in the open tick), then its connection dies; it resumes during the
/// pause and gets a snapshot from before that tick. The stale CaughtUp{me}
/// used to end the new connection's join on the client, so it never said
/// CaughtUp and its seat stayed non-live for good while it believed it
/// played. A resume drops the CaughtUp no tick carries yet.
#[test]
fn a_resume_during_a_pause_plays_again() {
    let seed = 5;
    let mut w = World::with(2, server_config(), LinkConditions::default(), seed, false);
    assert_eq!(w.run(Instant::from_millis(2_000)), Outcome::TimedOut);
    w.add_client(PeerId(3), true, false, seed);
    w.run_until(6_000, |e| {
        matches!(e, SequencerEvent::SnapshotReady { .. }).then_some(())
    })
    .expect("snapshot for the joiner");
    w.server_mut().pause();
    w.run_until(10_000, |e| match e {
        SequencerEvent::CaughtUp { peer, .. } if *peer == PeerId(3) => Some(()),
        _ => None,
    })
    .expect("joiner caught up");
    let token = w.client(PeerId(3)).welcome().unwrap().token;
    let seat = w.client(PeerId(3)).seat().unwrap();
    w.sim.freeze(PeerId(3));
    let x = w.server().open_tick();
    let t = w.sim.now().as_micros() / 1000;
    assert_eq!(w.run(Instant::from_millis(t + 1_500)), Outcome::TimedOut);
    assert!(w.server().paused());
    w.reconnect(PeerId(13), token, seed);
    let tick = w
        .run_until(t + 6_000, |e| match e {
            SequencerEvent::SnapshotReady { tick, .. } => Some(*tick),
            _ => None,
        })
        .expect("snapshot for the resumed seat");
    assert!(
        tick < x,
        "snapshot {tick} before the pending CaughtUp at {x}"
    );
    w.server_mut().resume();
    let t = w.sim.now().as_micros() / 1000;
    assert_eq!(w.run(Instant::from_millis(t + 8_000)), Outcome::TimedOut);
    let app = &w.apps[&PeerId(13)];
    assert!(
        app.events
            .iter()
            .any(|e| matches!(e, Event::CaughtUp { .. })),
        "client thinks it caught up"
    );
    assert!(app.inputs_after_live > 100, "client commits as live");
    let server_caught_up = w
        .server_events
        .iter()
        .any(|e| matches!(e, SequencerEvent::CaughtUp { peer, .. } if *peer == PeerId(13)));
    // Over the last 100 frames, the seat's inputs all neutral means the
    // server ignores it.
    let s = w.server();
    let open = s.open_tick();
    let played = (1..100)
        .filter_map(|k| s.frame(Tick::new(open.get() - k)))
        .filter(|f| f.inputs[seat.index()].is_some_and(|i| i != 0))
        .count();
    assert!(
        server_caught_up && played > 50,
        "server never saw the resumed seat catch up ({server_caught_up}); its inputs ran in {played} of the last 99 frames"
    );
}

/// Runs a simulating room with an honest-but-diverged client C (peer 1, a
/// slower link: it gets the server's datagrams in batches of thirty rounds (300 ms))
/// and another client M (peer 2) that, if `m_reports`, reports its state
/// hash after other ticks than C (ticks 11, 21, ...). Returns (the tick C was
/// first told it diverged at, whether the server saw C diverge).
fn simulating_room(m_reports: bool) -> (Option<Tick>, bool) {
    let config = SequencerConfig {
        policy: Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        },
        ..SequencerConfig::default()
    };
    let mut server = Sequencer::<u16>::with_simulation(
        config,
        Instant::ZERO,
        Box::new(Game::new(Tick::ZERO, 16)),
    )
    .unwrap();
    let mut clients: Vec<(PeerId, ClientSession<u16>, Game, Vec<Event>)> = (1..=2)
        .map(|k| {
            let c = ClientSession::new(ClientConfig::default(), SERVER, Instant::ZERO).unwrap();
            (PeerId(k), c, Game::new(Tick::ZERO, 16), Vec::new())
        })
        .collect();
    let mut to_c: Vec<Vec<u8>> = Vec::new();
    let mut buf = Vec::new();
    let mut now = Instant::ZERO;
    for round in 0..600u32 {
        now += Duration::from_millis(10);
        for (id, c, g, evs) in clients.iter_mut() {
            c.handle_timeout(now);
            while let Some(ev) = c.poll_event() {
                evs.push(ev);
            }
            if c.seat().is_some() {
                let _ = c.commit_local((round % 7) as u16 + 1);
            }
            while let Some(f) = c.advance() {
                g.step(&f);
                if *id == PeerId(1) {
                    let _ = c.report_checksum(f.tick, g.acc ^ u64::from(f.tick.get() >= 100));
                }
                if *id == PeerId(2) && m_reports && f.tick.get() % 10 == 1 {
                    let _ = c.report_checksum(f.tick, g.acc);
                }
            }
            while let Some(ev) = c.poll_event() {
                evs.push(ev);
            }
            while let Some(t) = c.poll_transmit(&mut buf) {
                let _ = server.handle_datagram(*id, &buf[..t.len], now);
            }
        }
        server.handle_timeout(now);
        while let Some(t) = server.poll_transmit(&mut buf) {
            let bytes = buf[..t.len].to_vec();
            if t.destination == PeerId(1) {
                to_c.push(bytes);
            } else if let Some((_, c, ..)) = clients.iter_mut().find(|x| x.0 == t.destination) {
                let _ = c.handle_datagram(SERVER, &bytes, now);
            }
        }
        if round % 30 == 0 {
            for bytes in to_c.drain(..) {
                let _ = clients[0].1.handle_datagram(SERVER, &bytes, now);
            }
        }
    }
    let mut server_saw = false;
    while let Some(ev) = server.poll_event() {
        if matches!(ev, SequencerEvent::Desync { peer, .. } if peer == PeerId(1)) {
            server_saw = true;
        }
    }
    let told = clients[0].3.iter().find_map(|e| match e {
        Event::Desync { tick, .. } => Some(*tick),
        _ => None,
    });
    assert!(
        server.open_tick().get() > 200,
        "the game ran: {}",
        server.open_tick()
    );
    (told, server_saw)
}

/// With a simulation, references once followed clients' reports in
/// whatever order they came; a client reporting ticks 11, 21, ..., a little
/// ahead of a slower diverged one, left the slower one told late, or never.
/// The simulation's references now go in tick order, checkpoints of its
/// own hash chain, and the slower client is told at the first checkpoint
/// after it parted (the chain through tick 103, closing the interval 96..=103).
#[test]
fn a_simulating_room_tells_a_diverged_client_at_its_first_checkpoint() {
    let (told_control, server_control) = simulating_room(false);
    assert!(
        server_control && told_control == Some(Tick::new(103)),
        "control: C told at {told_control:?}, server saw {server_control}"
    );
    let (told, server_saw) = simulating_room(true);
    assert!(server_saw, "the server sees C diverge");
    assert_eq!(
        told,
        Some(Tick::new(103)),
        "C is told late (or never) once M reports ticks 11, 21, ..."
    );
}

/// A room whose connections time out after 2 s and hold a dropped player's
/// seat for `grace`.
fn grace_config(policy: Policy, grace: Duration) -> SequencerConfig {
    SequencerConfig {
        policy,
        snapshot_join: true,
        snapshot_join_after: 0,
        timeout: Duration::from_secs(2),
        seat_grace: grace,
        ..SequencerConfig::default()
    }
}

fn deadline() -> Policy {
    Policy::Deadline {
        missing: lockstep_core::sequenced::MissingInput::RepeatLast,
    }
}

/// Cuts `id` off the server from now until far in the future (its old
/// address is dead; it keeps running its game).
fn cut(w: &mut World, id: PeerId) {
    let now = w.sim.now();
    w.sim
        .net
        .partition(&[id], &[SERVER], now, Instant::from_millis(10_000_000));
}

fn ms(w: &World) -> u64 {
    w.sim.now().as_micros() / 1000
}

/// How many of the server's last `n` frames ran an input of `seat`'s that
/// was not neutral.
fn played(w: &World, seat: lockstep_core::PlayerId, n: u32) -> usize {
    let s = w.server();
    let open = s.open_tick();
    (1..n)
        .filter_map(|k| s.frame(Tick::new(open.get() - k)))
        .filter(|f| f.inputs[seat.index()].is_some_and(|i| i != 0))
        .count()
}

/// A player's network goes away for 8 s, long past the 2 s timeout: the
/// seat is held (neutral input, not the last one repeated), the player
/// reconnects on a new socket with the same session, is sent the frames it
/// lacks from the history, keeps its game, and plays on. Nothing is run
/// twice or skipped (the toy game checks every tick), nobody's stream says
/// the seat left, and every machine ends on the same state.
#[test]
fn a_player_whose_network_drops_takes_its_seat_back_and_keeps_its_state() {
    let seed = 11;
    let mut w = World::new(
        3,
        grace_config(deadline(), Duration::from_secs(30)),
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(3_000)), Outcome::TimedOut);
    let seat = w.client(PeerId(1)).seat().unwrap();
    cut(&mut w, PeerId(1));
    assert_eq!(w.run(Instant::from_millis(11_000)), Outcome::TimedOut);
    assert!(
        w.server_events.iter().any(|e| matches!(
            e,
            SequencerEvent::Closed {
                peer: PeerId(1),
                reason: lockstep_core::sequenced::DropReason::Lost,
                ..
            }
        )),
        "the connection was dropped, the seat held"
    );
    // Held seats run neutral: nobody is holding a key down.
    assert_eq!(played(&w, seat, 100), 0);
    let before = w.apps[&PeerId(1)].states.len();
    w.move_client(PeerId(1), PeerId(11));
    assert_eq!(w.run(Instant::from_millis(20_000)), Outcome::TimedOut);
    let app = &w.apps[&PeerId(11)];
    assert!(
        app.events
            .iter()
            .any(|e| matches!(e, Event::Reconnected { kept: true, .. })),
        "{:?}",
        app.events
    );
    assert!(app.states.len() > before + 200, "it ran on");
    assert!(w.server_events.iter().any(|e| matches!(
        e,
        SequencerEvent::Resumed {
            peer: PeerId(11),
            previous: None,
            ..
        }
    )));
    assert!(
        !w.server_events
            .iter()
            .any(|e| matches!(e, SequencerEvent::SeatReleased { .. }))
    );
    assert!(played(&w, seat, 100) > 50, "its inputs run again");
    let ids = [PeerId(11), PeerId(2), PeerId(3)];
    assert!(w.assert_states_agree(&ids, seed) > 1_000);
}

/// Back after the history moved past it (64 frames kept), a player is
/// resumed from a snapshot: told its state was not kept, it restores the
/// snapshot, catches up and plays.
#[test]
fn a_reconnect_past_the_history_comes_back_from_a_snapshot() {
    let seed = 12;
    let mut config = grace_config(deadline(), Duration::from_secs(30));
    config.history = 64;
    let mut w = World::new(3, config, LinkConditions::default(), seed);
    assert_eq!(w.run(Instant::from_millis(3_000)), Outcome::TimedOut);
    let seat = w.client(PeerId(1)).seat().unwrap();
    cut(&mut w, PeerId(1));
    assert_eq!(w.run(Instant::from_millis(8_000)), Outcome::TimedOut);
    w.move_client(PeerId(1), PeerId(11));
    assert_eq!(w.run(Instant::from_millis(18_000)), Outcome::TimedOut);
    let app = &w.apps[&PeerId(11)];
    let reconnected = app
        .events
        .iter()
        .position(|e| matches!(e, Event::Reconnected { kept: false, .. }));
    let caught_up = app
        .events
        .iter()
        .rposition(|e| matches!(e, Event::CaughtUp { .. }));
    assert!(
        reconnected.is_some() && caught_up > reconnected,
        "{:?}",
        app.events
    );
    assert!(played(&w, seat, 100) > 50, "its inputs run again");
    let ids = [PeerId(11), PeerId(2), PeerId(3)];
    assert!(w.assert_states_agree(&ids, seed) > 1_000);
}

/// Nobody takes the seat back within its grace (5 s): it is `Left` at one
/// tick for everyone, and the token no longer takes anything (a typed
/// refusal, `BadToken`).
#[test]
fn a_seat_not_taken_back_within_its_grace_is_left() {
    let seed = 13;
    let mut w = World::new(
        3,
        grace_config(deadline(), Duration::from_secs(5)),
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(3_000)), Outcome::TimedOut);
    let seat = w.client(PeerId(1)).seat().unwrap();
    cut(&mut w, PeerId(1));
    let released = w
        .run_until(12_000, |e| match e {
            SequencerEvent::SeatReleased { seat, tick } => Some((*seat, *tick)),
            _ => None,
        })
        .expect("the seat is given up");
    assert_eq!(released.0, seat);
    // About 5 s after the player was last heard.
    let at = ms(&w);
    assert!((7_900..8_300).contains(&at), "released at {at} ms");
    assert_eq!(w.run(Instant::from_millis(at + 2_000)), Outcome::TimedOut);
    for id in [PeerId(2), PeerId(3)] {
        let s = w.server().frame(released.1).expect("in the history");
        assert!(
            s.events
                .contains(&lockstep_core::SystemEvent::Left { player: seat })
        );
        assert!(w.apps[&id].states.contains_key(&released.1), "{id} ran it");
    }
    w.move_client(PeerId(1), PeerId(11));
    assert_eq!(w.run(Instant::from_millis(at + 4_000)), Outcome::TimedOut);
    assert_eq!(
        w.client(PeerId(11)).closed(),
        Some(&lockstep_core::sequenced::CloseReason::Rejected(
            lockstep_core::sequenced::Rejection::BadToken
        ))
    );
    assert!(w.assert_states_agree(&[PeerId(2), PeerId(3)], seed) > 300);
}

/// Under `WaitForAll` a silent player whose connection is still open holds
/// the game up until `abandon_after` (3 s, inside the 5 s timeout): then it
/// is abandoned, the others play on, and its token is spent. A player whose
/// transport closed instead is held without holding anybody up.
#[test]
fn wait_for_all_abandons_a_silent_player_and_holds_nobody_up_for_a_closed_one() {
    let seed = 14;
    let policy = Policy::WaitForAll {
        abandon_after: Duration::from_secs(3),
    };
    let mut config = grace_config(policy, Duration::from_secs(30));
    config.timeout = Duration::from_secs(5);
    let mut w = World::new(4, config, LinkConditions::default(), seed);
    assert_eq!(w.run(Instant::from_millis(3_000)), Outcome::TimedOut);
    let seat = w.client(PeerId(1)).seat().unwrap();
    cut(&mut w, PeerId(1));
    let stalled_at = w.server().open_tick();
    let released = w
        .run_until(12_000, |e| match e {
            SequencerEvent::Closed {
                seat: Some(s),
                tick,
                reason: lockstep_core::sequenced::DropReason::Abandoned,
                ..
            } => Some((*s, *tick)),
            _ => None,
        })
        .expect("the seat is abandoned");
    assert_eq!(released.0, seat);
    // It stalled: about 3 s of waiting sealed a handful of ticks at most.
    assert!(
        released.1.since(stalled_at) < 20,
        "{stalled_at} -> {}",
        released.1
    );
    let t = ms(&w);
    assert_eq!(w.run(Instant::from_millis(t + 3_000)), Outcome::TimedOut);
    let s = w.server().frame(released.1).expect("in the history");
    assert!(
        s.events
            .contains(&lockstep_core::SystemEvent::Abandoned { player: seat })
    );
    assert!(
        w.server().open_tick().since(released.1) > 60,
        "the others play on"
    );
    w.move_client(PeerId(1), PeerId(11));
    assert_eq!(w.run(Instant::from_millis(t + 5_000)), Outcome::TimedOut);
    assert_eq!(
        w.client(PeerId(11)).closed(),
        Some(&lockstep_core::sequenced::CloseReason::Rejected(
            lockstep_core::sequenced::Rejection::BadToken
        ))
    );
    // Player 2's transport closes: nobody waits on its seat.
    cut(&mut w, PeerId(2));
    w.server_mut().disconnect(PeerId(2));
    let before = w.server().open_tick();
    let t = ms(&w);
    assert_eq!(w.run(Instant::from_millis(t + 1_000)), Outcome::TimedOut);
    assert!(
        w.server().open_tick().since(before) > 25,
        "a closed seat held the room up"
    );
    assert!(w.assert_states_agree(&[PeerId(3), PeerId(4)], seed) > 300);
}

/// Three players at 30 Hz under `Deadline`, seats held 30 s, after 2 s of
/// play.
fn held_room(seed: u64) -> World {
    room_under(deadline(), seed)
}

/// Three players at 30 Hz under `policy`, seats held 30 s, after 2 s of
/// play.
fn room_under(policy: Policy, seed: u64) -> World {
    let mut w = World::new(
        3,
        grace_config(policy, Duration::from_secs(30)),
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(2_000)), Outcome::TimedOut);
    w
}

fn wait_for_all(abandon_after_secs: u64) -> Policy {
    Policy::WaitForAll {
        abandon_after: Duration::from_secs(abandon_after_secs),
    }
}

/// `id` was taken back (its game says so).
fn assert_reconnected(w: &World, id: PeerId) {
    assert!(
        w.apps[&id]
            .events
            .iter()
            .any(|e| matches!(e, Event::Reconnected { .. })),
        "{:?}",
        w.client(id).closed()
    );
}

/// Drops everything the server sends `id` (its uplink still works).
fn deafen(w: &mut World, id: PeerId) {
    let dead = LinkConditions {
        loss: 1.0,
        ..LinkConditions::default()
    };
    w.sim.net.set_link(SERVER, id, dead);
}

/// A player that sends no input but takes its own seat back every two
/// seconds, each time from a new address, does not hold a `WaitForAll`
/// room up past `abandon_after` (found in review: every resume restarted
/// the clock, and the room sealed nothing for a minute).
#[test]
fn resuming_again_and_again_does_not_hold_wait_for_all_up() {
    let seed = 15;
    let mut w = room_under(wait_for_all(3), seed);
    let seat = w.client(PeerId(1)).seat().unwrap();
    let stalled_from = w.server().open_tick();
    let mut id = PeerId(1);
    for k in 0..20 {
        if let Some(app) = w.apps.get_mut(&id) {
            app.mute = true;
        }
        cut(&mut w, id);
        let t = ms(&w);
        assert_eq!(w.run(Instant::from_millis(t + 1_100)), Outcome::TimedOut);
        if !w.client(id).can_reconnect() {
            break;
        }
        let next = PeerId(100 + k);
        w.move_client(id, next);
        id = next;
        let t = ms(&w);
        assert_eq!(w.run(Instant::from_millis(t + 900)), Outcome::TimedOut);
    }
    // Released about `abandon_after` into the stall: the rest play on.
    let t = ms(&w);
    assert!(t < 9_000, "still resuming at {t} ms");
    assert_eq!(w.run(Instant::from_millis(t + 5_000)), Outcome::TimedOut);
    let released = w
        .server_events
        .iter()
        .any(|e| matches!(e, SequencerEvent::SeatReleased { seat: s, .. } | SequencerEvent::Closed { seat: Some(s), reason: lockstep_core::sequenced::DropReason::Abandoned, .. } if *s == seat));
    let sealed = w.server().open_tick().since(stalled_from);
    assert!(
        released && sealed > 150,
        "{sealed} ticks sealed; released: {released}"
    );
    assert!(w.assert_states_agree(&[PeerId(2), PeerId(3)], seed) > 300);
}

/// The player's downlink fails while its uplink works, so the old
/// connection is still heard when the player reconnects: refused
/// `SeatBusy`, the reconnecting client repeats its Hello and gets in once
/// the old connection is quiet (found in review: refused for good).
#[test]
fn a_reconnect_while_the_old_connection_is_still_heard_gets_in_after_it() {
    let seed = 16;
    let mut w = held_room(seed);
    deafen(&mut w, PeerId(1));
    assert_eq!(w.run(Instant::from_millis(6_000)), Outcome::TimedOut);
    w.move_client(PeerId(1), PeerId(11));
    assert_eq!(w.run(Instant::from_millis(12_000)), Outcome::TimedOut);
    assert!(
        w.server_events.iter().any(|e| matches!(
            e,
            SequencerEvent::Rejected {
                peer: PeerId(11),
                reason: lockstep_core::sequenced::Rejection::SeatBusy
            }
        )),
        "the first Hello came while the old connection was heard"
    );
    let app = &w.apps[&PeerId(11)];
    assert!(
        app.events
            .iter()
            .any(|e| matches!(e, Event::Reconnected { .. })),
        "{:?}",
        w.client(PeerId(11)).closed()
    );
    assert!(w.assert_states_agree(&[PeerId(11), PeerId(2), PeerId(3)], seed) > 500);
}

/// A closed transport (a WebSocket) holds the seat like a timeout does
/// (found in review: it released the seat at once, and the reconnect got
/// `BadToken`).
#[test]
fn a_closed_transport_holds_the_seat() {
    let seed = 17;
    let mut w = held_room(seed);
    cut(&mut w, PeerId(1));
    w.server_mut().disconnect(PeerId(1));
    assert_eq!(w.run(Instant::from_millis(2_500)), Outcome::TimedOut);
    w.move_client(PeerId(1), PeerId(11));
    assert_eq!(w.run(Instant::from_millis(6_000)), Outcome::TimedOut);
    assert_reconnected(&w, PeerId(11));
    assert!(w.assert_states_agree(&[PeerId(11), PeerId(2), PeerId(3)], seed) > 300);
}

/// The Welcome of a reconnect is lost and the player moves to yet another
/// socket: the token it holds (the one before) still takes the seat, until
/// a connection shows it got the new one (found in review: `BadToken`, the
/// seat lost for good).
#[test]
fn a_lost_welcome_on_reconnect_does_not_lose_the_seat() {
    let seed = 18;
    let mut w = held_room(seed);
    cut(&mut w, PeerId(1));
    assert_eq!(w.run(Instant::from_millis(5_000)), Outcome::TimedOut);
    w.move_client(PeerId(1), PeerId(11));
    deafen(&mut w, PeerId(11));
    assert_eq!(w.run(Instant::from_millis(8_000)), Outcome::TimedOut);
    assert!(w.server_events.iter().any(|e| matches!(
        e,
        SequencerEvent::Resumed {
            peer: PeerId(11),
            ..
        }
    )));
    cut(&mut w, PeerId(11));
    w.move_client(PeerId(11), PeerId(12));
    assert_eq!(w.run(Instant::from_millis(14_000)), Outcome::TimedOut);
    assert_reconnected(&w, PeerId(12));
    assert!(w.assert_states_agree(&[PeerId(12), PeerId(2), PeerId(3)], seed) > 500);
}

/// Single-player mode over a network: one player alone in a `Deadline` room
/// 40 ms away (with jitter) has its inputs sealed as they arrive; the
/// clock waits a tick and a round trip for them, so (after the first
/// ticks) no tick of its runs neutral for want of its input.
#[test]
fn a_player_alone_over_a_network_is_never_sealed_without_its_input() {
    let seed = 19;
    let link = LinkConditions {
        latency: Duration::from_millis(20),
        jitter: Duration::from_millis(5),
        ..LinkConditions::default()
    };
    let mut w = World::new(
        1,
        grace_config(deadline(), Duration::from_secs(30)),
        link,
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(12_000)), Outcome::TimedOut);
    let seat = w.client(PeerId(1)).seat().unwrap();
    let neutral = 300 - played(&w, seat, 301);
    assert!(
        neutral <= 2,
        "{neutral} of the last 300 ticks ran without its input"
    );
    assert!(w.server().open_tick().get() > 300);
}

/// A lone player claims a 59 s round trip with Pongs nobody asked for:
/// single-player mode waits at most 500 ms of it, and when a second player
/// arrives the clock takes over at once (found in review: the room sealed
/// nothing for a minute).
#[test]
fn a_claimed_round_trip_does_not_freeze_a_room_after_single_player_mode() {
    let seed = 20;
    let mut w = World::new(
        1,
        grace_config(deadline(), Duration::from_secs(30)),
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(1_000)), Outcome::TimedOut);
    for k in 0..50u64 {
        let now = w.sim.now();
        let stamp = ((now.as_micros() / 1000) as u32).wrapping_sub(59_000);
        let pong = lockstep_core::wire::Message::Pong {
            stamp,
            held_ms: 0,
            received: 1,
            sent: 1,
        };
        let out = common::join::datagram(w.client(PeerId(1)).frame(), &[pong]);
        w.sim.net.send(PeerId(1), SERVER, &out);
        assert_eq!(
            w.run(Instant::from_millis(1_000 + 10 * (k + 1))),
            Outcome::TimedOut
        );
    }
    assert_eq!(w.run(Instant::from_millis(2_000)), Outcome::TimedOut);
    w.add_client(PeerId(2), false, false, seed);
    assert_eq!(w.run(Instant::from_millis(2_500)), Outcome::TimedOut);
    let from = w.server().open_tick();
    assert_eq!(w.run(Instant::from_millis(7_500)), Outcome::TimedOut);
    let sealed = w.server().open_tick().since(from);
    assert!(
        sealed >= 140,
        "5 s at 30 Hz with two players sealed {sealed} ticks"
    );
    assert!(w.assert_states_agree(&[PeerId(1), PeerId(2)], seed) > 100);
}

/// A joiner's only donor leaves before handing over its state: the joiner
/// is told to come back, and its reconnect replays the game, which the room
/// still holds from its start (found in review: it waited for ever).
#[test]
fn a_joiner_whose_only_donor_leaves_comes_back_and_replays() {
    let seed = 21;
    let mut w = World::new(
        1,
        grace_config(deadline(), Duration::from_secs(30)),
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(2_000)), Outcome::TimedOut);
    w.add_client(PeerId(2), true, false, seed);
    assert_eq!(w.run(Instant::from_millis(2_100)), Outcome::TimedOut);
    assert!(w.client(PeerId(2)).joining());
    // The only player leaves before the join wait is over.
    let Some(Node::Client(mut a)) = w.sim.remove(PeerId(1)) else {
        panic!("a client")
    };
    a.leave();
    let mut buf = Vec::new();
    while let Some(t) = a.poll_transmit(&mut buf) {
        w.sim.net.send(PeerId(1), SERVER, &buf[..t.len]);
    }
    assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
    assert!(w.server().replayable());
    assert!(
        w.client(PeerId(2)).can_reconnect(),
        "{:?}",
        w.client(PeerId(2)).closed()
    );
    w.move_client(PeerId(2), PeerId(12));
    assert_eq!(w.run(Instant::from_millis(8_000)), Outcome::TimedOut);
    let c = w.client(PeerId(12));
    assert!(!c.joining() && c.connected(), "{:?}", c.closed());
    assert!(
        w.apps[&PeerId(12)].states.len() > 100,
        "it replayed and plays"
    );
}

/// Under `WaitForAll`, a player whose transport closed comes back after 5 s
/// (150 ticks run on without it): its inputs are due a delay from then, so
/// nobody waits while it stamps its way up from where it stopped (found in
/// a walkthrough: everyone froze for 4 s).
#[test]
fn a_player_back_from_a_drop_holds_nobody_up_while_it_catches_up() {
    let seed = 22;
    let mut w = room_under(wait_for_all(10), seed);
    cut(&mut w, PeerId(1));
    w.server_mut().disconnect(PeerId(1));
    assert_eq!(w.run(Instant::from_millis(7_000)), Outcome::TimedOut);
    w.move_client(PeerId(1), PeerId(11));
    let from = w.server().open_tick();
    assert_eq!(w.run(Instant::from_millis(9_000)), Outcome::TimedOut);
    let sealed = w.server().open_tick().since(from);
    assert!(
        sealed >= 50,
        "2 s at 30 Hz after the return sealed {sealed} ticks"
    );
    assert_reconnected(&w, PeerId(11));
    assert!(w.assert_states_agree(&[PeerId(11), PeerId(2), PeerId(3)], seed) > 300);
}

/// A player taking its own seat back (nobody else can: the proof is bound
/// to the handshake's cookie, which a forged address never gets) may name
/// any first frame it lacks. Out of range (before the history, past the
/// open tick, the last tick there is) it changes nothing but how its seat
/// comes back: a snapshot, or a refusal; the honest players play on and
/// end on one state.
#[test]
fn a_resume_naming_any_first_frame_changes_nothing_for_the_others() {
    let seed = 23;
    for (k, claim) in [u32::MAX, 0, 5, 1_000_000].into_iter().enumerate() {
        let mut config = grace_config(deadline(), Duration::from_secs(30));
        config.history = 64;
        let mut w = World::new(3, config, LinkConditions::default(), seed);
        assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
        let token = w.client(PeerId(1)).welcome().unwrap().token;
        w.sim.freeze(PeerId(1));
        assert_eq!(w.run(Instant::from_millis(5_500)), Outcome::TimedOut);
        let hello = lockstep_core::wire::Hello {
            resume: Some(lockstep_core::admission::resume_proof(&token, &[], None)),
            resume_from: Some(Tick::new(claim)),
            ..lockstep_core::wire::Hello::default()
        };
        let bytes = common::join::datagram(
            w.server().open_tick(),
            &[
                lockstep_core::wire::Message::Hello(hello),
                lockstep_core::wire::Message::Padding { len: 128 },
            ],
        );
        let liar = PeerId(50 + k as u32);
        w.sim.net.send(liar, SERVER, &bytes);
        assert_eq!(w.run(Instant::from_millis(12_000)), Outcome::TimedOut);
        let resumed = w
            .server_events
            .iter()
            .any(|e| matches!(e, SequencerEvent::Resumed { peer, .. } if *peer == liar));
        let refused = w
            .server_events
            .iter()
            .any(|e| matches!(e, SequencerEvent::Rejected { peer, .. } if *peer == liar));
        assert!(resumed || refused, "claim {claim}: {:?}", w.join_log());
        assert!(
            w.assert_states_agree(&[PeerId(2), PeerId(3)], seed) > 300,
            "claim {claim}"
        );
        assert!(
            w.server().open_tick().get() > 300,
            "claim {claim}: the game went on"
        );
    }
}
