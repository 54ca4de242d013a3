//! An in-process relay on loopback ports, and clients that play against it.
#![allow(dead_code, unreachable_pub)]

pub mod fold;

use lockstep_core::secure::{self, SecureChannel};
use lockstep_core::sequenced::{ClientConfig, ClientSession, Rejection};
use lockstep_core::sim::SimRng;
use lockstep_core::wire::InputCodec;
use lockstep_core::wire::{self, ByeReason, Datagram, DatagramWriter, ErrorCode, Hello, Message};
use lockstep_core::{Event, Input, PlayerInputs, StreamHash};
use lockstep_core::{PlayerId, SystemEvent, Tick};
use lockstep_net::{
    Clock, Faults, FaultyTransport, Transport, UdpTransport, WsClientTransport, drive,
};
use lockstep_relay::{BackgroundRelay, Bind, RelayConfig, RelayReport};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::net::UdpSocket;
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

    /// [`start`](Self::start) for a relay in a fleet.
    pub fn start_in_fleet<D: lockstep_relay::directory::Directory>(
        config: RelayConfig,
        fleet: lockstep_relay::fleet::Fleet<D>,
    ) -> Self {
        let relay =
            BackgroundRelay::start_in_fleet(config, Bind::loopback(), fleet).expect("relay starts");
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

    /// Stops the relay dead: nobody is told goodbye.
    pub fn kill(self) -> RelayReport {
        self.relay.kill().expect("relay stops")
    }

    /// A plain HTTP GET on the metrics port.
    pub fn http_get(&self, path: &str) -> String {
        http_get(self.http, path)
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
    /// Report wrong checksums (a malicious or broken player).
    pub lie_about_checksums: bool,
    /// Membership changes seen in the frames: tick, event, when it ran.
    pub system: Vec<(Tick, SystemEvent, Instant)>,
    /// Its transport's kind, for a relay it is redirected to.
    kind: Kind,
    /// Where relays of a fleet sent it, in order.
    pub redirected: Vec<SocketAddr>,
}

pub fn transport(
    relay: &TestRelay,
    kind: Kind,
    faults: Option<Faults>,
    seed: u64,
) -> Box<dyn Transport> {
    let inner = open(
        kind,
        match kind {
            Kind::Udp => relay.udp,
            Kind::Ws => relay.ws,
        },
    );
    match faults {
        Some(f) => Box::new(FaultyTransport::new(inner, f, seed)),
        None => inner,
    }
}

/// A transport of `kind` to the relay at `at`, the relay its peer 0.
fn open(kind: Kind, at: SocketAddr) -> Box<dyn Transport> {
    match kind {
        Kind::Udp => {
            let mut t = UdpTransport::bind("127.0.0.1:0").expect("bind");
            let id = t.add_peer(at);
            assert_eq!(
                id,
                WsClientTransport::SERVER,
                "the server is peer 0 either way"
            );
            Box::new(t)
        }
        Kind::Ws => Box::new(
            WsClientTransport::connect(&format!("ws://{at}/"), at, Duration::from_secs(5))
                .expect("websocket connect"),
        ),
    }
}

/// A plain HTTP GET of `path` at `addr`.
pub fn http_get(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("http connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").expect("write");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

pub fn client_config(room: &str, name: &str) -> ClientConfig {
    ClientConfig {
        room: room.into(),
        name: name.into(),
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
            session: ClientSession::new(
                ClientConfig {
                    secret: config.secret.or_else(|| (kind == Kind::Udp).then(secret)),
                    ..config
                },
                WsClientTransport::SERVER,
                clock.now(),
            )
            .expect("config"),
            hash: StreamHash::new(),
            events: Vec::new(),
            rng: SimRng::new(seed),
            held: None,
            scratch: lockstep_net::Buffers::default(),
            frames_wanted: u64::MAX,
            next_commit_at: None,
            lie_about_checksums: false,
            system: Vec::new(),
            kind,
            redirected: Vec::new(),
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
        if let Some(to) = self.session.redirect() {
            // A relay of a fleet named the room's: a transport there (the
            // server is peer 0 on it too).
            self.transport = open(self.kind, to);
            self.session
                .follow_redirect(WsClientTransport::SERVER, clock.now());
            self.redirected.push(to);
        }
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
            let now = Instant::now();
            self.system
                .extend(f.events.iter().map(|e| (f.tick, *e, now)));
            if self.hash.frames() < self.frames_wanted {
                self.hash.push(&f);
                let lie = u64::from(self.lie_about_checksums);
                let _ = self
                    .session
                    .report_checksum(f.tick, self.hash.value() ^ lie);
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

/// Plays `players` until all have run `more` frames past the furthest of
/// them, calling `also` every loop (an attacker's turn); fails after 30 s.
/// Returns how long it took.
pub fn play_on(
    players: &mut [Player<PlayerInputs>],
    clock: &Clock,
    more: u64,
    mut also: impl FnMut(),
) -> Duration {
    let target = players.iter().map(|p| p.hash.frames()).max().unwrap_or(0) + more;
    for p in players.iter_mut() {
        p.frames_wanted = target;
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(30);
    while !players.iter().all(Player::done) {
        assert!(Instant::now() < deadline, "honest players did not finish");
        also();
        for p in players.iter_mut() {
            p.step(clock);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    started.elapsed()
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

/// A raw socket to poke the relay with.
pub struct Raw {
    pub socket: UdpSocket,
    secret: [u8; 32],
    pending: RefCell<Option<SecureChannel>>,
    channel: RefCell<Option<SecureChannel>>,
}

impl Raw {
    pub fn new(relay: &TestRelay) -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        socket.connect(relay.udp).expect("connect");
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        Self {
            socket,
            secret: secret(),
            pending: RefCell::new(None),
            channel: RefCell::new(None),
        }
    }

    /// Sends `bytes`, sealed once the handshake agreed keys.
    pub fn send(&self, bytes: &[u8]) {
        let mut channel = self.channel.borrow_mut();
        match channel.as_mut() {
            Some(c) => {
                let mut sealed = Vec::new();
                c.seal(bytes, &mut sealed);
                self.socket.send(&sealed).expect("send");
            }
            None => self.send_plain(bytes),
        }
    }

    /// `bytes` sealed under this connection's keys (for another socket to
    /// send, as a forger holding the keys would).
    pub fn seal(&self, bytes: &[u8]) -> Vec<u8> {
        let mut sealed = Vec::new();
        if let Some(c) = self.channel.borrow_mut().as_mut() {
            c.seal(bytes, &mut sealed);
        }
        sealed
    }

    /// Sends `bytes` as they are.
    pub fn send_plain(&self, bytes: &[u8]) {
        self.socket.send(bytes).expect("send");
    }

    /// The first message `pick` takes from what the relay sends here, within
    /// 5 s.
    pub fn first<T>(&self, mut pick: impl FnMut(Message<'_>) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let Some(bytes) = self.recv_within(Duration::from_millis(200)) else {
                continue;
            };
            let Ok(d) = Datagram::decode(&bytes, Tick::ZERO) else {
                continue;
            };
            if let Some(t) = d.messages.into_iter().find_map(&mut pick) {
                return Some(t);
            }
        }
        None
    }

    /// Datagrams until one carries an Error, Reject or Bye (or 5 s pass).
    pub fn verdict(&self) -> Verdict {
        self.first(|m| match m {
            Message::Error { code, text } => Some(Verdict::Error(code, text.to_owned())),
            Message::Reject(r) => Some(Verdict::Reject(r.into())),
            Message::Bye { reason, .. } => Some(Verdict::Bye(reason)),
            _ => None,
        })
        .expect("a verdict from the relay")
    }

    /// The next datagram the relay sends here within `wait`, opened if
    /// sealed (a sealed one that does not open is skipped).
    pub fn recv_within(&self, wait: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + wait;
        let mut buf = vec![0u8; 65_536];
        while Instant::now() < deadline {
            let Ok(n) = self.socket.recv(&mut buf) else {
                continue;
            };
            if !secure::is_sealed(&buf[..n]) {
                return Some(buf[..n].to_vec());
            }
            let mut channel = self.channel.borrow_mut();
            if channel.is_none() {
                *channel = self.pending.borrow_mut().take();
            }
            if let Some(c) = channel.as_mut()
                && let Ok(plain) = c.open(&mut buf[..n])
            {
                return Some(plain.to_vec());
            }
        }
        None
    }

    /// Sends `hello` as a client would: padded, offering a key, then again
    /// with the cookie of the relay's challenge.
    pub fn hello(&self, hello: Hello<'_>) {
        let hello = Hello {
            key: Some(secure::client_public(&self.secret)),
            ..hello
        };
        self.send(&padded(&[Message::Hello(hello.clone())]));
        let (cookie, key) = self
            .first(|m| match m {
                Message::Challenge { cookie, key } => Some((cookie.to_vec(), key)),
                _ => None,
            })
            .expect("a challenge from the relay");
        if let Some(k) = key {
            let binding = secure::hello_binding(&hello);
            *self.pending.borrow_mut() =
                Some(SecureChannel::client(&self.secret, &k, &cookie, &binding).expect("key"));
        }
        let hello = Hello {
            cookie: Some(&cookie),
            ..hello
        };
        self.send(&padded(&[Message::Hello(hello)]));
    }

    /// Joins room `room`, returning the seat.
    pub fn join(&self, room: &str, fingerprint: u64) -> Option<PlayerId> {
        self.hello(Hello {
            fingerprint,
            room,
            name: "mallory",
            codec: InputCodec::PlayerInputs,
            ..Hello::default()
        });
        self.first(|m| match m {
            Message::Welcome(w) => Some(w.seat),
            _ => None,
        })
        .flatten()
    }
}

/// 32 bytes from the operating system, for a client's `secret`.
pub fn secret() -> [u8; 32] {
    let mut s = [0u8; 32];
    getrandom::fill(&mut s).expect("randomness");
    s
}

/// What the relay finally said to a raw socket.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Error(ErrorCode, String),
    Reject(Rejection),
    Bye(ByeReason),
}

pub fn datagram(base: Tick, messages: &[Message<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = DatagramWriter::new(&mut out, base, 65_000);
    for m in messages {
        w.push(m).expect("fits");
    }
    w.finish();
    out
}

/// A datagram of `messages` padded as a Hello must be.
pub fn padded(messages: &[Message<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = DatagramWriter::new(&mut out, Tick::ZERO, 1200);
    for m in messages {
        w.push(m).expect("fits");
    }
    w.pad_to(wire::MIN_HELLO_DATAGRAM);
    w.finish();
    out
}

/// A relay for attack tests: 100 Hz, so honest play is quick.
pub fn relay() -> TestRelay {
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = 100;
    TestRelay::start(config)
}

/// Two honest players, already playing.
pub fn honest(relay: &TestRelay, clock: &Clock) -> Vec<Player<PlayerInputs>> {
    let mut players: Vec<_> = (0..2)
        .map(|i| {
            Player::new(
                relay,
                Kind::Udp,
                client_config("room", &format!("honest{i}")),
                None,
                i + 1,
                clock,
            )
        })
        .collect();
    play_until(&mut players, clock, Duration::from_secs(20), |p| {
        p.hash.frames() >= 50
    });
    players
}

/// After the attack, the honest players keep going and agree.
pub fn still_fine(mut players: Vec<Player<PlayerInputs>>, clock: &Clock) {
    play_on(&mut players, clock, 150, || {});
    assert_eq!(players[0].hash.value(), players[1].hash.value());
    for p in &players {
        assert!(
            !p.events
                .iter()
                .any(|e| matches!(e, Event::Closed { .. } | Event::Desync { .. })),
            "{}: {:?}",
            p.name,
            p.events
        );
    }
}

/// A transport that keeps a copy of every datagram it sends: what someone
/// watching the path would see.
pub struct Tap<T> {
    pub inner: T,
    pub sent: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
}

impl<T: Transport> Transport for Tap<T> {
    fn send(
        &mut self,
        to: lockstep_core::PeerId,
        datagram: &[u8],
    ) -> Result<(), lockstep_net::TransportError> {
        if let Ok(mut v) = self.sent.lock() {
            v.push(datagram.to_vec());
        }
        self.inner.send(to, datagram)
    }

    fn recv(
        &mut self,
        buf: &mut [u8],
    ) -> Result<Option<(lockstep_core::PeerId, usize)>, lockstep_net::TransportError> {
        self.inner.recv(buf)
    }
}
