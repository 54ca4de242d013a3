//! Shared scenario harness: mesh sessions over the simulated network, each
//! run by a small "game" that commits generated input, runs every frame it
//! gets, reports checksums and records what it saw.
#![allow(dead_code, unreachable_pub)]

pub mod hand;
pub mod hosted;
pub mod join;
pub mod observe;
pub mod props;
pub mod record;
pub mod star;
pub mod toy;

use lockstep_core::sim::{LinkConditions, Outcome, Sim, SimNetwork, SimRng};
use lockstep_core::{
    Event, Frame, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, SystemEvent, Tick,
};
use std::collections::BTreeMap;
use std::time::Duration;

pub type Session = MeshSession<u16>;

/// What a skewed hash differs by.
pub const SKEW: u64 = 0x5A5A_5A5A;

/// What one peer's game saw.
#[derive(Debug)]
pub struct Record {
    /// The session's first tick.
    pub first: Tick,
    /// The game's state after each frame, indexed by tick since the first:
    /// a hash of every frame run, folded in one at a time, so it can be
    /// handed over as a snapshot and restored.
    pub chain: Vec<u64>,
    /// The state now.
    pub state: u64,
    /// The index in `chain` of the latest snapshot restored: the entries
    /// before it were skipped (they repeat the snapshot's state).
    pub restored: Option<usize>,
    /// Bytes of filler, derived from the state, that make snapshots as big
    /// as a real game's (and hard to compress).
    pub bulk: usize,
    /// Snapshots the session refused to send (over the cap).
    pub snapshot_refusals: Vec<lockstep_core::snapshot::SnapshotError>,
    /// Ticks that carried system events, with the events.
    pub system: Vec<(Tick, Vec<SystemEvent>)>,
    pub events: Vec<Event>,
    rng: SimRng,
    pending: Option<u16>,
    pub committed: u64,
    pub refused: u64,
    /// The game stops committing input (the session still runs: its
    /// connection stays alive, as a keepalive-only griefer's does).
    pub mute: bool,
    /// A desync injected into the hashes reported: from this tick on
    /// (`true`), or at this tick only (`false`, a state that recovers).
    pub skew: Option<(Tick, bool)>,
    /// A desync injected into the state itself at this tick: it differs
    /// from every other machine's from then on.
    pub corrupt: Option<Tick>,
    /// A snapshot asked of the game for a tick it has not run yet.
    pub owed: Option<Tick>,
    /// The game hands over a wrong state when asked for its own.
    pub poison: bool,
    /// The game never takes a snapshot it is told of.
    pub deaf: bool,
}

impl Record {
    pub fn new(seed: u64, first: Tick) -> Self {
        Self {
            first,
            chain: Vec::new(),
            state: 0,
            restored: None,
            bulk: 0,
            snapshot_refusals: Vec::new(),
            system: Vec::new(),
            events: Vec::new(),
            rng: SimRng::new(seed),
            pending: None,
            committed: 0,
            refused: 0,
            mute: false,
            skew: None,
            corrupt: None,
            owed: None,
            poison: false,
            deaf: false,
        }
    }

    /// The pending input was taken.
    pub fn committed(&mut self) {
        self.pending = None;
        self.committed += 1;
    }

    /// Folds a frame into the record.
    pub fn record(&mut self, frame: &Frame<u16>) {
        assert_eq!(
            frame.tick.since(self.first) as usize,
            self.chain.len(),
            "frames must come in order, each once"
        );
        let mut bytes = Vec::new();
        lockstep_core::wire::encode_frame(frame, &mut bytes);
        self.state = xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, self.state);
        if self.corrupt == Some(frame.tick) {
            // Once: a state resynced to before the tick runs it again.
            self.corrupt = None;
            self.state ^= SKEW;
        }
        self.chain.push(self.state);
        if !frame.events.is_empty() {
            self.system.push((frame.tick, frame.events.clone()));
        }
    }

    /// The game's state, as a snapshot's bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        let state = if self.poison {
            self.state ^ SKEW
        } else {
            self.state
        };
        let mut out = state.to_le_bytes().to_vec();
        out.extend(filler(state, self.bulk));
        out
    }

    /// The state after `tick`, as a snapshot's bytes, if it was run.
    pub fn snapshot_at(&self, tick: Tick) -> Option<Vec<u8>> {
        let state = *self.chain.get(tick.since(self.first) as usize)?;
        let mut out = state.to_le_bytes().to_vec();
        out.extend(filler(state, self.bulk));
        Some(out)
    }

    /// Replaces the state with a snapshot's, taken after `tick`: the frames
    /// up to it are skipped, never run (or, for a state resynced to an
    /// earlier tick, the ones after it are forgotten and run again).
    pub fn restore(&mut self, tick: Tick, bytes: &[u8]) {
        let at = tick.since(self.first) as usize;
        self.chain.truncate(at);
        assert_eq!(bytes.len(), 8 + self.bulk, "a snapshot of the wrong size");
        let (head, rest) = bytes.split_at(8);
        let mut raw = [0u8; 8];
        raw.copy_from_slice(head);
        self.state = u64::from_le_bytes(raw);
        assert!(
            rest.iter().copied().eq(filler(self.state, self.bulk)),
            "a snapshot with bad filler"
        );
        self.chain.resize(at + 1, self.state);
        self.restored = Some(at);
    }

    /// The state hash reported for `tick` (the state's, unless skewed).
    pub fn reported(&self, tick: Tick) -> u64 {
        match self.skew {
            Some((at, lasting)) if tick == at || (lasting && tick > at) => self.state ^ SKEW,
            _ => self.state,
        }
    }

    /// The last tick run, if any.
    pub fn last_tick(&self) -> Option<Tick> {
        let n = u32::try_from(self.chain.len()).ok()?;
        n.checked_sub(1).map(|k| self.first.saturating_add(k))
    }

    /// Input that changes every few ticks, like a held stick.
    pub fn input(&mut self) -> u16 {
        if let Some(p) = self.pending {
            return p;
        }
        let v = if self.rng.chance(0.25) {
            self.rng.next_u64() as u16
        } else {
            self.committed as u16 / 4
        };
        self.pending = Some(v);
        v
    }

    pub fn frames(&self) -> usize {
        self.chain.len()
    }
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub players: usize,
    pub observers: usize,
    pub config: MeshConfig,
    pub link: LinkConditions,
    pub seed: u64,
    pub period: Duration,
}

impl Scenario {
    pub fn new(players: usize, seed: u64) -> Self {
        Self {
            players,
            observers: 0,
            config: MeshConfig::default(),
            link: LinkConditions::default(),
            seed,
            period: Duration::from_millis(33),
        }
    }

    pub fn peer_ids(&self) -> Vec<PeerId> {
        (0..(self.players + self.observers) as u32)
            .map(PeerId)
            .collect()
    }

    pub fn player_ids(&self) -> Vec<PeerId> {
        (0..self.players as u32).map(PeerId).collect()
    }

    /// As [`build`](Self::build), with every game's snapshots `bulk`
    /// bytes bigger (filler that does not compress).
    pub fn build_with_bulk(&self, bulk: usize) -> Harness {
        let mut h = self.build();
        for r in h.records.values_mut() {
            r.bulk = bulk;
        }
        h
    }

    pub fn build(&self) -> Harness {
        let mut roster = Roster::new();
        for i in 0..self.players {
            roster = roster.player(PeerId(i as u32), PlayerId(i as u16));
        }
        for i in self.players..self.players + self.observers {
            roster = roster.observer(PeerId(i as u32));
        }
        let mut sim = Sim::new(SimNetwork::new(self.seed, self.link.clone()));
        let mut records = BTreeMap::new();
        for id in self.peer_ids() {
            let s = Session::new(self.config.clone(), roster.clone(), id, Instant::ZERO)
                .unwrap_or_else(|e| panic!("config: {e}"));
            sim.add(id, s);
            records.insert(
                id,
                Record::new(
                    self.seed ^ ((u64::from(id.0) + 1) * 0x9E37),
                    self.config.first_tick,
                ),
            );
        }
        Harness {
            first: self.config.first_tick,
            sim,
            records,
            period: self.period,
            checksum_every: 10,
        }
    }
}

pub struct Harness {
    /// The sessions' first tick.
    pub first: Tick,
    pub sim: Sim<Session>,
    pub records: BTreeMap<PeerId, Record>,
    pub period: Duration,
    pub checksum_every: u32,
}

/// One game-loop iteration for one peer.
pub fn play(s: &mut Session, rec: &mut Record, checksum_every: u32) {
    if !rec.deaf
        && let Some(snap) = s.take_snapshot()
    {
        rec.restore(snap.tick, &snap.bytes);
    }
    if !s.watching() && !rec.mute {
        let input = rec.input();
        match s.commit_local(input) {
            Ok(_) => {
                rec.pending = None;
                rec.committed += 1;
            }
            Err(_) => rec.refused += 1,
        }
    }
    while let Some(frame) = s.advance() {
        record_frame(s, rec, &frame, checksum_every);
    }
    while let Some(ev) = s.poll_event() {
        if let (Event::SnapshotRequested { .. }, Some(last)) = (&ev, rec.last_tick())
            && let Err(e) = s.provide_snapshot(last, rec.snapshot())
        {
            rec.snapshot_refusals.push(e);
        }
        rec.events.push(ev);
    }
}

fn record_frame(s: &mut Session, rec: &mut Record, frame: &Frame<u16>, checksum_every: u32) {
    rec.record(frame);
    if frame.tick.since(rec.first).is_multiple_of(checksum_every) {
        s.report_checksum(frame.tick, rec.reported(frame.tick))
            .unwrap_or_else(|e| panic!("checksum: {e}"));
    }
}

impl Harness {
    /// Runs until `done` or `until`, with `hook` called before each peer's
    /// game step (to pause, abandon, inspect...).
    pub fn run(
        &mut self,
        until: Instant,
        mut hook: impl FnMut(PeerId, &mut Session, Instant, &mut Record),
        done: impl FnMut(&Sim<Session>) -> bool,
    ) -> Outcome {
        let records = &mut self.records;
        let every = self.checksum_every;
        self.sim.run(
            until,
            self.period,
            |id, s, now| {
                let rec = records
                    .get_mut(&id)
                    .unwrap_or_else(|| panic!("no record for {id}"));
                hook(id, s, now, rec);
                play(s, rec, every);
            },
            done,
        )
    }

    /// Runs until every live peer has run `frames` frames.
    pub fn run_until_tick(&mut self, frames: u32, until: Instant) -> Outcome {
        let first = self.first;
        self.run(
            until,
            |_, _, _, _| {},
            |sim| sim.live().all(|(_, s)| s.frame().since(first) >= frames),
        )
    }

    /// Safety: every pair of peers ran identical frames up to the shorter
    /// of their two streams.
    pub fn assert_streams_agree(&self, ids: &[PeerId]) {
        assert_streams_agree(self.sim.net.seed(), &self.records, ids);
    }

    pub fn assert_no_desync(&self) {
        assert_no_desync(self.sim.net.seed(), &self.records);
    }

    pub fn session(&self, id: PeerId) -> &Session {
        self.sim.endpoint(id).unwrap_or_else(|| panic!("no {id}"))
    }
}

/// Drives a hand-built set of sessions with no delay or loss: moves the
/// clock on by 40 ms (so resend timers fire), then delivers everything
/// pending between all of them until quiet.
pub fn exchange(sessions: &mut [(PeerId, Session)], clock: &mut Instant) {
    *clock += Duration::from_millis(40);
    let now = *clock;
    let mut buf = Vec::new();
    loop {
        let mut moved = false;
        for i in 0..sessions.len() {
            sessions[i].1.handle_timeout(now);
            let mut out = Vec::new();
            while let Some(t) = sessions[i].1.poll_transmit(&mut buf) {
                out.push((t.destination, buf[..t.len].to_vec()));
            }
            let from = sessions[i].0;
            for (to, bytes) in out {
                moved = true;
                if let Some((_, s)) = sessions.iter_mut().find(|(id, _)| *id == to) {
                    s.handle_datagram(from, &bytes, now)
                        .unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
                }
            }
        }
        if !moved {
            return;
        }
    }
}

/// [`exchange`] until `d` has passed, and once more.
pub fn exchange_for(sessions: &mut [(PeerId, Session)], clock: &mut Instant, d: Duration) {
    let until = *clock + d;
    while *clock <= until {
        exchange(sessions, clock);
    }
}

/// `len` bytes that follow from `state` and do not compress.
fn filler(state: u64, len: usize) -> impl Iterator<Item = u8> {
    let mut x = state | 1;
    (0..len).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    })
}

pub fn secs(s: u64) -> Instant {
    Instant::from_millis(s * 1000)
}

pub fn outcome_ok(o: Outcome, what: &str, seed: u64) {
    assert_eq!(o, Outcome::Done, "seed {seed}: {what}");
}

/// Safety: every pair of `ids` ran identical frames up to the shorter of
/// their two streams.
pub fn assert_streams_agree(seed: u64, records: &BTreeMap<PeerId, Record>, ids: &[PeerId]) {
    for a in ids {
        for b in ids {
            let (ra, rb) = (&records[a].chain, &records[b].chain);
            let n = ra.len().min(rb.len());
            // Ticks a snapshot skipped were never run there: compared from
            // the snapshot on.
            let from = records[a].restored.max(records[b].restored).unwrap_or(0);
            if n > from && ra[n - 1] != rb[n - 1] {
                let first = (from..n).find(|&i| ra[i] != rb[i]).unwrap_or(n);
                panic!("seed {seed}: {a} and {b} diverge at tick {first} (of {n} common)");
            }
        }
    }
}

/// No peer reported a desync.
pub fn assert_no_desync(seed: u64, records: &BTreeMap<PeerId, Record>) {
    for (id, rec) in records {
        if let Some(ev) = rec
            .events
            .iter()
            .find(|e| matches!(e, Event::Desync { .. }))
        {
            panic!("seed {seed}: {id} reported {ev:?}");
        }
    }
}
