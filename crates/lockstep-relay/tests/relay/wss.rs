//! WebSocket over TLS (`wss://`): a relay with a certificate serves a TLS
//! client in the same room as a sealed UDP one, and they agree; a plain
//! `ws://` client, or one that does not trust the certificate, gets
//! nowhere.

use crate::common;
use common::{Kind, Player, TestRelay, client_config, play_until};
use lockstep_core::sequenced::ClientSession;
use lockstep_net::{Clock, WsClientTransport, tls_trusting};
use lockstep_relay::{RelayConfig, TlsFiles};
use std::time::Duration;

/// A self-signed certificate for `localhost`, written where the relay reads
/// it; returns the files and the certificate's PEM.
fn certificate(tag: &str) -> (TlsFiles, String) {
    let dir = std::env::temp_dir().join(format!("lockstep-wss-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("certificate");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).expect("write cert");
    std::fs::write(&key, ck.signing_key.serialize_pem()).expect("write key");
    (TlsFiles { cert, key }, ck.cert.pem())
}

#[test]
fn a_tls_websocket_client_plays_beside_a_udp_one() {
    let (files, pem) = certificate("play");
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = 100;
    config.tls = Some(files);
    let relay = TestRelay::start(config);
    let clock = Clock::new();
    let url = format!("wss://localhost:{}/", relay.ws.port());
    let tls = tls_trusting(pem.as_bytes()).expect("roots");
    let transport =
        WsClientTransport::connect_with_tls(&url, relay.ws, Duration::from_secs(5), tls)
            .expect("a TLS WebSocket");
    // A player whose transport is the TLS WebSocket (no seal: TLS is it).
    let config = client_config("room", "tls");
    let mut over_tls = Player::new(&relay, Kind::Udp, config.clone(), None, 1, &clock);
    over_tls.transport = Box::new(transport);
    over_tls.session =
        ClientSession::new(config, WsClientTransport::SERVER, clock.now()).expect("config");
    let udp = Player::new(
        &relay,
        Kind::Udp,
        client_config("room", "udp"),
        None,
        2,
        &clock,
    );
    let mut players = vec![over_tls, udp];
    for p in &mut players {
        p.frames_wanted = 150;
    }
    play_until(&mut players, &clock, Duration::from_secs(20), Player::done);
    assert_eq!(players[0].hash.value(), players[1].hash.value());
    assert!(players[0].session.seat().is_some() && players[1].session.seat().is_some());
}

#[test]
fn plain_or_untrusting_clients_get_nowhere_and_a_bad_certificate_stops_the_relay() {
    let (files, _) = certificate("refuse");
    let relay = TestRelay::start(RelayConfig {
        tls: Some(files.clone()),
        ..RelayConfig::default()
    });
    let plain = WsClientTransport::connect(
        &format!("ws://localhost:{}/", relay.ws.port()),
        relay.ws,
        Duration::from_secs(2),
    );
    assert!(plain.is_err(), "plain ws:// to a TLS listener");
    // Another certificate than the relay's: the client refuses it.
    let (_, other) = certificate("other");
    let untrusting = WsClientTransport::connect_with_tls(
        &format!("wss://localhost:{}/", relay.ws.port()),
        relay.ws,
        Duration::from_secs(2),
        tls_trusting(other.as_bytes()).expect("roots"),
    );
    assert!(
        untrusting.is_err(),
        "a certificate the client does not trust"
    );
    // A key that is not PEM: the relay says so before it listens.
    std::fs::write(&files.key, "not a key").expect("write");
    let config = RelayConfig {
        tls: Some(files),
        ..RelayConfig::default()
    };
    let err = lockstep_relay::BackgroundRelay::start(config, lockstep_relay::Bind::loopback())
        .expect_err("refused");
    assert!(err.to_string().starts_with("TLS: "), "{err}");
}
