//! Griefers inside a room, over real sockets: each is seated (or watching)
//! with sealed datagrams like any player, and abuses a rule instead of the
//! wire. The honest players must finish on equal hashes within a stated
//! bound of extra stall.

use crate::common;
use common::{
    Kind, Player, Raw, TestRelay, client_config, datagram, honest, play_on, play_until, still_fine,
};
use lockstep_core::wire::{Checkpoint, Message};
use lockstep_core::{Event, PlayerInputs, SystemEvent, Tick};
use lockstep_net::Clock;
use lockstep_relay::RelayConfig;
use std::time::{Duration, Instant};

const FINGERPRINT: u64 = 0xF00D;

fn relay_with(edit: impl FnOnce(&mut RelayConfig)) -> TestRelay {
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = 100;
    edit(&mut config);
    TestRelay::start(config)
}

#[test]
fn a_player_that_only_keeps_its_connection_alive_is_abandoned() {
    // abandon_after 1 s: the griefer holds the room up for about that long.
    let relay = relay_with(|c| c.room_defaults.abandon_after_secs = 1);
    let clock = Clock::new();
    let mut players = honest(&relay, &clock);
    let griefer = Raw::new(&relay);
    let seat = griefer.join("room", FINGERPRINT).expect("seated");
    let joined = Instant::now();
    let mut last = Instant::now();
    play_on(&mut players, &clock, 200, || {
        if last.elapsed() > Duration::from_millis(50) {
            griefer.send(&datagram(Tick::ZERO, &[]));
            last = Instant::now();
        }
    });
    let gone = players[0]
        .system
        .iter()
        .find(|(_, e, _)| *e == SystemEvent::Abandoned { player: seat });
    let Some((tick, _, at)) = gone else {
        panic!("the griefer was not abandoned: {:?}", players[0].system);
    };
    let held = at.duration_since(joined);
    eprintln!("keepalive-only griefer abandoned at {tick}, the room held {held:?}");
    // Its keepalives bought it nothing: abandoned after abandon_after of no
    // input (not the 15 s connection timeout), and no later.
    assert!(
        held >= Duration::from_millis(900) && held < Duration::from_millis(1_600),
        "{held:?}"
    );
    assert_eq!(players[0].hash.value(), players[1].hash.value());
}

#[test]
fn a_pause_griefer_gets_its_budget_and_no_more() {
    // Each pause lasts at most 1 s, and a seat may ask three times.
    let relay = relay_with(|c| {
        c.room_defaults.max_pause_secs = 1;
        c.room_defaults.pauses_per_seat = 3;
    });
    let clock = Clock::new();
    let mut players = honest(&relay, &clock);
    // It plays like anyone, and asks for a pause every 20 ms.
    let mut griefer = Player::new(
        &relay,
        Kind::Udp,
        client_config("room", "pauser"),
        None,
        9,
        &clock,
    );
    let mut asked = 0u32;
    let mut last = Instant::now();
    let took = play_on(&mut players, &clock, 400, || {
        griefer.step(&clock);
        if last.elapsed() > Duration::from_millis(20) && griefer.session.connected() {
            let _ = griefer.session.request_pause();
            asked += 1;
            last = Instant::now();
        }
    });
    let pauses: Vec<_> = griefer
        .events
        .iter()
        .filter(|e| matches!(e, Event::Paused { .. }))
        .collect();
    eprintln!(
        "400 frames, {asked} pause requests, {} pauses: {took:?}",
        pauses.len()
    );
    assert!(asked > 50);
    assert!((1..=3).contains(&pauses.len()), "{:?}", griefer.events);
    // 4 s of play and three pauses of at most 1 s.
    assert!(took < Duration::from_secs(4 + 3 + 2), "{took:?}");
    assert_eq!(players[0].hash.value(), players[1].hash.value());
}

#[test]
fn a_spectator_cannot_plant_a_checksum() {
    let relay = relay_with(|_| {});
    let clock = Clock::new();
    let mut players = honest(&relay, &clock);
    let watcher = Raw::new(&relay);
    watcher.hello(lockstep_core::wire::Hello {
        fingerprint: FINGERPRINT,
        room: "room",
        name: "planter",
        spectator: true,
        codec: lockstep_core::wire::InputCodec::PlayerInputs,
        ..Default::default()
    });
    // Bogus checkpoints for every interval the honest players will close,
    // repeated, so each reaches the relay as soon as its tick is sealed:
    // before the honest players' own.
    let plants: Vec<Vec<u8>> = (0..80u32)
        .collect::<Vec<_>>()
        .chunks(4)
        .map(|ks| {
            let msgs: Vec<Message<'_>> = ks
                .iter()
                .map(|k| {
                    let tick = Tick::new(8 * k + 7);
                    let full = tick.get() % 64 == 63;
                    Message::Checkpoint(Checkpoint {
                        tick,
                        full,
                        value: if full { 0xBAD } else { 0xBA },
                        ack: None,
                    })
                })
                .collect();
            datagram(Tick::ZERO, &msgs)
        })
        .collect();
    let mut last = Instant::now();
    play_on(&mut players, &clock, 300, || {
        if last.elapsed() > Duration::from_millis(20) {
            for plant in &plants {
                watcher.send(plant);
            }
            last = Instant::now();
        }
    });
    still_fine(players, &clock);
}

#[test]
fn one_lying_player_is_outvoted() {
    let relay = relay_with(|_| {});
    let clock = Clock::new();
    let mut players: Vec<Player<PlayerInputs>> = (0..3)
        .map(|i| {
            Player::new(
                &relay,
                Kind::Udp,
                client_config("room", &format!("p{i}")),
                None,
                i + 1,
                &clock,
            )
        })
        .collect();
    players[2].lie_about_checksums = true;
    play_until(&mut players, &clock, Duration::from_secs(20), |p| {
        p.hash.frames() >= 200
    });
    let liar = players.pop().expect("liar");
    assert!(
        liar.events
            .iter()
            .any(|e| matches!(e, Event::Desync { .. })),
        "the liar is told it differs from the majority"
    );
    still_fine(players, &clock);
    let metrics = relay.http_get("/metrics");
    assert!(
        !metrics.contains("lockstep_desync_reports_total 0"),
        "{metrics}"
    );
}
