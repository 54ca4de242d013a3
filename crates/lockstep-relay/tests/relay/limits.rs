//! Connection caps, timeouts and floods over real sockets, each while
//! honest players play and must finish on equal hashes within a stated
//! bound.

use crate::common;
use common::{Kind, Player, TestRelay, client_config, honest, play_until};
use lockstep_core::{PlayerInputs, SystemEvent};
use lockstep_net::Clock;
use lockstep_relay::RelayConfig;
use std::io::Read;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

fn relay_with(edit: impl FnOnce(&mut RelayConfig)) -> TestRelay {
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = 100;
    edit(&mut config);
    TestRelay::start(config)
}

/// A TCP connection to `to` from `from_ip` (any 127.x address).
fn tcp_from(from_ip: &str, to: SocketAddr) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let from: SocketAddr = format!("{from_ip}:0").parse().expect("address");
    s.bind(&from.into()).expect("bind");
    s.connect(&to.into()).expect("connect");
    s.into()
}

/// Whether the server closed `s` within `wait`.
fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let end = Instant::now() + wait;
    let mut buf = [0u8; 512];
    while Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// Plays `players` `more` frames on; they must agree. Returns how long it
/// took.
fn play_on(players: &mut [Player<PlayerInputs>], clock: &Clock, more: u64) -> Duration {
    let took = common::play_on(players, clock, more, || {});
    assert_eq!(players[0].hash.value(), players[1].hash.value());
    took
}

#[test]
fn websocket_connection_caps_hold_in_total_and_per_address() {
    let relay = relay_with(|c| {
        c.limits.max_ws_connections = 6;
        c.limits.max_ws_per_addr = 4;
    });
    let clock = Clock::new();
    let mut players = honest(&relay, &clock);
    // Four from one address are held (waiting for a WebSocket handshake);
    // a fifth from it is closed at once.
    let mut held: Vec<TcpStream> = (0..4).map(|_| tcp_from("127.0.2.1", relay.ws)).collect();
    let mut fifth = tcp_from("127.0.2.1", relay.ws);
    assert!(
        closed_within(&mut fifth, Duration::from_secs(2)),
        "the per-address cap"
    );
    // Two more from another fill the total; a seventh from a third is closed.
    held.extend((0..2).map(|_| tcp_from("127.0.2.2", relay.ws)));
    let mut seventh = tcp_from("127.0.2.3", relay.ws);
    assert!(
        closed_within(&mut seventh, Duration::from_secs(2)),
        "the total cap"
    );
    assert!(!closed_within(&mut held[0], Duration::from_millis(100)));
    play_on(&mut players, &clock, 100);
    let metrics = relay.http_get("/metrics");
    assert!(metrics.contains("lockstep_ws_refused_total 2"), "{metrics}");
}

#[test]
fn a_silent_or_chatty_websocket_is_closed() {
    let relay = relay_with(|c| c.limits.ws_hello_timeout_secs = 1);
    let clock = Clock::new();
    let mut players = honest(&relay, &clock);
    let url = format!("ws://{}/", relay.ws);
    // Handshake done, then nothing: closed after the hello timeout.
    let (mut silent, _) = tokio_tungstenite::tungstenite::connect(&url).expect("connect");
    // Text is not our protocol: closed at once.
    let (mut chatty, _) = tokio_tungstenite::tungstenite::connect(&url).expect("connect");
    chatty
        .send(tokio_tungstenite::tungstenite::Message::Text(
            "hello?".into(),
        ))
        .expect("send");
    let started = Instant::now();
    play_on(&mut players, &clock, 150);
    for (what, ws) in [("silent", &mut silent), ("chatty", &mut chatty)] {
        let end = Instant::now() + Duration::from_secs(5);
        let closed = loop {
            match ws.read() {
                Ok(tokio_tungstenite::tungstenite::Message::Close(_)) | Err(_) => break true,
                Ok(_) => {}
            }
            if Instant::now() > end {
                break false;
            }
        };
        assert!(closed, "{what} websocket still open");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let metrics = relay.http_get("/metrics");
    assert!(metrics.contains("lockstep_ws_refused_total 2"), "{metrics}");
}

#[test]
fn a_closed_websocket_holds_nobody_up() {
    let relay = relay_with(|_| {});
    let clock = Clock::new();
    let mut players: Vec<Player<PlayerInputs>> = [Kind::Udp, Kind::Udp, Kind::Ws]
        .into_iter()
        .enumerate()
        .map(|(i, kind)| {
            Player::new(
                &relay,
                kind,
                client_config("room", &format!("p{i}")),
                None,
                i as u64 + 1,
                &clock,
            )
        })
        .collect();
    play_until(&mut players, &clock, Duration::from_secs(20), |p| {
        p.hash.frames() >= 50
    });
    let leaver = players.pop().expect("ws player");
    let seat = leaver.session.seat().expect("seated");
    let closed_at = Instant::now();
    let target = players[0].hash.frames() + 60;
    drop(leaver);
    // The seat is held for its resume token, but the room does not wait on
    // it: play goes on at once, not after the 10 s abandon timeout.
    play_until(&mut players, &clock, Duration::from_secs(20), |p| {
        p.hash.frames() >= target
    });
    let took = closed_at.elapsed();
    eprintln!("60 frames after a WebSocket closed took {took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(
        !players[0]
            .system
            .iter()
            .any(|(_, e, _)| *e == SystemEvent::Abandoned { player: seat }),
        "the seat is held, not abandoned"
    );
    play_on(&mut players, &clock, 100);
}

#[test]
fn a_udp_flood_at_ten_times_the_rate_limit_leaves_play_and_health_intact() {
    let relay = relay_with(|_| {});
    let clock = Clock::new();
    let mut players = honest(&relay, &clock);
    let target = relay.udp;
    // 4,000 datagrams a second (ten times a connection's limit) for 2 s,
    // from several addresses: junk, sealed-looking junk, and Hellos.
    let flood = std::thread::spawn(move || {
        let sockets: Vec<UdpSocket> = (1..=4)
            .map(|i| UdpSocket::bind(format!("127.0.3.{i}:0")).expect("bind"))
            .collect();
        let hello = common::padded(&[lockstep_core::wire::Message::Hello(Default::default())]);
        let mut sealed = vec![0u8; 200];
        sealed[..3].copy_from_slice(b"LS\x02");
        let payloads = [vec![0xAB; 300], sealed, hello];
        let mut sent = 0u64;
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(2) {
            for k in 0..40 {
                let s = &sockets[k % sockets.len()];
                let _ = s.send_to(&payloads[k % payloads.len()], target);
                sent += 1;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        sent
    });
    let took = play_on(&mut players, &clock, 300);
    let sent = flood.join().expect("flood");
    let health = relay.http_get("/healthz");
    eprintln!(
        "{sent} flood datagrams; 300 frames in {took:?}; healthz: {}",
        health.lines().last().unwrap_or("")
    );
    // 300 frames at 100 Hz is 3 s; the flood may cost a little, not more.
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
}

/// `/readyz` says whether the relay takes another player: ready while it
/// keeps up and has room, not ready (503, and why) once it holds
/// `max_connections`; `/healthz` stays healthy either way, and an unknown
/// path is a 404.
#[test]
fn readyz_turns_unready_at_the_connection_limit_and_healthz_stays_healthy() {
    let relay = relay_with(|c| c.limits.max_connections = 2);
    let status = |page: &str| page.lines().next().unwrap_or_default().to_owned();
    let ready = relay.http_get("/readyz");
    assert!(status(&ready).contains("200"), "{ready}");
    assert!(ready.contains("ready: 0 connections"), "{ready}");
    let clock = Clock::new();
    let mut players = honest(&relay, &clock);
    // The gauges are refreshed every second: poll until the page says so.
    let deadline = Instant::now() + Duration::from_secs(10);
    let full = loop {
        play_on(&mut players, &clock, 10);
        let page = relay.http_get("/readyz");
        if page.contains("full") || Instant::now() > deadline {
            break page;
        }
    };
    assert!(status(&full).contains("503"), "{full}");
    assert!(full.contains("full: 2 connections of 2"), "{full}");
    let health = relay.http_get("/healthz");
    assert!(status(&health).contains("200"), "{health}");
    assert!(status(&relay.http_get("/nowhere")).contains("404"));
    assert!(
        relay
            .http_get("/metrics")
            .contains("lockstep_connections 2")
    );
}
