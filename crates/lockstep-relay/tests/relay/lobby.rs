//! Lobbies and match life against the relay over loopback UDP: a room
//! that starts when its players are seated or ready shows them by name
//! while it waits, and a room name used again after its match ended starts
//! a new match.

use crate::common::TestRelay;
use lockstep_core::runner::{RunnerConfig, Status};
use lockstep_core::sequenced::{ClientConfig, Start};
use lockstep_core::{Frame, Game, SystemEvent, Tick};
use lockstep_net::RelayClient;
use lockstep_relay::{RelayConfig, StartName};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A fold of every frame; it logs its hash after each tick and the system
/// events it ran.
#[derive(Debug, Default)]
struct Fold {
    next: u32,
    acc: u64,
    log: BTreeMap<Tick, u64>,
    system: Vec<(Tick, SystemEvent)>,
}

impl Game for Fold {
    type Input = u16;
    fn step(&mut self, frame: &Frame<u16>) {
        assert_eq!(frame.tick.get(), self.next, "every frame, in order");
        for i in &frame.inputs {
            self.acc = (self.acc ^ u64::from(i.unwrap_or(0))).wrapping_mul(0x100_0000_01B3);
        }
        self.system
            .extend(frame.events.iter().map(|e| (frame.tick, *e)));
        self.next += 1;
        self.log.insert(frame.tick, self.acc);
    }
    fn hash(&self) -> u64 {
        self.acc
    }
    fn save(&self) -> Vec<u8> {
        [self.next.to_le_bytes().as_slice(), &self.acc.to_le_bytes()].concat()
    }
    fn restore(b: &[u8]) -> Result<Self, String> {
        let next = b.get(..4).ok_or("short")?;
        let acc = b.get(4..12).ok_or("short")?;
        Ok(Self {
            next: u32::from_le_bytes(next.try_into().map_err(|_| "next")?),
            acc: u64::from_le_bytes(acc.try_into().map_err(|_| "acc")?),
            ..Self::default()
        })
    }
}

fn client(relay: &TestRelay, room: &str, name: &str) -> RelayClient<Fold> {
    let config = ClientConfig {
        room: room.into(),
        name: name.into(),
        ..ClientConfig::default()
    };
    RelayClient::connect(relay.udp, config, Fold::default(), RunnerConfig::default())
        .expect("a client")
}

fn turn_all(clients: &mut [RelayClient<Fold>]) {
    for c in clients.iter_mut() {
        c.turn(|g| (g.next as u16) | 1).expect("the turn goes on");
    }
    if let Some(c) = clients.first_mut() {
        c.wait(Duration::from_millis(5)).expect("waits");
    }
}

fn run_until(
    clients: &mut [RelayClient<Fold>],
    secs: u64,
    what: &str,
    done: impl Fn(&[RelayClient<Fold>]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done(clients) {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        turn_all(clients);
    }
}

fn names(c: &RelayClient<Fold>) -> Vec<String> {
    let mut n: Vec<String> = c
        .runner()
        .session()
        .roster()
        .map(|s| s.name.clone())
        .collect();
    n.sort();
    n
}

fn lobby(c: &RelayClient<Fold>) -> Option<(Start, u16, u16)> {
    match c.status() {
        Status::InLobby(l) => Some((l.start, l.seated, l.ready)),
        _ => None,
    }
}

/// A relay room that starts once two are seated and ready: the first
/// player waits in the lobby (nothing runs for a second), the second
/// arrives and both see each other by name, nothing runs until both are
/// ready, then they play one stream from tick 0.
#[test]
fn a_relay_room_waits_for_two_ready_players_and_names_them() {
    let mut config = RelayConfig::default();
    config.room_defaults.start = StartName::Ready;
    config.room_defaults.start_players = 2;
    let relay = TestRelay::start(config);
    let mut clients = vec![client(&relay, "lobby", "ann")];
    clients[0].set_ready(true);
    run_until(&mut clients, 10, "ann in the lobby", |c| {
        lobby(&c[0]) == Some((Start::Ready { min: 2 }, 1, 1))
    });
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(1) {
        turn_all(&mut clients);
    }
    assert_eq!(clients[0].game().next, 0, "nothing runs in the lobby");
    clients.push(client(&relay, "lobby", "bob"));
    run_until(&mut clients, 10, "both in the lobby", |c| {
        c.iter().all(|c| {
            lobby(c) == Some((Start::Ready { min: 2 }, 2, 1)) && names(c) == ["ann", "bob"]
        })
    });
    assert_eq!(
        clients[0].game().next,
        0,
        "nothing runs until all are ready"
    );
    clients[1].set_ready(true);
    run_until(&mut clients, 20, "both playing", |c| {
        c.iter()
            .all(|c| c.status() == Status::Playing && c.game().next > 90)
    });
    let (a, b) = (&clients[0].game(), &clients[1].game());
    for (t, h) in &a.log {
        if let Some(o) = b.log.get(t) {
            assert_eq!(h, o, "after tick {t}");
        }
    }
    // Both seats joined at tick 0, in the first frame.
    let joined: Vec<Tick> = a
        .system
        .iter()
        .filter(|(_, e)| matches!(e, SystemEvent::Joined { .. }))
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(joined, [Tick::ZERO, Tick::ZERO]);
    let ids: Vec<Option<u64>> = clients
        .iter()
        .map(|c| c.runner().session().match_id())
        .collect();
    assert_eq!(ids[0], ids[1]);
    relay.stop();
}

/// A room's match ends when its last player leaves: the next client under
/// the same name starts a new match (another id, tick 0, alone in it),
/// instead of finding itself in the old one.
#[test]
fn a_reused_room_name_starts_a_new_match() {
    let relay = TestRelay::start(RelayConfig::default());
    let mut first = vec![client(&relay, "again", "ann")];
    run_until(&mut first, 10, "ann playing", |c| c[0].game().next > 60);
    let old = first[0].runner().session().match_id().expect("an id");
    first[0].leave();
    run_until(&mut first, 10, "ann gone", |c| {
        c[0].status() == Status::Ended
    });
    let mut second = vec![client(&relay, "again", "bob")];
    run_until(&mut second, 10, "bob playing", |c| {
        c[0].status() == Status::Playing && c[0].game().next > 30
    });
    let new = second[0].runner().session().match_id().expect("an id");
    assert_ne!(new, old, "a new match");
    let g = second[0].game();
    // Alone from tick 0: one seat joined, nobody left.
    let events: Vec<&SystemEvent> = g.system.iter().map(|(_, e)| e).collect();
    assert!(
        matches!(events.as_slice(), [SystemEvent::Joined { .. }, ..]),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|e| matches!(e, SystemEvent::Left { .. })),
        "{events:?}"
    );
    relay.stop();
}

/// A griefer takes a seat of a relay lobby and leaves it; an honest player
/// takes the seat next. Every game sees every played seat joined (found in
/// review: the first frame read `[.., Joined k, Left k]`, so every game saw
/// the honest player's seat leave at tick 0).
#[test]
fn a_seat_taken_and_left_in_a_relay_lobby_is_joined_by_the_next_player() {
    let mut config = RelayConfig::default();
    config.room_defaults.start = StartName::Ready;
    config.room_defaults.start_players = 2;
    let relay = TestRelay::start(config);
    let mut clients = vec![
        client(&relay, "grief", "ann"),
        client(&relay, "grief", "bob"),
    ];
    run_until(&mut clients, 10, "two in the lobby", |c| {
        c.iter().all(|c| lobby(c).is_some_and(|l| l.1 == 2))
    });
    clients.push(client(&relay, "grief", "mallory"));
    run_until(&mut clients, 10, "mallory seated", |c| {
        c.iter().all(|c| lobby(c).is_some_and(|l| l.1 == 3))
    });
    clients[2].leave();
    run_until(&mut clients, 10, "mallory gone", |c| {
        lobby(&c[0]).is_some_and(|l| l.1 == 2) && lobby(&c[1]).is_some_and(|l| l.1 == 2)
    });
    clients.pop();
    clients.push(client(&relay, "grief", "carol"));
    run_until(&mut clients, 10, "carol seated", |c| {
        c.iter().all(|c| lobby(c).is_some_and(|l| l.1 == 3))
    });
    for c in clients.iter_mut() {
        c.set_ready(true);
    }
    run_until(&mut clients, 20, "all three playing", |c| {
        c.iter()
            .all(|c| c.status() == Status::Playing && c.game().next > 60)
    });
    let seats: Vec<_> = clients
        .iter()
        .map(|c| c.runner().session().seat().expect("seated"))
        .collect();
    for c in &clients {
        let mut here = BTreeMap::new();
        for (_, e) in &c.game().system {
            match *e {
                SystemEvent::Joined { player } => {
                    here.insert(player, true);
                }
                SystemEvent::Left { player } | SystemEvent::Abandoned { player } => {
                    here.insert(player, false);
                }
                _ => {}
            }
        }
        for s in &seats {
            assert_eq!(
                here.get(s),
                Some(&true),
                "seat {s:?}: {:?}",
                c.game().system
            );
        }
    }
    relay.stop();
}

/// A griefer takes the only seat of a lobby where a spectator waits, and
/// leaves: the lobby stays open for the spectator (found in review: the
/// room closed, and the caster was told the match was over before it
/// began).
#[test]
fn a_lobby_left_by_its_only_player_keeps_its_spectators() {
    let mut config = RelayConfig::default();
    config.room_defaults.start = StartName::Ready;
    config.room_defaults.start_players = 2;
    let relay = TestRelay::start(config);
    let watcher = ClientConfig {
        room: "show".into(),
        name: "caster".into(),
        spectator: true,
        ..ClientConfig::default()
    };
    let caster = RelayClient::connect(relay.udp, watcher, Fold::default(), RunnerConfig::default())
        .expect("a client");
    let mut clients = vec![caster];
    run_until(&mut clients, 10, "the caster in the lobby", |c| {
        lobby(&c[0]).is_some()
    });
    clients.push(client(&relay, "show", "mallory"));
    run_until(&mut clients, 10, "mallory seated", |c| {
        lobby(&c[0]).is_some_and(|l| l.1 == 1)
    });
    clients[1].leave();
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(3) {
        turn_all(&mut clients);
    }
    assert!(
        lobby(&clients[0]).is_some(),
        "the caster still waits in the lobby: {:?}",
        clients[0].status()
    );
    relay.stop();
}

/// A client dropped without `leave` says goodbye all the same: the other
/// player's game runs its seat's `Left` within a second, and once both are
/// dropped the room's name starts a new match at once (a newcomer's game
/// dropped its clients, and the room stayed the old match for the 30 s the
/// relay held their seats).
#[test]
fn a_dropped_client_says_goodbye() {
    let relay = TestRelay::start(RelayConfig::default());
    let mut clients = vec![client(&relay, "drop", "ann"), client(&relay, "drop", "bob")];
    run_until(&mut clients, 10, "both playing", |c| {
        c.iter()
            .all(|c| c.status() == Status::Playing && c.game().next > 30)
    });
    let old = clients[0].session().match_id();
    let bob = clients[1].session().seat().expect("seated");
    drop(clients.pop());
    let left = |c: &[RelayClient<Fold>]| {
        c[0].game()
            .system
            .iter()
            .any(|(_, e)| *e == SystemEvent::Left { player: bob })
    };
    let since = Instant::now();
    run_until(&mut clients, 5, "bob's seat left", left);
    assert!(
        since.elapsed() < Duration::from_secs(1),
        "{:?}",
        since.elapsed()
    );
    drop(clients.pop());
    let mut again = vec![client(&relay, "drop", "cat")];
    run_until(&mut again, 10, "cat playing", |c| {
        c[0].status() == Status::Playing
    });
    assert_ne!(again[0].session().match_id(), old, "a new match");
    relay.stop();
}
