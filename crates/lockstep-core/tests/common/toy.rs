//! A tiny deterministic game for the join tests, and the client loop that
//! plays it: its whole state is a fold of every frame, plus incompressible
//! bulk (as a real state has) so that a snapshot takes many chunks.

use lockstep_core::sequenced::{ClientSession, HostedSession, Simulation};
use lockstep_core::sim::SimRng;
use lockstep_core::snapshot::{Snapshot, SnapshotError};
use lockstep_core::{ChecksumError, CommitError};
use lockstep_core::{Event, Frame, Instant, Pacer, PlayerId, Tick};
use std::collections::BTreeMap;

/// What [`App::play`] needs of a session: a client's game side.
pub trait Player {
    fn poll_event(&mut self) -> Option<Event>;
    fn take_snapshot(&mut self) -> Option<Snapshot>;
    fn provide_snapshot(&mut self, tick: Tick, bytes: Vec<u8>) -> Result<(), SnapshotError>;
    fn seat(&self) -> Option<PlayerId>;
    fn joining(&self) -> bool;
    fn commit_local(&mut self, input: u16) -> Result<Tick, CommitError>;
    fn advance(&mut self) -> Option<Frame<u16>>;
    fn report_checksum(&mut self, tick: Tick, hash: u64) -> Result<(), ChecksumError>;
    fn input_due(&self) -> bool;
    fn ready_to_pace(&self) -> usize;
}

macro_rules! player {
    ($t:ty, $joining:expr) => {
        impl Player for $t {
            fn poll_event(&mut self) -> Option<Event> {
                <$t>::poll_event(self)
            }
            fn take_snapshot(&mut self) -> Option<Snapshot> {
                <$t>::take_snapshot(self)
            }
            fn provide_snapshot(
                &mut self,
                tick: Tick,
                bytes: Vec<u8>,
            ) -> Result<(), SnapshotError> {
                <$t>::provide_snapshot(self, tick, bytes)
            }
            fn seat(&self) -> Option<PlayerId> {
                <$t>::seat(self)
            }
            fn joining(&self) -> bool {
                $joining(self)
            }
            fn commit_local(&mut self, input: u16) -> Result<Tick, CommitError> {
                <$t>::commit_local(self, input)
            }
            fn advance(&mut self) -> Option<Frame<u16>> {
                <$t>::advance(self)
            }
            fn report_checksum(&mut self, tick: Tick, hash: u64) -> Result<(), ChecksumError> {
                <$t>::report_checksum(self, tick, hash)
            }
            fn input_due(&self) -> bool {
                <$t>::input_due(self)
            }
            fn ready_to_pace(&self) -> usize {
                <$t>::ready_to_pace(self)
            }
        }
    };
}
player!(ClientSession<u16>, ClientSession::<u16>::joining);
player!(HostedSession<u16>, |s: &HostedSession<u16>| s
    .client()
    .joining());

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Game {
    pub next: Tick,
    pub acc: u64,
    /// Bytes of bulk in a snapshot.
    pub bulk: usize,
}

impl Game {
    pub fn new(first: Tick, bulk: usize) -> Self {
        Self {
            next: first,
            acc: 0,
            bulk,
        }
    }

    pub fn step(&mut self, f: &Frame<u16>) {
        assert_eq!(f.tick, self.next, "frames in order, each once");
        let mut h = self.acc ^ u64::from(f.tick.get());
        for (i, input) in f.inputs.iter().enumerate() {
            let v = input.map_or(0xFFFF_FFFF, u64::from);
            h = (h ^ v ^ ((i as u64) << 40)).wrapping_mul(0x100_0000_01B3);
        }
        for ev in &f.events {
            h = (h ^ ev.player().map_or(0x1_0000, |p| u64::from(p.0)) ^ 0xE7)
                .wrapping_mul(0x100_0000_01B3);
        }
        self.acc = h;
        self.next = f.tick.saturating_add(1);
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut v = self.next.get().to_le_bytes().to_vec();
        v.extend_from_slice(&self.acc.to_le_bytes());
        let mut x = self.acc | 1;
        v.extend((0..self.bulk).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }));
        v
    }

    pub fn restore(b: &[u8]) -> Self {
        let next = Tick::new(u32::from_le_bytes(b[..4].try_into().unwrap()));
        let acc = u64::from_le_bytes(b[4..12].try_into().unwrap());
        Self {
            next,
            acc,
            bulk: b.len() - 12,
        }
    }
}

impl Simulation<u16> for Game {
    fn step(&mut self, frame: &Frame<u16>) {
        Self::step(self, frame);
    }

    fn snapshot(&self) -> Vec<u8> {
        self.bytes()
    }

    fn hash(&self) -> u64 {
        self.acc
    }
}

/// One client's game loop and what it saw.
#[derive(Debug)]
pub struct App {
    pub game: Option<Game>,
    /// The state after each tick run.
    pub states: BTreeMap<Tick, u64>,
    pub asked: Option<Tick>,
    /// The ticks of the snapshots restored, in order.
    pub restored: Vec<Tick>,
    pub rng: SimRng,
    pub events: Vec<Event>,
    pub inputs_after_live: u64,
    /// Reports a wrong state hash every 10 ticks (a liar, or a broken
    /// build).
    pub lie: bool,
    /// Commits no input (its connection stays alive).
    pub mute: bool,
    /// Runs the loop `docs/game-loop.md` shows, its ticks on this steady
    /// clock, committing while `input_due()` holds; without one, every
    /// frame runs on arrival and a commit is offered every call.
    pub pacer: Option<Pacer>,
    /// Hands its state over one frame too late, for the tick after the one
    /// asked (as a loop that runs a frame before reading its events does).
    pub late_donor: bool,
    /// What `provide_snapshot` refused.
    pub snapshot_errors: Vec<SnapshotError>,
    /// Frames run whose input for our own seat was one we committed (not
    /// the neutral input): how much this client played.
    pub own_inputs_run: u64,
    /// The room's first tick and the bulk of the game's state, for a game
    /// started afresh.
    first: Tick,
    bulk: usize,
}

impl App {
    /// A client's game; a joining one has none until its snapshot.
    pub fn new(seed: u64, joining: bool, first: Tick, bulk: usize) -> Self {
        Self {
            game: (!joining).then(|| Game::new(first, bulk)),
            states: BTreeMap::new(),
            asked: None,
            restored: Vec::new(),
            rng: SimRng::new(seed),
            events: Vec::new(),
            inputs_after_live: 0,
            lie: false,
            mute: false,
            pacer: None,
            late_donor: false,
            snapshot_errors: Vec::new(),
            own_inputs_run: 0,
            first,
            bulk,
        }
    }

    /// One turn of this client's loop at `now`: the paced loop with a
    /// [`pacer`](Self::pacer), else [`play`](Self::play).
    pub fn play_at(&mut self, c: &mut impl Player, now: Instant) {
        let Some(mut pacer) = self.pacer.take() else {
            return self.play(c);
        };
        self.take_events(c);
        self.commit_due(c);
        self.donate(c);
        for _ in 0..pacer.ticks_due(now, c.ready_to_pace()) {
            let Some(f) = c.advance() else { break };
            self.run(c, &f);
            self.commit_due(c);
        }
        self.pacer = Some(pacer);
    }

    fn commit_due(&mut self, c: &mut impl Player) {
        if c.input_due() && !self.mute {
            let input = self.rng.next_u64() as u16 | 1;
            if c.commit_local(input).is_ok() {
                self.inputs_after_live += 1;
            }
        }
    }

    /// Events, then the snapshot to restore if one came.
    fn take_events(&mut self, c: &mut impl Player) {
        while let Some(ev) = c.poll_event() {
            match ev {
                Event::SnapshotRequested { tick } => self.asked = Some(tick),
                // Taken back without our state: start over, as a new
                // client would.
                Event::Reconnected { kept: false, .. } => self.game = None,
                _ => {}
            }
            self.events.push(ev);
        }
        if let Some(s) = c.take_snapshot() {
            self.restored.push(s.tick);
            let g = Game::restore(&s.bytes);
            assert_eq!(g.next, s.tick.saturating_add(1));
            self.game = Some(g);
        }
    }

    pub fn play(&mut self, c: &mut impl Player) {
        self.take_events(c);
        if c.seat().is_some()
            && !self.mute
            && c.commit_local(self.rng.next_u64() as u16).is_ok()
            && !c.joining()
        {
            self.inputs_after_live += 1;
        }
        self.donate(c);
        while let Some(f) = c.advance() {
            self.run(c, &f);
        }
    }

    /// Runs frame `f`, reports its checksum and hands our state over if
    /// it was asked for after it.
    fn run(&mut self, c: &mut impl Player, f: &Frame<u16>) {
        // A client welcomed to replay the game (not joining from a
        // snapshot) runs it from the start.
        if self.game.is_none() && !c.joining() {
            self.game = Some(Game::new(self.first, self.bulk));
        }
        let Some(g) = self.game.as_mut() else {
            panic!("a frame before the state it follows");
        };
        g.step(f);
        self.states.insert(f.tick, g.acc);
        let _ = c.report_checksum(f.tick, g.acc ^ u64::from(self.lie));
        self.donate(c);
        if let Some(me) = c.seat()
            && f.inputs
                .get(me.index())
                .is_some_and(|i| i.is_some_and(|v| v != 0))
        {
            self.own_inputs_run += 1;
        }
    }

    /// Hands over the state asked for once it is the current one.
    pub fn donate(&mut self, c: &mut impl Player) {
        if self.late_donor {
            if let (Some(t), Some(g)) = (self.asked, &self.game)
                && g.next == t.saturating_add(2)
            {
                if let Err(e) = c.provide_snapshot(t.saturating_add(1), g.bytes()) {
                    self.snapshot_errors.push(e);
                }
                self.asked = None;
            }
            return;
        }
        if let (Some(t), Some(g)) = (self.asked, &self.game)
            && g.next == t.saturating_add(1)
        {
            // A request the sequencer withdrew meanwhile (its joiner went,
            // or another donor was asked) is refused as not asked: dropped,
            // as the runner drops it; the sequencer asks again if it must.
            match c.provide_snapshot(t, g.bytes()) {
                Ok(()) | Err(SnapshotError::NotAsked { .. }) => {}
                Err(e) => panic!("snapshot under the cap: {e:?}"),
            }
            self.asked = None;
        }
    }

    pub fn caught_up(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, Event::CaughtUp { .. }))
    }
}
