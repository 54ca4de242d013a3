//! `RelayClient`s against the relay over loopback UDP: the whole client
//! side of a game is the client's `turn` and `wait`, and it joins under
//! way and comes back after losing its connection with no code of the
//! game's.

use crate::common::TestRelay;
use lockstep_core::runner::{RunnerConfig, Status};
use lockstep_core::sequenced::ClientConfig;
use lockstep_core::{Frame, Game, Tick};
use lockstep_net::RelayClient;
use lockstep_relay::RelayConfig;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A fold of every frame, counting each seat's inputs run, with bulk for
/// a snapshot of many chunks; it logs its hash after each tick (not part
/// of the state).
#[derive(Debug, Default)]
struct Fold {
    next: u32,
    acc: u64,
    ran: BTreeMap<u16, u64>,
    log: BTreeMap<Tick, u64>,
}

impl Game for Fold {
    type Input = u16;
    fn step(&mut self, frame: &Frame<u16>) {
        assert_eq!(frame.tick.get(), self.next, "every frame, in order");
        for (seat, i) in frame.inputs.iter().enumerate() {
            let v = i.unwrap_or(0);
            self.acc = (self.acc ^ u64::from(v)).wrapping_mul(0x100_0000_01B3);
            if v != 0 {
                *self.ran.entry(seat as u16).or_default() += 1;
            }
        }
        self.next += 1;
        self.log.insert(frame.tick, self.acc);
    }
    fn hash(&self) -> u64 {
        self.acc
    }
    fn save(&self) -> Vec<u8> {
        let mut out = [self.next.to_le_bytes().as_slice(), &self.acc.to_le_bytes()].concat();
        for (seat, n) in &self.ran {
            out.extend_from_slice(&seat.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.resize(out.len() + 30_000, 7);
        out
    }
    fn restore(b: &[u8]) -> Result<Self, String> {
        let take = |at: usize, n: usize| b.get(at..at + n).ok_or("short state");
        let next = u32::from_le_bytes(take(0, 4)?.try_into().map_err(|_| "next")?);
        let acc = u64::from_le_bytes(take(4, 8)?.try_into().map_err(|_| "acc")?);
        let mut ran = BTreeMap::new();
        let mut at = 12;
        while b.len() - at > 30_000 {
            let seat = u16::from_le_bytes(take(at, 2)?.try_into().map_err(|_| "seat")?);
            let n = u64::from_le_bytes(take(at + 2, 8)?.try_into().map_err(|_| "count")?);
            ran.insert(seat, n);
            at += 10;
        }
        Ok(Self {
            next,
            acc,
            ran,
            log: BTreeMap::new(),
        })
    }
}

fn client(relay: &TestRelay) -> RelayClient<Fold> {
    let config = ClientConfig {
        room: "runners".into(),
        ..ClientConfig::default()
    };
    RelayClient::connect(relay.udp, config, Fold::default(), RunnerConfig::default())
        .expect("a client")
}

/// Turns every client once, then waits a little on the first: a render
/// frame's worth between turns.
fn turn_all(clients: &mut [RelayClient<Fold>], offline: Option<usize>) {
    for (i, c) in clients.iter_mut().enumerate() {
        if Some(i) == offline {
            continue;
        }
        let seat = c.runner().session().seat().map_or(0, |s| s.0);
        c.turn(|g| (g.next as u16 ^ seat.wrapping_mul(77)) | 1)
            .expect("the turn goes on");
    }
    if let Some(c) = clients.first_mut() {
        c.wait(Duration::from_millis(5)).expect("waits");
    }
}

/// Runs until `done` or the deadline.
fn run_until(
    clients: &mut [RelayClient<Fold>],
    offline: Option<usize>,
    secs: u64,
    what: &str,
    done: impl Fn(&[RelayClient<Fold>]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done(clients) {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        turn_all(clients, offline);
    }
}

/// Two players, then a third joining from a snapshot, then the second
/// losing its socket for good: the second's client opens a new one and
/// takes its seat back by itself. All three end on the same state, and the
/// joiner's inputs run.
#[test]
fn relay_clients_join_under_way_and_reconnect_by_themselves() {
    let mut config = RelayConfig::default();
    config.room_defaults.snapshot_join = true;
    config.room_defaults.snapshot_join_after = 0;
    let relay = TestRelay::start(config);
    let mut clients = vec![client(&relay), client(&relay)];
    run_until(&mut clients, None, 20, "two playing", |c| {
        c.iter().all(|c| c.game().next > 60)
    });
    clients.push(client(&relay));
    run_until(&mut clients, None, 30, "the joiner playing", |c| {
        let seat = c[2].runner().session().seat().map_or(99, |s| s.0);
        c[2].status() == Status::Playing && c[0].game().ran.get(&seat).is_some_and(|n| *n > 30)
    });
    // The second player's link goes dead: its socket is swapped for one
    // whose "relay" is a socket nobody reads, and nothing reaches it.
    let cut = clients[1].transport_mut().local_addr().expect("an address");
    let lost_at = clients[1].game().next;
    let hole = std::net::UdpSocket::bind("127.0.0.1:0").expect("a socket");
    let mut dead = lockstep_net::UdpTransport::bind("127.0.0.1:0").expect("a socket");
    dead.insert_peer(
        lockstep_core::PeerId(0),
        hole.local_addr().expect("an address"),
    )
    .expect("peer 0");
    *clients[1].transport_mut() = dead;
    run_until(&mut clients, None, 40, "the second player back", |c| {
        c[1].reconnects() > 0 && c[1].status() == Status::Playing && c[1].game().next > lost_at + 90
    });
    assert_ne!(
        clients[1].transport_mut().local_addr().expect("an address"),
        cut,
        "a new socket"
    );
    // Everyone agrees on every tick two of them ran.
    for a in 0..3 {
        for b in 0..3 {
            let (la, lb) = (&clients[a].game().log, &clients[b].game().log);
            for (t, h) in la {
                if let Some(o) = lb.get(t) {
                    assert_eq!(h, o, "clients {a} and {b} after tick {t}");
                }
            }
        }
    }
    relay.stop();
}
