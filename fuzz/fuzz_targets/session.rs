//! An arbitrary sequence of calls on a three-player mesh with an observer,
//! with datagrams delivered, dropped, duplicated, reordered or replaced by
//! fuzzer bytes. Whatever happens: no panic, buffers within their bound,
//! and any two sessions agree on every frame both ran.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use lockstep_core::{
    Frame, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, StreamHash,
};
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
}

fuzz_target!(|ops: Vec<Op>| {
    let roster = Roster::new()
        .player(PeerId(0), PlayerId(0))
        .player(PeerId(1), PlayerId(1))
        .player(PeerId(2), PlayerId(2))
        .observer(PeerId(3));
    let config = MeshConfig { abandon_after: Some(Duration::from_secs(2)), ..MeshConfig::default() };
    let mut now = Instant::ZERO;
    let mut sessions: Vec<MeshSession<u16>> = (0..PEERS as u32)
        .map(|i| MeshSession::new(config.clone(), roster.clone(), PeerId(i), now).expect("config"))
        .collect();
    let mut chains: Vec<Vec<u64>> = vec![Vec::new(); PEERS];
    let mut hashes: Vec<StreamHash> = (0..PEERS).map(|_| StreamHash::new()).collect();
    let mut wire: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    let mut buf = Vec::new();
    // Forged bytes that decode are another peer's word: a mesh trusts its
    // peers' addresses, so after one is accepted agreement is not checked.
    let mut tainted = false;
    let pick = |p: u8| usize::from(p) % PEERS;
    let record = |i: usize, f: &Frame<u16>, chains: &mut Vec<Vec<u64>>, hashes: &mut Vec<StreamHash>| {
        hashes[i].push(f);
        chains[i].push(hashes[i].value());
    };
    for op in ops.into_iter().take(2_000) {
        match op {
            Op::Commit { peer, input } => {
                let _ = sessions[pick(peer)].commit_local(input);
            }
            Op::Advance { peer } => {
                let i = pick(peer);
                while let Some(f) = sessions[i].advance() {
                    record(i, &f, &mut chains, &mut hashes);
                }
            }
            Op::Timeout { peer } => sessions[pick(peer)].handle_timeout(now),
            Op::Tick { millis } => now += Duration::from_millis(u64::from(millis)),
            Op::Send { peer } => {
                let i = pick(peer);
                while let Some(t) = sessions[i].poll_transmit(&mut buf) {
                    if wire.len() < 256 {
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
                if let Some(last) = chains[i].len().checked_sub(1) {
                    let _ = sessions[i].report_checksum(lockstep_core::Tick::new(last as u32), chains[i][last]);
                }
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
            let n = chains[a].len().min(chains[b].len());
            if n > 0 {
                assert_eq!(chains[a][n - 1], chains[b][n - 1], "peers {a} and {b} disagree");
            }
        }
    }
});
