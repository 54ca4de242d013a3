//! The relay end to end over real loopback sockets: UDP and WebSocket
//! clients in one room, clean and impaired, reach the same state.

use crate::common;
use common::{Kind, Player, TestRelay, client_config, play_until};
use lockstep_core::Event;
use lockstep_net::{Clock, Faults};
use lockstep_relay::{PolicyName, RelayConfig};
use std::time::Duration;

fn room_of_six(faults: Option<Faults>, frames: u64, limit: Duration) {
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = 100;
    let relay = TestRelay::start(config);
    let clock = Clock::new();
    let kinds = [
        Kind::Udp,
        Kind::Udp,
        Kind::Ws,
        Kind::Udp,
        Kind::Ws,
        Kind::Udp,
    ];
    let mut players: Vec<_> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut p = Player::new(
                &relay,
                *k,
                client_config("e2e", &format!("p{i}")),
                faults.clone(),
                i as u64 + 1,
                &clock,
            );
            p.frames_wanted = frames;
            p
        })
        .collect();
    play_until(&mut players, &clock, limit, Player::done);
    let first = players[0].hash.value();
    for p in &players {
        assert_eq!(p.hash.frames(), frames, "{}", p.name);
        assert_eq!(p.hash.value(), first, "{} ran different frames", p.name);
        assert!(
            !p.events.iter().any(|e| matches!(
                e,
                Event::Desync { .. } | Event::Closed { .. } | Event::Rejected { .. }
            )),
            "{}: {:?}",
            p.name,
            p.events
        );
    }
    let seats: Vec<_> = players.iter().filter_map(|p| p.session.seat()).collect();
    assert_eq!(seats.len(), 6, "six seats: {seats:?}");
    let metrics = relay.http_get("/metrics");
    assert!(metrics.contains("lockstep_ticks_total"), "{metrics}");
    let health = relay.http_get("/healthz");
    assert!(
        health.starts_with("HTTP/1.1 200") && health.contains("\nok: "),
        "{health}"
    );
    let report = relay.stop();
    assert!(report.ticks >= frames);
    assert_eq!(report.violations, 0);
}

#[test]
fn four_udp_and_two_websocket_clients_reach_tick_600_with_equal_hashes() {
    room_of_six(None, 600, Duration::from_secs(60));
}

#[test]
fn the_same_at_10_percent_loss_and_50_ms_latency() {
    let faults = Faults {
        loss: 0.10,
        latency: Duration::from_millis(50),
        jitter: Duration::from_millis(20),
        ..Faults::default()
    };
    room_of_six(Some(faults), 600, Duration::from_secs(120));
}

#[test]
fn a_distant_client_does_not_slow_a_deadline_room() {
    let mut config = RelayConfig::default();
    config.room_defaults.policy = PolicyName::Deadline;
    config.room_defaults.tick_rate = 60;
    let relay = TestRelay::start(config);
    let clock = Clock::new();
    let far = Faults {
        latency: Duration::from_millis(300),
        ..Faults::default()
    };
    let mut players: Vec<_> = (0..4)
        .map(|i| {
            let faults = (i == 0).then(|| far.clone());
            Player::new(
                &relay,
                Kind::Udp,
                client_config("deadline", &format!("p{i}")),
                faults,
                i + 1,
                &clock,
            )
        })
        .collect();
    // Everyone in and running.
    play_until(&mut players, &clock, Duration::from_secs(20), |p| {
        p.hash.frames() > 60
    });
    let start: Vec<u64> = players.iter().map(|p| p.hash.frames()).collect();
    let t0 = std::time::Instant::now();
    let window = Duration::from_secs(5);
    while t0.elapsed() < window {
        for p in players.iter_mut() {
            p.step(&clock);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let secs = t0.elapsed().as_secs_f64();
    let nominal = 60.0 * secs;
    for (i, p) in players.iter().enumerate().skip(1) {
        let ran = (p.hash.frames() - start[i]) as f64;
        assert!(
            (ran - nominal).abs() <= nominal * 0.02,
            "{} ran {ran} frames in {secs:.2} s; nominal {nominal:.0}",
            p.name
        );
    }
    // The distant player keeps up too, 300 ms behind.
    assert!(players[0].hash.frames() - start[0] > (nominal * 0.9) as u64);
}

#[test]
fn a_declared_room_opens_afresh_once_everyone_left() {
    let config: RelayConfig = toml::from_str(
        r#"
        [room_defaults]
        tick_rate = 100
        [[rooms]]
        name = "arena"
        history = 16
        "#,
    )
    .expect("config");
    let relay = TestRelay::start(config);
    let clock = Clock::new();
    let mut players: Vec<_> = (0..2)
        .map(|i| {
            Player::new(
                &relay,
                Kind::Udp,
                client_config("arena", &format!("p{i}")),
                None,
                i + 1,
                &clock,
            )
        })
        .collect();
    // Far past the 16-frame history: a joiner could no longer replay it.
    play_until(&mut players, &clock, Duration::from_secs(20), |p| {
        p.hash.frames() >= 100
    });
    // The room gauge has caught up (it is refreshed every second)...
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !relay.http_get("/metrics").contains("lockstep_rooms 1\n") {
        assert!(
            std::time::Instant::now() < end,
            "the room gauge never shows the room"
        );
        for p in &mut players {
            p.step(&clock);
        }
    }
    for p in &mut players {
        p.session.leave();
    }
    // ...and now shows the empty room closed.
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !relay.http_get("/metrics").contains("lockstep_rooms 0\n") {
        assert!(std::time::Instant::now() < end, "the empty room stays open");
        for p in &mut players {
            p.step(&clock);
        }
    }
    // The next client gets a new room from tick 0, not a refusal.
    let mut next = vec![Player::new(
        &relay,
        Kind::Udp,
        client_config("arena", "late"),
        None,
        9,
        &clock,
    )];
    play_until(&mut next, &clock, Duration::from_secs(10), |p| {
        p.hash.frames() >= 20
    });
    let w = next[0].session.welcome().copied().expect("welcomed");
    assert_eq!(w.start, lockstep_core::Tick::ZERO);
}
