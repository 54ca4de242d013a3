//! Relay failover over loopback UDP: a room with `failover` on shares its
//! roster (every player's address as the relay sees it), and its four
//! players each run a host-mode session against the relay. The relay
//! disappears mid-match (killed dead, or shut down with a goodbye); the
//! players carry the match on under the lowest seat, directly between
//! themselves, and end on the same stream.

use crate::common;
use common::{TestRelay, secret};
use lockstep_core::sequenced::{ClientConfig, HostedConfig, HostedSession};
use lockstep_core::{StreamHash, SystemEvent};
use lockstep_net::{Buffers, Clock, UdpTransport, drive_hosted};
use lockstep_relay::RelayConfig;
use std::time::{Duration, Instant};

struct Player {
    session: HostedSession<u32>,
    udp: UdpTransport,
    hash: StreamHash,
    /// When it first ran the frame saying who hosts now.
    host_changed: Option<Instant>,
}

/// How the relay goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// Killed dead.
    Killed,
    /// Shut down with a goodbye.
    Stopped,
    /// Told to stop while draining for a second: it drains until the
    /// deadline (the match does not end), then says goodbye.
    Drained,
}

/// Plays 120 frames through the relay, ends it as `end` says, and plays
/// 300 more without it. Returns the pause: from the relay's end to the
/// first frame the new host sealed.
fn match_outlives_its_relay(end: End) -> Duration {
    let mut config = RelayConfig::default();
    config.room_defaults.failover = true;
    if end == End::Drained {
        config.drain_secs = 1;
    }
    let relay = TestRelay::start(config);
    let clock = Clock::new();
    let mut players: Vec<Player> = (0..4)
        .map(|k| {
            let mut udp = UdpTransport::bind("127.0.0.1:0")
                .expect("bind")
                .accept_unknown(16);
            let server = udp.add_peer(relay.udp);
            let config = HostedConfig {
                client: ClientConfig {
                    room: "failover".into(),
                    name: format!("p{k}"),
                    secret: Some(secret()),
                    ..HostedConfig::default().client
                },
                ..HostedConfig::default()
            };
            Player {
                session: HostedSession::join(config, server, clock.now()).expect("config"),
                udp,
                hash: StreamHash::new(),
                host_changed: None,
            }
        })
        .collect();
    let mut relay = Some(relay);
    let mut buffers = Buffers::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut step = 0u32;
    let mut stopped: Option<Instant> = None;
    loop {
        let done: Vec<u64> = players.iter().map(|p| p.hash.frames()).collect();
        if stopped.is_none() && done.iter().all(|f| *f >= 120) {
            let r = relay.take().expect("running");
            let asked = Instant::now();
            let _ = if end == End::Killed {
                r.kill()
            } else {
                r.stop()
            };
            if end == End::Drained {
                // It drained to its deadline (the match never ended).
                let drained = asked.elapsed();
                assert!(drained >= Duration::from_secs(1), "{drained:?}");
            }
            stopped = Some(Instant::now());
        }
        if stopped.is_some() && done.iter().all(|f| *f >= 420) {
            break;
        }
        assert!(Instant::now() < deadline, "stuck at {done:?}");
        for (k, p) in players.iter_mut().enumerate() {
            drive_hosted(&mut p.session, &mut p.udp, clock.now(), &mut buffers).expect("udp");
            let _ = p.session.commit_local(step.wrapping_mul(31) ^ k as u32);
            while let Some(f) = p.session.advance() {
                if p.hash.frames() < 420 {
                    p.hash.push(&f);
                }
                if p.host_changed.is_none()
                    && f.events
                        .iter()
                        .any(|e| matches!(e, SystemEvent::HostChanged { .. }))
                {
                    p.host_changed = Some(Instant::now());
                }
            }
        }
        step += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    let first = players[0].hash.value();
    for p in &players {
        assert_eq!(p.hash.value(), first, "one stream");
    }
    let hosts = players.iter().filter(|p| p.session.hosting()).count();
    assert_eq!(hosts, 1, "one new host");
    let changed = players
        .iter()
        .filter_map(|p| p.host_changed)
        .min()
        .expect("the stream says who hosts now");
    changed - stopped.expect("stopped")
}

#[test]
fn players_carry_on_when_their_relay_is_killed() {
    let pause = match_outlives_its_relay(End::Killed);
    println!("takeover pause after the relay was killed: {pause:?}");
    assert!(pause < Duration::from_secs(3), "{pause:?}");
}

#[test]
fn players_carry_on_when_their_relay_shuts_down() {
    let pause = match_outlives_its_relay(End::Stopped);
    println!("takeover pause after the relay said goodbye: {pause:?}");
    assert!(pause < Duration::from_secs(2), "{pause:?}");
}

/// A drain whose match does not end by its deadline: the relay stops then,
/// and the failover room's players carry the match on.
#[test]
fn players_carry_on_when_their_relay_drains_to_its_deadline() {
    let pause = match_outlives_its_relay(End::Drained);
    println!("takeover pause after the drained relay stopped: {pause:?}");
    assert!(pause < Duration::from_secs(2), "{pause:?}");
}
