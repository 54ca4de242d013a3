//! Attacks on per-frame copies and resends: a client in a relay room that
//! holds its acknowledgement (datagram base) back, goes nearly silent, or
//! forges its pongs, and what the relay then sends it, while honest players
//! and an honest spectator play in the same room.

use crate::common::star::{Node, SERVER, StarScenario, play};
use crate::common::{Record, assert_no_desync, assert_streams_agree, secs};
use lockstep_core::sequenced::{ClientConfig, ClientSession, Sequencer};
use lockstep_core::sim::{Outcome, Sim, SimNetwork, SimRng};
use lockstep_core::wire::{Datagram, DatagramWriter, Message};
use lockstep_core::{Endpoint, Instant, PeerId, Tick, Transmit};
use std::collections::BTreeMap;
use std::time::Duration;

/// What the attacker does from `from` on.
#[derive(Debug, Clone, Default)]
struct Plan {
    from: Option<Instant>,
    /// Every datagram's base held at the tick the client had reached when
    /// the attack began (it acknowledges nothing more).
    hold_base: bool,
    /// Only one datagram out per this much (the rest dropped unsent).
    send_every: Option<Duration>,
    /// Pongs claim nothing was received (loss 100%).
    deny_receipt: bool,
    /// Pongs claim the ping was held as long as it was: a round trip of 0.
    zero_rtt: bool,
    /// Hostile values: pongs with random or extreme fields, extra pongs
    /// and pings, bases anywhere a 16-bit base reaches, from this seed.
    chaos: Option<u64>,
    /// Bases alternately 30 ticks behind the client's and 30 ahead (past
    /// the relay's open tick, for ticks not yet sealed).
    flip_base: bool,
    /// Every datagram's base this many ticks behind the client's own.
    lag_base: Option<u32>,
}

#[derive(Debug)]
struct Evil {
    c: ClientSession<u16>,
    rec: Record,
    plan: Plan,
    now: Instant,
    held: Option<Tick>,
    /// Frames carried in the datagrams it got since the attack began
    /// (copies counted).
    frames_got: u64,
    rng: Option<SimRng>,
    last_out: Option<Instant>,
    /// Pings from the sequencer: stamp, when they came.
    pings: BTreeMap<u32, Instant>,
    /// Since the attack began: datagrams and bytes each way.
    got: (u64, u64),
    sent: (u64, u64),
}

impl Evil {
    fn attacking(&self) -> bool {
        self.plan.from.is_some_and(|f| self.now >= f)
    }
}

#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one attacker and a few honest nodes: boxing buys nothing"
)]
enum Hostile {
    Honest(Node),
    Evil(Evil),
}

impl Endpoint for Hostile {
    type Error = String;

    fn handle_datagram(&mut self, from: PeerId, d: &[u8], now: Instant) -> Result<(), String> {
        match self {
            Self::Honest(n) => n.handle_datagram(from, d, now),
            Self::Evil(e) => {
                e.now = now;
                if e.attacking() {
                    e.got.0 += 1;
                    e.got.1 += d.len() as u64;
                }
                if let Ok(dg) = Datagram::decode(d, e.c.frame()) {
                    for m in &dg.messages {
                        if let Message::Ping { stamp } = m {
                            e.pings.insert(*stamp, now);
                        }
                        if let Message::Frames(f) = m
                            && e.attacking()
                        {
                            e.frames_got += u64::from(f.count);
                        }
                    }
                }
                e.c.handle_datagram(from, d, now).map_err(|x| x.to_string())
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self {
            Self::Honest(n) => n.handle_timeout(now),
            Self::Evil(e) => {
                e.now = now;
                e.c.handle_timeout(now);
            }
        }
    }

    fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        let e = match self {
            Self::Honest(n) => return n.poll_transmit(buf),
            Self::Evil(e) => e,
        };
        loop {
            let t = e.c.poll_transmit(buf)?;
            if !e.attacking() {
                return Some(t);
            }
            if let Some(every) = e.plan.send_every
                && e.last_out.is_some_and(|l| e.now - l < every)
            {
                continue;
            }
            let d = Datagram::decode(&buf[..t.len], e.c.frame()).ok()?;
            if let Some(seed) = e.plan.chaos {
                let rng = e.rng.get_or_insert_with(|| SimRng::new(seed));
                let mine = buf[..t.len].to_vec();
                return Some(chaos(
                    rng,
                    &e.pings,
                    e.now,
                    &mine,
                    e.c.frame(),
                    t,
                    buf,
                    &mut e.sent,
                ));
            }
            let base = if e.plan.hold_base {
                *e.held.get_or_insert(d.base)
            } else if let Some(lag) = e.plan.lag_base {
                d.base.saturating_sub(lag)
            } else if e.plan.flip_base {
                if e.sent.0 % 2 == 0 {
                    d.base.saturating_sub(30)
                } else {
                    d.base.saturating_add(30)
                }
            } else {
                d.base
            };
            let mut out = Vec::new();
            let mut w = DatagramWriter::new(&mut out, base, usize::MAX);
            for m in &d.messages {
                match *m {
                    Message::Pong {
                        stamp,
                        held_ms,
                        received,
                        sent,
                    } => {
                        // Held for as long as the ping has been out, and
                        // the way back: the relay measures a round trip of
                        // 0 (the sequencer's clock is the simulation's).
                        let held_ms = if e.plan.zero_rtt {
                            (e.now.as_millis() as u32).wrapping_sub(stamp) + 30
                        } else {
                            held_ms
                        };
                        let received = if e.plan.deny_receipt { 0 } else { received };
                        let _ = w.push(&Message::Pong {
                            stamp,
                            held_ms,
                            received,
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
            e.last_out = Some(e.now);
            e.sent.0 += 1;
            e.sent.1 += buf.len() as u64;
            return Some(Transmit {
                destination: t.destination,
                len: buf.len(),
            });
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Self::Honest(n) => n.poll_timeout(),
            Self::Evil(e) => e.c.poll_timeout(),
        }
    }
}

struct Room {
    sim: Sim<Hostile>,
    records: BTreeMap<PeerId, Record>,
    period: Duration,
    honest: Vec<PeerId>,
    evil: PeerId,
    watcher: PeerId,
}

/// `players` honest players, one honest spectator (the yardstick), and the
/// attacker (a player or a spectator) with `plan`.
fn room(sc: &StarScenario, evil_plays: bool, plan: Plan) -> Room {
    let mut sim = Sim::new(SimNetwork::new(sc.seed, sc.link.clone()));
    let server = Sequencer::new(sc.server.clone(), Instant::ZERO).expect("server config");
    sim.add(SERVER, Hostile::Honest(Node::Server(server)));
    let mut records = BTreeMap::new();
    let mut honest = Vec::new();
    let n = sc.players as u32;
    for k in 1..=n {
        let id = PeerId(k);
        let config = ClientConfig {
            name: format!("c{k}"),
            ..sc.client.clone()
        };
        let c = ClientSession::new(config, SERVER, Instant::ZERO).expect("client");
        sim.add(id, Hostile::Honest(Node::Client(c)));
        records.insert(
            id,
            Record::new(sc.seed ^ u64::from(k), sc.server.first_tick),
        );
        honest.push(id);
    }
    let watcher = PeerId(n + 1);
    let config = ClientConfig {
        name: "watcher".into(),
        spectator: true,
        ..sc.client.clone()
    };
    let c = ClientSession::new(config, SERVER, Instant::ZERO).expect("client");
    sim.add(watcher, Hostile::Honest(Node::Client(c)));
    records.insert(watcher, Record::new(sc.seed ^ 0x77, sc.server.first_tick));
    let evil = PeerId(n + 2);
    let config = ClientConfig {
        name: "evil".into(),
        spectator: !evil_plays,
        ..sc.client.clone()
    };
    let c = ClientSession::new(config, SERVER, Instant::ZERO).expect("client");
    sim.add(
        evil,
        Hostile::Evil(Evil {
            c,
            rec: Record::new(0xe5, sc.server.first_tick),
            plan,
            now: Instant::ZERO,
            held: None,
            frames_got: 0,
            rng: None,
            last_out: None,
            pings: BTreeMap::new(),
            got: (0, 0),
            sent: (0, 0),
        }),
    );
    Room {
        sim,
        records,
        period: sc.period(),
        honest,
        evil,
        watcher,
    }
}

impl Room {
    fn run(&mut self, until: Instant) {
        let records = &mut self.records;
        let out = self.sim.run(
            until,
            self.period,
            |id, node, _| match node {
                Hostile::Honest(Node::Client(c)) => play(c, records.get_mut(&id).expect("record")),
                Hostile::Evil(e) => play(&mut e.c, &mut e.rec),
                _ => {}
            },
            |_| false,
        );
        assert_eq!(out, Outcome::TimedOut);
    }

    fn evil(&self) -> &Evil {
        match self.sim.endpoint(self.evil) {
            Some(Hostile::Evil(e)) => e,
            _ => panic!("no attacker"),
        }
    }

    fn client(&self, id: PeerId) -> &ClientSession<u16> {
        match self.sim.endpoint(id) {
            Some(Hostile::Honest(n)) => n.client().expect("a client"),
            _ => panic!("no client {id}"),
        }
    }

    fn server(&self) -> &Sequencer<u16> {
        match self.sim.endpoint(SERVER) {
            Some(Hostile::Honest(n)) => n.server().expect("the server"),
            _ => panic!("no server"),
        }
    }

    /// (datagrams, bytes) the client `id` has received.
    fn received(&self, id: PeerId) -> (u64, u64) {
        let s = self.client(id).stats();
        (s.datagrams_received, s.bytes_received)
    }

    fn check_honest(&self) {
        let mut ids = self.honest.clone();
        ids.push(self.watcher);
        assert_streams_agree(self.sim.net.seed(), &self.records, &ids);
        assert_no_desync(self.sim.net.seed(), &self.records);
    }
}

/// Runs an attack from 10 s to 70 s and prints, per second of the attack:
/// what the attacker sent, what the relay sent it, and what the honest
/// spectator got. Returns (attacker got datagrams/s, bytes/s; attacker sent
/// bytes/s; honest spectator got datagrams/s, bytes/s).
fn measure(what: &str, players: usize, evil_plays: bool, plan: Plan) -> (f64, f64, f64, f64, f64) {
    measure_for(what, players, evil_plays, plan, 60)
}

/// [`measure`] over an attack of `attack` seconds.
fn measure_for(
    what: &str,
    players: usize,
    evil_plays: bool,
    plan: Plan,
    attack: u64,
) -> (f64, f64, f64, f64, f64) {
    let mut sc = StarScenario::new(players, 0xa77a);
    sc.link.latency = Duration::from_millis(30);
    let plan = Plan {
        from: Some(secs(10)),
        ..plan
    };
    let mut r = room(&sc, evil_plays, plan);
    r.run(secs(10));
    let w0 = r.received(r.watcher);
    let p0 = r.received(r.honest[0]);
    let open0 = r.server().open_tick();
    r.run(secs(10 + attack));
    if let Some(Hostile::Honest(Node::Server(s))) = r.sim.endpoint_mut(SERVER) {
        while let Some(ev) = s.poll_event() {
            if format!("{ev:?}").contains("Closed") {
                println!("  {what}: {ev:?} (open {})", s.open_tick());
            }
        }
    }
    let w1 = r.received(r.watcher);
    let p1 = r.received(r.honest[0]);
    println!(
        "  {what}: an honest player got {:.1} datagrams/s, {:.0} B/s; the relay reads the attacker's link as {:?}, rtt {:?}",
        (p1.0 - p0.0) as f64 / attack as f64,
        (p1.1 - p0.1) as f64 / attack as f64,
        r.server().traffic(r.evil).and_then(|t| t.loss_up),
        r.server().rtt(r.evil),
    );
    let e = r.evil();
    println!(
        "  {what}: the attacker got {} frames (copies counted) for {} sealed",
        e.frames_got,
        r.server().open_tick().since(open0)
    );
    let s = attack as f64;
    let out = (
        e.got.0 as f64 / s,
        e.got.1 as f64 / s,
        e.sent.1 as f64 / s,
        (w1.0 - w0.0) as f64 / s,
        (w1.1 - w0.1) as f64 / s,
    );
    println!(
        "{what}: attacker sent {} datagrams, {} B ({:.1} B/s); relay sent it {:.1} datagrams/s, {:.0} B/s \
         ({:.0}x its bytes); honest spectator got {:.1} datagrams/s, {:.0} B/s; ticks sealed {}; still connected {}",
        e.sent.0,
        e.sent.1,
        out.2,
        out.0,
        out.1,
        out.1 / out.2.max(1e-9),
        out.3,
        out.4,
        r.server().open_tick().since(open0),
        r.server().is_connected(r.evil),
    );
    r.check_honest();
    out
}

/// A spectator that acknowledges no frame after its first seconds and lets
/// one datagram out every 10 s (enough to stay connected): every frame it
/// lacks runs out of copies and its timer. Resends narrow down: after the
/// first round only its base goes again, once a timeout, so it is sent a
/// small multiple of what an honest spectator is (here 1.3x the datagrams
/// and 1.6x the bytes; before, every frame it lacked went in every
/// datagram and forced one every half tick: 89.5 datagrams and 46 kB a
/// second, for 1.3 B/s).
#[test]
fn a_silent_spectator_holding_its_ack_is_sent_what_an_honest_one_is() {
    let (dps, bps, sent_bps, wdps, wbps) = measure(
        "silent spectator, base held, 3 players",
        3,
        false,
        Plan {
            hold_base: true,
            send_every: Some(Duration::from_secs(10)),
            ..Plan::default()
        },
    );
    // In a full room (7 honest players, the inputs a frame carries grow):
    // only measured.
    measure(
        "silent spectator, base held, 7 players",
        7,
        false,
        Plan {
            hold_base: true,
            send_every: Some(Duration::from_secs(10)),
            ..Plan::default()
        },
    );
    // For as long as it likes: its acknowledgement 1,000 ticks behind the
    // frames it got, so it never falls out of the history, for 5 minutes.
    measure_for(
        "silent spectator, base 1000 behind, 3 players, 300 s",
        3,
        false,
        Plan {
            lag_base: Some(1_000),
            send_every: Some(Duration::from_secs(10)),
            ..Plan::default()
        },
        300,
    );
    // Bounds an acceptable engine would hold: a small multiple of what an
    // honest spectator gets.
    assert!(
        dps <= wdps * 2.0,
        "the relay sends the silent attacker {dps:.1} datagrams/s, an honest spectator {wdps:.1}"
    );
    assert!(
        bps <= wbps * 3.0,
        "the relay sends the silent attacker {bps:.0} B/s ({:.0}x the {sent_bps:.1} B/s it sends), an honest spectator {wbps:.0} B/s",
        bps / sent_bps
    );
}

/// The same, a player that plays every tick (so nothing stalls) but never
/// acknowledges a frame after its first seconds (1.7x an honest
/// spectator's datagrams, 2.4x its bytes; before, 89.8 datagrams and 60 kB
/// a second).
#[test]
fn a_player_holding_its_ack_is_sent_what_an_honest_one_is() {
    let (dps, bps, sent_bps, wdps, wbps) = measure(
        "playing, base held, 3 players",
        3,
        true,
        Plan {
            hold_base: true,
            ..Plan::default()
        },
    );
    assert!(
        dps <= wdps * 2.0,
        "the relay sends the attacker {dps:.1} datagrams/s, an honest spectator {wdps:.1}"
    );
    assert!(
        bps <= wbps * 3.0,
        "the relay sends the attacker {bps:.0} B/s (it sends {sent_bps:.0}), an honest spectator {wbps:.0} B/s"
    );
}

/// A player whose pongs claim it received nothing and a round trip of 0:
/// its link reads 100% loss (6 copies a frame), but it acknowledges each
/// frame within a round trip, which ends its copies: it is sent what an
/// honest player is.
#[test]
fn lying_pongs_gain_an_acknowledging_liar_nothing() {
    let (dps, bps, sent_bps, wdps, wbps) = measure(
        "playing, pongs deny receipt, rtt 0",
        3,
        true,
        Plan {
            deny_receipt: true,
            zero_rtt: true,
            ..Plan::default()
        },
    );
    let _ = sent_bps;
    assert!(dps <= wdps * 1.2, "{dps:.1} datagrams/s against {wdps:.1}");
    assert!(bps <= wbps * 4.0, "{bps:.0} B/s against {wbps:.0}");
}

/// One of `u32`'s edges, or anything.
fn wild(rng: &mut SimRng) -> u32 {
    match rng.below(6) {
        0 => 0,
        1 => u32::MAX,
        2 => u32::MAX - rng.below(100) as u32,
        3 => 1 << 31,
        4 => rng.below(100) as u32,
        _ => rng.next_u64() as u32,
    }
}

/// The client's datagram `d`, rewritten with hostile values.
#[expect(
    clippy::too_many_arguments,
    reason = "a test helper that rewrites one datagram"
)]
fn chaos(
    rng: &mut SimRng,
    pings: &BTreeMap<u32, Instant>,
    now: Instant,
    d: &[u8],
    frame: Tick,
    t: Transmit,
    buf: &mut Vec<u8>,
    sent: &mut (u64, u64),
) -> Transmit {
    let d = Datagram::decode(d, frame).expect("its own datagram");
    // A base far from the inputs a datagram carries makes them undecodable
    // (the connection is closed as malformed): wild bases ride alone.
    let inputs = d.messages.iter().any(|m| matches!(m, Message::Inputs(_)));
    let base = match rng.below(4) {
        _ if inputs && rng.chance(0.5) => d.base,
        _ if inputs => Tick::new(d.base.get().wrapping_sub(rng.below(48) as u32)),
        0 => d.base,
        1 => Tick::new(d.base.get().wrapping_add(rng.below(32_768) as u32)),
        2 => Tick::new(d.base.get().wrapping_sub(rng.below(32_768) as u32)),
        _ => Tick::new(wild(rng)),
    };
    let mut out = Vec::new();
    let mut w = DatagramWriter::new(&mut out, base, 1_200);
    for m in &d.messages {
        match *m {
            Message::Pong {
                stamp,
                held_ms,
                received,
                sent,
            } if rng.chance(0.7) => {
                let _ = w.push(&Message::Pong {
                    stamp: if rng.chance(0.8) { stamp } else { wild(rng) },
                    held_ms: if rng.chance(0.5) { held_ms } else { wild(rng) },
                    received: if rng.chance(0.3) { received } else { wild(rng) },
                    sent: if rng.chance(0.3) { sent } else { wild(rng) },
                });
            }
            _ => {
                let _ = w.push(m);
            }
        }
    }
    // Pongs nobody asked for, or for pings still awaited, with any counts.
    for _ in 0..rng.below(3) {
        let stamp = match pings
            .keys()
            .nth(rng.below(pings.len().max(1) as u64) as usize)
        {
            Some(s) if rng.chance(0.7) => *s,
            _ => wild(rng),
        };
        let held = pings.get(&stamp).map(|at| (now - *at).as_millis() as u32);
        let _ = w.push(&Message::Pong {
            stamp,
            held_ms: match held {
                Some(h) if rng.chance(0.5) => h.wrapping_add(rng.below(3) as u32).wrapping_sub(1),
                _ => wild(rng),
            },
            received: wild(rng),
            sent: wild(rng),
        });
    }
    if rng.chance(0.3) {
        let _ = w.push(&Message::Ping { stamp: wild(rng) });
    }
    w.finish();
    buf.clear();
    buf.extend_from_slice(&out);
    sent.0 += 1;
    sent.1 += buf.len() as u64;
    Transmit {
        destination: t.destination,
        len: buf.len(),
    }
}

/// A player whose pongs, pings and bases carry hostile values (wrapping
/// counts, held_ms past the round trip or u32::MAX, stamps never sent,
/// bases anywhere), in a room that starts 900 ticks before the tick wrap:
/// nothing panics, the honest streams agree up to the last tick, and the
/// relay's figures for the liar stay in bounds.
#[test]
fn hostile_pong_ping_and_base_values_near_the_tick_wrap_change_nothing_for_the_others() {
    for seed in 0..10u64 {
        // Six rooms that end at the tick wrap, four that play 120 s.
        let wraps = seed < 6;
        let mut sc = StarScenario::new(3, 0xc4a0 + seed);
        sc.link.latency = Duration::from_millis(25);
        sc.link.loss = 0.02;
        if wraps {
            sc.server.first_tick = Tick::new(u32::MAX - 900);
        }
        let mut r = room(
            &sc,
            true,
            Plan {
                from: Some(secs(2)),
                chaos: Some(seed),
                ..Plan::default()
            },
        );
        r.run(secs(if wraps { 40 } else { 120 }));
        if let Some(Hostile::Honest(Node::Server(s))) = r.sim.endpoint_mut(SERVER) {
            while let Some(ev) = s.poll_event() {
                if format!("{ev:?}").contains("Closed") {
                    println!("  {ev:?}");
                }
            }
        }
        let s = r.server();
        let rtt = s.rtt(r.evil);
        println!(
            "seed {seed}: open {}, evil rtt {rtt:?}, traffic {:?}, connected {}, honest frames {:?}",
            s.open_tick().get(),
            s.traffic(r.evil),
            s.is_connected(r.evil),
            r.honest
                .iter()
                .map(|id| r.client(*id).stats().frames)
                .collect::<Vec<_>>()
        );
        assert!(rtt.is_none_or(|r| r <= Duration::from_secs(4)), "{rtt:?}");
        assert!(s.is_connected(r.evil), "the liar plays on");
        if wraps {
            assert_eq!(s.open_tick(), Tick::MAX, "the room ran to the end of time");
        }
        for id in &r.honest {
            assert!(r.client(*id).stats().frames >= 900, "{id}");
        }
        r.check_honest();
    }
}

/// A player whose bases go back 30 ticks and forward 30 (past the open
/// tick) in turn: the relay never moves a base back, and clamps one ahead
/// to the open tick, so the liar is sent less (it skipped its own frames),
/// runs out of frames, stops committing and is abandoned after
/// `abandon_after` (the documented cost of a player going quiet); the
/// honest streams agree.
#[test]
fn bases_flipping_back_and_ahead_of_the_open_tick_gain_nothing() {
    let (dps, bps, _, wdps, wbps) = measure(
        "playing, bases flipping -30/+30",
        3,
        true,
        Plan {
            flip_base: true,
            ..Plan::default()
        },
    );
    assert!(dps <= wdps * 1.2, "{dps:.1} datagrams/s against {wdps:.1}");
    assert!(bps <= wbps * 2.0, "{bps:.0} B/s against {wbps:.0}");
}
