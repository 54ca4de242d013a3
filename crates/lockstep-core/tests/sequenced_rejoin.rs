//! Reconnecting from a snapshot, and a sequencer that runs the game, in the
//! corners a review found them broken.

mod common;

use common::join::World;
use common::star::SERVER;
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
/// hash after every tick it runs (the API allows it). Returns (the tick C was
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
                if *id == PeerId(1) && f.tick.get().is_multiple_of(10) {
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
/// The simulation's references now go in tick order, every
/// `sim_check_every` ticks, and the slower client is told at once.
#[test]
fn a_simulating_room_tells_a_diverged_client_at_its_first_checkpoint() {
    let (told_control, server_control) = simulating_room(false);
    assert!(
        server_control && told_control == Some(Tick::new(100)),
        "control: C told at {told_control:?}, server saw {server_control}"
    );
    let (told, server_saw) = simulating_room(true);
    assert!(server_saw, "the server sees C diverge");
    assert_eq!(
        told,
        Some(Tick::new(100)),
        "C is told late (or never) once M reports ticks 11, 21, ..."
    );
}
