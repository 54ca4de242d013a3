//! Runners over real loopback UDP: every player a thread with its own
//! socket, its loop `turn` then `wait`, peers named by their roster ids.

use lockstep_core::runner::{Runner, RunnerConfig, Status};
use lockstep_core::{Frame, Game, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster};
use lockstep_net::{Buffers, Clock, UdpTransport, turn, wait};
use std::net::UdpSocket;
use std::time::Duration;

/// Ticks every player runs before comparing.
const TICKS: u32 = 90;

/// A fold of every input, the number of ticks run, and its hash after
/// tick `AT` kept aside (not state).
#[derive(Debug, Default)]
struct Fold<const AT: u32> {
    acc: u64,
    ran: u32,
    at_end: Option<u64>,
}

impl<const AT: u32> Game for Fold<AT> {
    type Input = u8;
    fn step(&mut self, frame: &Frame<u8>) {
        for i in &frame.inputs {
            self.acc = (self.acc ^ u64::from(i.unwrap_or(0))).wrapping_mul(0x100_0000_01B3);
        }
        self.ran = frame.tick.get() + 1;
        if frame.tick.get() == AT {
            self.at_end = Some(self.acc);
        }
    }
    fn hash(&self) -> u64 {
        self.acc
    }
    fn save(&self) -> Vec<u8> {
        [self.acc.to_le_bytes().as_slice(), &self.ran.to_le_bytes()].concat()
    }
    fn restore(b: &[u8]) -> Result<Self, String> {
        let (a, r) = b.split_at_checked(8).ok_or("short")?;
        Ok(Self {
            acc: u64::from_le_bytes(a.try_into().map_err(|_| "acc")?),
            ran: u32::from_le_bytes(r.try_into().map_err(|_| "ran")?),
            at_end: None,
        })
    }
}

/// Player `me` of the mesh whose sockets are `sockets`, until it has run
/// `TICKS` ticks and half a second more (its last inputs reach the
/// others), or a deadline.
fn player(me: usize, sockets: Vec<UdpSocket>) -> Result<(Fold<{ TICKS - 1 }>, f64), String> {
    let addrs: Vec<_> = sockets.iter().map(|s| s.local_addr().unwrap()).collect();
    let mut udp = UdpTransport::from_socket(sockets.into_iter().nth(me).unwrap()).unwrap();
    let mut roster = Roster::new();
    for (i, addr) in addrs.iter().enumerate() {
        roster = roster.player(PeerId(i as u32), PlayerId(i as u16));
        if i != me {
            udp.insert_peer(PeerId(i as u32), *addr).unwrap();
        }
    }
    let clock = Clock::new();
    let session = MeshSession::new(
        MeshConfig::default(),
        roster,
        PeerId(me as u32),
        clock.now(),
    )
    .unwrap();
    let mut runner = Runner::new(session, Fold::default(), RunnerConfig::default()).unwrap();
    let mut buffers = Buffers::default();
    let deadline = Instant::ZERO + Duration::from_secs(30);
    let mut done_at = None;
    let mut turns = 0u64;
    while done_at.is_none_or(|t| clock.now() < t + Duration::from_millis(500)) {
        let now = clock.now();
        if now > deadline {
            return Err(format!("player {me} stalled at {}", runner.game().ran));
        }
        let pull = (now.as_micros() / 100_000) as u8 ^ me as u8;
        turn(&mut runner, &mut udp, now, &mut buffers, |_| pull).map_err(|e| e.to_string())?;
        turns += 1;
        assert_ne!(runner.status(), Status::Ended);
        if runner.game().ran >= TICKS && done_at.is_none() {
            done_at = Some(now);
        }
        wait(
            &runner,
            &mut udp,
            &clock,
            now + Duration::from_micros(16_667),
        )
        .map_err(|e| e.to_string())?;
    }
    let per_second = turns as f64 / clock.now().as_micros() as f64 * 1e6;
    Ok((runner.into_parts().1, per_second))
}

/// Three players reach the same state, each waking only for its frames,
/// its timers and datagrams: at most a few hundred turns a second, where a
/// loop that polls spins thousands.
#[test]
fn runners_play_a_mesh_over_loopback_udp() {
    let sockets: Vec<UdpSocket> = (0..3)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let threads: Vec<_> = (0..3)
        .map(|me| {
            let mine: Vec<UdpSocket> = sockets.iter().map(|s| s.try_clone().unwrap()).collect();
            std::thread::spawn(move || player(me, mine))
        })
        .collect();
    let results: Vec<(Fold<{ TICKS - 1 }>, f64)> = threads
        .into_iter()
        .map(|t| t.join().unwrap().unwrap())
        .collect();
    let ends: Vec<Option<u64>> = results.iter().map(|(f, _)| f.at_end).collect();
    assert!(ends[0].is_some());
    assert!(ends.windows(2).all(|w| w[0] == w[1]), "{ends:?}");
    for (_, rate) in &results {
        assert!(*rate < 1_000.0, "{rate:.0} turns a second");
    }
}

/// Runners in host mode over loopback UDP: a host and three players, the
/// host's process gone at tick 90 (no goodbye); the three carry the match
/// on under one of them through `turn_hosted`, with no code of the game's,
/// and agree on the state after tick 300.
#[test]
fn runners_carry_a_hosted_match_past_its_host() {
    use lockstep_core::sequenced::{HostedConfig, HostedSession};
    use lockstep_net::turn_hosted;
    const AFTER: u32 = 300;

    type Long = Fold<AFTER>;

    let clock = Clock::new();
    let config = HostedConfig::default();
    let host_udp = UdpTransport::bind("127.0.0.1:0")
        .unwrap()
        .accept_unknown(16);
    let host_addr = host_udp.local_addr().unwrap();
    let runner = |s| Runner::new(s, Long::default(), RunnerConfig::default()).unwrap();
    let mut players = vec![Some((
        runner(HostedSession::host(config.clone(), clock.now()).unwrap()),
        host_udp,
    ))];
    for _ in 1..4 {
        let mut udp = UdpTransport::bind("127.0.0.1:0")
            .unwrap()
            .accept_unknown(16);
        let host = udp.add_peer(host_addr);
        players.push(Some((
            runner(HostedSession::join(config.clone(), host, clock.now()).unwrap()),
            udp,
        )));
    }
    let mut buffers = Buffers::default();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    type Slot = Option<(Runner<Long, HostedSession<u8>>, UdpTransport)>;
    let done = |players: &[Slot]| {
        players
            .iter()
            .flatten()
            .all(|(r, _)| r.game().at_end.is_some())
    };
    while !done(&players) {
        assert!(std::time::Instant::now() < deadline, "the match stopped");
        if players[0].is_some()
            && players[1..]
                .iter()
                .flatten()
                .all(|(r, _)| r.game().ran >= 90)
        {
            players[0] = None; // the host's process dies
        }
        let now = clock.now();
        for (k, slot) in players.iter_mut().enumerate() {
            let Some((r, udp)) = slot else { continue };
            turn_hosted(r, udp, now, &mut buffers, |g| (g.ran as u8) ^ k as u8).unwrap();
        }
        if let Some((r, udp)) = players.iter_mut().flatten().next() {
            wait(r, udp, &clock, now + Duration::from_millis(2)).unwrap();
        }
    }
    let ends: Vec<Option<u64>> = players
        .iter()
        .flatten()
        .map(|(r, _)| r.game().at_end)
        .collect();
    assert_eq!(ends.len(), 3);
    assert!(ends.windows(2).all(|w| w[0] == w[1]), "{ends:?}");
}
