//! Host mode over loopback UDP: four players, the host's process gone at a
//! random tick (its session and socket dropped, no goodbye; the tick is
//! printed); the other three carry the match on under one of them and end
//! on the same stream. The takeover pause (from the crash to the first
//! frame the new host runs after it) is printed and bounded.

use lockstep_core::sequenced::{HostedConfig, HostedSession};
use lockstep_core::{StreamHash, SystemEvent};
use lockstep_net::{Buffers, Clock, UdpTransport, drive_hosted};
use std::time::{Duration, Instant};

struct Player {
    session: HostedSession<u32>,
    udp: UdpTransport,
    hash: StreamHash,
    /// When it first ran the frame saying who hosts now.
    host_changed: Option<Instant>,
}

#[test]
fn a_match_over_udp_survives_its_host_process_dying() -> Result<(), Box<dyn std::error::Error>> {
    let clock = Clock::new();
    let config = HostedConfig::default();
    let mut players: Vec<Option<Player>> = Vec::new();
    let host_udp = UdpTransport::bind("127.0.0.1:0")?.accept_unknown(16);
    let host_addr = host_udp.local_addr()?;
    players.push(Some(Player {
        session: HostedSession::host(config.clone(), clock.now())?,
        udp: host_udp,
        hash: StreamHash::new(),
        host_changed: None,
    }));
    for _ in 1..4 {
        let mut udp = UdpTransport::bind("127.0.0.1:0")?.accept_unknown(16);
        let host = udp.add_peer(host_addr);
        players.push(Some(Player {
            session: HostedSession::join(config.clone(), host, clock.now())?,
            udp,
            hash: StreamHash::new(),
            host_changed: None,
        }));
    }
    let mut buffers = Buffers::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut step = 0u32;
    let mut crashed: Option<Instant> = None;
    // The tick the host dies at, from 60 to 239: this run's, printed.
    let at = 60
        + u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
                % 180,
        );
    eprintln!("the host dies at tick {at}");
    // Frames every survivor must run: `at` before the crash, 300 after.
    let frames = |players: &[Option<Player>]| -> Vec<u64> {
        players
            .iter()
            .map(|p| p.as_ref().map_or(u64::MAX, |p| p.hash.frames()))
            .collect()
    };
    loop {
        let done = frames(&players);
        if crashed.is_none() && done[1..].iter().all(|f| *f >= at) {
            // The host's process dies: session and socket gone.
            players[0] = None;
            crashed = Some(Instant::now());
        }
        if crashed.is_some() && done.iter().all(|f| *f >= at + 300) {
            break;
        }
        assert!(Instant::now() < deadline, "stuck at {done:?}");
        for (k, slot) in players.iter_mut().enumerate() {
            let Some(p) = slot else { continue };
            drive_hosted(&mut p.session, &mut p.udp, clock.now(), &mut buffers)?;
            let _ = p.session.commit_local(step.wrapping_mul(31) ^ k as u32);
            while let Some(f) = p.session.advance() {
                if p.hash.frames() < at + 300 {
                    p.hash.push(&f);
                }
                if f.events
                    .iter()
                    .any(|e| matches!(e, SystemEvent::HostChanged { .. }))
                {
                    p.host_changed = Some(Instant::now());
                }
            }
        }
        step += 1;
        // The pace of a game loop, not a wait for anything.
        std::thread::sleep(Duration::from_millis(1));
    }
    let survivors: Vec<&Player> = players.iter().flatten().collect();
    assert_eq!(survivors.len(), 3);
    let hosts: Vec<&&Player> = survivors.iter().filter(|p| p.session.hosting()).collect();
    assert_eq!(hosts.len(), 1, "one new host");
    // Equal streams: every survivor's hash over its first `at + 300`
    // frames, `at` of them sealed by the old host.
    for p in &survivors {
        assert_eq!(p.hash.frames(), at + 300);
        assert_eq!(p.hash.value(), survivors[0].hash.value());
    }
    let crashed = crashed.unwrap_or_else(Instant::now);
    let resumed = hosts[0].host_changed.expect("the new host ran HostChanged");
    let pause = resumed.saturating_duration_since(crashed);
    eprintln!(
        "takeover pause over loopback: {} ms from the crash to the first frame after",
        pause.as_millis()
    );
    assert!(pause < Duration::from_secs(2), "took {pause:?}");
    Ok(())
}
