//! Per-datagram identity over real sockets: once a UDP client's datagrams
//! are sealed, a datagram forged with its source address (a `Bye`, inputs,
//! garbage sealed under its connection id) is dropped and the victim plays
//! on; in plain mode the same forgery ends the victim's connection, which
//! is why plain mode is off by default. A sealed client whose address
//! changes (NAT rebinding) keeps its connection.
//!
//! The forger sends from a clone of the victim's own socket: to the relay
//! that is exactly a datagram with a forged source address.

use crate::common;
use common::{Player, TestRelay, client_config, datagram, play_until, still_fine};
use lockstep_core::sequenced::{ClientConfig, ClientSession, CloseReason};
use lockstep_core::wire::{ByeReason, ChainWriter, InputRun, Inputs, List, Message};
use lockstep_core::{PlayerId, PlayerInputs, Tick, secure};
use lockstep_net::{Clock, UdpTransport, WsClientTransport};
use lockstep_relay::RelayConfig;
use std::net::UdpSocket;
use std::time::Duration;

thread_local! {
    /// What the victim of this test thread sent, as a watcher would see it.
    static SENT: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>> = Default::default();
}

fn relay(plain_udp: bool) -> TestRelay {
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = 100;
    config.plain_udp = plain_udp;
    TestRelay::start(config)
}

/// A player on a socket the test keeps a clone of.
fn victim(
    relay: &TestRelay,
    name: &str,
    sealed: bool,
    clock: &Clock,
) -> (Player<PlayerInputs>, UdpSocket) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.connect(relay.udp).expect("connect");
    let forger = socket.try_clone().expect("clone");
    let mut inner = UdpTransport::from_socket(socket).expect("socket");
    inner.add_peer(relay.udp);
    let transport = common::Tap {
        inner,
        sent: SENT.with(|s| s.clone()),
    };
    let config = ClientConfig {
        secret: sealed.then(common::secret),
        ..client_config("room", name)
    };
    let mut p = Player::new(relay, common::Kind::Udp, config.clone(), None, 3, clock);
    p.transport = Box::new(transport);
    // A fresh session on the kept socket (the first one never sent).
    p.session = ClientSession::new(config, WsClientTransport::SERVER, clock.now()).expect("config");
    (p, forger)
}

fn forgeries(seat: PlayerId) -> Vec<Vec<u8>> {
    let mut chain = ChainWriter::new();
    chain.push(&PlayerInputs::default().with_button(3, true), usize::MAX);
    let mut bytes = Vec::new();
    chain.write(&mut bytes);
    let mut sealed_garbage = vec![0u8; 80];
    sealed_garbage[..2].copy_from_slice(&secure::SEALED_MAGIC);
    sealed_garbage[2] = lockstep_core::wire::VERSION;
    vec![
        datagram(
            Tick::ZERO,
            &[Message::Bye {
                reason: ByeReason::Leaving,
                text: "",
            }],
        ),
        datagram(
            Tick::new(60),
            &[Message::Inputs(Inputs {
                acks: List::EMPTY,
                runs: (&[InputRun {
                    seat,
                    start: Tick::new(60),
                    count: 1,
                    back: 0,
                    check: 0,
                    chain: &bytes,
                }])
                    .into(),
            })],
        ),
        sealed_garbage,
    ]
}

fn two_players(
    relay: &TestRelay,
    sealed: bool,
    clock: &Clock,
) -> (Vec<Player<PlayerInputs>>, UdpSocket) {
    let (v, forger) = victim(relay, "victim", sealed, clock);
    let other = Player::new(
        relay,
        common::Kind::Udp,
        client_config("room", "other"),
        None,
        4,
        clock,
    );
    let mut players = vec![v, other];
    play_until(&mut players, clock, Duration::from_secs(20), |p| {
        p.hash.frames() >= 50
    });
    (players, forger)
}

#[test]
fn forged_datagrams_from_a_sealed_players_address_change_nothing() {
    let relay = relay(false);
    let clock = Clock::new();
    let (players, forger) = two_players(&relay, true, &clock);
    assert!(
        players[0].session.sealed(),
        "the victim's datagrams are sealed"
    );
    let seat = players[0].session.seat().expect("seated");
    for f in forgeries(seat) {
        for _ in 0..20 {
            forger.send(&f).expect("send");
        }
    }
    still_fine(players, &clock);
    let metrics = relay.http_get("/metrics");
    assert!(
        metrics.contains("lockstep_unauthenticated_total 20"),
        "the sealed garbage was counted and dropped: {metrics}"
    );
}

#[test]
fn in_plain_mode_a_forged_bye_ends_the_victims_connection() {
    let relay = relay(true);
    let clock = Clock::new();
    let (mut players, forger) = two_players(&relay, false, &clock);
    assert!(!players[0].session.sealed());
    let bye = &forgeries(PlayerId(0))[0];
    forger.send(bye).expect("send");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while players[0].session.closed().is_none() && std::time::Instant::now() < deadline {
        for p in &mut players {
            p.step(&clock);
        }
    }
    assert!(
        matches!(players[0].session.closed(), Some(CloseReason::Bye(..))),
        "{:?}",
        players[0].session.closed()
    );
}

#[test]
fn a_sealed_connection_follows_its_client_to_a_new_address() {
    let relay = relay(false);
    let clock = Clock::new();
    let (mut players, _) = two_players(&relay, true, &clock);
    // The victim's NAT gives it a new port: same session, new socket.
    let mut moved = UdpTransport::bind("127.0.0.1:0").expect("bind");
    moved.add_peer(relay.udp);
    players[0].transport = Box::new(moved);
    let target = players.iter().map(|p| p.hash.frames()).max().unwrap_or(0) + 150;
    for p in &mut players {
        p.frames_wanted = target;
    }
    play_until(&mut players, &clock, Duration::from_secs(30), Player::done);
    assert_eq!(players[0].hash.value(), players[1].hash.value());
    assert!(players[0].session.closed().is_none());
}

#[test]
fn a_watched_plain_hello_replayed_with_messages_added_changes_nothing() {
    let relay = relay(false);
    let clock = Clock::new();
    let (players, forger) = two_players(&relay, true, &clock);
    // The victim's Hello that carried the cookie, as seen on the path.
    let seen: Vec<Vec<u8>> = SENT.with(|s| s.lock().map(|v| v.clone()).unwrap_or_default());
    let hello_bytes = seen
        .iter()
        .find(|d| {
            !secure::is_sealed(d)
                && lockstep_core::wire::Datagram::decode(d, Tick::ZERO).is_ok_and(|d| {
                    d.messages
                        .iter()
                        .any(|m| matches!(m, Message::Hello(h) if h.cookie.is_some()))
                })
        })
        .expect("the victim's Hello with its cookie")
        .clone();
    let d = lockstep_core::wire::Datagram::decode(&hello_bytes, Tick::ZERO).expect("decodes");
    let Some(Message::Hello(hello)) = d
        .messages
        .into_iter()
        .find(|m| matches!(m, Message::Hello(_)))
    else {
        panic!("a hello");
    };
    // The same Hello with inputs for another seat, and a pause, appended;
    // and the captured bytes replayed 500 times (a rate-limit kick).
    let inputs_bytes = forgeries(PlayerId(1)).remove(1);
    let inputs =
        lockstep_core::wire::Datagram::decode(&inputs_bytes, Tick::new(60)).expect("decodes");
    let mut forged = Vec::new();
    let mut w = lockstep_core::wire::DatagramWriter::new(&mut forged, Tick::new(60), 1200);
    w.push(&Message::Hello(hello)).expect("fits");
    for m in &inputs.messages {
        w.push(m).expect("fits");
    }
    w.push(&Message::Pause {
        frame: Tick::new(5_000),
    })
    .expect("fits");
    w.pad_to(lockstep_core::wire::MIN_HELLO_DATAGRAM);
    w.finish();
    forger.send(&forged).expect("send");
    for _ in 0..500 {
        forger.send(&hello_bytes).expect("send");
    }
    still_fine(players, &clock);
    let metrics = relay.http_get("/metrics");
    assert!(metrics.contains("lockstep_violations_total 0"), "{metrics}");
}

#[test]
fn an_authentic_datagram_from_a_forged_address_does_not_aim_the_room_there() {
    let relay = relay(false);
    let clock = Clock::new();
    let players = common::honest(&relay, &clock);
    // A player who holds its own keys joins, and never acknowledges a frame
    // (so the room would keep sending it everything).
    let attacker = common::Raw::new(&relay);
    attacker.join("room", 0xF00D).expect("seated");
    // A datagram sealed under its keys, sent "from" a victim's address.
    let victim = UdpSocket::bind("127.0.6.1:0").expect("bind");
    let sealed = attacker.seal(&datagram(Tick::ZERO, &[Message::Ping { stamp: u32::MAX }]));
    victim.send_to(&sealed, relay.udp).expect("send");
    let got = std::thread::spawn(move || {
        victim
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        let mut buf = vec![0u8; 65_536];
        let (mut bytes, mut datagrams) = (0, 0);
        let end = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < end {
            if let Ok(n) = victim.recv(&mut buf) {
                bytes += n;
                datagrams += 1;
            }
        }
        (bytes, datagrams)
    });
    still_fine(players, &clock);
    let (bytes, datagrams) = got.join().expect("victim");
    eprintln!(
        "forged source: {} bytes in, {bytes} bytes in {datagrams} datagrams to the victim",
        sealed.len()
    );
    // One probe at most, no larger than a few times what was sent.
    assert!(
        datagrams <= 1 && bytes <= 3 * sealed.len(),
        "{bytes} bytes in {datagrams}"
    );
}

/// The session's datagrams out, to `socket`; returns them.
fn flush_out(
    s: &mut ClientSession<PlayerInputs>,
    socket: &UdpSocket,
    clock: &Clock,
) -> Vec<Vec<u8>> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    s.handle_timeout(clock.now());
    while let Some(t) = s.poll_transmit(&mut buf) {
        socket.send(&buf[..t.len]).expect("send");
        out.push(buf[..t.len].to_vec());
    }
    out
}

/// Everything the relay sends `socket` within `wait`.
fn drain(socket: &UdpSocket, wait: Duration) -> Vec<Vec<u8>> {
    let deadline = std::time::Instant::now() + wait;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while std::time::Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
    }
    got
}

/// A sealed client whose first Hellos went unanswered long enough for the
/// relay's cookie to change second, and that took both challenges in turn
/// (the Welcome of the first handshake lost): one connection, one seat. The
/// relay once opened a second connection under the second cookie and
/// seated the client twice: at 10% loss a room of 8 turned its last player
/// away as full, and a room waiting for all would wait on a seat nobody
/// plays.
#[test]
fn a_client_taking_a_later_challenge_keeps_one_seat() {
    let relay = relay(false);
    let clock = Clock::new();
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.connect(relay.udp).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .expect("timeout");
    let config = ClientConfig {
        secret: Some(common::secret()),
        ..client_config("room", "twice")
    };
    let mut s = ClientSession::<PlayerInputs>::new(config, WsClientTransport::SERVER, clock.now())
        .expect("config");
    let hello = flush_out(&mut s, &socket, &clock).pop().expect("a hello");
    // Its Hello again until a challenge with another cookie comes back.
    let mut challenges: Vec<Vec<u8>> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while challenges.len() < 2 {
        assert!(std::time::Instant::now() < deadline, "no second cookie");
        socket.send(&hello).expect("send");
        for c in drain(&socket, Duration::from_millis(50)) {
            if !challenges.contains(&c) {
                challenges.push(c);
            }
        }
    }
    // The first challenge taken, its Hello reaches the relay, the Welcome
    // is lost; then the second.
    s.handle_datagram(WsClientTransport::SERVER, &challenges[0], clock.now())
        .expect("a challenge");
    flush_out(&mut s, &socket, &clock);
    drain(&socket, Duration::from_millis(200));
    assert!(s.seat().is_none());
    s.handle_datagram(WsClientTransport::SERVER, &challenges[1], clock.now())
        .expect("a challenge");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while s.seat().is_none() {
        assert!(std::time::Instant::now() < deadline, "never seated");
        flush_out(&mut s, &socket, &clock);
        for d in drain(&socket, Duration::from_millis(20)) {
            let _ = s.handle_datagram(WsClientTransport::SERVER, &d, clock.now());
        }
    }
    assert_eq!(s.seat(), Some(PlayerId(0)), "its first seat, on new keys");
    // The next player gets the next seat: no seat was taken twice.
    let mut other = Player::new(
        &relay,
        common::Kind::Udp,
        client_config("room", "next"),
        None,
        9,
        &clock,
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while other.session.seat().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the next player never seated"
        );
        other.step(&clock);
        flush_out(&mut s, &socket, &clock);
        for d in drain(&socket, Duration::from_millis(5)) {
            let _ = s.handle_datagram(WsClientTransport::SERVER, &d, clock.now());
        }
    }
    assert_eq!(other.session.seat(), Some(PlayerId(1)));
    assert!(s.closed().is_none());
}
