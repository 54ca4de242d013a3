//! Headless apps on the simulated network, and a small game to play.
#![allow(dead_code, unreachable_pub)]

use bevy::prelude::*;
use bevy::time::TimeUpdateStrategy;
use lockstep_bevy::prelude::*;
use lockstep_core::sim::{LinkConditions, SimNetwork};
use lockstep_core::{PeerId, PlayerId, SystemEvent};
use lockstep_net::{Transport, TransportError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A render frame: every app updates this often.
pub const FRAME: Duration = Duration::from_micros(16_667);

/// The seeded network every app's transport sends through, on the test's
/// clock.
#[derive(Clone)]
pub struct Net(Arc<Mutex<Inner>>);

struct Inner {
    sim: SimNetwork,
    inbox: BTreeMap<PeerId, VecDeque<(PeerId, Vec<u8>)>>,
}

impl Net {
    pub fn new(seed: u64, link: LinkConditions) -> Self {
        Self(Arc::new(Mutex::new(Inner {
            sim: SimNetwork::new(seed, link),
            inbox: BTreeMap::new(),
        })))
    }

    /// `me`'s end of the network.
    pub fn transport(&self, me: PeerId) -> NetTransport {
        NetTransport {
            me,
            net: self.clone(),
        }
    }

    /// Cuts `a` off from `b` for good, from now on.
    pub fn cut(&self, a: PeerId, b: PeerId) {
        let mut n = self.0.lock().expect("not poisoned");
        let now = n.sim.now();
        n.sim
            .partition(&[a], &[b], now, now + Duration::from_secs(3_600));
    }

    /// Sets the link between `a` and `b`, both ways.
    pub fn set_link_both(&self, a: PeerId, b: PeerId, link: LinkConditions) {
        self.0
            .lock()
            .expect("not poisoned")
            .sim
            .set_link_both(a, b, link);
    }

    /// Moves the network's clock to `t`, delivering what is due.
    pub fn advance_to(&self, t: lockstep_core::Instant) {
        let mut n = self.0.lock().expect("not poisoned");
        n.sim.advance_to(t);
        while let Some(d) = n.sim.pop_due() {
            n.inbox
                .entry(d.to)
                .or_default()
                .push_back((d.from, d.bytes));
        }
    }
}

pub struct NetTransport {
    me: PeerId,
    net: Net,
}

/// Each peer of the network has an address of its own, `10.0.a.b:7000`.
impl lockstep_net::Addresses for NetTransport {
    fn addr(&self, peer: PeerId) -> Option<std::net::SocketAddr> {
        let [_, _, a, b] = peer.0.to_be_bytes();
        Some(([10, 0, a, b], 7000).into())
    }
    fn add_peer(&mut self, addr: std::net::SocketAddr) -> PeerId {
        match addr {
            std::net::SocketAddr::V4(v4) => {
                let [_, _, a, b] = v4.ip().octets();
                PeerId(u32::from(a) << 8 | u32::from(b))
            }
            std::net::SocketAddr::V6(_) => PeerId(u32::MAX),
        }
    }
}

impl Transport for NetTransport {
    fn send(&mut self, to: PeerId, datagram: &[u8]) -> Result<(), TransportError> {
        self.net
            .0
            .lock()
            .expect("not poisoned")
            .sim
            .send(self.me, to, datagram);
        Ok(())
    }
    fn recv(&mut self, buf: &mut [u8]) -> Result<Option<(PeerId, usize)>, TransportError> {
        let mut n = self.net.0.lock().expect("not poisoned");
        let Some((from, bytes)) = n.inbox.get_mut(&self.me).and_then(VecDeque::pop_front) else {
            return Ok(None);
        };
        let len = bytes.len().min(buf.len());
        buf[..len].copy_from_slice(&bytes[..len]);
        Ok(Some((from, len)))
    }
}

/// A seat's ship: where it is and how fast it goes, in whole units.
#[derive(Component, Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[require(Simulated)]
pub struct Ship {
    pub seat: u16,
    pub x: i64,
    pub y: i64,
    pub vx: i64,
    pub vy: i64,
}

/// Points scored: a resource of the simulation.
#[derive(Resource, Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Score(pub Vec<u64>);

pub const UP: u8 = 1;
pub const DOWN: u8 = 2;
pub const LEFT: u8 = 4;
pub const RIGHT: u8 = 8;

/// Ships come and go with their seats, move by their inputs, and score
/// where a random draw says.
pub fn simulate(
    mut commands: Commands,
    frame: Res<FrameInputs<u8>>,
    mut ships: Query<(Entity, &mut Ship)>,
    mut score: ResMut<Score>,
    mut rng: ResMut<SimRng>,
) {
    for e in &frame.events {
        match e {
            SystemEvent::Joined { player } => {
                commands.spawn(Ship {
                    seat: player.0,
                    ..Ship::default()
                });
            }
            SystemEvent::Left { player } => {
                for (entity, s) in &ships {
                    if s.seat == player.0 {
                        commands.entity(entity).despawn();
                    }
                }
            }
            _ => {}
        }
    }
    let bonus = rng.below(4);
    for (_, mut s) in &mut ships {
        let i = frame.input(PlayerId(s.seat)).copied().unwrap_or(0);
        s.vx += i64::from(i & RIGHT != 0) - i64::from(i & LEFT != 0);
        s.vy += i64::from(i & DOWN != 0) - i64::from(i & UP != 0);
        s.vx = s.vx.clamp(-5, 5);
        s.vy = s.vy.clamp(-5, 5);
        s.x = (s.x + s.vx).clamp(-1000, 1000);
        s.y = (s.y + s.vy).clamp(-1000, 1000);
        let seat = usize::from(s.seat);
        if score.0.len() <= seat {
            score.0.resize(seat + 1, 0);
        }
        if (s.x + s.y).rem_euclid(7) as u64 == bonus {
            score.0[seat] += 1;
        }
    }
}

/// The local player's controls: a pattern from its seed and the time.
#[derive(Resource)]
pub struct Controls {
    pub seed: u64,
    pub n: u64,
}

pub fn read_controls(mut c: ResMut<Controls>, mut input: ResMut<LocalInput<u8>>) {
    c.n += 1;
    let k = (c.seed.wrapping_mul(31).wrapping_add(c.n / 20)) % 16;
    input.0 = k as u8;
}

/// A headless app with the plugin and nothing of a game.
pub fn bare() -> App {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, LockstepPlugin::<u8>::default()));
    app
}

/// A headless app of the game, its time stepped by hand a frame at a
/// time.
pub fn app(seed: u64) -> App {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, LockstepPlugin::<u8>::default()))
        .insert_resource(TimeUpdateStrategy::ManualDuration(FRAME))
        .insert_resource(Controls { seed, n: 0 })
        .insert_resource(SimRng::seeded(99))
        .init_resource::<Score>()
        .lockstep_component::<Ship>()
        .lockstep_resource::<Score>()
        .add_systems(LockstepInput, read_controls)
        .add_systems(LockstepSchedule, simulate)
        .init_resource::<Seen>()
        .init_resource::<Restored>()
        .add_systems(LockstepRestored, |mut r: ResMut<Restored>| r.0 += 1)
        .add_observer(|ev: On<LockstepEvent>, mut seen: ResMut<Seen>| {
            seen.0.push(ev.event().0.clone());
        });
    app
}

/// Every session event an app saw, through an observer.
#[derive(Resource, Default)]
pub struct Seen(pub Vec<lockstep_core::Event>);

/// Times the app's state was replaced (`LockstepRestored` ran).
#[derive(Resource, Default)]
pub struct Restored(pub u32);

/// Updates every app once a frame for `frames` frames, the network's
/// clock following.
pub fn run(net: &Net, apps: &mut [&mut App], clock: &mut lockstep_core::Instant, frames: u32) {
    for _ in 0..frames {
        *clock += FRAME;
        net.advance_to(*clock);
        for a in apps.iter_mut() {
            a.update();
        }
    }
}

/// Whether the app's match is finished.
pub fn finished(app: &App) -> bool {
    *app.world().resource::<LockstepStatus>() == LockstepStatus::Session(Status::Finished)
}

/// Steps the apps (`step` runs some frames) until every one's match is
/// finished, at most `rounds` times.
pub fn until_finished(apps: &mut [&mut App], rounds: u32, mut step: impl FnMut(&mut [&mut App])) {
    for _ in 0..rounds {
        step(apps);
        if apps.iter().all(|a| finished(a)) {
            return;
        }
    }
}

/// Asserts every app holds one state, and returns its hash.
pub fn one_state(apps: &[App], context: &str) -> u64 {
    let hashes: Vec<u64> = apps
        .iter()
        .map(|a| lockstep_bevy::state_hash(a.world()).expect("saves"))
        .collect();
    assert!(
        hashes.windows(2).all(|w| w[0] == w[1]),
        "{context}: {hashes:?}"
    );
    hashes[0]
}

/// The relay's id on the network.
pub const SERVER: PeerId = PeerId(100);

/// A relay's room on the network: the sequencer, pumped by the test.
pub struct Server {
    pub seq: lockstep_core::sequenced::Sequencer<u8>,
    t: NetTransport,
    buf: Vec<u8>,
    recv: Vec<u8>,
}

impl Server {
    pub fn new(net: &Net, config: lockstep_core::sequenced::SequencerConfig) -> Self {
        Self {
            seq: lockstep_core::sequenced::Sequencer::new(config, lockstep_core::Instant::ZERO)
                .expect("a room"),
            t: net.transport(SERVER),
            buf: Vec::new(),
            recv: vec![0; 2048],
        }
    }

    /// Everything that arrived in, timers, everything due out.
    pub fn pump(&mut self, now: lockstep_core::Instant) {
        while let Ok(Some((from, len))) = self.t.recv(&mut self.recv) {
            let _ = self.seq.handle_datagram(from, &self.recv[..len], now);
        }
        self.seq.handle_timeout(now);
        while let Some(tx) = self.seq.poll_transmit(&mut self.buf) {
            let _ = self.t.send(tx.destination, &self.buf[..tx.len]);
        }
    }
}

/// A relay client's session for an app, on the network as `me`.
pub fn client_session(net: &Net, me: PeerId, spectator: bool) -> LockstepSession<u8> {
    let config = ClientConfig {
        spectator,
        ..ClientConfig::default()
    };
    let session =
        lockstep_core::sequenced::ClientSession::new(config, SERVER, lockstep_core::Instant::ZERO)
            .expect("a client session");
    LockstepSession::client(session, net.transport(me))
}

/// [`run`] with a relay's room pumped every frame too.
pub fn run_star(
    net: &Net,
    server: &mut Server,
    apps: &mut [&mut App],
    clock: &mut lockstep_core::Instant,
    frames: u32,
) {
    for _ in 0..frames {
        *clock += FRAME;
        net.advance_to(*clock);
        server.pump(*clock);
        for a in apps.iter_mut() {
            a.update();
        }
    }
}

/// The ships of an app's world, by seat.
pub fn ships(app: &mut App) -> Vec<Ship> {
    let w = app.world_mut();
    let mut v: Vec<Ship> = w.query::<&Ship>().iter(w).cloned().collect();
    v.sort_by_key(|s| s.seat);
    v
}

/// A relay client's session that takes its seat back from a new id on the
/// network (`me + 1000`, `me + 2000`, ...) when its connection is lost.
pub fn reconnecting_session(net: &Net, me: PeerId) -> LockstepSession<u8> {
    let session = lockstep_core::sequenced::ClientSession::new(
        ClientConfig::default(),
        SERVER,
        lockstep_core::Instant::ZERO,
    )
    .expect("a client session");
    let net2 = net.clone();
    let mut n = 0u32;
    LockstepSession::client_reconnecting(session, net.transport(me), move || {
        n += 1;
        Ok(lockstep_bevy::Reopened {
            transport: net2.transport(PeerId(me.0 + 1000 * n)),
            server: SERVER,
            secret: None,
        })
    })
}

/// Log lines, kept (a `tracing` writer).
#[derive(Clone, Default)]
#[allow(dead_code)]
pub struct Said(Arc<Mutex<Vec<u8>>>);

#[allow(dead_code)]
impl Said {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("not poisoned")).into_owned()
    }
}

impl std::io::Write for Said {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Said {
    type Writer = Self;
    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}
