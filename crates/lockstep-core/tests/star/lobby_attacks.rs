//! Attacks on a room's lobby, each beside honest players: seats taken and
//! left to confuse the first frame's membership, a host leaving in its
//! lobby, readiness flipped to make the room send everyone more, names
//! made to break a display, seats churned to swell the first frame.

use super::lobby::{arrive, rough};
use crate::common::secs;
use crate::common::star::{Node, SERVER, StarScenario};
use lockstep_core::sequenced::{Sequencer, SequencerConfig, Start};
use lockstep_core::sim::{LinkConditions, Outcome};
use lockstep_core::{ConfigError, Instant, PeerId, PlayerId, SystemEvent};
use std::collections::BTreeMap;
use std::time::Duration;

/// Which seats a game believes are occupied after every frame it ran,
/// folding `Joined`, `Left` and `Abandoned` in order.
fn occupied<'a>(events: impl Iterator<Item = &'a SystemEvent>) -> BTreeMap<PlayerId, bool> {
    let mut seats = BTreeMap::new();
    for e in events {
        match *e {
            SystemEvent::Joined { player } => {
                seats.insert(player, true);
            }
            SystemEvent::Left { player } | SystemEvent::Abandoned { player } => {
                seats.insert(player, false);
            }
            _ => {}
        }
    }
    seats
}

/// A griefer takes a seat in the lobby and leaves it; an honest player
/// takes the seat next. Every game sees that seat joined and played (the
/// first frame read `[.., Joined k, Left k]` and the honest player's
/// `Joined` was dropped as a repeat: every game saw seat k leave at tick 0
/// while it was played all match; found in review). Four seeds, 30 +-
/// 15 ms, 10% loss.
#[test]
fn a_seat_taken_and_left_in_the_lobby_is_joined_by_the_next_player() {
    for seed in 1..=4 {
        let mut sc = StarScenario::new(2, seed);
        sc.server.start = Start::Ready { min: 3 };
        sc.link = rough();
        let mut h = sc.build();
        let o = h.run(secs(2), |_, _, _| {}, |_| false);
        assert_eq!(o, Outcome::TimedOut);
        let seated = |n: usize| {
            move |sim: &lockstep_core::sim::Sim<Node>| {
                sim.endpoint(SERVER)
                    .and_then(Node::server)
                    .is_some_and(|s| s.players().count() == n)
            }
        };
        arrive(&mut h, &sc, PeerId(3), "mallory");
        let o = h.run(
            h.sim.now() + Duration::from_secs(5),
            |_, _, _| {},
            seated(3),
        );
        assert_eq!(o, Outcome::Done, "seed {seed}");
        if let Some(Node::Client(c)) = h.sim.endpoint_mut(PeerId(3)) {
            c.leave();
        }
        let o = h.run(
            h.sim.now() + Duration::from_secs(5),
            |_, _, _| {},
            seated(2),
        );
        assert_eq!(o, Outcome::Done, "seed {seed}");
        h.sim.remove(PeerId(3));
        h.records.remove(&PeerId(3));
        arrive(&mut h, &sc, PeerId(4), "carol");
        let o = h.run(
            h.sim.now() + Duration::from_secs(40),
            |_, n, _| {
                if let Some(c) = n.client_mut() {
                    c.set_ready(true);
                }
            },
            |sim| {
                sim.live()
                    .filter_map(|(_, n)| n.client())
                    .all(|c| c.stats().frames >= 100)
            },
        );
        assert_eq!(o, Outcome::Done, "seed {seed}");
        let ids = [PeerId(1), PeerId(2), PeerId(4)];
        h.assert_streams_agree(&ids);
        let held: Vec<PlayerId> = h.server().players().map(|(p, _, _)| p).collect();
        assert_eq!(held.len(), 3, "seed {seed}");
        for id in ids {
            let rec = &h.records[&id];
            let seen = occupied(rec.system.iter().flat_map(|(_, e)| e));
            for p in &held {
                assert_eq!(
                    seen.get(p),
                    Some(&true),
                    "seed {seed} {id}: seat {p:?} is played; first frame {:?}",
                    rec.system.first()
                );
            }
        }
    }
}

/// Host mode: the host leaves while the lobby is open. Nothing was
/// sealed, so every seat's `Joined` went with the old host; the new host's
/// first frame names every survivor's seat as joined (found in review:
/// only `[Left host, HostChanged]`, so no survivor's game was ever told its
/// seat joined), and nobody who never joined leaves.
#[test]
fn a_takeover_in_the_lobby_keeps_every_survivors_join() {
    use crate::common::hosted::{Game, play};
    use lockstep_core::sequenced::{HostedConfig, HostedSession};
    use lockstep_core::sim::{Sim, SimNetwork};
    type Session = HostedSession<u16>;
    let mut config = HostedConfig::default();
    config.sequencer.start = Start::Ready { min: 2 };
    let lan = LinkConditions {
        latency: Duration::from_millis(10),
        ..LinkConditions::default()
    };
    let mut sim = Sim::new(SimNetwork::new(5, lan));
    sim.add(
        PeerId(0),
        Session::host(config.clone(), Instant::ZERO).unwrap(),
    );
    for k in 1..4 {
        sim.add(
            PeerId(k),
            Session::join(config.clone(), PeerId(0), Instant::ZERO).unwrap(),
        );
    }
    let mut games: BTreeMap<PeerId, Game> = BTreeMap::new();
    let step = |sim: &mut Sim<Session>, games: &mut BTreeMap<PeerId, Game>, ready: bool| {
        let until = sim.now() + Duration::from_millis(100);
        sim.run(
            until,
            Duration::from_millis(33),
            |id, s, now| {
                if ready {
                    s.set_ready(true);
                }
                play(id, s, games.entry(id).or_default(), now);
            },
            |_| false,
        );
    };
    for _ in 0..30 {
        step(&mut sim, &mut games, false);
    }
    for k in 1..4 {
        let c = sim.endpoint(PeerId(k)).unwrap().client();
        assert!(c.lobby().is_some(), "{k} in the lobby");
        assert_eq!(c.roster().count(), 4, "{k} knows the roster");
    }
    sim.endpoint_mut(PeerId(0)).unwrap().leave();
    for _ in 0..2 {
        step(&mut sim, &mut games, false);
    }
    sim.freeze(PeerId(0));
    let survivors = [PeerId(1), PeerId(2), PeerId(3)];
    let hosting = |sim: &Sim<Session>| {
        survivors
            .iter()
            .any(|id| sim.endpoint(*id).is_some_and(Session::hosting))
    };
    for _ in 0..200 {
        if hosting(&sim) {
            break;
        }
        step(&mut sim, &mut games, false);
    }
    assert!(hosting(&sim), "a survivor took over");
    for _ in 0..300 {
        if survivors
            .iter()
            .all(|id| games.get(id).is_some_and(|g| g.ran.len() >= 60))
        {
            break;
        }
        step(&mut sim, &mut games, true);
    }
    for id in survivors {
        let g = &games[&id];
        assert!(g.ran.len() >= 60, "{id} plays: {}", g.ran.len());
        let seats = occupied(g.ran.values().flat_map(|f| f.events.iter()));
        let first = g.ran.values().next().map(|f| f.events.clone());
        for other in survivors {
            let seat = sim.endpoint(other).unwrap().seat().unwrap();
            assert_eq!(
                seats.get(&seat),
                Some(&true),
                "{id}: survivor {other} (seat {seat:?}) plays; first frame {first:?}"
            );
        }
        assert_eq!(seats.len(), 3, "{id}: only the survivors: {seats:?}");
    }
}

/// Bytes the sequencer sent over `secs_` of an open lobby with two honest
/// players and six spectators (nobody ready), the third player flipping
/// its readiness every tick (`flap`) or keeping quiet; and what the
/// flapper sent.
fn lobby_traffic(flap: bool, secs_: u64) -> (u64, u64) {
    let mut sc = StarScenario::new(3, 11);
    sc.spectators = 6;
    sc.server.start = Start::Ready { min: 3 };
    sc.link = LinkConditions {
        latency: Duration::from_millis(20),
        ..LinkConditions::default()
    };
    let mut h = sc.build();
    let o = h.run(secs(3), |_, _, _| {}, |_| false);
    assert_eq!(o, Outcome::TimedOut);
    let s0 = h.server().stats();
    let a0 = h.client(PeerId(3)).stats();
    let mut flips = 0u32;
    let o = h.run(
        secs(3 + secs_),
        |p, n, _| {
            if flap
                && p == PeerId(3)
                && let Some(c) = n.client_mut()
            {
                flips += 1;
                c.set_ready(flips % 2 == 1);
            }
        },
        |_| false,
    );
    assert_eq!(o, Outcome::TimedOut);
    assert!(!h.server().match_started());
    let (s1, a1) = (h.server().stats(), h.client(PeerId(3)).stats());
    (s1.bytes_sent - s0.bytes_sent, a1.bytes_sent - a0.bytes_sent)
}

/// A player flipping its readiness every tick, beside two players and six
/// spectators: each change taken is a roster entry for every client, so
/// the sequencer takes one at most once a second, and none once the match
/// started. Over 20 s what the room sends beyond a quiet lobby's is under
/// twice what the flapper sends (measured: 8,159 more bytes, 11,688 ->
/// 19,847, for 5,230 the flapper sent, shared by eight clients; found in
/// review: 138,195 more for 10,035, 13.8 times).
#[test]
fn a_player_flapping_its_readiness_costs_the_room_little() {
    let (quiet, _) = lobby_traffic(false, 20);
    let (flapping, sent) = lobby_traffic(true, 20);
    println!("quiet lobby: {quiet} bytes; flapping: {flapping} bytes (the flapper sent {sent})");
    assert!(
        flapping.saturating_sub(quiet) <= 2 * sent,
        "a flapper sending {sent} bytes made the sequencer send {quiet} -> {flapping}"
    );
}

/// A player named with a terminal's escape sequences, a newline, a NUL and
/// a bidirectional override: every other client's roster shows its name
/// with each of them replaced by `?` (found in review: passed on as it
/// came, to every client and spectator).
#[test]
fn names_reach_the_roster_without_control_characters() {
    let mut sc = StarScenario::new(2, 3);
    sc.spectators = 1;
    sc.server.start = Start::Seated(4);
    let mut h = sc.build();
    let o = h.run(secs(2), |_, _, _| {}, |_| false);
    assert_eq!(o, Outcome::TimedOut);
    let evil = "\u{1b}[2J\u{1b}]0;x\u{7}\n\0\u{202e}c1";
    assert!(evil.len() <= lockstep_core::wire::MAX_NAME);
    arrive(&mut h, &sc, PeerId(4), evil);
    let o = h.run(secs(6), |_, _, _| {}, |_| false);
    assert_eq!(o, Outcome::TimedOut);
    for id in [PeerId(1), PeerId(2), PeerId(3)] {
        let names: Vec<String> = h.client(id).roster().map(|s| s.name.clone()).collect();
        assert_eq!(names.len(), 3, "{id}: {names:?}");
        assert!(
            names.contains(&"?[2J?]0;x????c1".to_owned()),
            "{id}: {names:?}"
        );
    }
}

/// A griefer's 120 connections take seats of a 200-seat lobby and leave
/// them; 200 honest players then fill it. The first frame names the 200
/// and nobody else, and the match plays (found in review: 120 `Left` more
/// made the first frame too large for any datagram, and every client
/// waited at tick 0 for good).
#[test]
fn seats_churned_in_a_big_lobby_do_not_swell_its_first_frame() {
    let seats = 200usize;
    let mut sc = StarScenario::new(0, 4);
    sc.server.max_seats = seats as u16;
    sc.server.start = Start::Seated(seats as u16);
    let mut h = sc.build();
    let griefers: Vec<PeerId> = (1000..1120).map(PeerId).collect();
    for id in &griefers {
        arrive(&mut h, &sc, *id, "g");
    }
    let o = h.run(secs(3), |_, _, _| {}, |_| false);
    assert_eq!(o, Outcome::TimedOut);
    assert_eq!(h.server().players().count(), griefers.len());
    for id in &griefers {
        if let Some(Node::Client(c)) = h.sim.endpoint_mut(*id) {
            c.leave();
        }
    }
    let o = h.run(secs(6), |_, _, _| {}, |_| false);
    assert_eq!(o, Outcome::TimedOut);
    assert_eq!(h.server().players().count(), 0);
    for id in &griefers {
        h.sim.remove(*id);
        h.records.remove(id);
    }
    for k in 1..=seats as u32 {
        arrive(&mut h, &sc, PeerId(k), &format!("p{k}"));
    }
    let o = h.run(
        secs(30),
        |_, _, _| {},
        |sim| {
            sim.live()
                .filter_map(|(_, n)| n.client())
                .all(|c| c.stats().frames >= 30)
        },
    );
    assert!(h.server().match_started());
    assert_eq!(
        o,
        Outcome::Done,
        "{} ticks sealed",
        h.server().stats().sealed
    );
    let first = &h.records[&PeerId(1)].system[0].1;
    let joined = first
        .iter()
        .filter(|e| matches!(e, SystemEvent::Joined { .. }))
        .count();
    assert_eq!((joined, first.len()), (seats, seats), "{first:?}");
}

/// A lobby too large for its first frame is refused when the room is
/// made, naming the most seats that fit (a 256-seat lobby's first frame,
/// 256 `Joined`, needs more than a 1,200-byte datagram: its clients would
/// have waited at tick 0 for good).
#[test]
fn a_lobby_whose_first_frame_cannot_fit_is_refused() {
    let config = |seats: u16| SequencerConfig {
        max_seats: seats,
        start: Start::Seated(seats),
        ..SequencerConfig::default()
    };
    match Sequencer::<u16>::new(config(256), Instant::ZERO) {
        Err(ConfigError::LobbyTooLarge {
            seats: 256,
            first_frame,
            max_datagram: 1200,
            fits,
        }) => {
            assert!(first_frame > 1200);
            assert!((100..256).contains(&fits), "{fits}");
            assert!(Sequencer::<u16>::new(config(fits), Instant::ZERO).is_ok());
            assert!(Sequencer::<u16>::new(config(fits + 1), Instant::ZERO).is_err());
        }
        other => panic!("{other:?}"),
    }
    // Without a lobby, seats join over many ticks.
    let at_once = SequencerConfig {
        max_seats: 256,
        ..SequencerConfig::default()
    };
    assert!(Sequencer::<u16>::new(at_once, Instant::ZERO).is_ok());
}

/// Two ready players and a third seated that never says ready: the match
/// starts `ready_wait` after the two were ready, not before, and the
/// third plays it with them (found in review: the lobby held for good).
#[test]
fn a_player_that_never_readies_holds_the_lobby_only_for_the_ready_wait() {
    let mut sc = StarScenario::new(3, 9);
    sc.server.start = Start::Ready { min: 2 };
    sc.server.ready_wait = Some(Duration::from_secs(20));
    sc.link = rough();
    let mut h = sc.build();
    let started = |sim: &lockstep_core::sim::Sim<Node>| {
        sim.endpoint(SERVER)
            .and_then(Node::server)
            .is_some_and(|s| s.match_started())
    };
    let ready_but_third = |p: PeerId, n: &mut Node, _: Instant| {
        if p != PeerId(3)
            && let Some(c) = n.client_mut()
        {
            c.set_ready(true);
        }
    };
    let o = h.run(secs(19), ready_but_third, started);
    assert_eq!(o, Outcome::TimedOut, "started before the wait was over");
    let o = h.run(secs(25), ready_but_third, started);
    assert_eq!(o, Outcome::Done, "still waiting on the third player");
    let o = h.run(
        secs(60),
        |_, _, _| {},
        |sim| {
            sim.live()
                .filter_map(|(_, n)| n.client())
                .all(|c| c.stats().frames >= 300)
        },
    );
    assert_eq!(o, Outcome::Done);
    h.assert_streams_agree(&sc.client_ids());
    assert!(h.records[&PeerId(3)].committed > 250, "the third plays too");
}
