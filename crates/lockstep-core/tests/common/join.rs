//! A sequenced room on the simulated network whose clients play the toy
//! game (see `toy`), for the join and reconnect tests: clients join, leave,
//! reconnect; the sequencer's events are kept; states are compared.

use super::star::{Node, SERVER};
use super::toy::{App, Game};
use lockstep_core::sequenced::{
    ClientConfig, ClientSession, DropReason, Sequencer, SequencerConfig, SequencerEvent,
};
use lockstep_core::sim::{LinkConditions, Outcome, Sim, SimNetwork};
use lockstep_core::{Instant, PeerId, Tick};
use std::collections::BTreeMap;
use std::time::Duration;

/// Bytes of bulk in the game's state: a few hundred chunks, several round
/// trips.
pub const BULK: usize = 200_000;

/// One datagram of `msgs` with base `base`, as a client would send it.
pub fn datagram(base: Tick, msgs: &[lockstep_core::wire::Message<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = lockstep_core::wire::DatagramWriter::new(&mut out, base, 1200);
    for m in msgs {
        w.push(m).unwrap();
    }
    w.finish();
    out
}

pub struct World {
    pub first: Tick,
    pub sim: Sim<Node>,
    pub apps: BTreeMap<PeerId, App>,
    pub server_events: Vec<SequencerEvent>,
    pub period: Duration,
    /// Bytes of bulk in the games of clients added from now on.
    pub bulk: usize,
}

impl World {
    pub fn new(players: usize, server: SequencerConfig, link: LinkConditions, seed: u64) -> Self {
        Self::with(players, server, link, seed, false)
    }

    pub fn with(
        players: usize,
        server: SequencerConfig,
        link: LinkConditions,
        seed: u64,
        simulates: bool,
    ) -> Self {
        Self::build(players, server, link, seed, simulates, BULK)
    }

    /// A room whose games carry `bulk` bytes of state.
    pub fn with_bulk(
        players: usize,
        server: SequencerConfig,
        link: LinkConditions,
        seed: u64,
        bulk: usize,
    ) -> Self {
        Self::build(players, server, link, seed, false, bulk)
    }

    fn build(
        players: usize,
        server: SequencerConfig,
        link: LinkConditions,
        seed: u64,
        simulates: bool,
        bulk: usize,
    ) -> Self {
        let period = Duration::from_micros(1_000_000 / u64::from(server.tick_rate));
        let first = server.first_tick;
        let mut sim = Sim::new(SimNetwork::new(seed, link));
        let game = Game::new(server.first_tick, bulk);
        let s = if simulates {
            Sequencer::with_simulation(server, Instant::ZERO, Box::new(game))
        } else {
            Sequencer::new(server, Instant::ZERO)
        }
        .unwrap();
        sim.add(SERVER, Node::Server(s));
        let mut w = Self {
            first,
            sim,
            apps: BTreeMap::new(),
            server_events: Vec::new(),
            period,
            bulk,
        };
        for k in 1..=players as u32 {
            w.add_client(PeerId(k), false, false, seed);
        }
        w
    }

    pub fn add_client(&mut self, id: PeerId, joining: bool, spectator: bool, seed: u64) {
        self.add_node(id, joining, spectator, seed, Node::Client);
    }

    /// A new connection taking back the seat `token` names.
    pub fn reconnect(&mut self, id: PeerId, token: lockstep_core::wire::ResumeToken, seed: u64) {
        let config = ClientConfig {
            name: format!("c{}", id.0),
            resume: Some(token),
            ..ClientConfig::default()
        };
        let c = ClientSession::new(config, SERVER, self.sim.now()).unwrap();
        self.sim.add(id, Node::Client(c));
        self.apps.insert(
            id,
            App::new(seed ^ (u64::from(id.0) * 77), true, self.first, self.bulk),
        );
    }

    pub fn add_node(
        &mut self,
        id: PeerId,
        joining: bool,
        spectator: bool,
        seed: u64,
        node: fn(ClientSession<u16>) -> Node,
    ) {
        let config = ClientConfig {
            spectator,
            name: format!("c{}", id.0),
            ..ClientConfig::default()
        };
        let c = ClientSession::new(config, SERVER, self.sim.now()).unwrap();
        self.sim.add(id, node(c));
        self.apps.insert(
            id,
            App::new(
                seed ^ (u64::from(id.0) * 77),
                joining,
                self.first,
                self.bulk,
            ),
        );
    }

    /// Client `old` opens a new transport (reachable as `new`) and takes its
    /// seat back on it, keeping its session and game.
    pub fn move_client(&mut self, old: PeerId, new: PeerId) {
        let Some(Node::Client(mut c)) = self.sim.remove(old) else {
            panic!("{old} is not a client");
        };
        c.reconnect(SERVER, None, self.sim.now())
            .expect("a seat to take back");
        self.sim.add(new, Node::Client(c));
        let app = self.apps.remove(&old).expect("its game");
        self.apps.insert(new, app);
    }

    /// Runs the world until `until`.
    pub fn run(&mut self, until: Instant) -> Outcome {
        self.run_with(until, |_, _| {})
    }

    /// Runs the world until `until`, showing `on_server` every sequencer
    /// event (it may list clients to freeze once the run ends).
    pub fn run_with(
        &mut self,
        until: Instant,
        mut on_server: impl FnMut(&SequencerEvent, &mut Vec<PeerId>),
    ) -> Outcome {
        let (apps, events) = (&mut self.apps, &mut self.server_events);
        let mut freeze = Vec::new();
        let o = self.sim.run(
            until,
            self.period,
            |id, node, now| match node {
                Node::Server(s) => {
                    while let Some(ev) = s.poll_event() {
                        on_server(&ev, &mut freeze);
                        events.push(ev);
                    }
                }
                Node::Client(c) | Node::Unacking(c) | Node::LyingPongs(c) | Node::SlowAck(c, _) => {
                    if let Some(app) = apps.get_mut(&id) {
                        app.play_at(c, now);
                    }
                }
            },
            |_| false,
        );
        for id in freeze {
            self.sim.freeze(id);
        }
        o
    }

    /// Runs in slices of 20 ms until `found` picks something out of the
    /// sequencer's events from now on, or `limit`.
    pub fn run_until<T>(
        &mut self,
        limit: u64,
        found: impl Fn(&SequencerEvent) -> Option<T>,
    ) -> Option<T> {
        let seen = self.server_events.len();
        let mut at = self.sim.now().as_micros() / 1000;
        while at < limit {
            at += 20;
            assert_eq!(self.run(Instant::from_millis(at)), Outcome::TimedOut);
            if let Some(t) = self.server_events[seen..].iter().find_map(&found) {
                return Some(t);
            }
        }
        None
    }

    /// The connections the sequencer closed, and why.
    pub fn closed(&self) -> Vec<(PeerId, DropReason)> {
        self.server_events
            .iter()
            .filter_map(|e| match e {
                SequencerEvent::Closed { peer, reason, .. } => Some((*peer, reason.clone())),
                _ => None,
            })
            .collect()
    }

    /// The sequencer's events but joins: what a failing join assertion shows.
    pub fn join_log(&self) -> Vec<&SequencerEvent> {
        self.server_events
            .iter()
            .filter(|e| !matches!(e, SequencerEvent::Joined { .. }))
            .collect()
    }

    pub fn client(&self, id: PeerId) -> &ClientSession<u16> {
        self.sim.endpoint(id).and_then(Node::client).unwrap()
    }

    pub fn server(&self) -> &Sequencer<u16> {
        self.sim.endpoint(SERVER).and_then(Node::server).unwrap()
    }

    pub fn server_mut(&mut self) -> &mut Sequencer<u16> {
        match self.sim.endpoint_mut(SERVER) {
            Some(Node::Server(s)) => s,
            _ => unreachable!("the server is at SERVER"),
        }
    }

    /// Every pair of `ids` holds the same state after every tick both ran.
    pub fn assert_states_agree(&self, ids: &[PeerId], seed: u64) -> usize {
        let mut common = 0;
        for a in ids {
            for b in ids {
                let (sa, sb) = (&self.apps[a].states, &self.apps[b].states);
                for (t, v) in sa {
                    if let Some(w) = sb.get(t) {
                        assert_eq!(v, w, "seed {seed}: {a} and {b} differ after tick {t}");
                        common += 1;
                    }
                }
            }
        }
        common
    }
}
