//! Attacks on admission over real sockets, each while honest players play
//! in the same relay and must finish on equal hashes: forged-source Hello
//! floods (measured amplification), reply-loop bait, resume-token guessing
//! and ticket reuse.
//!
//! A forged source address cannot be made on loopback without raw sockets,
//! so a "victim" here is a socket bound to its own 127.x address that sends
//! the attacker's datagrams itself and never answers: to the relay that is
//! exactly a forged datagram, and the victim counts what the relay sends it.

use crate::common;
use common::{
    Kind, Player, TestRelay, client_config, honest, padded, play_until, relay, still_fine,
};
use lockstep_core::admission;
use lockstep_core::secure::{self, SecureChannel};
use lockstep_core::sequenced::{CloseReason, Rejection};
use lockstep_core::sim::SimRng;
use lockstep_core::wire::{
    ByeReason, Datagram, ErrorCode, Hello, InputCodec, Message, RejectReason, ResumeToken, Status,
    Welcome,
};
use lockstep_core::{PlayerId, Tick};
use lockstep_net::Clock;
use lockstep_relay::RelayConfig;
use lockstep_relay::ticket::{self, Claims, Role, TicketKey};
use std::net::UdpSocket;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn hello_for(room: &str) -> Vec<u8> {
    padded(&[Message::Hello(Hello {
        fingerprint: 0xF00D,
        room,
        name: "victim",
        codec: InputCodec::PlayerInputs,
        ..Hello::default()
    })])
}

/// Bytes `sockets` receive, all read together, until `quiet` passes with
/// nothing new (or `limit` in all).
fn drain_all(sockets: &[UdpSocket], quiet: Duration, limit: Duration) -> usize {
    for s in sockets {
        s.set_nonblocking(true).expect("nonblocking");
    }
    let mut got = 0;
    let mut buf = vec![0u8; 65_536];
    let end = Instant::now() + limit;
    let mut last = Instant::now();
    while Instant::now() < end && last.elapsed() < quiet {
        for s in sockets {
            while let Ok(n) = s.recv(&mut buf) {
                got += n;
                last = Instant::now();
            }
        }
        std::thread::yield_now();
    }
    got
}

fn metric(relay: &TestRelay, name: &str) -> u64 {
    let text = relay.http_get("/metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[test]
fn a_forged_hello_flood_is_not_amplified_and_allocates_nothing() {
    let relay = relay();
    let clock = Clock::new();
    let players = honest(&relay, &clock);
    let target = relay.udp;
    let flood = std::thread::spawn(move || {
        // 64 victims on 32 addresses, each "sent" 40 Hellos for rooms of
        // their own, naming the honest room too.
        let victims: Vec<UdpSocket> = (0..64)
            .map(|i| UdpSocket::bind(format!("127.0.1.{}:0", 1 + i % 32)).expect("bind"))
            .collect();
        let mut sent = 0usize;
        for round in 0..40 {
            for (i, v) in victims.iter().enumerate() {
                let room = if i % 2 == 0 {
                    "room".to_owned()
                } else {
                    format!("squat{i}-{round}")
                };
                let h = hello_for(&room);
                v.send_to(&h, target).expect("send");
                sent += h.len();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let received = drain_all(&victims, Duration::from_millis(300), Duration::from_secs(3));
        (sent, received)
    });
    still_fine(players, &clock);
    let (sent, received) = flood.join().expect("flood thread");
    let factor = received as f64 / sent as f64;
    eprintln!("forged Hellos: {sent} bytes in, {received} bytes out to victims: {factor:.3}x");
    assert!(factor <= 1.0, "amplification {factor:.3}");
    assert!(received > 0, "victims were challenged at least once");
    // Nothing was allocated for an address that never proved itself: one
    // room, two players, whatever the flood named. (The gauges are
    // refreshed every second; the honest game above ran longer.)
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&relay, "lockstep_challenges_total") == 0 && Instant::now() < deadline {}
    assert_eq!(metric(&relay, "lockstep_rooms"), 1);
    assert_eq!(metric(&relay, "lockstep_players"), 2);
    // The room adapts its delay (the default), within 1..=16 ticks.
    let delay = metric(&relay, "lockstep_input_delay_max_ticks");
    assert!((1..=16).contains(&delay), "room delay {delay}");
}

#[test]
fn answers_are_never_answered_so_no_loop_can_start() {
    let relay = relay();
    let clock = Clock::new();
    let players = honest(&relay, &clock);
    let target = relay.udp;
    let echo = std::thread::spawn(move || {
        // An echo service whose address an attacker forged: everything the
        // relay sends it comes straight back. Each bait starts one exchange.
        let welcome = Welcome {
            seat: Some(PlayerId(0)),
            ..Welcome::default()
        };
        let baits: Vec<(&str, Vec<u8>)> = vec![
            (
                "error",
                padded(&[Message::Error {
                    code: ErrorCode::Malformed,
                    text: "x",
                }]),
            ),
            ("reject", padded(&[Message::Reject(RejectReason::RoomFull)])),
            (
                "bye",
                padded(&[Message::Bye {
                    reason: ByeReason::Kicked,
                    text: "",
                }]),
            ),
            (
                "challenge",
                padded(&[Message::Challenge {
                    cookie: &[1; 20],
                    key: None,
                }]),
            ),
            ("welcome", padded(&[Message::Welcome(welcome)])),
            (
                "pong",
                padded(&[Message::Pong {
                    stamp: 1,
                    held_ms: 0,
                    received: 1,
                    sent: 1,
                }]),
            ),
            ("status", padded(&[Message::Status(Status::default())])),
            ("not ours", vec![0x55; 200]),
            // No Hello: never answered (most likely a player the relay
            // dropped, which must stay free to time out and reconnect).
            ("ping", padded(&[Message::Ping { stamp: 1 }])),
            // A Hello: one challenge, echoed back, ignored.
            ("hello", hello_for("room")),
        ];
        let mut exchanges = Vec::new();
        for (what, bait) in baits {
            let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
            s.set_read_timeout(Some(Duration::from_millis(20)))
                .expect("timeout");
            s.send_to(&bait, target).expect("send");
            let mut received = 0;
            let mut buf = vec![0u8; 65_536];
            let end = Instant::now() + Duration::from_millis(400);
            while Instant::now() < end {
                if let Ok(n) = s.recv(&mut buf) {
                    received += 1;
                    s.send_to(&buf[..n], target).expect("echo");
                }
            }
            exchanges.push((what, received));
        }
        exchanges
    });
    still_fine(players, &clock);
    for (what, received) in echo.join().expect("echo thread") {
        let expected = usize::from(what == "hello");
        assert_eq!(
            received, expected,
            "{what}: the relay answered {received} times"
        );
    }
}

/// Steps `players` except `silent` until `until` holds or `limit` passes.
fn play_without(
    players: &mut [Player<lockstep_core::PlayerInputs>],
    silent: usize,
    clock: &Clock,
    limit: Duration,
) {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        for (i, p) in players.iter_mut().enumerate() {
            if i != silent {
                p.step(clock);
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

fn two_seat_relay() -> TestRelay {
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = 100;
    config.room_defaults.max_seats = 2;
    TestRelay::start(config)
}

/// One full handshake from `socket` presenting resume token `guess`: what
/// the relay answered, opened.
fn try_token(socket: &UdpSocket, rng: &mut SimRng, guess: [u8; 16]) -> Vec<u8> {
    handshake(socket, rng, "room", Some(ResumeToken(guess))).expect("an answer")
}

/// One full sealed handshake from `socket` into `room`, with a fresh key
/// (and a resume proof for `resume`): what the relay answered, opened, or
/// nothing if it did not answer.
fn handshake(
    socket: &UdpSocket,
    rng: &mut SimRng,
    room: &str,
    resume: Option<ResumeToken>,
) -> Option<Vec<u8>> {
    let mut secret = [0u8; 32];
    for b in &mut secret {
        *b = rng.below(256) as u8;
    }
    let key = secure::client_public(&secret);
    let hello = Hello {
        fingerprint: 0xF00D,
        room,
        name: "mallory",
        codec: InputCodec::PlayerInputs,
        key: Some(key),
        ..Hello::default()
    };
    socket
        .send(&padded(&[Message::Hello(hello.clone())]))
        .expect("send");
    let mut buf = vec![0u8; 65_536];
    let n = socket.recv(&mut buf).ok()?;
    let d = Datagram::decode(&buf[..n], Tick::ZERO).expect("plain");
    let Some((cookie, server_key)) = d.messages.into_iter().find_map(|m| match m {
        Message::Challenge { cookie, key } => Some((cookie.to_vec(), key?)),
        _ => None,
    }) else {
        panic!("no challenge with a key");
    };
    let binding = secure::hello_binding(&hello);
    let mut channel = SecureChannel::client(&secret, &server_key, &cookie, &binding).expect("key");
    let hello = Hello {
        cookie: Some(&cookie),
        resume: resume.map(|t| admission::resume_proof(&t, &cookie, Some(&key))),
        ..hello
    };
    socket
        .send(&padded(&[Message::Hello(hello)]))
        .expect("send");
    let n = socket.recv(&mut buf).ok()?;
    if !secure::is_sealed(&buf[..n]) {
        return Some(buf[..n].to_vec());
    }
    Some(channel.open(&mut buf[..n]).expect("sealed for us").to_vec())
}

#[test]
fn ten_thousand_guessed_resume_tokens_take_no_seat() {
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = 100;
    config.room_defaults.max_seats = 2;
    // Room for the guesses to run while player 0 is quiet (the default
    // rates, 5 replies and 20 handshakes a second per address, would make
    // this take over half an hour).
    config.room_defaults.abandon_after_secs = 60;
    config.limits.timeout_secs = 60;
    config.limits.stranger_replies_per_addr = 1_000_000;
    config.limits.stranger_replies_per_sec = 1_000_000;
    config.limits.handshakes_per_addr = 1_000_000;
    config.limits.handshakes_per_sec = 1_000_000;
    let relay = TestRelay::start(config);
    let clock = Clock::new();
    let mut players = honest(&relay, &clock);
    // Player 0 goes quiet for longer than resume_after_silence (1 s), so its
    // seat could be taken back, by whoever holds its token.
    play_without(&mut players, 0, &clock, Duration::from_millis(1_300));
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.connect(relay.udp).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut rng = SimRng::new(0x70CE);
    let started = Instant::now();
    let mut refusals = 0;
    for _ in 0..10_000 {
        let mut guess = [0u8; 16];
        for b in &mut guess {
            *b = rng.below(256) as u8;
        }
        let answer = try_token(&socket, &mut rng, guess);
        let d = Datagram::decode(&answer, Tick::ZERO).expect("an answer");
        for m in d.messages {
            match m {
                Message::Welcome(w) => panic!("a guess took a seat: {w:?}"),
                Message::Reject(RejectReason::BadToken) => refusals += 1,
                _ => {}
            }
        }
    }
    eprintln!(
        "10,000 guessed tokens in {:?}, every one refused",
        started.elapsed()
    );
    assert_eq!(refusals, 10_000);
    // Player 0 comes back on its own connection and the game goes on.
    still_fine(players, &clock);
}

#[test]
fn a_resume_token_moves_a_quiet_seat_once_and_never_a_live_one() {
    let relay = two_seat_relay();
    let clock = Clock::new();
    let mut players = honest(&relay, &clock);
    let token = players[0].session.welcome().expect("welcomed").token;
    let seat = players[0].session.seat();
    let mut config = client_config("room", "honest0-again");
    config.resume = Some(token);
    // While player 0 is alive, its token is refused.
    let mut early = Player::new(&relay, Kind::Udp, config.clone(), None, 30, &clock);
    let end = Instant::now() + Duration::from_secs(5);
    while early.session.closed().is_none() && Instant::now() < end {
        early.step(&clock);
        for p in &mut players {
            p.step(&clock);
        }
    }
    assert!(
        matches!(
            early.session.closed(),
            Some(CloseReason::Rejected(Rejection::SeatBusy))
        ),
        "{:?}",
        early.session.closed()
    );
    // Player 0's network goes away; it comes back from a new socket.
    play_without(&mut players, 0, &clock, Duration::from_millis(1_300));
    let mut back = Player::new(&relay, Kind::Udp, config.clone(), None, 31, &clock);
    let end = Instant::now() + Duration::from_secs(5);
    while !back.session.connected() && Instant::now() < end {
        back.step(&clock);
        players[1].step(&clock);
    }
    assert_eq!(back.session.seat(), seat, "the seat came back");
    let fresh = back.session.welcome().expect("welcomed").token;
    assert_ne!(fresh, token, "a token is spent by its use");
    // Once the new connection has shown it got its Welcome (any datagram
    // after it), the old token takes nothing: no seat is held for it.
    let end = Instant::now() + Duration::from_millis(600);
    while Instant::now() < end {
        back.step(&clock);
        players[1].step(&clock);
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut replay = Player::new(&relay, Kind::Udp, config, None, 32, &clock);
    let end = Instant::now() + Duration::from_secs(5);
    while replay.session.closed().is_none() && Instant::now() < end {
        replay.step(&clock);
        back.step(&clock);
        players[1].step(&clock);
    }
    assert_eq!(
        replay.session.closed(),
        Some(&CloseReason::Rejected(Rejection::BadToken))
    );
    // The resumed seat and the other player carry on together.
    let survivor = players.pop().expect("player 1");
    let mut pair = vec![back, survivor];
    let target = pair.iter().map(|p| p.hash.frames()).max().unwrap_or(0) + 100;
    play_until(&mut pair, &clock, Duration::from_secs(30), |p| {
        p.session.stats().next_tick.get() as u64 >= target
    });
}

const SECRET: &str = "the relay's ticket secret";

fn unix_in(secs: u64) -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        + secs
}

/// Connects `config` and returns how it ended up: connected, or refused.
fn outcome(
    relay: &TestRelay,
    kind: Kind,
    config: lockstep_core::sequenced::ClientConfig,
) -> Result<(), Rejection> {
    let clock = Clock::new();
    let mut p = Player::new(relay, kind, config, None, 40, &clock);
    let end = Instant::now() + Duration::from_secs(5);
    while !p.session.connected() && p.session.closed().is_none() && Instant::now() < end {
        p.step(&clock);
    }
    match p.session.closed() {
        Some(CloseReason::Rejected(r)) => Err(r.clone()),
        other => {
            assert!(p.session.connected(), "{other:?}");
            Ok(())
        }
    }
}

#[test]
fn a_ticket_opens_one_connection_in_its_own_role() {
    let mut config = RelayConfig::default();
    config.tickets.secret = Some(SECRET.into());
    let relay = TestRelay::start(config);
    let key = TicketKey::new(0, SECRET).expect("long enough");
    let claims = Claims {
        room: "vip",
        name: "alice",
        role: Role::Player,
        expiry: unix_in(60),
        relay: None,
    };
    let t = ticket::issue_random(&key, &claims).expect("randomness");
    let mut alice = client_config("vip", "alice");
    alice.ticket = t.clone();
    assert_eq!(outcome(&relay, Kind::Udp, alice.clone()), Ok(()));
    // The same ticket again, from another socket: spent.
    assert_eq!(outcome(&relay, Kind::Ws, alice), Err(Rejection::BadTicket));
    // A spectator's ticket does not seat a player, nor the other way round.
    let watch = ticket::issue_random(
        &key,
        &Claims {
            role: Role::Spectator,
            ..claims
        },
    )
    .expect("randomness");
    let mut as_player = client_config("vip", "alice");
    as_player.ticket = watch.clone();
    assert_eq!(
        outcome(&relay, Kind::Udp, as_player),
        Err(Rejection::BadTicket)
    );
    let mut as_spectator = client_config("vip", "alice");
    as_spectator.ticket = watch;
    as_spectator.spectator = true;
    assert_eq!(outcome(&relay, Kind::Udp, as_spectator), Ok(()));
    // Signed by a key the relay does not hold: refused.
    let stranger_key = TicketKey::new(7, SECRET).expect("long enough");
    let mut forged = client_config("vip", "bob");
    forged.ticket = ticket::issue_random(
        &stranger_key,
        &Claims {
            name: "bob",
            ..claims
        },
    )
    .expect("randomness");
    assert_eq!(
        outcome(&relay, Kind::Udp, forged),
        Err(Rejection::BadTicket)
    );
    assert!(
        relay
            .http_get("/metrics")
            .contains("lockstep_bad_tickets_total 3")
    );
}

#[test]
fn a_relay_refuses_to_start_with_a_short_ticket_secret() {
    let mut config = RelayConfig::default();
    config.tickets.secret = Some("short".into());
    let err = lockstep_relay::BackgroundRelay::start(config, lockstep_relay::Bind::loopback())
        .expect_err("refused");
    assert!(err.to_string().contains("at least 16"), "{err}");
}

/// The messages of an opened answer.
fn answers(bytes: &[u8]) -> Vec<String> {
    Datagram::decode(bytes, Tick::ZERO)
        .map(|d| d.messages.iter().map(|m| format!("{m:?}")).collect())
        .unwrap_or_default()
}

#[test]
fn one_address_opens_at_most_its_share_of_sealed_connections() {
    let relay = relay_with_limits(|l| {
        l.max_udp_per_addr = 4;
        l.handshakes_per_addr = 1_000;
        l.stranger_replies_per_addr = 1_000;
    });
    let clock = Clock::new();
    let players = honest(&relay, &clock);
    let socket = UdpSocket::bind("127.0.4.1:0").expect("bind");
    socket.connect(relay.udp).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut rng = SimRng::new(4);
    let mut welcomed = 0;
    let mut refused = 0;
    for i in 0..10 {
        let room = format!("mine{i}");
        let answer = handshake(&socket, &mut rng, &room, None).expect("an answer");
        let said = answers(&answer);
        if said.iter().any(|m| m.starts_with("Welcome")) {
            welcomed += 1;
        } else if said.iter().any(|m| m.contains("too many connections")) {
            refused += 1;
        }
    }
    assert_eq!((welcomed, refused), (4, 6));
    still_fine(players, &clock);
}

#[test]
fn sealed_handshakes_are_rate_limited_per_address() {
    let relay = relay_with_limits(|l| {
        l.handshakes_per_addr = 20;
        l.stranger_replies_per_addr = 1_000_000;
        l.stranger_replies_per_sec = 1_000_000;
    });
    let clock = Clock::new();
    let players = honest(&relay, &clock);
    let socket = UdpSocket::bind("127.0.4.2:0").expect("bind");
    socket.connect(relay.udp).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    // One cookie, then a thousand Hellos with it, each with a new key: each
    // would cost the relay an X25519.
    let mut rng = SimRng::new(5);
    let secret = [3u8; 32];
    let hello = Hello {
        fingerprint: 0xF00D,
        room: "room",
        name: "mallory",
        codec: InputCodec::PlayerInputs,
        key: Some(secure::client_public(&secret)),
        ..Hello::default()
    };
    socket
        .send(&padded(&[Message::Hello(hello.clone())]))
        .expect("send");
    let mut buf = vec![0u8; 65_536];
    let n = socket.recv(&mut buf).expect("challenge");
    let d = Datagram::decode(&buf[..n], Tick::ZERO).expect("plain");
    let cookie = d
        .messages
        .into_iter()
        .find_map(|m| match m {
            Message::Challenge { cookie, .. } => Some(cookie.to_vec()),
            _ => None,
        })
        .expect("cookie");
    let before = metric(&relay, "lockstep_handshakes_total");
    let started = Instant::now();
    for _ in 0..1_000 {
        let mut k = [0u8; 32];
        for b in &mut k {
            *b = rng.below(256) as u8;
        }
        let h = Hello {
            cookie: Some(&cookie),
            key: Some(secure::client_public(&k)),
            ..hello.clone()
        };
        socket.send(&padded(&[Message::Hello(h)])).expect("send");
    }
    // Let the relay read them all.
    let end = Instant::now() + Duration::from_secs(5);
    while metric(&relay, "lockstep_strangers_ignored_total") < 900 && Instant::now() < end {}
    let spent = metric(&relay, "lockstep_handshakes_total") - before;
    let secs = started.elapsed().as_secs_f64();
    eprintln!("1,000 keyed Hellos in {secs:.2} s: {spent} handshakes computed");
    // A burst of 20 and 20 a second after it.
    assert!(
        spent as f64 <= 20.0 + 20.0 * secs + 1.0,
        "{spent} in {secs:.2} s"
    );
    still_fine(players, &clock);
}

#[test]
fn a_websocket_hello_with_a_cookie_or_key_is_refused() {
    use lockstep_net::{Transport, WsClientTransport};
    let relay = relay();
    let mut ws = WsClientTransport::connect(
        &format!("ws://{}/", relay.ws),
        relay.ws,
        Duration::from_secs(5),
    )
    .expect("connect");
    let hello = Hello {
        fingerprint: 0xF00D,
        room: "room",
        cookie: Some(b"anyone's cookie"),
        key: Some([1; 32]),
        resume: Some(ResumeToken([2; 16])),
        ..Hello::default()
    };
    ws.send(WsClientTransport::SERVER, &padded(&[Message::Hello(hello)]))
        .expect("send");
    let mut buf = vec![0u8; 65_536];
    let end = Instant::now() + Duration::from_secs(5);
    let said = loop {
        if let Ok(Some((_, n))) = ws.recv(&mut buf) {
            break answers(&buf[..n]);
        }
        assert!(Instant::now() < end, "no answer");
        std::thread::yield_now();
    };
    assert!(
        said.iter()
            .any(|m| m.contains("cookies and keys are for UDP")),
        "{said:?}"
    );
}

fn relay_with_limits(edit: impl FnOnce(&mut lockstep_relay::Limits)) -> TestRelay {
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = 100;
    edit(&mut config.limits);
    TestRelay::start(config)
}

/// Steps `players` until `p` (one of them) says it was taken back, or 10 s.
fn until_reconnected(players: &mut [Player<lockstep_core::PlayerInputs>], p: usize, clock: &Clock) {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end
        && players[p].session.closed().is_none()
        && !players[p]
            .events
            .iter()
            .any(|e| matches!(e, lockstep_core::Event::Reconnected { .. }))
    {
        for pl in players.iter_mut() {
            pl.step(clock);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    assert!(
        players[p]
            .events
            .iter()
            .any(|e| matches!(e, lockstep_core::Event::Reconnected { kept: true, .. })),
        "{:?} {:?} {:?}",
        players[p].session.closed(),
        players[p].events,
        players[p].session.stats()
    );
}

/// A sealed UDP player reconnects on a new socket while its old connection
/// was heard a moment ago: refused `SeatBusy`, it starts its handshake over
/// (the relay forgets a refused sealed connection) until the old one is
/// quiet, then is taken back with its state (found by a walkthrough: the
/// retried Hello named a retired connection and was ignored for good).
#[test]
fn a_sealed_reconnect_refused_as_busy_retries_and_gets_in() {
    let relay = two_seat_relay();
    let clock = Clock::new();
    let mut players = honest(&relay, &clock);
    players[0].transport = common::transport(&relay, Kind::Udp, None, 40);
    let secret = lockstep_net::session_secret().expect("secret");
    players[0]
        .session
        .reconnect(
            lockstep_net::WsClientTransport::SERVER,
            Some(secret),
            clock.now(),
        )
        .expect("a seat to take back");
    until_reconnected(&mut players, 0, &clock);
    // It was refused as busy at least once on the way.
    let metrics = relay.http_get("/metrics");
    assert!(
        metrics.contains("lockstep_rejects_total ")
            && !metrics.contains("lockstep_rejects_total 0\n"),
        "{metrics}"
    );
    still_fine(players, &clock);
}

/// A WebSocket player's connection closes; it opens a new one and takes its
/// seat back with its state (found in review: the close released the seat
/// and the reconnect was refused `BadToken`).
#[test]
fn a_websocket_player_reconnects_after_its_socket_closes() {
    let relay = two_seat_relay();
    let clock = Clock::new();
    let mut players: Vec<_> = (0..2)
        .map(|i| {
            Player::new(
                &relay,
                Kind::Ws,
                client_config("room", &format!("ws{i}")),
                None,
                i + 1,
                &clock,
            )
        })
        .collect();
    play_until(&mut players, &clock, Duration::from_secs(20), |p| {
        p.hash.frames() >= 50
    });
    // The old socket closes; a moment later a new one opens (the relay
    // closes a WebSocket it refused, so the player waits until the close
    // has reached the relay rather than be refused as busy).
    let old = std::mem::replace(
        &mut players[0].transport,
        common::transport(&relay, Kind::Ws, None, 41),
    );
    drop(old);
    let end = Instant::now() + Duration::from_millis(200);
    while Instant::now() < end {
        players[1].step(&clock);
        std::thread::sleep(Duration::from_millis(1));
    }
    players[0]
        .session
        .reconnect(lockstep_net::WsClientTransport::SERVER, None, clock.now())
        .expect("a seat to take back");
    until_reconnected(&mut players, 0, &clock);
    still_fine(players, &clock);
}

/// A stranger's datagram is answered, if at all, with no more bytes than
/// it had: one that is not ours at all never, however large (the relay
/// once answered 1,300 bytes of anything with a 55-byte `Error`); one of
/// ours over the size limit with an `Error` cut to fit; one without a
/// `Hello` with an `Error`, when one fits.
#[test]
fn a_stranger_is_never_answered_with_more_than_it_sent() {
    use lockstep_core::wire::DatagramWriter;
    let relay = relay();
    let clock = Clock::new();
    let players = honest(&relay, &clock);
    let ours = |messages: &[Message<'_>], len: usize| {
        let mut out = Vec::new();
        let mut w = DatagramWriter::new(&mut out, Tick::ZERO, usize::MAX);
        for m in messages {
            w.push(m).expect("fits");
        }
        w.pad_to(len);
        w.finish();
        out
    };
    let ping = Message::Ping { stamp: 1 };
    let baits: Vec<(&str, Vec<u8>, Option<ErrorCode>)> = vec![
        ("not ours, large", vec![0x55; 1300], None),
        (
            "ours, over the limit",
            ours(std::slice::from_ref(&ping), 1300),
            Some(ErrorCode::TooLarge),
        ),
        ("no hello, tiny", ours(std::slice::from_ref(&ping), 0), None),
        // No Hello, however large: never answered (a dropped player
        // must stay free to time out and reconnect).
        ("no hello", ours(&[ping], 128), None),
    ];
    for (what, bait, expected) in baits {
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
        s.set_read_timeout(Some(Duration::from_millis(20)))
            .expect("timeout");
        s.send_to(&bait, relay.udp).expect("send");
        let mut answers = Vec::new();
        let mut buf = vec![0u8; 65_536];
        let end = Instant::now() + Duration::from_millis(300);
        while Instant::now() < end {
            if let Ok(n) = s.recv(&mut buf) {
                answers.push(buf[..n].to_vec());
            }
        }
        for a in &answers {
            assert!(
                a.len() <= bait.len(),
                "{what}: {} bytes for {}",
                a.len(),
                bait.len()
            );
        }
        let codes: Vec<Option<ErrorCode>> = answers
            .iter()
            .map(
                |a| match Datagram::decode(a, Tick::ZERO).map(|d| d.messages) {
                    Ok(m) => match m.first() {
                        Some(Message::Error { code, .. }) => Some(*code),
                        _ => None,
                    },
                    Err(_) => None,
                },
            )
            .collect();
        let wanted: Vec<Option<ErrorCode>> = expected.into_iter().map(Some).collect();
        assert_eq!(codes, wanted, "{what}");
    }
    still_fine(players, &clock);
}
