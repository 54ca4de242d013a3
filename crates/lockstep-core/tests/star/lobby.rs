//! A room's lobby and match life: nothing runs until the start rule holds,
//! the roster names everyone meanwhile, readiness can be given and taken
//! back, and a match is over once its last player has left.

use crate::common::star::{Node, SERVER, StarHarness, StarScenario};
use crate::common::{Record, secs};
use lockstep_core::sequenced::{ClientConfig, ClientSession, Lobby, Start};
use lockstep_core::sim::{LinkConditions, Outcome};
use lockstep_core::wire::{DatagramWriter, Message};
use lockstep_core::{CommitError, Event, Instant, PeerId, SystemEvent, Tick};
use std::time::Duration;

pub(super) fn rough() -> LinkConditions {
    LinkConditions {
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(15),
        loss: 0.1,
        duplicate: 0.02,
        reorder: 0.05,
        max_datagram: Some(1200),
        bandwidth: None,
    }
}

/// A lobby's fields (`Lobby` is non-exhaustive: compared through them).
fn fields(l: Option<Lobby>) -> Option<(Start, u16, u16)> {
    l.map(|l| (l.start, l.seated, l.ready))
}

/// Each player's readiness as `c`'s roster shows it, by name (`c1`, `c2`,
/// ...): seats go in the order Hellos arrive.
fn readiness(c: &ClientSession<u16>) -> Vec<bool> {
    let mut by_name: Vec<(String, bool)> = c.roster().map(|s| (s.name.clone(), s.ready)).collect();
    by_name.sort();
    by_name.into_iter().map(|(_, r)| r).collect()
}

/// A player like the scenario's arriving now, named `name`.
pub(super) fn arrive(h: &mut StarHarness, sc: &StarScenario, id: PeerId, name: &str) {
    let config = ClientConfig {
        name: name.into(),
        ..sc.client.clone()
    };
    let c = ClientSession::new(config, SERVER, h.sim.now()).expect("client config");
    h.sim.add(id, Node::Client(c));
    h.records.insert(
        id,
        Record::new(sc.seed ^ (u64::from(id.0) * 0x51), sc.server.first_tick),
    );
}

/// A room that starts at three seated waits with two, tells both who is
/// there by name, takes no input and seals nothing; the third's arrival
/// starts the match at tick 0 with every seat's `Joined` in the first
/// frame, and all three play one stream. Eight seeds at 30 +- 15 ms, 10%
/// loss.
#[test]
fn a_room_waits_for_its_players_and_names_them() {
    for seed in 1..=8 {
        let mut sc = StarScenario::new(2, seed);
        sc.server.start = Start::Seated(3);
        sc.link = rough();
        let mut h = sc.build();
        // Three seconds: both welcomed and named, nothing sealed.
        let o = h.run(secs(3), |_, _, _| {}, |_| false);
        assert_eq!(o, Outcome::TimedOut, "seed {seed}");
        assert!(!h.server().match_started(), "seed {seed}");
        assert_eq!(h.server().open_tick(), Tick::ZERO, "seed {seed}");
        for id in sc.client_ids() {
            let c = h.client(id);
            assert_eq!(
                fields(c.lobby()),
                Some((Start::Seated(3), 2, 0)),
                "seed {seed} {id}"
            );
            let mut names: Vec<&str> = c.roster().map(|s| s.name.as_str()).collect();
            names.sort_unstable();
            assert_eq!(names, ["c1", "c2"], "seed {seed} {id}");
            assert_eq!(c.frame(), Tick::ZERO, "seed {seed} {id}");
            assert!(!c.input_due(), "seed {seed} {id}");
            let rec = &h.records[&id];
            assert_eq!(rec.committed, 0, "seed {seed} {id}");
            assert!(rec.refused > 0, "seed {seed} {id}");
        }
        // Committing in the lobby says why it cannot.
        let mut probe = h.sim.remove(PeerId(1)).expect("client 1");
        if let Node::Client(c) = &mut probe {
            assert_eq!(c.commit_local(5), Err(CommitError::InLobby));
        }
        h.sim.add(PeerId(1), probe);
        // The third player starts the match.
        arrive(&mut h, &sc, PeerId(3), "c3");
        let o = h.run(
            secs(30),
            |_, _, _| {},
            |sim| {
                sim.live()
                    .filter_map(|(_, n)| n.client())
                    .all(|c| c.stats().frames >= 150)
            },
        );
        assert_eq!(o, Outcome::Done, "seed {seed}");
        let ids = [PeerId(1), PeerId(2), PeerId(3)];
        h.assert_streams_agree(&ids);
        h.assert_no_desync();
        for id in ids {
            let c = h.client(id);
            assert_eq!(c.lobby(), None, "seed {seed} {id}");
            let rec = &h.records[&id];
            assert!(rec.committed >= 100, "seed {seed} {id}: {}", rec.committed);
            let (tick, first) = &rec.system[0];
            assert_eq!(*tick, Tick::ZERO, "seed {seed} {id}");
            let joined = first
                .iter()
                .filter(|e| matches!(e, SystemEvent::Joined { .. }))
                .count();
            assert_eq!(joined, 3, "seed {seed} {id}: {first:?}");
            assert_eq!(c.match_id(), Some(h.server().match_id()), "seed {seed}");
        }
    }
}

/// A room that starts when its players are ready: nothing runs while one
/// of three holds back, nor when one that was ready takes it back; the
/// roster shows each player's readiness; the match starts once all three
/// are ready and they play one stream.
#[test]
fn a_ready_room_starts_when_every_seated_player_is_ready() {
    for seed in 1..=6 {
        let mut sc = StarScenario::new(3, seed);
        sc.server.start = Start::Ready { min: 2 };
        sc.link = rough();
        let mut h = sc.build();
        let set = |id: u32, ready: bool| {
            move |p: PeerId, n: &mut Node, _: Instant| {
                if p == PeerId(id)
                    && let Some(c) = n.client_mut()
                {
                    c.set_ready(ready);
                }
            }
        };
        // Two ready, the third not.
        let o = h.run(
            secs(2),
            |p, n, now| {
                if p != PeerId(3) {
                    set(p.0, true)(p, n, now);
                }
            },
            |_| false,
        );
        assert_eq!(o, Outcome::TimedOut);
        assert!(!h.server().match_started(), "seed {seed}");
        for id in sc.client_ids() {
            assert_eq!(
                fields(h.client(id).lobby()),
                Some((Start::Ready { min: 2 }, 3, 2)),
                "seed {seed} {id}"
            );
            assert_eq!(
                readiness(h.client(id)),
                [true, true, false],
                "seed {seed} {id}"
            );
        }
        // The third says yes and the second takes it back in the same
        // moment: still not all ready.
        let o = h.run(
            secs(4),
            |p, n, now| {
                if p == PeerId(3) {
                    set(3, true)(p, n, now);
                }
                if p == PeerId(2) {
                    set(2, false)(p, n, now);
                }
            },
            |_| false,
        );
        assert_eq!(o, Outcome::TimedOut);
        // One of them may have won the race for a moment: if the match
        // started, every client saw it start; if not, the roster agrees.
        if !h.server().match_started() {
            for id in sc.client_ids() {
                assert_eq!(
                    readiness(h.client(id)),
                    [true, false, true],
                    "seed {seed} {id}"
                );
            }
        }
        let o = h.run(
            secs(40),
            |p, n, now| set(p.0, true)(p, n, now),
            |sim| {
                sim.live()
                    .filter_map(|(_, n)| n.client())
                    .all(|c| c.stats().frames >= 150)
            },
        );
        assert_eq!(o, Outcome::Done, "seed {seed}");
        h.assert_streams_agree(&sc.client_ids());
        h.assert_no_desync();
    }
}

/// Attacks on the lobby, each beside two honest players that must start
/// and finish on one stream: a spectator saying it is ready (no seat: it
/// counts for nothing), a stranger's forged `Ready` (not connected:
/// refused), and a player that flips its readiness every tick (the match
/// starts the first moment all are ready, and flipping after that changes
/// nothing).
#[test]
fn nobody_starts_a_lobby_for_the_players_or_stalls_it_after_the_start() {
    for seed in 1..=6 {
        let mut sc = StarScenario::new(3, seed);
        sc.spectators = 1;
        sc.server.start = Start::Ready { min: 2 };
        sc.link = rough();
        let mut h = sc.build();
        let spectator = PeerId(4);
        let mut ready_raw = Vec::new();
        let mut w = DatagramWriter::new(&mut ready_raw, Tick::ZERO, 1200);
        w.put(Message::Ready { ready: true });
        w.finish();
        let mut forged_ok = 0;
        let mut flips = 0u32;
        let o = h.run(
            secs(3),
            |p, n, now| match n {
                Node::Server(s) => {
                    // The spectator's connection and a stranger's.
                    if s.handle_datagram(spectator, &ready_raw, now).is_ok() {
                        forged_ok += 1;
                    }
                    assert!(s.handle_datagram(PeerId(99), &ready_raw, now).is_err());
                }
                _ if p == PeerId(3) => {
                    if let Some(c) = n.client_mut() {
                        flips += 1;
                        c.set_ready(false);
                    }
                }
                _ => {}
            },
            |_| false,
        );
        assert_eq!(o, Outcome::TimedOut);
        assert!(forged_ok > 0, "the spectator's datagrams are taken");
        assert!(
            !h.server().match_started(),
            "seed {seed}: started by nobody"
        );
        // The honest two say yes; the third flips every tick.
        let o = h.run(
            secs(40),
            |p, n, _| {
                if let Some(c) = n.client_mut() {
                    if p == PeerId(3) {
                        flips += 1;
                        c.set_ready(flips.is_multiple_of(2));
                    } else {
                        c.set_ready(true);
                    }
                }
            },
            |sim| {
                sim.live()
                    .filter_map(|(_, n)| n.client())
                    .filter(|c| c.seat().is_some())
                    .all(|c| c.stats().frames >= 150)
            },
        );
        assert_eq!(o, Outcome::Done, "seed {seed}");
        h.assert_streams_agree(&[PeerId(1), PeerId(2), PeerId(3)]);
        h.assert_no_desync();
    }
}

/// A match is over once every player has left: a room that keeps its
/// players' seats for their tokens is not over while one is held, and a
/// spectator alone does not keep a match going.
#[test]
fn a_match_is_over_when_its_last_player_has_left() {
    let mut sc = StarScenario::new(2, 3);
    sc.spectators = 1;
    sc.server.seat_grace = Duration::from_secs(5);
    let mut h = sc.build();
    assert!(!h.server().match_over(), "no player has come yet");
    assert_eq!(h.run_until_frames(60, secs(20)), Outcome::Done);
    assert!(!h.server().match_over());
    // Player 1 leaves; player 2's link dies (its seat is held).
    if let Some(Node::Client(c)) = h.sim.endpoint_mut(PeerId(1)) {
        c.leave();
    }
    h.sim.freeze(PeerId(2));
    let o = h.run(
        secs(25),
        |_, _, _| {},
        |sim| {
            sim.endpoint(SERVER)
                .and_then(Node::server)
                .is_some_and(|s| s.players().count() == 1)
        },
    );
    assert_eq!(o, Outcome::Done);
    assert!(!h.server().match_over(), "a seat held for its token");
    let held_until = h.sim.now() + Duration::from_secs(30);
    let o = h.run(
        held_until,
        |_, _, _| {},
        |sim| {
            sim.endpoint(SERVER)
                .and_then(Node::server)
                .is_some_and(|s| s.match_over())
        },
    );
    assert_eq!(o, Outcome::Done, "over once the held seat is given up");
    // The spectator saw the first player leave in the stream (the last
    // one's seat is given up when nobody is left to run a frame).
    let rec = &h.records[&PeerId(3)];
    let gone = rec
        .system
        .iter()
        .flat_map(|(_, e)| e)
        .filter(|e| matches!(e, SystemEvent::Left { .. }))
        .count();
    assert_eq!(gone, 1, "{:?}", rec.system);
    assert!(
        rec.events
            .iter()
            .all(|e| !matches!(e, Event::Closed { .. })),
        "the sequencer closes nobody itself: a server does"
    );
}
