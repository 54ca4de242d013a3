//! Relays in a fleet, sharing a room directory (in memory here): a room
//! opens on one relay only, and a client asking another is told so; a
//! relay killed leaves its claims to lapse, and another relay takes its
//! rooms' names; one stopped cleanly gives them up at once.

use crate::common::{Kind, Player, TestRelay, client_config, play_on, play_until};
use lockstep_net::Clock;
use lockstep_relay::RelayConfig;
use lockstep_relay::directory::{Directory, MemoryDirectory};
use lockstep_relay::fleet::Fleet;
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_millis(600);

fn member(directory: &MemoryDirectory, id: &str) -> Fleet<MemoryDirectory> {
    Fleet {
        directory: directory.clone(),
        id: id.into(),
        udp: None,
        ws: None,
        lease: LEASE,
    }
}

/// Runs a directory call to its end.
fn ask<T>(f: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}

/// Polls `check` for a few seconds at most.
fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not in time");
        std::thread::yield_now();
    }
}

fn pair(
    relay: &TestRelay,
    room: &str,
    seed: u64,
    clock: &Clock,
) -> Vec<Player<lockstep_core::PlayerInputs>> {
    (0..2)
        .map(|k| {
            Player::new(
                relay,
                Kind::Udp,
                client_config(room, &format!("{room}-{k}")),
                None,
                seed + k,
                clock,
            )
        })
        .collect()
}

#[test]
fn a_room_opens_on_one_relay_and_moves_when_its_relay_dies() {
    let dir = MemoryDirectory::new();
    let a = TestRelay::start_in_fleet(RelayConfig::default(), member(&dir, "relay-a"));
    let b = TestRelay::start_in_fleet(RelayConfig::default(), member(&dir, "relay-b"));
    until("both relays registered", || {
        ask(dir.relays()).map(|r| r.len()).unwrap_or(0) == 2
    });
    let clock = Clock::new();

    // A match in "arena" on relay a, another in "lagoon" on relay b.
    let mut arena = pair(&a, "arena", 10, &clock);
    play_on(&mut arena, &clock, 60, || {});
    let mut lagoon = pair(&b, "lagoon", 20, &clock);
    play_on(&mut lagoon, &clock, 60, || {});
    let owner = |room: &str| ask(dir.owner(room)).expect("reads").map(|o| o.relay);
    assert_eq!(owner("arena").as_deref(), Some("relay-a"));
    assert_eq!(owner("lagoon").as_deref(), Some("relay-b"));

    // Asking relay b for "arena" is refused, saying why; arena plays on.
    let mut stray = pair(&b, "arena", 30, &clock);
    stray.truncate(1);
    play_until(&mut stray, &clock, Duration::from_secs(10), |p| {
        p.session.closed().is_some()
    });
    let why = format!("{:?}", stray[0].session.closed());
    assert!(why.contains("another relay"), "{why}");
    play_on(&mut arena, &clock, 30, || {});

    // Relay a dies: its entry and its claim lapse within the lease, and
    // "arena" opens on relay b for a new match.
    let died = Instant::now();
    a.kill();
    until("relay a's claim lapses", || owner("arena").is_none());
    let lapsed = died.elapsed();
    println!("relay a's claim lapsed {lapsed:?} after it died (lease {LEASE:?})");
    assert!(lapsed <= LEASE + Duration::from_millis(300), "{lapsed:?}");
    until("relay a's entry lapses", || {
        ask(dir.relays()).is_ok_and(|r| r.iter().all(|e| e.id != "relay-a"))
    });
    let mut again = pair(&b, "arena", 40, &clock);
    play_on(&mut again, &clock, 60, || {});
    assert_eq!(owner("arena").as_deref(), Some("relay-b"));

    // Relay b stops cleanly: it gives its rooms and its entry up at once.
    drop(again);
    drop(lagoon);
    b.stop();
    assert_eq!(ask(dir.rooms()).expect("reads"), []);
    assert_eq!(ask(dir.relays()).expect("reads"), []);
}

/// An attacker names new rooms, one Hello each (past the address check),
/// and never comes back: each room it made the relay claim is given back
/// within seconds, so the directory holds only rooms that run; an honest
/// match plays on meanwhile.
#[test]
fn rooms_claimed_for_clients_that_never_come_back_are_given_back() {
    use crate::common::Raw;
    use lockstep_core::wire::{Hello, InputCodec};
    let dir = MemoryDirectory::new();
    let a = TestRelay::start_in_fleet(RelayConfig::default(), member(&dir, "relay-a"));
    let clock = Clock::new();
    let mut arena = pair(&a, "arena", 50, &clock);
    play_on(&mut arena, &clock, 30, || {});
    let names: Vec<String> = (0..5).map(|k| format!("junk-{k}")).collect();
    let raws: Vec<Raw> = names
        .iter()
        .map(|room| {
            let raw = Raw::new(&a);
            raw.hello(Hello {
                fingerprint: 0xF00D,
                room,
                name: "mallory",
                codec: InputCodec::PlayerInputs,
                ..Hello::default()
            });
            raw
        })
        .collect();
    let rooms = || -> Vec<String> {
        ask(dir.rooms())
            .expect("reads")
            .into_iter()
            .map(|(r, _)| r)
            .collect()
    };
    until("the attacker's rooms are claimed", || rooms().len() > 1);
    let claimed = rooms().len() - 1;
    let mut given_back = false;
    play_on(&mut arena, &clock, 150, || {
        given_back |= rooms() == ["arena"];
    });
    until("every unused claim is given back", || rooms() == ["arena"]);
    println!(
        "{claimed} rooms claimed for the attacker, all given back; given back during play: {given_back}"
    );
    drop(raws);
}
