//! The star topology on the simulated network: a sequencer at `PeerId(0)`,
//! clients at `PeerId(1..)`, each client running a small game.

use super::Record;
use lockstep_core::sequenced::{ClientConfig, ClientSession, Sequencer, SequencerConfig};
use lockstep_core::sim::{LinkConditions, Outcome, Sim, SimNetwork};
use lockstep_core::{Endpoint, Event, Instant, PeerId, Transmit};
use std::collections::BTreeMap;
use std::time::Duration;

pub const SERVER: PeerId = PeerId(0);

/// Either end of the star.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // a handful per test, never moved in bulk
pub enum Node {
    Server(Sequencer<u16>),
    Client(ClientSession<u16>),
    /// A client whose datagrams lose every snapshot acknowledgement.
    Unacking(ClientSession<u16>),
    /// A player whose pongs claim it received none of the sequencer's
    /// datagrams since the last (its own link's loss, forged).
    LyingPongs(ClientSession<u16>),
    /// A joiner crawling through its snapshot (see [`SlowAck`]).
    SlowAck(ClientSession<u16>, SlowAck),
}

/// A joiner that lets one datagram out every `every` once its snapshot
/// started, carrying nothing but an acknowledgement of exactly one chunk
/// more than the last one did; it counts the bytes both ways from then.
#[derive(Debug)]
pub struct SlowAck {
    pub every: Duration,
    last: Option<Instant>,
    next: u32,
    now: Instant,
    pub got: u64,
    pub sent: u64,
    started: bool,
}

impl SlowAck {
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            next: 0,
            now: Instant::ZERO,
            got: 0,
            sent: 0,
            started: false,
        }
    }

    /// What it lets out of `c`'s next datagram, if anything.
    fn transmit(&mut self, c: &mut ClientSession<u16>, buf: &mut Vec<u8>) -> Option<Transmit> {
        use lockstep_core::wire::{Datagram, DatagramWriter, Message, SnapshotAck};
        loop {
            let t = c.poll_transmit(buf)?;
            if !self.started {
                if c.snapshot_progress().is_some() {
                    self.started = true;
                } else {
                    return Some(t);
                }
            }
            if self.last.is_some_and(|l| self.now - l < self.every) {
                continue; // dropped: the attacker sends nothing
            }
            let d = Datagram::decode(&buf[..t.len], c.frame()).ok()?;
            let mut out = Vec::new();
            let mut w = DatagramWriter::new(&mut out, d.base, usize::MAX);
            let mut acked = false;
            for m in &d.messages {
                if let Message::SnapshotAck(a) = m {
                    self.next += 1;
                    let _ = w.push(&Message::SnapshotAck(SnapshotAck {
                        id: a.id,
                        next: self.next,
                        bits: 0,
                    }));
                    acked = true;
                }
            }
            if !acked {
                continue;
            }
            w.finish();
            buf.clear();
            buf.extend_from_slice(&out);
            self.last = Some(self.now);
            self.sent += buf.len() as u64;
            return Some(Transmit {
                destination: t.destination,
                len: buf.len(),
            });
        }
    }
}

impl Node {
    pub fn client(&self) -> Option<&ClientSession<u16>> {
        match self {
            Self::Client(c) | Self::Unacking(c) | Self::LyingPongs(c) | Self::SlowAck(c, _) => {
                Some(c)
            }
            Self::Server(_) => None,
        }
    }

    pub fn client_mut(&mut self) -> Option<&mut ClientSession<u16>> {
        match self {
            Self::Client(c) | Self::Unacking(c) | Self::LyingPongs(c) | Self::SlowAck(c, _) => {
                Some(c)
            }
            Self::Server(_) => None,
        }
    }

    pub fn server(&self) -> Option<&Sequencer<u16>> {
        match self {
            Self::Server(s) => Some(s),
            _ => None,
        }
    }
}

impl Endpoint for Node {
    type Error = String;

    fn handle_datagram(&mut self, from: PeerId, d: &[u8], now: Instant) -> Result<(), String> {
        match self {
            Self::Server(s) => s.handle_datagram(from, d, now).map_err(|e| e.to_string()),
            Self::Client(c) | Self::Unacking(c) | Self::LyingPongs(c) => {
                c.handle_datagram(from, d, now).map_err(|e| e.to_string())
            }
            Self::SlowAck(c, s) => {
                s.now = now;
                if s.started {
                    s.got += d.len() as u64;
                }
                c.handle_datagram(from, d, now).map_err(|e| e.to_string())
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self {
            Self::Server(s) => s.handle_timeout(now),
            Self::Client(c) | Self::Unacking(c) | Self::LyingPongs(c) => c.handle_timeout(now),
            Self::SlowAck(c, s) => {
                s.now = now;
                c.handle_timeout(now);
            }
        }
    }

    fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        let unacking = matches!(self, Self::Unacking(_));
        match self {
            Self::Server(s) => s.poll_transmit(buf),
            Self::Client(c) => c.poll_transmit(buf),
            Self::SlowAck(c, s) => s.transmit(c, buf),
            Self::Unacking(c) | Self::LyingPongs(c) => {
                use lockstep_core::wire::Message;
                let t = c.poll_transmit(buf)?;
                let reference = c.frame();
                let d = lockstep_core::wire::Datagram::decode(&buf[..t.len], reference).ok()?;
                let mut out = Vec::new();
                let mut w = lockstep_core::wire::DatagramWriter::new(&mut out, d.base, usize::MAX);
                for m in &d.messages {
                    match *m {
                        Message::SnapshotAck(_) if unacking => {}
                        Message::Pong {
                            stamp,
                            held_ms,
                            sent,
                            ..
                        } if !unacking => {
                            let _ = w.push(&Message::Pong {
                                stamp,
                                held_ms,
                                received: 0,
                                sent,
                            });
                        }
                        _ => {
                            let _ = w.push(m);
                        }
                    }
                }
                w.finish();
                buf.clear();
                buf.extend_from_slice(&out);
                Some(Transmit {
                    destination: t.destination,
                    len: buf.len(),
                })
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Self::Server(s) => s.poll_timeout(),
            Self::Client(c) | Self::Unacking(c) | Self::LyingPongs(c) | Self::SlowAck(c, _) => {
                c.poll_timeout()
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct StarScenario {
    pub players: usize,
    pub spectators: usize,
    pub server: SequencerConfig,
    pub client: ClientConfig,
    pub link: LinkConditions,
    pub seed: u64,
}

impl StarScenario {
    pub fn new(players: usize, seed: u64) -> Self {
        Self {
            players,
            spectators: 0,
            server: SequencerConfig {
                secret: {
                    let mut k = [0u8; 32];
                    k[..8].copy_from_slice(&seed.to_le_bytes());
                    k
                },
                ..SequencerConfig::default()
            },
            client: ClientConfig::default(),
            link: LinkConditions::default(),
            seed,
        }
    }

    pub fn client_ids(&self) -> Vec<PeerId> {
        (1..=(self.players + self.spectators) as u32)
            .map(PeerId)
            .collect()
    }

    pub fn period(&self) -> Duration {
        Duration::from_micros(1_000_000 / u64::from(self.server.tick_rate))
    }

    pub fn build(&self) -> StarHarness {
        let mut sim = Sim::new(SimNetwork::new(self.seed, self.link.clone()));
        let server = Sequencer::new(self.server.clone(), Instant::ZERO)
            .unwrap_or_else(|e| panic!("server config: {e}"));
        sim.add(SERVER, Node::Server(server));
        let mut records = BTreeMap::new();
        for (k, id) in self.client_ids().into_iter().enumerate() {
            let config = ClientConfig {
                spectator: k >= self.players,
                name: format!("c{}", id.0),
                ..self.client.clone()
            };
            let c = ClientSession::new(config, SERVER, Instant::ZERO)
                .unwrap_or_else(|e| panic!("client config: {e}"));
            sim.add(id, Node::Client(c));
            records.insert(
                id,
                Record::new(self.seed ^ (u64::from(id.0) * 0x51), self.server.first_tick),
            );
        }
        StarHarness {
            sim,
            records,
            period: self.period(),
        }
    }
}

pub struct StarHarness {
    pub sim: Sim<Node>,
    pub records: BTreeMap<PeerId, Record>,
    pub period: Duration,
}

/// One game-loop iteration for a client.
pub fn play(c: &mut ClientSession<u16>, rec: &mut Record) {
    if let Some(snap) = c.take_snapshot() {
        rec.restore(snap.tick, &snap.bytes);
    }
    if c.seat().is_some() {
        let input = rec.input();
        match c.commit_local(input) {
            Ok(_) => rec.committed(),
            Err(_) => rec.refused += 1,
        }
    }
    while let Some(frame) = c.advance() {
        rec.record(&frame);
        let _ = c.report_checksum(frame.tick, rec.reported(frame.tick));
    }
    while let Some(ev) = c.poll_event() {
        if let Event::SnapshotRequested { tick } = ev {
            rec.owed = Some(tick);
        }
        rec.events.push(ev);
    }
    // The state right after the tick asked for, once it has been run.
    if let Some(tick) = rec.owed
        && let Some(bytes) = rec.snapshot_at(tick)
    {
        rec.owed = None;
        if let Err(e) = c.provide_snapshot(tick, bytes) {
            rec.snapshot_refusals.push(e);
        }
    }
}

impl StarHarness {
    pub fn run(
        &mut self,
        until: Instant,
        hook: impl FnMut(PeerId, &mut Node, Instant),
        done: impl FnMut(&Sim<Node>) -> bool,
    ) -> Outcome {
        self.drive(until, hook, |_, c, rec| play(c, rec), done)
    }

    /// Runs until `until` or `done`, calling `each` for every client
    /// (plain ones: not the acknowledging kinds) every tick period in place
    /// of [`play`]: a game loop of the test's own.
    pub fn run_clients(
        &mut self,
        until: Instant,
        each: impl FnMut(PeerId, &mut ClientSession<u16>, &mut Record),
        done: impl FnMut(&Sim<Node>) -> bool,
    ) -> Outcome {
        self.drive(until, |_, _, _| {}, each, done)
    }

    /// Every tick period: `hook` for every node, then `each` for every
    /// plain client with its record.
    pub fn drive(
        &mut self,
        until: Instant,
        mut hook: impl FnMut(PeerId, &mut Node, Instant),
        mut each: impl FnMut(PeerId, &mut ClientSession<u16>, &mut Record),
        done: impl FnMut(&Sim<Node>) -> bool,
    ) -> Outcome {
        let records = &mut self.records;
        self.sim.run(
            until,
            self.period,
            |id, node, now| {
                hook(id, node, now);
                if let Node::Client(c) = node {
                    let rec = records
                        .get_mut(&id)
                        .unwrap_or_else(|| panic!("no record for {id}"));
                    each(id, c, rec);
                }
            },
            done,
        )
    }

    /// Runs until every live client has run `frames` frames.
    pub fn run_until_frames(&mut self, frames: u64, until: Instant) -> Outcome {
        self.run(
            until,
            |_, _, _| {},
            |sim| {
                sim.live()
                    .filter_map(|(_, n)| n.client())
                    .all(|c| c.stats().frames >= frames)
            },
        )
    }

    pub fn client(&self, id: PeerId) -> &ClientSession<u16> {
        self.sim
            .endpoint(id)
            .and_then(Node::client)
            .unwrap_or_else(|| panic!("no client {id}"))
    }

    pub fn server(&self) -> &Sequencer<u16> {
        self.sim
            .endpoint(SERVER)
            .and_then(Node::server)
            .unwrap_or_else(|| panic!("no server"))
    }

    pub fn assert_streams_agree(&self, ids: &[PeerId]) {
        super::assert_streams_agree(self.sim.net.seed(), &self.records, ids);
    }

    pub fn assert_no_desync(&self) {
        super::assert_no_desync(self.sim.net.seed(), &self.records);
    }
}
