//! A mesh driven by hand on a perfect network, every datagram routed
//! through the test (dropped, rewritten, forged from another address):
//! for attacks on what peers tell each other.

use super::Session;
use lockstep_core::wire::{Datagram, DatagramWriter, Message};
use lockstep_core::{
    AdaptiveDelay, Event, Frame, Instant, MeshConfig, PeerId, PlayerId, Roster, SystemEvent, Tick,
};
use std::time::Duration;

/// A peer's `DelayChanged` events: tick and delay.
pub type Changes = Vec<(Tick, u32)>;

/// What every game commits, every tick: a dishonest peer can predict it.
pub const INPUT: u16 = 7;

/// Who delivers what: `(from, to, bytes, net)` to any number of
/// `(claimed source, destination, bytes)`.
pub type Route<'a> = dyn FnMut(usize, usize, Vec<u8>, &Net) -> Vec<(usize, usize, Vec<u8>)> + 'a;

/// Hand-driven mesh on a perfect network, peer `i` playing seat `i`, every
/// game running the classic loop (commit while `input_due`) and reporting
/// a checkpoint every 10 ticks of a state that is its inputs so far.
pub struct Net {
    pub s: Vec<Session>,
    pub frames: Vec<Vec<Frame<u16>>>,
    pub events: Vec<Vec<Event>>,
    state: Vec<u64>,
    pub now: Instant,
}

/// `n` sessions, peer `i` playing seat `i`, started at zero.
pub fn players(n: usize, config: &MeshConfig) -> Vec<Session> {
    let mut roster = Roster::new();
    for i in 0..n {
        roster = roster.player(PeerId(i as u32), PlayerId(i as u16));
    }
    (0..n)
        .map(|i| {
            Session::new(
                config.clone(),
                roster.clone(),
                PeerId(i as u32),
                Instant::ZERO,
            )
            .expect("a session")
        })
        .collect()
}

impl Net {
    pub fn new(n: usize, config: &MeshConfig) -> Self {
        let s = players(n, config);
        Self {
            s,
            frames: vec![Vec::new(); n],
            events: vec![Vec::new(); n],
            state: vec![0; n],
            now: Instant::ZERO,
        }
    }

    /// One tick: every peer runs what it can, committing while due, then
    /// sends, through `route`.
    pub fn tick(&mut self, route: &mut Route<'_>) {
        self.now += Duration::from_millis(33);
        let mut buf = Vec::new();
        for i in 0..self.s.len() {
            let s = &mut self.s[i];
            s.handle_timeout(self.now);
            if s.input_due() {
                let _ = s.commit_local(INPUT);
            }
            while let Some(f) = s.advance() {
                for x in &f.inputs {
                    self.state[i] = self.state[i]
                        .rotate_left(5)
                        .wrapping_add(u64::from(x.unwrap_or(u16::MAX)));
                }
                if f.tick.get().is_multiple_of(10) {
                    let _ = s.report_checksum(f.tick, self.state[i]);
                }
                self.frames[i].push(f);
                if s.input_due() {
                    let _ = s.commit_local(INPUT);
                }
            }
            let mut out = Vec::new();
            while let Some(t) = self.s[i].poll_transmit(&mut buf) {
                out.push((t.destination.0 as usize, buf[..t.len].to_vec()));
            }
            for (to, bytes) in out {
                for (claimed, dest, b) in route(i, to, bytes, self) {
                    let now = self.now;
                    let _ = self.s[dest].handle_datagram(PeerId(claimed as u32), &b, now);
                }
            }
        }
        for i in 0..self.s.len() {
            while let Some(e) = self.s[i].poll_event() {
                self.events[i].push(e);
            }
        }
    }

    pub fn changes(&self, i: usize) -> Vec<(Tick, u32)> {
        self.frames[i]
            .iter()
            .flat_map(|f| f.events.iter().map(move |e| (f.tick, *e)))
            .filter_map(|(t, e)| match e {
                SystemEvent::DelayChanged { delay } => Some((t, delay)),
                _ => None,
            })
            .collect()
    }

    /// `a` and `b` ran the same inputs at every tick both ran.
    pub fn assert_inputs_agree(&self, a: usize, b: usize) {
        let n = self.frames[a].len().min(self.frames[b].len());
        for (x, y) in self.frames[a][..n].iter().zip(&self.frames[b][..n]) {
            assert_eq!(
                (x.tick, &x.inputs),
                (y.tick, &y.inputs),
                "{a} and {b}: inputs"
            );
        }
    }

    /// The `DelayChanged` events of `a` and `b` up to the shorter stream.
    pub fn common_changes(&self, a: usize, b: usize) -> (Changes, Changes) {
        let n = self.frames[a].len().min(self.frames[b].len());
        let last = self.frames[a][n - 1].tick;
        let cut = |c: Vec<(Tick, u32)>| c.into_iter().filter(|(t, _)| *t <= last).collect();
        (cut(self.changes(a)), cut(self.changes(b)))
    }

    /// Whether `i` raised a desync.
    pub fn desynced(&self, i: usize) -> bool {
        self.events[i]
            .iter()
            .any(|e| matches!(e, Event::Desync { .. }))
    }
}

/// Two ticks of delay to start with, adapting (a short window, so it moves
/// within a test), nobody abandoned by itself.
pub fn adaptive_mesh() -> MeshConfig {
    MeshConfig {
        delay: 2,
        adaptive: Some(AdaptiveDelay {
            window: 60,
            ..AdaptiveDelay::default()
        }),
        abandon_after: None,
        ..MeshConfig::default()
    }
}

/// A datagram of `msgs` read against `base`.
pub fn datagram(base: Tick, msgs: &[Message<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = DatagramWriter::new(&mut out, base, 1200);
    for m in msgs {
        w.push(m).expect("room");
    }
    w.finish();
    out
}

/// `bytes` with every `DelayWants` of `seat` replaced by `want(t)` at
/// ticks of each run of its input: the first (`every` false) or the first
/// 16 (`every` true); `None` from `want`: no want there.
pub fn set_wants(
    bytes: &[u8],
    reference: Tick,
    seat: PlayerId,
    every: bool,
    want: &dyn Fn(Tick) -> Option<u32>,
) -> Vec<u8> {
    let d = Datagram::decode(bytes, reference).expect("a datagram");
    let mut out = Vec::new();
    let mut w = DatagramWriter::new(&mut out, d.base, 1200);
    let mut wants = Vec::new();
    for m in &d.messages {
        match m {
            Message::DelayWants { seat: s, .. } if *s == seat => {}
            Message::Inputs(i) => {
                for r in i.runs.iter().filter(|r| r.seat == seat) {
                    let n = if every { r.count.min(16) } else { 1 };
                    let changes: Vec<(Tick, u32)> = (0..n)
                        .filter_map(|k| {
                            let t = r.start.saturating_add(k);
                            want(t).map(|d| (t, d))
                        })
                        .collect();
                    if !changes.is_empty() {
                        wants.push(Message::DelayWants { seat, changes });
                    }
                }
                w.push(m).expect("room");
            }
            other => w.push(other).expect("room"),
        }
    }
    for m in &wants {
        w.push(m).expect("room");
    }
    w.finish();
    out
}
