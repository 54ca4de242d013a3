//! A room of opaque inputs (any `Input` but `PlayerInputs`: the relay holds
//! them as byte strings) with clients whose input is a plain `u8`, over
//! loopback UDP. The relay's chains run over encodings from the empty one,
//! a `u8` client's over values from `0`: the clients used to refuse the
//! relay's frames (an unchanged input marked changed, an empty input that
//! is no `u8`) and stop within 20 frames. They now play on, all equal.

use crate::common;
use common::{TestRelay, secret};
use lockstep_core::StreamHash;
use lockstep_core::sequenced::{ClientConfig, ClientSession};
use lockstep_net::{Buffers, Clock, UdpTransport, drive};
use lockstep_relay::{PolicyName, RelayConfig};
use std::time::{Duration, Instant};

fn room_of_u8_players(policy: PolicyName) {
    let mut config = RelayConfig::default();
    config.room_defaults.policy = policy;
    config.room_defaults.tick_rate = 100;
    let relay = TestRelay::start(config);
    let clock = Clock::new();
    let mut players: Vec<(ClientSession<u8>, UdpTransport, StreamHash, usize)> = (0..4)
        .map(|k| {
            let mut udp = UdpTransport::bind("127.0.0.1:0").expect("bind");
            let server = udp.add_peer(relay.udp);
            let config = ClientConfig {
                room: "opaque".into(),
                name: format!("p{k}"),
                secret: Some(secret()),
                ..ClientConfig::default()
            };
            let session = ClientSession::new(config, server, clock.now()).expect("config");
            (session, udp, StreamHash::new(), 0)
        })
        .collect();
    let mut buffers = Buffers::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut step = 0u64;
    while players.iter().any(|p| p.2.frames() < 300) {
        assert!(
            Instant::now() < deadline,
            "stuck: {:?}",
            players
                .iter()
                .map(|p| (p.2.frames(), p.3))
                .collect::<Vec<_>>()
        );
        for (k, p) in players.iter_mut().enumerate() {
            let d = drive(&mut p.0, &mut p.1, clock.now(), &mut buffers).expect("udp");
            p.3 += d.rejected;
            // Every value, zero (the neutral input) included, and repeats.
            let _ = p.0.commit_local(((step / 3 + k as u64) % 5) as u8);
            while let Some(f) = p.0.advance() {
                if p.2.frames() < 300 {
                    p.2.push(&f);
                }
            }
        }
        step += 1;
        // The pace of a game loop, not a wait for anything.
        std::thread::sleep(Duration::from_millis(1));
    }
    for p in &players {
        assert_eq!(p.3, 0, "a datagram refused");
        assert_eq!(p.2.value(), players[0].2.value(), "one stream");
    }
}

#[test]
fn u8_players_play_through_a_relay_that_waits_for_all() {
    room_of_u8_players(PolicyName::WaitForAll);
}

#[test]
fn u8_players_play_through_a_relay_on_the_clock() {
    room_of_u8_players(PolicyName::Deadline);
}
