//! Relays in a fleet, sharing a room directory (in memory here): a room
//! opens on one relay only, and a client asking another is sent there; a
//! relay killed leaves its claims to lapse, and another relay takes its
//! rooms' names; one stopped cleanly gives them up at once.

use crate::common::fold::{self, Fold};
use crate::common::{Kind, Player, TestRelay, client_config, play_on, play_until};
use lockstep_core::runner::Status;
use lockstep_core::{Event, Tick};
use lockstep_net::Clock;
use lockstep_net::RelayClient;
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

/// Relays a and b in `dir`'s fleet, with these configurations, both
/// registered.
fn two(dir: &MemoryDirectory, a: RelayConfig, b: RelayConfig) -> (TestRelay, TestRelay) {
    let a = TestRelay::start_in_fleet(a, member(dir, "relay-a"));
    let b = TestRelay::start_in_fleet(b, member(dir, "relay-b"));
    until("both relays registered", || {
        ask(dir.relays()).map(|r| r.len()).unwrap_or(0) == 2
    });
    (a, b)
}

/// Polls until `dir` holds relay `id`'s entry and `check` holds for it.
fn until_entry(
    dir: &MemoryDirectory,
    id: &str,
    what: &str,
    check: impl Fn(&lockstep_relay::directory::RelayEntry) -> bool,
) {
    until(&format!("{id} {what} in the directory"), || {
        ask(dir.relays()).is_ok_and(|r| r.iter().any(|e| e.id == id && check(e)))
    });
}

/// The relay holding `room` in `dir`, if any.
fn owner_of(dir: &MemoryDirectory, room: &str) -> Option<String> {
    ask(dir.owner(room)).expect("reads").map(|o| o.relay)
}

/// `players` leave, and play on until the draining relay (stopping on
/// `stopping`) has stopped (10 s at most); what it reported.
fn leave_until_stopped(
    players: &mut [Player<lockstep_core::PlayerInputs>],
    stopping: std::thread::JoinHandle<lockstep_relay::RelayReport>,
    clock: &Clock,
) -> lockstep_relay::RelayReport {
    for p in players.iter_mut() {
        p.session.leave();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stopping.is_finished() {
        assert!(Instant::now() < deadline, "the relay did not stop");
        for p in players.iter_mut() {
            p.step(clock);
        }
        std::thread::yield_now();
    }
    stopping.join().expect("joins")
}

/// Asserts the honest players of a match ran one stream.
fn one_stream(players: &[Player<lockstep_core::PlayerInputs>]) {
    let hashes: Vec<u64> = players.iter().map(|p| p.hash.value()).collect();
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "{hashes:x?}");
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
    let (a, b) = two(&dir, RelayConfig::default(), RelayConfig::default());
    let clock = Clock::new();

    // A match in "arena" on relay a. Once the directory shows its load,
    // a new room asked of relay a goes to relay b, the least loaded: its
    // players are sent there.
    let mut arena = pair(&a, "arena", 10, &clock);
    play_on(&mut arena, &clock, 60, || {});
    until_entry(&dir, "relay-a", "its load", |e| e.clients == 2);
    let mut lagoon = pair(&a, "lagoon", 20, &clock);
    play_on(&mut lagoon, &clock, 60, || {});
    let owner = |room: &str| owner_of(&dir, room);
    assert_eq!(owner("arena").as_deref(), Some("relay-a"));
    assert_eq!(owner("lagoon").as_deref(), Some("relay-b"));
    for p in &lagoon {
        assert_eq!(p.redirected, [b.udp], "{} was sent to relay b", p.name);
    }
    assert!(arena.iter().all(|p| p.redirected.is_empty()));

    // Asking relay b for "arena" is told to go to relay a; arena plays on.
    let mut stray = pair(&b, "arena", 30, &clock);
    stray.truncate(1);
    play_until(&mut stray, &clock, Duration::from_secs(10), |p| {
        !p.redirected.is_empty()
    });
    assert_eq!(stray[0].redirected, [a.udp]);
    drop(stray);
    play_on(&mut arena, &clock, 30, || {});
    one_stream(&arena);
    one_stream(&lagoon);

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

/// Turns every client, each playing its own input, until `done`.
fn turn_until(
    clients: &mut [(RelayClient<Fold>, u16)],
    what: &str,
    mut done: impl FnMut(&mut [(RelayClient<Fold>, u16)]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done(clients) {
        assert!(Instant::now() < deadline, "{what}: not in time");
        for (c, input) in clients.iter_mut() {
            c.turn(|_| *input).expect("the turn goes on");
        }
        if let Some((c, _)) = clients.first_mut() {
            c.wait(Duration::from_millis(2)).expect("waits");
        }
    }
}

/// A client that asks a relay for a room another relay of the fleet
/// serves is sent there by a sealed redirect, no larger than its Hello,
/// and plays in the same match as the player who came straight: one
/// stream, both seats in it.
#[test]
fn a_client_sent_to_the_wrong_relay_is_redirected_and_plays() {
    let dir = MemoryDirectory::new();
    let (a, b) = two(&dir, RelayConfig::default(), RelayConfig::default());
    let mut clients = vec![(fold::client(&a, "arena", "ann"), 3)];
    turn_until(&mut clients, "ann seated on relay a", |c| {
        c[0].0.session().connected()
    });
    // Bob asks relay b.
    clients.push((fold::client(&b, "arena", "bob"), 5));
    let last = Tick::new(99);
    for (c, _) in &mut clients {
        c.set_last_tick(Some(last));
    }
    let mut redirected = Vec::new();
    turn_until(&mut clients, "both finish", |c| {
        while let Some(e) = c[1].0.poll_event() {
            if let Event::Redirected { to } = e {
                redirected.push(to);
            }
        }
        c.iter().all(|(c, _)| c.status() == Status::Finished)
    });
    assert_eq!(redirected, [a.udp], "bob was sent to relay a, once");
    let (ann, bob) = (clients[0].0.game(), clients[1].0.game());
    assert_eq!((ann.next, ann.acc), (bob.next, bob.acc), "one stream");
    assert_eq!(
        clients[1].0.session().roster().count(),
        2,
        "bob plays beside ann"
    );
    let metrics = b.http_get("/metrics");
    assert!(metrics.contains("lockstep_redirects_total 1"), "{metrics}");
    assert_eq!(owner_of(&dir, "arena").as_deref(), Some("relay-a"));
}

/// A matchmaker's ticket may name the relay of the fleet to serve the
/// room: a client that asks another relay first is sent there, its
/// ticket spent only where it plays.
#[test]
fn a_ticket_names_the_relay_of_its_room() {
    use lockstep_relay::ticket::{self, Claims, Role, TicketKey};
    const SECRET: &str = "a ticket secret of the fleet's";
    let dir = MemoryDirectory::new();
    let config = || {
        let mut c = RelayConfig::default();
        c.tickets.secret = Some(SECRET.into());
        c
    };
    let (a, b) = two(&dir, config(), config());
    let key = TicketKey::new(0, SECRET).expect("long enough");
    let clock = Clock::new();
    let expiry = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        + 60;
    let mut players: Vec<_> = (0..2)
        .map(|k| {
            let name = format!("vip-{k}");
            let claims = Claims {
                room: "vip",
                name: &name,
                role: Role::Player,
                expiry,
                relay: Some("relay-b"),
            };
            let mut config = client_config("vip", &name);
            config.ticket = ticket::issue_random(&key, &claims).expect("randomness");
            Player::new(&a, Kind::Udp, config, None, 90 + k, &clock)
        })
        .collect();
    play_on(&mut players, &clock, 60, || {});
    for p in &players {
        assert_eq!(p.redirected, [b.udp], "{} was sent to relay b", p.name);
    }
    one_stream(&players);
    assert_eq!(owner_of(&dir, "vip").as_deref(), Some("relay-b"));
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
    one_stream(&arena);
    println!(
        "{claimed} rooms claimed for the attacker, all given back; given back during play: {given_back}"
    );
    drop(raws);
}

/// A relay in a fleet told to stop (SIGTERM: here `stop`) while a match
/// plays, with `drain_secs`: it takes no new room (refused while it is
/// the only relay, sent to another once one runs), fails `/readyz`, says
/// `draining` in the directory, and lets the match play to its end; it
/// stops once its last room closes, long before the deadline, having
/// dropped nobody.
#[test]
fn a_draining_relay_takes_no_room_and_stops_when_its_last_match_ends() {
    use lockstep_relay::directory::RelayState;
    let dir = MemoryDirectory::new();
    let config = RelayConfig {
        drain_secs: 30,
        ..RelayConfig::default()
    };
    let a = TestRelay::start_in_fleet(config, member(&dir, "relay-a"));
    let clock = Clock::new();
    let mut arena = pair(&a, "arena", 60, &clock);
    play_on(&mut arena, &clock, 30, || {});
    let ready = |relay: &TestRelay| relay.http_get("/readyz");
    assert!(ready(&a).contains("200"), "{}", ready(&a));

    let http = a.http;
    // A player for a new room, ready to knock once the relay drains.
    let mut late = pair(&a, "lagoon", 70, &clock);
    late.truncate(1);
    // And two for another, to knock once another relay runs.
    let mut cove = pair(&a, "cove", 80, &clock);
    let stopping = Instant::now();
    let b_side = std::thread::spawn(move || a.stop());
    until("the relay says it drains", || {
        ask(dir.relays()).is_ok_and(|r| r.first().is_some_and(|e| e.state == RelayState::Draining))
    });
    let readyz = crate::common::http_get(http, "/readyz");
    assert!(
        readyz.contains("503") && readyz.contains("draining"),
        "{readyz}"
    );

    // The match plays on; a new room is refused, saying why.
    play_on(&mut arena, &clock, 60, || {});
    assert!(
        arena.iter().all(|p| p.session.closed().is_none()),
        "nobody dropped"
    );
    one_stream(&arena);
    play_until(&mut late, &clock, Duration::from_secs(10), |p| {
        p.session.closed().is_some()
    });
    let why = format!("{:?}", late[0].session.closed());
    assert!(why.contains("draining"), "{why}");

    // With another relay in the fleet, a new room asked of the draining
    // one is sent there, and plays.
    let b = TestRelay::start_in_fleet(RelayConfig::default(), member(&dir, "relay-b"));
    until_entry(&dir, "relay-b", "registered", |_| true);
    play_on(&mut cove, &clock, 30, || {});
    for p in &cove {
        assert_eq!(p.redirected, [b.udp], "{} was sent to relay b", p.name);
    }
    one_stream(&cove);

    // The players leave: the room closes, and the relay stops.
    let report = leave_until_stopped(&mut arena, b_side, &clock);
    let took = stopping.elapsed();
    println!(
        "drained in {took:?} (deadline 30 s); {} goodbyes",
        report.said_goodbye
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(report.said_goodbye, 0, "nobody was left to tell goodbye");
}

/// A room another relay placed on this one before it began to drain (the
/// client sent on with a redirect): the draining relay gives the claim
/// back and sends the client to a relay that takes rooms, rather than open
/// a room it will cut off at its deadline. The fleet hears of the drain at
/// once, not at the next heartbeat.
#[test]
fn a_draining_relay_hands_on_a_room_placed_on_it_before() {
    use lockstep_relay::directory::{Claim, RelayState};
    let dir = MemoryDirectory::new();
    let config = RelayConfig {
        drain_secs: 30,
        ..RelayConfig::default()
    };
    let (a, b) = two(&dir, config, RelayConfig::default());
    let clock = Clock::new();
    let mut arena = pair(&a, "arena", 130, &clock);
    play_on(&mut arena, &clock, 30, || {});
    // Relay b placed "late" on relay a, and sent its client there.
    assert!(matches!(
        ask(dir.claim("late", "relay-a", Duration::from_secs(30))),
        Ok(Claim::Ours { .. })
    ));
    let mut late = pair(&a, "late", 140, &clock);
    let http = a.http;
    let b_udp = b.udp;
    let draining = std::thread::spawn(move || a.stop());
    let asked = Instant::now();
    until_entry(&dir, "relay-a", "draining", |e| {
        e.state == RelayState::Draining
    });
    println!(
        "the drain reached the directory {:?} after the stop",
        asked.elapsed()
    );
    assert!(crate::common::http_get(http, "/readyz").contains("503"));
    play_on(&mut late, &clock, 30, || {});
    for p in &late {
        assert_eq!(p.redirected, [b_udp], "{} was sent to relay b", p.name);
    }
    one_stream(&late);
    assert_eq!(owner_of(&dir, "late").as_deref(), Some("relay-b"));
    leave_until_stopped(&mut arena, draining, &clock);
}

/// The directory in a real Redis, which stops mid-match and comes back
/// empty (no persistence): the running match is untouched, a new room is
/// refused by name meanwhile, and once Redis is back the relay's entry and
/// its room are in it again and new rooms open.
#[test]
fn a_match_outlives_its_directorys_restart() {
    use lockstep_relay::directory::{LocalRedis, RedisDirectory};
    let redis = LocalRedis::start().expect("a redis-server (scripts/test-deps installs it)");
    let port = redis.port();
    let url = redis.url();
    let fleet = Fleet {
        directory: RedisDirectory::open(&url, "restart:").expect("a client"),
        id: "relay-r".into(),
        udp: None,
        ws: None,
        lease: LEASE,
    };
    let a = TestRelay::start_in_fleet(RelayConfig::default(), fleet);
    let watch = || RedisDirectory::open(&url, "restart:").expect("a client");
    let rooms = || -> Vec<String> {
        ask(watch().rooms())
            .map(|r| r.into_iter().map(|(name, _)| name).collect())
            .unwrap_or_default()
    };
    let clock = Clock::new();
    let mut arena = pair(&a, "arena", 80, &clock);
    play_on(&mut arena, &clock, 30, || {});
    assert_eq!(rooms(), ["arena"]);

    drop(redis);
    let mut lagoon = pair(&a, "lagoon", 90, &clock);
    lagoon.truncate(1);
    play_until(&mut lagoon, &clock, Duration::from_secs(10), |p| {
        p.session.closed().is_some()
    });
    let why = format!("{:?}", lagoon[0].session.closed());
    assert!(why.contains("directory is unavailable"), "{why}");
    play_on(&mut arena, &clock, 60, || {});
    assert!(arena.iter().all(|p| p.session.closed().is_none()));

    let _redis = LocalRedis::start_on(port).expect("redis again");
    until("the relay and its room are back in the directory", || {
        rooms() == ["arena"] && ask(watch().relays()).is_ok_and(|r| r.len() == 1)
    });
    let mut lagoon = pair(&a, "lagoon", 100, &clock);
    play_on(&mut lagoon, &clock, 30, || {});
    play_on(&mut arena, &clock, 30, || {});
    assert_eq!(rooms(), ["arena", "lagoon"]);
    one_stream(&arena);
    one_stream(&lagoon);
}

/// Hellos from forged source addresses, each naming a new room: none
/// echoes its challenge's cookie (the forger never sees it), so none makes
/// the relay claim a room, and the reply to each is no larger than it;
/// an honest match plays on to one stream.
#[test]
fn forged_hellos_claim_nothing() {
    use crate::common::{Raw, padded};
    use lockstep_core::wire::{Hello, InputCodec, Message};
    let dir = MemoryDirectory::new();
    let a = TestRelay::start_in_fleet(RelayConfig::default(), member(&dir, "relay-a"));
    let clock = Clock::new();
    let mut arena = pair(&a, "arena", 110, &clock);
    play_on(&mut arena, &clock, 30, || {});
    let forger = Raw::new(&a);
    let names: Vec<String> = (0..200).map(|k| format!("forged-{k}")).collect();
    let mut k = 0;
    play_on(&mut arena, &clock, 90, || {
        if let Some(room) = names.get(k) {
            let hello = padded(&[Message::Hello(Hello {
                fingerprint: 0xF00D,
                room,
                name: "mallory",
                codec: InputCodec::PlayerInputs,
                key: Some([7; 32]),
                ..Hello::default()
            })]);
            forger.send_plain(&hello);
            while let Some(reply) = forger.recv_within(Duration::from_millis(1)) {
                assert!(
                    reply.len() <= hello.len(),
                    "{} > {}",
                    reply.len(),
                    hello.len()
                );
            }
            k += 1;
        }
    });
    let rooms: Vec<String> = ask(dir.rooms())
        .expect("reads")
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert_eq!(rooms, ["arena"]);
    one_stream(&arena);
}

/// What a stranger learns of a room another relay serves: to a Hello
/// without a cookie, only the challenge (no address leaves the relay
/// before the address check); with the cookie, the redirect, sealed under
/// the handshake's keys (plain bytes would let anyone forge one) and no
/// larger than the Hello, even an unpadded one; repeated Hellos get the
/// same bytes (one nonce, one reply). The honest match plays on.
#[test]
fn a_redirect_goes_only_to_a_proven_address_sealed_and_small() {
    use crate::common::{datagram, padded, secret};
    use lockstep_core::secure::{self, SecureChannel};
    use lockstep_core::wire::{Datagram, Hello, InputCodec, Message, RejectReason};
    let dir = MemoryDirectory::new();
    let (a, b) = two(&dir, RelayConfig::default(), RelayConfig::default());
    let clock = Clock::new();
    let mut arena = pair(&a, "arena", 120, &clock);
    play_on(&mut arena, &clock, 30, || {});
    let (b_udp, a_udp) = (b.udp, a.udp);
    let stranger = std::thread::spawn(move || {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        sock.connect(b_udp).expect("connect");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let secret = secret();
        let key = secure::client_public(&secret);
        fn hello(key: [u8; 32], cookie: Option<&[u8]>) -> Hello<'_> {
            Hello {
                fingerprint: 0xF00D,
                room: "arena",
                name: "mallory",
                codec: InputCodec::PlayerInputs,
                key: Some(key),
                cookie,
                ..Hello::default()
            }
        }
        let mut buf = vec![0u8; 2048];
        sock.send(&padded(&[Message::Hello(hello(key, None))]))
            .expect("send");
        let n = sock.recv(&mut buf).expect("a challenge");
        let d = Datagram::decode(&buf[..n], Tick::ZERO).expect("decodes");
        let Some(Message::Challenge {
            cookie,
            key: Some(server),
        }) = d.messages.first().cloned()
        else {
            panic!(
                "only a challenge before the address check: {:?}",
                d.messages
            )
        };
        let cookie = cookie.to_vec();
        let binding = secure::hello_binding(&hello(key, None));
        let mut channel =
            SecureChannel::client(&secret, &server, &cookie, &binding).expect("a key");
        // Unpadded, repeated until the claim is settled and answered.
        let proven = datagram(Tick::ZERO, &[Message::Hello(hello(key, Some(&cookie)))]);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut replies: Vec<Vec<u8>> = Vec::new();
        while replies.len() < 2 {
            assert!(Instant::now() < deadline, "no redirect");
            sock.send(&proven).expect("send");
            if let Ok(n) = sock.recv(&mut buf) {
                replies.push(buf[..n].to_vec());
            }
        }
        assert_eq!(replies[0], replies[1], "the same reply, the same bytes");
        let reply = replies.swap_remove(0);
        assert!(secure::is_sealed(&reply), "a redirect goes sealed");
        assert!(
            reply.len() <= proven.len(),
            "{} > {}",
            reply.len(),
            proven.len()
        );
        let mut open = reply.clone();
        let plain = channel.open(&mut open).expect("opens").to_vec();
        let d = Datagram::decode(&plain, Tick::ZERO).expect("decodes");
        assert_eq!(
            d.messages,
            [Message::Reject(RejectReason::Moved(a_udp))],
            "sent to relay a"
        );
        (reply.len(), proven.len())
    });
    play_until(&mut arena, &clock, Duration::from_secs(10), |_| {
        stranger.is_finished()
    });
    let (reply, hello) = stranger.join().expect("the stranger's checks passed");
    println!("redirect {reply} bytes sealed, for an unpadded Hello of {hello}");
    play_on(&mut arena, &clock, 30, || {});
    one_stream(&arena);
}

/// The forger's copy of a Hello the victim sent (plain, with its cookie
/// and key), naming `room` instead: what someone who watches the victim's
/// path and can send "from" its address (see `sealed.rs`) makes of it.
fn forged_hello(seen: &[Vec<u8>], room: &str) -> Option<Vec<u8>> {
    use crate::common::padded;
    use lockstep_core::secure;
    use lockstep_core::wire::{Datagram, Hello, Message};
    seen.iter().rev().find_map(|d| {
        if secure::is_sealed(d) {
            return None;
        }
        let dg = Datagram::decode(d, Tick::ZERO).ok()?;
        dg.messages.iter().find_map(|m| match m {
            Message::Hello(h) if h.cookie.is_some() => {
                Some(padded(&[Message::Hello(Hello { room, ..h.clone() })]))
            }
            _ => None,
        })
    })
}

/// A player, a clone of its socket (to send "from" its address) and what
/// it sent.
type Tapped = (
    Player<lockstep_core::PlayerInputs>,
    std::net::UdpSocket,
    std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
);

/// A sealed player opening a new room on relay a, on a socket the test
/// keeps a clone of (the forger's "from its address"), its datagrams
/// tapped (the watcher's view of its path).
fn tapped_victim(relay: &TestRelay, room: &str, clock: &Clock) -> Tapped {
    use crate::common::{Tap, secret};
    use lockstep_net::{UdpTransport, WsClientTransport};
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.connect(relay.udp).expect("connect");
    let forger = socket.try_clone().expect("clone");
    let mut inner = UdpTransport::from_socket(socket).expect("socket");
    inner.add_peer(relay.udp);
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let config = lockstep_core::sequenced::ClientConfig {
        secret: Some(secret()),
        ..client_config(room, "victim")
    };
    let mut p = Player::new(relay, Kind::Udp, config.clone(), None, 140, clock);
    p.transport = Box::new(Tap {
        inner,
        sent: sent.clone(),
    });
    p.session = lockstep_core::sequenced::ClientSession::new(
        config,
        WsClientTransport::SERVER,
        clock.now(),
    )
    .expect("config");
    (p, forger, sent)
}

/// Steps `victim` (and `others`, who play on) until it is seated, the
/// forger copying its latest Hello with a cookie, naming `decoy`, every
/// 20 ms (10 times at most: the loopback address's handshake budget is
/// shared with the honest players).
fn forge_while_joining(
    victim: &mut Player<lockstep_core::PlayerInputs>,
    others: &mut [Player<lockstep_core::PlayerInputs>],
    forger: &std::net::UdpSocket,
    sent: &std::sync::Mutex<Vec<Vec<u8>>>,
    decoy: &str,
    clock: &Clock,
) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut forged, mut last) = (0, None::<Instant>);
    while victim.session.seat().is_none() {
        assert!(
            Instant::now() < deadline,
            "the victim was never seated: {:?}",
            victim.session.closed()
        );
        if forged < 10 && last.is_none_or(|t| t.elapsed() >= Duration::from_millis(20)) {
            let seen = sent.lock().expect("lock").clone();
            if let Some(f) = forged_hello(&seen, decoy) {
                forger.send(&f).expect("send");
                forged += 1;
                last = Some(Instant::now());
            }
        }
        victim.step(clock);
        for p in others.iter_mut() {
            p.step(clock);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    forged
}

/// Someone who watches a sealed client's path and can send "from" its
/// address copies the client's Hello (its cookie and key) naming a room
/// relay b serves, while the client's own room is being claimed on relay
/// a. The handshake's keys are bound to what the Hello asks for, so relay
/// a's redirect for the copy is sealed under keys the client does not
/// have: the client is never redirected for a room it did not name, and
/// plays one stream with its partner in its own room.
#[test]
fn a_watched_hello_copied_naming_another_room_does_not_redirect_its_client() {
    let dir = MemoryDirectory::new();
    let (a, b) = two(&dir, RelayConfig::default(), RelayConfig::default());
    let clock = Clock::new();
    let owner = |room: &str| owner_of(&dir, room);
    let mut lagoon = pair(&b, "lagoon", 130, &clock);
    play_on(&mut lagoon, &clock, 30, || {});
    assert_eq!(owner("lagoon").as_deref(), Some("relay-b"));

    let (mut victim, forger, sent) = tapped_victim(&a, "cove", &clock);
    let forged = forge_while_joining(&mut victim, &mut lagoon, &forger, &sent, "lagoon", &clock);
    let partner = Player::new(
        &a,
        Kind::Udp,
        client_config("cove", "partner"),
        None,
        141,
        &clock,
    );
    let mut cove = vec![victim, partner];
    play_on(&mut cove, &clock, 60, || {});
    play_on(&mut lagoon, &clock, 30, || {});
    one_stream(&lagoon);
    one_stream(&cove);
    assert_eq!(owner("cove").as_deref(), Some("relay-a"));
    println!(
        "{forged} forged Hellos; the victim was sent to {:?} (relay a {}, relay b {})",
        cove[0].redirected, a.udp, b.udp
    );
    assert!(
        cove[0].redirected.is_empty(),
        "the victim was redirected {:?} for a room it never named",
        cove[0].redirected
    );
}

/// The same copied Hello naming a room relay a itself runs ("arena"):
/// the copy's Welcome is sealed under keys bound to "arena", which the
/// client does not have, so the client is not seated there; it plays one
/// stream with its partner in "cove", and arena's pair plays on.
#[test]
fn a_watched_hello_copied_naming_a_running_room_does_not_seat_its_client_there() {
    let dir = MemoryDirectory::new();
    let a = TestRelay::start_in_fleet(RelayConfig::default(), member(&dir, "relay-a"));
    until("relay a registered", || {
        ask(dir.relays()).map(|r| r.len()).unwrap_or(0) == 1
    });
    let clock = Clock::new();
    let mut arena = pair(&a, "arena", 150, &clock);
    play_on(&mut arena, &clock, 30, || {});

    let (mut victim, forger, sent) = tapped_victim(&a, "cove", &clock);
    let forged = forge_while_joining(&mut victim, &mut arena, &forger, &sent, "arena", &clock);
    let partner = Player::new(
        &a,
        Kind::Udp,
        client_config("cove", "partner"),
        None,
        151,
        &clock,
    );
    // Everyone plays on together: arena's pair, then cove's.
    let mut all = std::mem::take(&mut arena);
    all.push(victim);
    all.push(partner);
    play_on(&mut all, &clock, 60, || {});
    let names = |p: &Player<lockstep_core::PlayerInputs>| -> Vec<String> {
        p.session.roster().map(|s| s.name.clone()).collect()
    };
    println!(
        "{forged} forged Hellos; the victim's room holds {:?}, arena's {:?}, the partner's {:?}",
        names(&all[2]),
        names(&all[0]),
        names(&all[3])
    );
    one_stream(&all[..2]);
    one_stream(&all[2..]);
}

/// A relay at its `max_rooms` registers as full at once: a new room asked
/// of another relay is not placed on it (a relay full of an attacker's
/// one-player rooms looked least loaded), and one asked of the full relay
/// itself is sent on rather than refused. Both play one stream.
#[test]
fn a_new_room_is_not_placed_on_a_full_relay() {
    use lockstep_relay::directory::RelayState;
    let dir = MemoryDirectory::new();
    let mut small = RelayConfig::default();
    small.limits.max_rooms = 1;
    let (a, b) = two(&dir, small, RelayConfig::default());
    let clock = Clock::new();
    // Relay a is full: one room of one player. Relay b runs a pair.
    let mut solo = pair(&a, "solo", 160, &clock);
    solo.truncate(1);
    let mut arena = pair(&b, "arena", 170, &clock);
    let mut all: Vec<_> = solo.drain(..).chain(arena.drain(..)).collect();
    play_on(&mut all, &clock, 30, || {});
    until_entry(&dir, "relay-a", "full", |e| e.state == RelayState::Full);
    // A new room asked of relay b, and another asked of full relay a.
    let mut cove = pair(&b, "cove", 180, &clock);
    let mut reef = pair(&a, "reef", 190, &clock);
    let mut both: Vec<_> = cove.drain(..).chain(reef.drain(..)).collect();
    play_on(&mut both, &clock, 60, || {});
    assert!(
        both[..2].iter().all(|p| p.redirected.is_empty()),
        "cove stays on b"
    );
    for p in &both[2..] {
        assert_eq!(p.redirected, [b.udp], "{} was sent on to relay b", p.name);
    }
    one_stream(&both[..2]);
    one_stream(&both[2..]);
    play_on(&mut all, &clock, 30, || {});
    one_stream(&all[1..]);
}

/// Placement looks at the client's transport: a UDP client's new room is
/// not placed on a relay that takes WebSocket clients only (the client
/// would be refused there), however lightly loaded; it stays on a relay
/// with a UDP address, and plays.
#[test]
fn a_room_goes_to_a_relay_the_client_can_reach() {
    use lockstep_relay::{BackgroundRelay, Bind};
    let dir = MemoryDirectory::new();
    let a = TestRelay::start_in_fleet(RelayConfig::default(), member(&dir, "relay-a"));
    let ws_only = Bind {
        ws: Bind::loopback().ws,
        ..Bind::default()
    };
    let b =
        BackgroundRelay::start_in_fleet(RelayConfig::default(), ws_only, member(&dir, "relay-b"))
            .expect("starts");
    until("both relays registered", || {
        ask(dir.relays()).map(|r| r.len()).unwrap_or(0) == 2
    });
    let clock = Clock::new();
    let mut arena = pair(&a, "arena", 200, &clock);
    play_on(&mut arena, &clock, 30, || {});
    until_entry(&dir, "relay-a", "its load", |e| e.clients == 2);
    let mut cove = pair(&a, "cove", 210, &clock);
    play_on(&mut cove, &clock, 60, || {});
    assert!(
        cove.iter().all(|p| p.redirected.is_empty()),
        "cove stays on relay a"
    );
    assert_eq!(owner_of(&dir, "cove").as_deref(), Some("relay-a"));
    one_stream(&cove);
    drop(b);
}

/// A fleet that could not run is refused when the relay starts, by name:
/// a lease under the shortest (its renewals could not keep up), a bad id,
/// an address no client can be sent to.
#[test]
fn a_fleet_that_cannot_run_is_refused_at_start() {
    use lockstep_relay::{BackgroundRelay, Bind};
    let dir = MemoryDirectory::new();
    let mut short = member(&dir, "relay-a");
    short.lease = Duration::ZERO;
    let err = BackgroundRelay::start_in_fleet(RelayConfig::default(), Bind::loopback(), short)
        .expect_err("a zero lease");
    assert!(err.to_string().contains("lease"), "{err}");
    let bad = member(&dir, "two words");
    let err = BackgroundRelay::start_in_fleet(RelayConfig::default(), Bind::loopback(), bad)
        .expect_err("a bad id");
    assert!(err.to_string().contains("relay id"), "{err}");
    // Listening on every interface with no public address: other relays
    // would send clients to 0.0.0.0.
    let everywhere = Bind {
        udp: Some("0.0.0.0:0".parse().expect("an address")),
        ..Bind::default()
    };
    let err = BackgroundRelay::start_in_fleet(
        RelayConfig::default(),
        everywhere,
        member(&dir, "relay-a"),
    )
    .expect_err("no public address");
    assert!(err.to_string().contains("public address"), "{err}");
}
