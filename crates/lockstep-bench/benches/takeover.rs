//! How long a host-mode match stops when its host dies: from the crash to
//! the first frame the new host runs. The baseline is the silence a
//! survivor waits before it takes over (`host_timeout`, 500 ms by
//! default): what is beyond it is the takeover's own cost.
//!
//! - Simulated network (virtual time): 4 players at 30 Hz, 15 ms each way,
//!   the host frozen at a random tick from 60 to 240, 100 runs per loss
//!   rate.
//! - Loopback UDP (wall time, this machine): 4 players in one process, the
//!   host's session and socket dropped at tick 120, 5 runs; and the same
//!   with a relay sequencing a room with failover on, the relay stopped
//!   dead (or shut down with a goodbye) at tick 120.

use lockstep_core::sequenced::{HostedConfig, HostedSession};
use lockstep_core::sim::{LinkConditions, Sim, SimNetwork, SimRng};
use lockstep_core::{Frame, Instant, PeerId, SystemEvent};
use lockstep_net::{Buffers, Clock, UdpTransport, drive_hosted};
use lockstep_relay::{BackgroundRelay, Bind, RelayConfig};
use std::time::Duration;

type Session = HostedSession<u16>;

/// A sorted sample's minimum, median and maximum, in milliseconds.
fn spread(mut ms: Vec<u64>) -> (u64, u64, u64) {
    ms.sort_unstable();
    let n = ms.len();
    (ms[0], ms[n / 2], ms[n - 1])
}

fn changed(f: &Frame<u16>) -> bool {
    f.events
        .iter()
        .any(|e| matches!(e, SystemEvent::HostChanged { .. }))
}

/// One simulated run: the pause, in virtual milliseconds.
fn simulated(seed: u64, loss: f64) -> Option<u64> {
    let link = LinkConditions {
        latency: Duration::from_millis(15),
        jitter: Duration::from_millis(5),
        loss,
        ..LinkConditions::default()
    };
    let config = HostedConfig::default();
    let mut sim = Sim::new(SimNetwork::new(seed, link));
    sim.add(
        PeerId(0),
        Session::host(config.clone(), Instant::ZERO).ok()?,
    );
    for k in 1..4 {
        sim.add(
            PeerId(k),
            Session::join(config.clone(), PeerId(0), Instant::ZERO).ok()?,
        );
    }
    let crash_at = 60 + SimRng::new(seed).next_u64() % 180;
    let mut frames = [0u64; 4];
    let mut crashed: Option<Instant> = None;
    let mut resumed: Option<Instant> = None;
    let limit = Instant::from_millis(120_000);
    while resumed.is_none() && sim.now() < limit {
        if crashed.is_none() && frames[0] >= crash_at {
            sim.freeze(PeerId(0));
            crashed = Some(sim.now());
        }
        let until = sim.now() + Duration::from_millis(50);
        let _ = sim.run(
            until,
            Duration::from_millis(33),
            |id, s, now| {
                if let Some(room) = s.sequencer() {
                    let peers: Vec<PeerId> = room.connections().map(|(p, _)| p).collect();
                    for p in peers {
                        let _ = room.set_contact(p, &p.0.to_le_bytes());
                    }
                }
                // Every contact wanted, each once.
                while let Some(c) = s.contact_wanted().map(<[u8]>::to_vec) {
                    let Ok(b) = <[u8; 4]>::try_from(&c[..]) else {
                        break;
                    };
                    s.resolved(&c, PeerId(u32::from_le_bytes(b)));
                }
                let _ = s.commit_local(id.0 as u16 + 1);
                while let Some(f) = s.advance() {
                    frames[id.0 as usize] += 1;
                    if changed(&f) && s.hosting() {
                        resumed.get_or_insert(now);
                    }
                }
            },
            |_| false,
        );
    }
    Some((resumed? - crashed?).as_millis() as u64)
}

/// Who sequences a loopback run, and how it goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sequencer {
    /// The first player hosts; its session and socket are dropped.
    Host,
    /// A relay's room with failover on; the relay stops dead, or (`true`)
    /// shuts down with a goodbye.
    Relay { goodbye: bool },
}

/// One loopback run: the pause, in wall milliseconds.
fn loopback(by: Sequencer) -> Option<u64> {
    let clock = Clock::new();
    let mut relay = match by {
        Sequencer::Host => None,
        Sequencer::Relay { .. } => {
            let mut config = RelayConfig::default();
            config.room_defaults.failover = true;
            let bind = Bind {
                ws: None,
                http: None,
                ..Bind::loopback()
            };
            Some(BackgroundRelay::start(config, bind).ok()?)
        }
    };
    let mut players: Vec<Option<(Session, UdpTransport, u64)>> = Vec::new();
    let mut server = relay.as_ref().and_then(|r| r.udp);
    for _ in 0..4 {
        let mut udp = UdpTransport::bind("127.0.0.1:0").ok()?.accept_unknown(16);
        let session = match server {
            None => {
                server = Some(udp.local_addr().ok()?);
                Session::host(HostedConfig::default(), clock.now()).ok()?
            }
            Some(addr) => {
                let to = udp.add_peer(addr);
                let mut config = HostedConfig::default();
                if relay.is_some() {
                    config.client.secret = Some(lockstep_net::session_secret().ok()?);
                }
                Session::join(config, to, clock.now()).ok()?
            }
        };
        players.push(Some((session, udp, 0)));
    }
    let mut buffers = Buffers::default();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut crashed: Option<std::time::Instant> = None;
    while std::time::Instant::now() < deadline {
        if crashed.is_none() && players[1..].iter().flatten().all(|p| p.2 >= 120) {
            match (by, relay.take()) {
                (Sequencer::Relay { goodbye: true }, Some(r)) => drop(r.stop()),
                (Sequencer::Relay { goodbye: false }, Some(r)) => drop(r.kill()),
                _ => players[0] = None,
            }
            crashed = Some(std::time::Instant::now());
        }
        for (k, slot) in players.iter_mut().enumerate() {
            let Some((s, udp, frames)) = slot else {
                continue;
            };
            let _ = drive_hosted(s, udp, clock.now(), &mut buffers);
            let _ = s.commit_local(k as u16 + 1);
            while let Some(f) = s.advance() {
                *frames += 1;
                if changed(&f) && s.hosting() {
                    return Some(crashed?.elapsed().as_millis() as u64);
                }
            }
        }
        // The pace of a game loop.
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

fn main() {
    let timeout = HostedConfig::default().host_timeout.as_millis() as u64;
    println!(
        "host migration: the match's pause when its host dies, 4 players (host_timeout {timeout} ms)"
    );
    println!();
    println!(
        "| where | loss | runs | pause, ms: min | median | max | median beyond host_timeout |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for loss in [0.0, 0.05, 0.15] {
        let ms: Vec<u64> = (0..100).filter_map(|seed| simulated(seed, loss)).collect();
        let runs = ms.len();
        let (lo, mid, hi) = spread(ms);
        println!(
            "| simulated, 15 ms each way | {:.0}% | {runs} | {lo} | {mid} | {hi} | {} ({:.2}x the timeout) |",
            loss * 100.0,
            mid.saturating_sub(timeout),
            mid as f64 / timeout as f64
        );
    }
    for (what, by) in [
        ("loopback UDP, host dies", Sequencer::Host),
        (
            "loopback UDP, relay dies (failover)",
            Sequencer::Relay { goodbye: false },
        ),
        (
            "loopback UDP, relay shuts down (failover)",
            Sequencer::Relay { goodbye: true },
        ),
    ] {
        let ms: Vec<u64> = (0..5).filter_map(|_| loopback(by)).collect();
        let runs = ms.len();
        let (lo, mid, hi) = spread(ms);
        println!(
            "| {what} | 0% | {runs} | {lo} | {mid} | {hi} | {} ({:.2}x the timeout) |",
            mid.saturating_sub(timeout),
            mid as f64 / timeout as f64
        );
    }
}
