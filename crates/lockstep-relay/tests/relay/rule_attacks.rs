//! Hostile and unlucky clients over real sockets: each gets the stated
//! error or refusal and is dropped, and the honest players' progress and
//! agreement are untouched.

use crate::common;
use common::{
    Kind, Player, Raw, TestRelay, Verdict, client_config, datagram, honest, padded, relay,
    still_fine,
};
use lockstep_core::sequenced::{CloseReason, Rejection};
use lockstep_core::wire::{
    self, ByeReason, ChainWriter, ErrorCode, Hello, InputCodec, InputRun, Inputs, List, Message,
};
use lockstep_core::{PlayerId, PlayerInputs, Tick};
use lockstep_net::Clock;
use lockstep_relay::RelayConfig;
use lockstep_relay::ticket::{self, Claims, Role, TicketKey};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn inputs_from(seat: PlayerId, start: Tick, n: usize) -> Vec<u8> {
    let mut c = ChainWriter::new();
    for _ in 0..n {
        c.push(&PlayerInputs::default().with_button(1, true), usize::MAX);
    }
    let mut chain = Vec::new();
    c.write(&mut chain);
    datagram(
        start,
        &[Message::Inputs(Inputs {
            acks: List::EMPTY,
            runs: (&[InputRun {
                seat,
                start,
                count: n as u32,
                back: 0,
                check: 0,
                chain: &chain,
            }])
                .into(),
        })],
    )
}

const FINGERPRINT: u64 = 0xF00D;

#[test]
fn garbage_is_ignored_and_a_truncated_hello_gets_malformed() {
    let relay = relay();
    let clock = Clock::new();
    let players = honest(&relay, &clock);
    let raw = Raw::new(&relay);
    // Not ours: whatever sent it would not understand an answer.
    raw.send(b"\x16\x03\x01 definitely not a lockstep datagram");
    assert_eq!(raw.recv_within(Duration::from_millis(300)), None);
    let hello = padded(&[Message::Hello(Hello {
        room: "room",
        name: "x",
        ..Hello::default()
    })]);
    raw.send(&hello[..hello.len() - 4]);
    assert!(matches!(
        raw.verdict(),
        Verdict::Error(ErrorCode::Malformed, _)
    ));
    still_fine(players, &clock);
}

#[test]
fn another_game_build_or_protocol_is_refused_in_words() {
    let relay = relay();
    let clock = Clock::new();
    let players = honest(&relay, &clock);
    let raw = Raw::new(&relay);
    raw.hello(Hello {
        fingerprint: 0xBAD,
        room: "room",
        codec: InputCodec::PlayerInputs,
        ..Hello::default()
    });
    let game = Rejection::GameMismatch {
        server: FINGERPRINT,
        client: 0xBAD,
    };
    assert!(game.to_string().starts_with("game build differs"));
    assert_eq!(raw.verdict(), Verdict::Reject(game));
    let mut next = datagram(Tick::ZERO, &[Message::Hello(Hello::default())]);
    next[2] = wire::VERSION + 1;
    raw.send_plain(&next);
    let protocol = Rejection::ProtocolMismatch {
        server: wire::VERSION,
        client: wire::VERSION + 1,
    };
    assert_eq!(
        protocol.to_string(),
        format!(
            "server runs protocol {}, you run {}",
            wire::VERSION,
            wire::VERSION + 1
        )
    );
    assert_eq!(raw.verdict(), Verdict::Reject(protocol));
    still_fine(players, &clock);
}

/// A relay of `Deadline` rooms at 100 Hz (a misbehaving client holds
/// nobody up), with two honest players already playing.
fn deadline_room() -> (TestRelay, Clock, Vec<Player<PlayerInputs>>) {
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = 100;
    config.room_defaults.policy = lockstep_relay::PolicyName::Deadline;
    let relay = TestRelay::start(config);
    let clock = Clock::new();
    let players = honest(&relay, &clock);
    (relay, clock, players)
}

/// Mallory joins for real, then misbehaves with `bad(seat, open)`.
fn mallory(bad: impl Fn(PlayerId) -> Vec<Vec<u8>>, code: ErrorCode) {
    let relay = relay();
    let clock = Clock::new();
    let players = honest(&relay, &clock);
    let raw = Raw::new(&relay);
    let seat = raw.join("room", FINGERPRINT).expect("mallory is seated");
    for d in bad(seat) {
        raw.send(&d);
    }
    match raw.verdict() {
        Verdict::Error(c, text) => assert_eq!(c, code, "{text}"),
        other => panic!("expected {code:?}, got {other:?}"),
    }
    still_fine(players, &clock);
    assert!(
        relay
            .http_get("/metrics")
            .contains("lockstep_violations_total 1")
    );
}

#[test]
fn a_spoofed_seat_is_dropped() {
    mallory(
        |_| vec![inputs_from(PlayerId(0), Tick::new(5), 1)],
        ErrorCode::Violation,
    );
}

#[test]
fn a_far_future_tick_is_dropped() {
    mallory(
        |seat| vec![inputs_from(seat, Tick::new(900_000), 1)],
        ErrorCode::Violation,
    );
}

#[test]
fn an_input_flood_is_dropped() {
    mallory(
        |seat| {
            // Twice the datagram limit's burst (400), sent at once.
            (0..800)
                .map(|k| inputs_from(seat, Tick::new(10 + (k % 5)), 8))
                .collect()
        },
        ErrorCode::RateLimited,
    );
}

#[test]
fn an_oversized_message_is_dropped() {
    mallory(|_| vec![vec![0x4C; 4000]], ErrorCode::TooLarge);
}

const SECRET: &str = "the relay's ticket secret";

#[test]
fn tickets_are_required_when_a_secret_is_set() {
    let mut config = RelayConfig::default();
    config.tickets.secret = Some(SECRET.into());
    let relay = TestRelay::start(config);
    let clock = Clock::new();
    // Without a ticket: refused.
    let mut nobody = Player::new(
        &relay,
        Kind::Udp,
        client_config("vip", "eve"),
        None,
        9,
        &clock,
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while nobody.session.closed().is_none() && Instant::now() < deadline {
        nobody.step(&clock);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        nobody.session.closed(),
        Some(&CloseReason::Rejected(Rejection::BadTicket))
    );
    // With one signed for this room and name: in.
    let expiry = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        + 60;
    let mut config = client_config("vip", "alice");
    let key = TicketKey::new(0, SECRET).expect("long enough");
    let claims = Claims {
        room: "vip",
        name: "alice",
        role: Role::Player,
        expiry,
        relay: None,
    };
    config.ticket = ticket::issue_random(&key, &claims).expect("randomness");
    let mut alice = Player::new(&relay, Kind::Ws, config, None, 10, &clock);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !alice.session.connected() && Instant::now() < deadline {
        alice.step(&clock);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(alice.session.connected(), "{:?}", alice.events);
}

#[test]
fn a_full_room_refuses_and_spectators_watch() {
    let mut config = RelayConfig::default();
    config.room_defaults.max_seats = 2;
    config.room_defaults.tick_rate = 100;
    let relay = TestRelay::start(config);
    let clock = Clock::new();
    let mut players = honest(&relay, &clock);
    let mut third = Player::new(
        &relay,
        Kind::Udp,
        client_config("room", "third"),
        None,
        7,
        &clock,
    );
    let mut config = client_config("room", "watcher");
    config.spectator = true;
    let mut watcher = Player::new(&relay, Kind::Ws, config, None, 8, &clock);
    let deadline = Instant::now() + Duration::from_secs(10);
    while (third.session.closed().is_none() || watcher.hash.frames() < 60)
        && Instant::now() < deadline
    {
        third.step(&clock);
        watcher.step(&clock);
        for p in &mut players {
            p.step(&clock);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    assert_eq!(
        third.session.closed(),
        Some(&CloseReason::Rejected(Rejection::RoomFull))
    );
    assert!(watcher.session.connected() && watcher.session.seat().is_none());
    assert!(
        watcher.hash.frames() >= 60,
        "the spectator watches from tick 0"
    );
}

#[test]
fn shutdown_tells_every_client_goodbye() {
    let relay = relay();
    let clock = Clock::new();
    let mut players = honest(&relay, &clock);
    let report = relay.stop();
    assert_eq!(report.said_goodbye, 2);
    let deadline = Instant::now() + Duration::from_secs(5);
    while players.iter().any(|p| p.session.closed().is_none()) && Instant::now() < deadline {
        for p in &mut players {
            p.step(&clock);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    for p in &players {
        assert!(
            matches!(
                p.session.closed(),
                Some(CloseReason::Bye(ByeReason::Shutdown, _))
            ),
            "{}: {:?}",
            p.name,
            p.session.closed()
        );
    }
}

/// Runs of Mallory's own seat coded against inputs it never sent (or
/// sent and then pushed out of the room's reach with inputs stamped far
/// ahead): the relay skips them without an error; Mallory gains nothing,
/// and the honest players play on in agreement. A reference out of the
/// protocol's reach is malformed.
#[test]
fn input_runs_coded_against_inputs_never_sent_are_skipped() {
    let (relay, clock, players) = deadline_room();
    let raw = Raw::new(&relay);
    let seat = raw.join("room", FINGERPRINT).expect("mallory is seated");
    let mut c = ChainWriter::after(PlayerInputs::default().with_button(3, true));
    c.push(&PlayerInputs::default(), usize::MAX);
    let mut chain = Vec::new();
    c.write(&mut chain);
    for k in 0..200u32 {
        let start = Tick::new(40 + k);
        let d = datagram(
            start,
            &[Message::Inputs(Inputs {
                acks: List::EMPTY,
                runs: (&[InputRun {
                    seat,
                    start,
                    count: 1,
                    back: 1 + k % wire::MAX_INPUT_BACK,
                    check: k as u8,
                    chain: &chain,
                }])
                    .into(),
            })],
        );
        raw.send(&d);
    }
    still_fine(players, &clock);
    assert!(
        relay
            .http_get("/metrics")
            .contains("lockstep_violations_total 0")
    );
}

#[test]
fn an_input_reference_out_of_reach_is_malformed() {
    mallory(
        |seat| {
            let mut c = ChainWriter::new();
            c.push(&PlayerInputs::default(), usize::MAX);
            let mut chain = Vec::new();
            c.write(&mut chain);
            let start = Tick::new(200);
            // No writer sends it: the farthest reach, one further by hand
            // (`count 1, back 64` becomes `count 1, back 65`).
            let mut d = datagram(
                start,
                &[Message::Inputs(Inputs {
                    acks: List::EMPTY,
                    runs: (&[InputRun {
                        seat,
                        start,
                        count: 1,
                        back: wire::MAX_INPUT_BACK,
                        check: 0,
                        chain: &chain,
                    }])
                        .into(),
                })],
            );
            let at = d
                .windows(2)
                .rposition(|w| w == [1, 64])
                .expect("count and back");
            d[at + 1] = 65;
            vec![d]
        },
        ErrorCode::Malformed,
    );
}

/// Mallory's `Inputs` with one input per tick of `ticks` (each its own
/// run, coded against nothing) and `floor` as its own seat's ack.
fn inputs_with_floor(seat: PlayerId, ticks: &[Tick], floor: Option<(PlayerId, Tick)>) -> Vec<u8> {
    let mut c = ChainWriter::new();
    c.push(&PlayerInputs::default().with_button(2, true), usize::MAX);
    let mut chain = Vec::new();
    c.write(&mut chain);
    let runs: Vec<InputRun<'_>> = ticks
        .iter()
        .map(|&start| InputRun {
            seat,
            start,
            count: 1,
            back: 0,
            check: 0,
            chain: &chain,
        })
        .collect();
    let acks: Vec<(PlayerId, Tick)> = floor.into_iter().collect();
    datagram(
        ticks.first().copied().unwrap_or(Tick::ZERO),
        &[Message::Inputs(Inputs {
            acks: (&acks).into(),
            runs: (&runs).into(),
        })],
    )
}

#[test]
fn a_floor_for_another_seat_is_a_violation() {
    mallory(
        |seat| {
            let other = PlayerId(seat.0 ^ 1);
            vec![inputs_with_floor(seat, &[], Some((other, Tick::new(5))))]
        },
        ErrorCode::Violation,
    );
}

#[test]
fn a_floor_past_the_horizon_is_a_violation() {
    mallory(
        |seat| {
            vec![inputs_with_floor(
                seat,
                &[],
                Some((seat, Tick::new(1_000_000))),
            )]
        },
        ErrorCode::Violation,
    );
}

/// Inputs out of order, with a gap never filled: the relay holds what came
/// and acknowledges only up to the gap (a client is never told an input
/// arrived that did not), until the client's floor gives the gap up; a
/// floor going back changes nothing. Honest players in the same room play
/// on undisturbed.
#[test]
fn inputs_past_a_gap_are_held_and_acknowledged_only_up_to_it() {
    let (relay, clock, players) = deadline_room();
    let raw = Raw::new(&relay);
    raw.hello(Hello {
        fingerprint: FINGERPRINT,
        room: "room",
        name: "mallory",
        codec: InputCodec::PlayerInputs,
        ..Hello::default()
    });
    let (seat, from) = raw
        .first(|m| match m {
            Message::Welcome(w) => Some((w.seat?, w.tick.saturating_add(w.delay))),
            _ => None,
        })
        .expect("mallory is seated");
    let t = |k: u32| from.saturating_add(k);
    let ack = |raw: &Raw| {
        raw.first(|m| match m {
            Message::Inputs(i) => i.acks.iter().find(|(s, _)| *s == seat).map(|(_, t)| t),
            _ => None,
        })
    };
    // Every tick but the second, in reverse order (within the horizon):
    // held, acknowledged up to the gap.
    let late: Vec<Tick> = (2..6).rev().map(t).chain([t(0)]).collect();
    raw.send(&inputs_with_floor(seat, &late, None));
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen = None;
    while Instant::now() < deadline && seen != Some(t(1)) {
        seen = ack(&raw);
        assert!(
            seen.is_none_or(|a| a <= t(1)),
            "acknowledged past the gap: {seen:?}"
        );
    }
    assert_eq!(seen, Some(t(1)));
    // A floor behind changes nothing; one past the gap gives it up, and
    // the acknowledgement moves over everything held after it.
    raw.send(&inputs_with_floor(seat, &[], Some((seat, t(0)))));
    raw.send(&inputs_with_floor(seat, &[], Some((seat, t(2)))));
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && seen != Some(t(6)) {
        seen = ack(&raw);
    }
    assert_eq!(seen, Some(t(6)));
    still_fine(players, &clock);
    assert!(
        relay
            .http_get("/metrics")
            .contains("lockstep_violations_total 0")
    );
}
