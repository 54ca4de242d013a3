//! Workloads for lockstep's benchmarks, shared by `cargo bench -p
//! lockstep-bench` and its tests.
//!
//! - [`Trace`]: a seeded input trace shaped like real play (sticks held for
//!   a few ticks, buttons sparse).
//! - [`Codec`]s: the same per-tick traffic written three ways: lockstep's
//!   protocol, a plain fixed-size encoding, and a JSON envelope.
//! - [`run_mesh_udp`]: a lockstep mesh session over real loopback UDP, with
//!   every byte sent counted and the time spent in the session measured.
//! - [`feel`]: a room's stall rate and input latency under a simulated
//!   network, with a fixed or an adaptive input delay.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod feel;

use lockstep_core::sim::SimRng;
use lockstep_core::wire::{self, ChainWriter, DatagramWriter, Decoder, InputRun, Inputs, Message};
use lockstep_core::{
    Instant, MeshConfig, MeshSession, PeerId, PlayerId, PlayerInputs, Roster, Tick,
};
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// Simulation rate of every workload.
pub const TICK_RATE: u32 = 30;
/// Ticks a sender keeps resending until acknowledged: about 100 ms at 30 Hz,
/// a typical internet round trip.
pub const WINDOW: usize = 3;

/// Seeded inputs for every player and tick.
#[derive(Debug, Clone)]
pub struct Trace {
    /// `inputs[player][tick]`.
    pub inputs: Vec<Vec<PlayerInputs>>,
}

impl Trace {
    /// `players` players for `ticks` ticks: each stick moves about every
    /// five ticks, the pointer every ten, and a button changes about once a
    /// second.
    pub fn generate(players: usize, ticks: usize, seed: u64) -> Self {
        let inputs = (0..players)
            .map(|p| {
                let mut rng = SimRng::new(seed ^ (p as u64 + 1).wrapping_mul(0x9E37_79B9));
                let mut cur = PlayerInputs::default();
                let axis = |rng: &mut SimRng| (rng.below(255) as i32 - 127) as i8;
                (0..ticks)
                    .map(|_| {
                        if rng.chance(0.2) {
                            cur.movement = [axis(&mut rng), axis(&mut rng)];
                        }
                        if rng.chance(0.2) {
                            cur.aim = [axis(&mut rng), axis(&mut rng)];
                        }
                        if rng.chance(0.1) {
                            cur.pointer = [
                                rng.next_u64() as u16 & 0x7BFF,
                                rng.next_u64() as u16 & 0x7BFF,
                            ];
                        }
                        if rng.chance(0.03) {
                            cur.buttons ^= 1 << rng.below(8);
                        }
                        cur.clone()
                    })
                    .collect()
            })
            .collect();
        Self { inputs }
    }

    /// Number of players.
    pub fn players(&self) -> usize {
        self.inputs.len()
    }

    /// Number of ticks.
    pub fn ticks(&self) -> usize {
        self.inputs.first().map_or(0, Vec::len)
    }

    /// The inputs a sender resends at `tick`: the last [`WINDOW`] ticks.
    pub fn window(&self, player: usize, tick: usize) -> &[PlayerInputs] {
        let from = (tick + 1).saturating_sub(WINDOW);
        &self.inputs[player][from..=tick]
    }

    /// The input of `player` for the tick before its window at `tick`:
    /// what the recipient acknowledged and holds (none at the start).
    pub fn held(&self, player: usize, tick: usize) -> Option<&PlayerInputs> {
        (tick + 1)
            .checked_sub(WINDOW + 1)
            .map(|t| &self.inputs[player][t])
    }
}

/// The fixed-size form of an input, as a game without a codec sends it (and
/// as GGRS serialises it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PadInput {
    /// Movement stick.
    pub movement: [i8; 2],
    /// Aim stick.
    pub aim: [i8; 2],
    /// Pointer (half-float bits).
    pub pointer: [u16; 2],
    /// Buttons.
    pub buttons: u32,
}

impl From<&PlayerInputs> for PadInput {
    fn from(p: &PlayerInputs) -> Self {
        Self {
            movement: p.movement,
            aim: p.aim,
            pointer: p.pointer,
            buttons: p.buttons,
        }
    }
}

/// One way of putting a player's per-tick datagram on the wire.
pub trait Codec {
    /// A short name for the table.
    fn name(&self) -> &'static str;
    /// Appends the datagram `player` sends at `tick`: its inputs for
    /// `inputs` (the last [`WINDOW`] ticks, ending at `tick`), plus the
    /// acknowledgement of what it received. `held` is its input for the
    /// tick before the window, which the recipient acknowledged and holds
    /// (none at the start).
    fn encode(
        &mut self,
        player: usize,
        tick: u32,
        inputs: &[PlayerInputs],
        held: Option<&PlayerInputs>,
        out: &mut Vec<u8>,
    );
    /// Decodes a datagram back into inputs, the recipient holding `held`;
    /// returns how many.
    fn decode(&mut self, bytes: &[u8], held: Option<&PlayerInputs>) -> usize;
}

/// lockstep's protocol: header, an `Inputs` message with an ack and a
/// delta chain coded against the input the recipient acknowledged. It keeps
/// its chain writer, decoder and buffers from one datagram to the next, as
/// a session does, so neither side allocates per datagram.
#[derive(Debug, Default)]
pub struct LockstepCodec {
    chain: ChainWriter<PlayerInputs>,
    bytes: Vec<u8>,
    scratch: Vec<u8>,
    decoder: Decoder,
    decoded: Vec<PlayerInputs>,
}

impl Codec for LockstepCodec {
    fn name(&self) -> &'static str {
        "lockstep v11 (delta chains)"
    }

    fn encode(
        &mut self,
        player: usize,
        tick: u32,
        inputs: &[PlayerInputs],
        held: Option<&PlayerInputs>,
        out: &mut Vec<u8>,
    ) {
        self.chain.restart(held.cloned().unwrap_or_default());
        for i in inputs {
            self.chain.push(i, usize::MAX);
        }
        self.bytes.clear();
        self.chain.write(&mut self.bytes);
        let start = Tick::new(tick + 1 - inputs.len() as u32);
        let base = Tick::new(tick.saturating_sub(2));
        let acks = [(PlayerId(((player + 1) % 8) as u16), base)];
        let runs = [InputRun {
            seat: PlayerId(player as u16),
            start,
            count: inputs.len() as u32,
            back: u32::from(held.is_some()),
            check: held.map_or(0, |h| wire::reference_check(h, &mut self.scratch)),
            chain: &self.bytes,
        }];
        let mut w = DatagramWriter::new(out, base, 1200);
        let _ = w.push(&Message::Inputs(Inputs {
            acks: (&acks).into(),
            runs: (&runs).into(),
        }));
        w.finish();
    }

    fn decode(&mut self, bytes: &[u8], held: Option<&PlayerInputs>) -> usize {
        let Ok(d) = self.decoder.decode(bytes, Tick::ZERO) else {
            return 0;
        };
        let mut n = 0;
        for m in &d.messages {
            if let Message::Inputs(i) = m {
                for r in i.runs {
                    self.decoded.clear();
                    // The recipient works out the check of the input it
                    // holds once, when it takes it (here: this once).
                    let held = held.map(|h| wire::HeldInput::new(h, &mut self.scratch));
                    if r.decode_into(held, &mut self.decoded).is_ok() {
                        n += self.decoded.len();
                    }
                }
            }
        }
        self.decoder.recycle(d);
        n
    }
}

/// Every input in full, fixed size: tick (4), seat (1), ack (4), count (1),
/// then 12 bytes per input.
#[derive(Debug, Default)]
pub struct FixedCodec;

impl Codec for FixedCodec {
    fn name(&self) -> &'static str {
        "fixed-size, every input in full"
    }

    fn encode(
        &mut self,
        player: usize,
        tick: u32,
        inputs: &[PlayerInputs],
        _held: Option<&PlayerInputs>,
        out: &mut Vec<u8>,
    ) {
        out.extend_from_slice(&tick.to_le_bytes());
        out.push(player as u8);
        out.extend_from_slice(&tick.saturating_sub(2).to_le_bytes());
        out.push(inputs.len() as u8);
        for i in inputs {
            let p = PadInput::from(i);
            out.extend(p.movement.map(|v| v as u8));
            out.extend(p.aim.map(|v| v as u8));
            for v in p.pointer {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&p.buttons.to_le_bytes());
        }
    }

    fn decode(&mut self, bytes: &[u8], _held: Option<&PlayerInputs>) -> usize {
        let Some(&n) = bytes.get(9) else { return 0 };
        let mut count = 0;
        for chunk in bytes[10..].chunks_exact(12).take(usize::from(n)) {
            let p = PadInput {
                movement: [chunk[0] as i8, chunk[1] as i8],
                aim: [chunk[2] as i8, chunk[3] as i8],
                pointer: [
                    u16::from_le_bytes([chunk[4], chunk[5]]),
                    u16::from_le_bytes([chunk[6], chunk[7]]),
                ],
                buttons: u32::from_le_bytes([chunk[8], chunk[9], chunk[10], chunk[11]]),
            };
            count += usize::from(p.buttons != u32::MAX);
        }
        count
    }
}

/// A versioned JSON envelope, as a WebSocket game server might send:
/// `{"protocolVersion":1,"type":"inputs","payload":{...}}`.
#[derive(Debug, Default)]
pub struct JsonCodec;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonEnvelope {
    protocol_version: u32,
    r#type: String,
    payload: JsonInputs,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonInputs {
    player: usize,
    tick: u32,
    ack: u32,
    inputs: Vec<PadInput>,
}

impl Codec for JsonCodec {
    fn name(&self) -> &'static str {
        "JSON envelope"
    }

    fn encode(
        &mut self,
        player: usize,
        tick: u32,
        inputs: &[PlayerInputs],
        _held: Option<&PlayerInputs>,
        out: &mut Vec<u8>,
    ) {
        let env = JsonEnvelope {
            protocol_version: 1,
            r#type: "inputs".into(),
            payload: JsonInputs {
                player,
                tick,
                ack: tick.saturating_sub(2),
                inputs: inputs.iter().map(PadInput::from).collect(),
            },
        };
        // Writing to a Vec cannot fail.
        let _ = serde_json::to_writer(out, &env);
    }

    fn decode(&mut self, bytes: &[u8], _held: Option<&PlayerInputs>) -> usize {
        serde_json::from_slice::<JsonEnvelope>(bytes).map_or(0, |e| e.payload.inputs.len())
    }
}

/// Bytes and time for one codec over a whole trace.
#[derive(Debug, Clone, Copy)]
pub struct CodecResult {
    /// Mean datagram size per player per tick.
    pub bytes_per_player_tick: f64,
    /// Encode plus decode time per tick (all players), best of the rounds.
    pub nanos_per_tick: f64,
}

/// Encodes and decodes every player's datagram at every tick of `trace`,
/// `rounds` times; reports the mean size and the fastest round's time.
pub fn measure_codec(codec: &mut dyn Codec, trace: &Trace, rounds: usize) -> CodecResult {
    let mut buf = Vec::with_capacity(2048);
    let mut bytes = 0usize;
    let mut best = f64::INFINITY;
    for round in 0..rounds.max(1) {
        let started = std::time::Instant::now();
        let mut decoded = 0usize;
        for tick in 0..trace.ticks() {
            for p in 0..trace.players() {
                buf.clear();
                let held = trace.held(p, tick);
                codec.encode(p, tick as u32, trace.window(p, tick), held, &mut buf);
                decoded += codec.decode(&buf, held);
                if round == 0 {
                    bytes += buf.len();
                }
            }
        }
        let elapsed = started.elapsed().as_nanos() as f64;
        assert!(decoded > 0, "{} decoded nothing", codec.name());
        best = best.min(elapsed / trace.ticks() as f64);
    }
    CodecResult {
        bytes_per_player_tick: bytes as f64 / (trace.ticks() * trace.players()) as f64,
        nanos_per_tick: best,
    }
}

/// What a run of sessions over loopback UDP cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionResult {
    /// Frames every peer ran.
    pub frames: u64,
    /// Bytes handed to the sockets, per player per frame.
    pub bytes_per_player_frame: f64,
    /// Datagrams sent, per player per frame.
    pub datagrams_per_player_frame: f64,
    /// Time spent inside the sessions and sockets (not sleeping), per player
    /// per frame, in microseconds.
    pub micros_per_player_frame: f64,
    /// Of that, the time inside the socket calls themselves (`recv_from`,
    /// `send_to`), per player per frame, in microseconds. The harness polls
    /// every socket at 2 kHz, so most of it is the same for any session:
    /// `micros_per_player_frame - socket_micros_per_player_frame` is the
    /// session's own work.
    pub socket_micros_per_player_frame: f64,
    /// Whether every peer ran identical frames.
    pub agreed: bool,
}

/// Paces a game loop at [`TICK_RATE`] against the wall clock.
#[derive(Debug)]
pub struct Pacer {
    start: std::time::Instant,
    due: u64,
}

impl Pacer {
    /// Starts now.
    pub fn new() -> Self {
        Self {
            start: std::time::Instant::now(),
            due: 0,
        }
    }

    /// Whether the next tick is due.
    pub fn due(&self) -> bool {
        self.start.elapsed() >= Duration::from_secs(1) * self.due as u32 / TICK_RATE
    }

    /// Marks the due tick done.
    pub fn done(&mut self) {
        self.due += 1;
    }

    /// Time since the start, as the core's `Instant`.
    pub fn now(&self) -> Instant {
        Instant::from_duration(self.start.elapsed())
    }
}

impl Default for Pacer {
    fn default() -> Self {
        Self::new()
    }
}

/// Binds `n` non-blocking UDP sockets on loopback ports the OS picks, and
/// returns them with their addresses.
pub fn loopback_sockets(n: usize) -> std::io::Result<(Vec<UdpSocket>, Vec<SocketAddr>)> {
    let sockets = (0..n)
        .map(|_| {
            let s = UdpSocket::bind("127.0.0.1:0")?;
            s.set_nonblocking(true)?;
            Ok(s)
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let addrs = sockets
        .iter()
        .map(UdpSocket::local_addr)
        .collect::<std::io::Result<_>>()?;
    Ok((sockets, addrs))
}

/// One side of a session benchmark over loopback UDP: every peer of one
/// library's session in this thread, stepped by a loop that sleeps between
/// steps (see [`run_side_by_side`]). Each step times itself: the whole
/// step, and the socket calls in it.
pub trait SessionRun {
    /// Polls every peer once: receives what waits, runs its timers, commits
    /// an input when its tick is due, runs the frames it can, sends what is
    /// due. Returns whether every peer has run its frames.
    fn step(&mut self) -> Result<bool, Box<dyn std::error::Error>>;
    /// What the steps so far cost.
    fn result(&self) -> SessionResult;
}

/// The time of the steps of a [`SessionRun`] and of their socket calls.
#[derive(Debug, Default, Clone, Copy)]
pub struct StepTimes {
    /// Time inside steps.
    pub busy: Duration,
    /// Of it, time inside socket calls.
    pub in_socket: Duration,
}

impl StepTimes {
    /// Runs `call` (a socket call), adding its time to `in_socket`.
    pub fn socket<T>(&mut self, call: impl FnOnce() -> T) -> T {
        let started = std::time::Instant::now();
        let out = call();
        self.in_socket += started.elapsed();
        out
    }

    /// The figures for `players` peers that each ran `frames` frames.
    pub fn result(
        &self,
        players: usize,
        frames: u64,
        bytes: u64,
        datagrams: u64,
        agreed: bool,
    ) -> SessionResult {
        let per = (players as u64 * frames) as f64;
        SessionResult {
            frames,
            bytes_per_player_frame: bytes as f64 / per,
            datagrams_per_player_frame: datagrams as f64 / per,
            micros_per_player_frame: self.busy.as_secs_f64() * 1e6 / per,
            socket_micros_per_player_frame: self.in_socket.as_secs_f64() * 1e6 / per,
            agreed,
        }
    }
}

/// Steps every run in one loop until each has run its frames, sleeping
/// 500 us between passes (the loop polls at about 2 kHz), the runs taking
/// turns at going first. Runs side by side, they meet the machine in the
/// same state from one moment to the next: a comparison of their costs
/// does not drift with it, as two runs one after the other do.
pub fn run_side_by_side(
    runs: &mut [&mut dyn SessionRun],
    limit: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    let deadline = std::time::Instant::now() + limit;
    let mut done = vec![false; runs.len()];
    let mut first = 0;
    while done.iter().any(|d| !d) {
        if std::time::Instant::now() > deadline {
            return Err("the sessions did not finish in time".into());
        }
        for k in 0..runs.len() {
            let i = (first + k) % runs.len();
            if !done[i] {
                done[i] = runs[i].step()?;
            }
        }
        first = (first + 1) % runs.len();
        std::thread::sleep(Duration::from_micros(500));
    }
    Ok(())
}

/// A 4-player (or `trace.players()`) lockstep mesh over loopback UDP at
/// [`TICK_RATE`] with input delay 2, every peer in this thread, until each
/// ran `frames` frames. Every byte handed to a socket is counted.
#[derive(Debug)]
pub struct MeshRun<'t> {
    trace: &'t Trace,
    frames: u64,
    delay: u32,
    sockets: Vec<UdpSocket>,
    addrs: Vec<SocketAddr>,
    sessions: Vec<MeshSession<PlayerInputs>>,
    clock: Pacer,
    pacers: Vec<Pacer>,
    hashes: Vec<lockstep_core::StreamHash>,
    ran: Vec<u64>,
    bytes: u64,
    datagrams: u64,
    times: StepTimes,
    buf: Vec<u8>,
    inbox: Vec<u8>,
}

impl<'t> MeshRun<'t> {
    /// Binds the sockets and starts the sessions.
    pub fn new(trace: &'t Trace, frames: u64) -> std::io::Result<Self> {
        let n = trace.players();
        let (sockets, addrs) = loopback_sockets(n)?;
        let mut roster = Roster::new();
        for i in 0..n {
            roster = roster.player(PeerId(i as u32), PlayerId(i as u16));
        }
        let config = MeshConfig {
            delay: 2,
            abandon_after: None,
            ..MeshConfig::default()
        };
        let clock = Pacer::new();
        let sessions = (0..n)
            .map(|i| {
                MeshSession::new(
                    config.clone(),
                    roster.clone(),
                    PeerId(i as u32),
                    clock.now(),
                )
            })
            .collect::<Result<_, _>>()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let pacers = (0..n)
            .map(|_| Pacer {
                start: clock.start,
                due: 0,
            })
            .collect();
        Ok(Self {
            trace,
            frames,
            delay: config.delay,
            sockets,
            addrs,
            sessions,
            clock,
            pacers,
            hashes: (0..n).map(|_| lockstep_core::StreamHash::new()).collect(),
            ran: vec![0; n],
            bytes: 0,
            datagrams: 0,
            times: StepTimes::default(),
            buf: Vec::with_capacity(1500),
            inbox: vec![0; 1500],
        })
    }
}

impl SessionRun for MeshRun<'_> {
    fn step(&mut self) -> Result<bool, Box<dyn std::error::Error>> {
        let work = std::time::Instant::now();
        let trace = self.trace;
        for i in 0..self.sessions.len() {
            let now = self.clock.now();
            loop {
                let socket = &self.sockets[i];
                let inbox = &mut self.inbox;
                match self.times.socket(|| socket.recv_from(inbox)) {
                    Ok((len, from)) => {
                        if let Some(peer) = self.addrs.iter().position(|a| *a == from) {
                            let _ = self.sessions[i].handle_datagram(
                                PeerId(peer as u32),
                                &self.inbox[..len],
                                now,
                            );
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e.into()),
                }
            }
            let s = &mut self.sessions[i];
            s.handle_timeout(now);
            if self.pacers[i].due() {
                let k = s.next_commit().get() as usize - self.delay as usize;
                let input = trace.inputs[i][k.min(trace.ticks() - 1)].clone();
                if s.commit_local(input).is_ok() {
                    self.pacers[i].done();
                }
            }
            while self.ran[i] < self.frames {
                let Some(f) = s.advance() else { break };
                self.hashes[i].push(&f);
                self.ran[i] += 1;
            }
            while let Some(t) = s.poll_transmit(&mut self.buf) {
                self.bytes += t.len as u64;
                self.datagrams += 1;
                let (socket, to) = (&self.sockets[i], self.addrs[t.destination.0 as usize]);
                let datagram = &self.buf[..t.len];
                self.times.socket(|| socket.send_to(datagram, to))?;
            }
            while s.poll_event().is_some() {}
        }
        self.times.busy += work.elapsed();
        Ok(self.ran.iter().all(|r| *r >= self.frames))
    }

    fn result(&self) -> SessionResult {
        let first = self.hashes[0].value();
        let agreed = self.hashes.iter().all(|h| h.value() == first);
        self.times.result(
            self.sessions.len(),
            self.frames,
            self.bytes,
            self.datagrams,
            agreed,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_reproducible_and_shaped_like_play() {
        let a = Trace::generate(8, 600, 7);
        let b = Trace::generate(8, 600, 7);
        assert_eq!(a.inputs, b.inputs);
        let changes = a.inputs[0]
            .windows(2)
            .filter(|w| w[0].movement != w[1].movement)
            .count();
        assert!(
            (80..160).contains(&changes),
            "movement changes {changes} times in 600 ticks"
        );
    }

    #[test]
    fn every_codec_decodes_what_it_encodes() {
        let trace = Trace::generate(8, 60, 1);
        for codec in [
            &mut LockstepCodec::default() as &mut dyn Codec,
            &mut FixedCodec,
            &mut JsonCodec,
        ] {
            let mut buf = Vec::new();
            let held = trace.held(3, 30);
            codec.encode(3, 30, trace.window(3, 30), held, &mut buf);
            assert_eq!(codec.decode(&buf, held), WINDOW, "{}", codec.name());
        }
    }

    #[test]
    fn mesh_over_loopback_udp_agrees() -> Result<(), Box<dyn std::error::Error>> {
        let trace = Trace::generate(4, 100, 3);
        let mut run = MeshRun::new(&trace, 30)?;
        run_side_by_side(&mut [&mut run], Duration::from_secs(30))?;
        let r = run.result();
        assert!(r.agreed);
        assert_eq!(r.frames, 30);
        assert!(r.bytes_per_player_frame > 0.0);
        Ok(())
    }
}
