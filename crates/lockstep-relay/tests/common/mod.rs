//! An in-process relay on loopback ports, and clients that play against it.
#![allow(dead_code, unreachable_pub)]

use lockstep_core::sequenced::{ClientConfig, ClientSession};
use lockstep_core::sim::SimRng;
use lockstep_core::wire::InputCodec;
use lockstep_core::{Event, Input, PlayerInputs, StreamHash};
use lockstep_net::{
    Clock, Faults, FaultyTransport, Transport, UdpTransport, WsClientTransport, drive,
};
use lockstep_relay::{BackgroundRelay, Bind, RelayConfig, RelayReport};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A [`BackgroundRelay`] on loopback with every listener, and its
/// addresses unwrapped.
pub struct TestRelay {
    pub udp: SocketAddr,
    pub ws: SocketAddr,
    pub http: SocketAddr,
    relay: BackgroundRelay,
}

impl TestRelay {
    pub fn start(config: RelayConfig) -> Self {
        let relay = BackgroundRelay::start(config, Bind::loopback()).expect("relay starts");
        Self {
            udp: relay.udp.expect("udp"),
            ws: relay.ws.expect("ws"),
            http: relay.http.expect("http"),
            relay,
        }
    }

    /// Shuts the relay down and returns its report.
    pub fn stop(self) -> RelayReport {
        self.relay.stop().expect("relay stops cleanly")
    }

    /// A plain HTTP GET on the metrics port.
    pub fn http_get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.http).expect("http connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        write!(s, "GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").expect("write");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Udp,
    Ws,
}

/// A client game: commits seeded inputs, runs every frame, hashes them.
pub struct Player<I: Input> {
    pub name: String,
    pub transport: Box<dyn Transport>,
    pub session: ClientSession<I>,
    pub hash: StreamHash,
    pub events: Vec<Event>,
    rng: SimRng,
    held: Option<I>,
    scratch: lockstep_net::Buffers,
    /// Stop recording after this many frames (so hashes compare equal).
    pub frames_wanted: u64,
    /// When the next tick of input is due, at the room's tick rate.
    next_commit_at: Option<Instant>,
}

pub fn transport(
    relay: &TestRelay,
    kind: Kind,
    faults: Option<Faults>,
    seed: u64,
) -> Box<dyn Transport> {
    let inner: Box<dyn Transport> = match kind {
        Kind::Udp => {
            let mut t = UdpTransport::bind("127.0.0.1:0").expect("bind");
            let id = t.add_peer(relay.udp);
            assert_eq!(
                id,
                WsClientTransport::SERVER,
                "the server is peer 0 either way"
            );
            Box::new(t)
        }
        Kind::Ws => Box::new(
            WsClientTransport::connect(
                &format!("ws://{}/", relay.ws),
                relay.ws,
                Duration::from_secs(5),
            )
            .expect("websocket connect"),
        ),
    };
    match faults {
        Some(f) => Box::new(FaultyTransport::new(inner, f, seed)),
        None => inner,
    }
}

pub fn client_config(room: &str, name: &str) -> ClientConfig {
    ClientConfig {
        room: room.into(),
        name: name.into(),
        codec: InputCodec::PlayerInputs,
        fingerprint: 0xF00D,
        ..ClientConfig::default()
    }
}

impl Player<PlayerInputs> {
    pub fn new(
        relay: &TestRelay,
        kind: Kind,
        config: ClientConfig,
        faults: Option<Faults>,
        seed: u64,
        clock: &Clock,
    ) -> Self {
        let name = config.name.clone();
        Self {
            name,
            transport: transport(relay, kind, faults, seed),
            session: ClientSession::new(config, WsClientTransport::SERVER, clock.now())
                .expect("config"),
            hash: StreamHash::new(),
            events: Vec::new(),
            rng: SimRng::new(seed),
            held: None,
            scratch: lockstep_net::Buffers::default(),
            frames_wanted: u64::MAX,
            next_commit_at: None,
        }
    }

    /// One game-loop iteration.
    pub fn step(&mut self, clock: &Clock) {
        let _ = drive(
            &mut self.session,
            &mut self.transport,
            clock.now(),
            &mut self.scratch,
        );
        // A game commits once per tick of its clock, like a real loop.
        let rate = self.session.welcome().map_or(0, |w| w.tick_rate);
        let due = *self.next_commit_at.get_or_insert_with(Instant::now);
        if self.session.seat().is_some() && rate > 0 && Instant::now() >= due {
            let rng = &mut self.rng;
            let input = self.held.get_or_insert_with(|| {
                PlayerInputs::default()
                    .with_movement(rng.unit() as f32 * 2.0 - 1.0, 0.5)
                    .with_button((rng.below(4)) as u8, true)
            });
            if self.session.commit_local(input.clone()).is_ok() {
                self.next_commit_at = Some(due + Duration::from_secs(1) / rate);
                if self.rng.chance(0.2) {
                    self.held = None;
                }
            }
        }
        while let Some(f) = self.session.advance() {
            if self.hash.frames() < self.frames_wanted {
                self.hash.push(&f);
                if f.tick.get() % 30 == 0 {
                    let _ = self.session.report_checksum(f.tick, self.hash.value());
                }
            }
        }
        while let Some(e) = self.session.poll_event() {
            self.events.push(e);
        }
        let _ = drive(
            &mut self.session,
            &mut self.transport,
            clock.now(),
            &mut self.scratch,
        );
    }

    pub fn done(&self) -> bool {
        self.hash.frames() >= self.frames_wanted
    }
}

/// Steps every player until `done` holds for all, failing after `limit`.
pub fn play_until(
    players: &mut [Player<PlayerInputs>],
    clock: &Clock,
    limit: Duration,
    mut done: impl FnMut(&Player<PlayerInputs>) -> bool,
) {
    let deadline = Instant::now() + limit;
    while !players.iter().all(&mut done) {
        assert!(
            Instant::now() < deadline,
            "timed out: {:?}",
            players
                .iter()
                .map(|p| (
                    p.name.clone(),
                    p.hash.frames(),
                    p.session.stats().next_tick,
                    p.session.closed().cloned()
                ))
                .collect::<Vec<_>>()
        );
        for p in players.iter_mut() {
            p.step(clock);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}
