//! An arbitrary sequence of calls on a three-player mesh with an observer,
//! with datagrams delivered, dropped, duplicated, reordered or replaced by
//! fuzzer bytes, snapshots handed over and restored (the observer's window
//! is short, so it falls behind), and forged snapshots whose envelope is
//! fuzzer bytes; games whose state is changed on purpose, and resynced
//! from another player's. Whatever happens: no panic, buffers within their
//! bound, and any two sessions agree on every frame both ran.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use lockstep_core::snapshot::{Snapshot, SnapshotLimits, SnapshotSender};
use lockstep_core::wire::{DatagramWriter, Message};
use lockstep_core::{
    AdaptiveDelay, Event, Frame, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, Tick,
};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

const PEERS: usize = 4;

#[derive(Arbitrary, Debug)]
enum Op {
    Commit { peer: u8, input: u16 },
    Advance { peer: u8 },
    Timeout { peer: u8 },
    Tick { millis: u8 },
    Send { peer: u8 },
    Deliver { index: u8, twice: bool },
    Drop { index: u8 },
    Garbage { peer: u8, from: u8, bytes: Vec<u8> },
    Mutate { index: u8, at: u16, xor: u8 },
    Pause { peer: u8 },
    Resume { peer: u8 },
    Abandon { peer: u8, seat: u8 },
    Leave { peer: u8 },
    Checksum { peer: u8 },
    /// Answers every snapshot request with the current state.
    Donate { peer: u8 },
    /// Takes a snapshot in hand and restores it.
    Restore { peer: u8 },
    /// A whole, well-formed snapshot whose envelope is fuzzer bytes.
    ForgedSnapshot { peer: u8, from: u8, ahead: u16, bytes: Vec<u8> },
    AddObserver { peer: u8, id: u8 },
    RemoveObserver { peer: u8, id: u8 },
    /// Changes a game's state (a desync for the checks to find and heal).
    Corrupt { peer: u8 },
}

/// The state after each tick run, by tick; `None` for ticks a snapshot
/// skipped.
#[derive(Default)]
struct Game {
    chain: Vec<Option<u64>>,
    state: u64,
    asked: bool,
}

impl Game {
    fn run(&mut self, f: &Frame<u16>) {
        assert_eq!(f.tick.get() as usize, self.chain.len(), "frames in order, each once");
        let mut h = DefaultHasher::new();
        (self.state, &f.inputs, &f.events).hash(&mut h);
        self.state = h.finish();
        self.chain.push(Some(self.state));
    }

    /// Restores `s`; false if it is not a state of this game (forged).
    fn restore(&mut self, s: &Snapshot) -> bool {
        let at = s.tick.get() as usize;
        // An observer's is ahead; a player resyncing ran its tick.
        assert!(at + 1 >= self.chain.len(), "a snapshot of a state already run past");
        let raw = <[u8; 8]>::try_from(s.bytes.as_slice()).ok();
        self.state = raw.map_or(0, u64::from_le_bytes);
        self.chain.resize(at, None);
        self.chain.push(Some(self.state));
        raw.is_some()
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let roster = Roster::new()
        .player(PeerId(0), PlayerId(0))
        .player(PeerId(1), PlayerId(1))
        .player(PeerId(2), PlayerId(2))
        .observer(PeerId(3));
    // The delay adapts (a short window, so it moves within a run): wants
    // ride in the streams and every session must still agree.
    let config = MeshConfig {
        abandon_after: Some(Duration::from_secs(2)),
        observer_window: 16,
        resync: true,
        adaptive: Some(AdaptiveDelay {
            window: 16,
            ..AdaptiveDelay::default()
        }),
        ..MeshConfig::default()
    };
    let mut now = Instant::ZERO;
    let mut sessions: Vec<MeshSession<u16>> = (0..PEERS as u32)
        .map(|i| MeshSession::new(config.clone(), roster.clone(), PeerId(i), now).expect("config"))
        .collect();
    let mut games: Vec<Game> = (0..PEERS).map(|_| Game::default()).collect();
    let mut wire: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    let mut buf = Vec::new();
    // Forged bytes that decode are another peer's word: a mesh trusts its
    // peers' addresses, so after one is accepted agreement is not checked.
    let mut tainted = false;
    let pick = |p: u8| usize::from(p) % PEERS;
    for op in ops.into_iter().take(2_000) {
        match op {
            Op::Commit { peer, input } => {
                let _ = sessions[pick(peer)].commit_local(input);
            }
            Op::Advance { peer } => {
                let i = pick(peer);
                while let Some(f) = sessions[i].advance() {
                    games[i].run(&f);
                }
                while let Some(ev) = sessions[i].poll_event() {
                    games[i].asked |= matches!(ev, Event::SnapshotRequested { .. });
                }
            }
            Op::Timeout { peer } => sessions[pick(peer)].handle_timeout(now),
            Op::Tick { millis } => now += Duration::from_millis(u64::from(millis)),
            Op::Send { peer } => {
                let i = pick(peer);
                while let Some(t) = sessions[i].poll_transmit(&mut buf) {
                    // Added observers have no session here: their datagrams go nowhere.
                    if wire.len() < 256 && (t.destination.0 as usize) < PEERS {
                        wire.push((i, t.destination.0 as usize, buf[..t.len].to_vec()));
                    }
                }
            }
            Op::Deliver { index, twice } => {
                if wire.is_empty() {
                    continue;
                }
                let k = usize::from(index) % wire.len();
                let (from, to, bytes) = if twice { wire[k].clone() } else { wire.swap_remove(k) };
                let _ = sessions[to].handle_datagram(PeerId(from as u32), &bytes, now);
            }
            Op::Drop { index } => {
                if !wire.is_empty() {
                    let k = usize::from(index) % wire.len();
                    wire.swap_remove(k);
                }
            }
            Op::Garbage { peer, from, bytes } => {
                let from = PeerId(u32::from(from) % 6);
                tainted |= sessions[pick(peer)].handle_datagram(from, &bytes, now).is_ok();
            }
            Op::Mutate { index, at, xor } => {
                if wire.is_empty() {
                    continue;
                }
                let k = usize::from(index) % wire.len();
                let (from, to, mut d) = wire[k].clone();
                if !d.is_empty() && xor != 0 {
                    let at = usize::from(at) % d.len();
                    d[at] ^= xor;
                    tainted |= sessions[to].handle_datagram(PeerId(from as u32), &d, now).is_ok();
                }
            }
            Op::Pause { peer } => {
                let _ = sessions[pick(peer)].request_pause();
            }
            Op::Resume { peer } => {
                sessions[pick(peer)].resume();
            }
            Op::Abandon { peer, seat } => {
                let _ = sessions[pick(peer)].abandon(PlayerId(u16::from(seat) % 4));
            }
            Op::Leave { peer } => sessions[pick(peer)].leave(),
            Op::Checksum { peer } => {
                let i = pick(peer);
                if let Some(last) = games[i].chain.len().checked_sub(1) {
                    let _ = sessions[i].report_checksum(Tick::new(last as u32), games[i].state);
                }
            }
            Op::Donate { peer } => {
                let i = pick(peer);
                if let Some(last) = games[i].chain.len().checked_sub(1).filter(|_| games[i].asked) {
                    games[i].asked = false;
                    let bytes = games[i].state.to_le_bytes().to_vec();
                    let _ = sessions[i].provide_snapshot(Tick::new(last as u32), bytes);
                }
            }
            Op::Restore { peer } => {
                let i = pick(peer);
                if let Some(s) = sessions[i].take_snapshot() {
                    tainted |= !games[i].restore(&s);
                }
            }
            Op::ForgedSnapshot { peer, from, ahead, bytes } => {
                let i = pick(peer);
                let tick = sessions[i].frame().saturating_add(u32::from(ahead));
                let limits = SnapshotLimits::default();
                let Ok(mut tx) = SnapshotSender::new(9, &Snapshot::new(tick, bytes), 1000, &limits) else {
                    continue;
                };
                let mut d = Vec::new();
                let mut w = DatagramWriter::new(&mut d, tick, 1200);
                if let Some(c) = tx.next_chunk(now) {
                    let _ = w.push(&Message::SnapshotChunk(c.as_message()));
                }
                w.finish();
                tainted |= sessions[i].handle_datagram(PeerId(u32::from(from) % 6), &d, now).is_ok();
            }
            Op::Corrupt { peer } => {
                // States may differ for good (two players that part have no
                // majority): only the bounds and the absence of panics hold.
                games[pick(peer)].state ^= 0x5A5A;
                tainted = true;
            }
            Op::AddObserver { peer, id } => {
                let _ = sessions[pick(peer)].add_observer(PeerId(u32::from(id) % 8));
            }
            Op::RemoveObserver { peer, id } => {
                let _ = sessions[pick(peer)].remove_observer(PeerId(u32::from(id) % 8));
            }
        }
        for s in &sessions {
            assert!(s.stats().buffered_ticks <= s.buffer_bound());
        }
    }
    if tainted {
        return;
    }
    for a in 0..PEERS {
        for b in 0..PEERS {
            let n = games[a].chain.len().min(games[b].chain.len());
            if let (Some(Some(x)), Some(Some(y))) = (n.checked_sub(1).map(|k| games[a].chain[k]), n.checked_sub(1).map(|k| games[b].chain[k])) {
                assert_eq!(x, y, "peers {a} and {b} disagree");
            }
        }
    }
});
