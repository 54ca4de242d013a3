//! A mesh with one dishonest peer.
//!
//! The dishonest peer runs a real session (so it stays in step and keeps
//! its seat) and rewrites every datagram it sends, differently for each
//! recipient: arbitrary abandonment votes, frozen seats and endorsements,
//! forged input for other players' seats, lies about what it holds, pause
//! and resume spam. Meanwhile an honest player may crash, so that an
//! abandonment really runs with the liar taking part. Whatever it sends,
//! the honest peers' confirmed streams never differ.

use crate::common;
use common::props::{cases, link};
use common::{Record, Session, play, secs};
use lockstep_core::sim::{Outcome, Sim, SimNetwork, SimRng};
use lockstep_core::wire::{
    Abandon, ChainWriter, Datagram, DatagramWriter, Endorsement, InputRun, Inputs, Message, Status,
};
use lockstep_core::{
    DatagramError, Endpoint, Instant, MeshConfig, PeerId, PlayerId, Roster, Tick, Transmit,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// What the dishonest peer does, each on or off per case.
#[derive(Debug, Clone, Copy)]
struct Lies {
    abandon: bool,
    inputs: bool,
    acks: bool,
    pause: bool,
    status: bool,
}

struct Liar {
    rng: SimRng,
    lies: Lies,
    seats: u16,
}

impl Liar {
    /// Rewrites a datagram of the liar's honest session for `to`.
    fn rewrite(&mut self, own: PlayerId, reference: Tick, bytes: &[u8]) -> Option<Vec<u8>> {
        let d = Datagram::decode(bytes, reference).ok()?;
        let base = d.base;
        let near = |rng: &mut SimRng, back: u32, ahead: u32| {
            base.saturating_sub(back)
                .saturating_add(rng.below(u64::from(back + ahead)) as u32)
        };
        let seat = |rng: &mut SimRng| PlayerId(rng.below(u64::from(self.seats)) as u16);
        // Forged runs for other seats, kept alive for the writer below.
        let mut forged: Vec<(PlayerId, Tick, u32, Vec<u8>)> = Vec::new();
        if self.lies.inputs {
            for _ in 0..self.rng.below(3) {
                let s = seat(&mut self.rng);
                if s == own {
                    continue;
                }
                let start = near(&mut self.rng, 4, 24);
                let count = 1 + self.rng.below(8) as u32;
                let mut w = ChainWriter::new();
                for _ in 0..count {
                    w.push(&(self.rng.next_u64() as u16), usize::MAX);
                }
                let mut chain = Vec::new();
                w.write(&mut chain);
                forged.push((s, start, count, chain));
            }
        }
        let mut out = Vec::new();
        let mut w = DatagramWriter::new(&mut out, base, 1200);
        for m in &d.messages {
            match m {
                Message::Abandon(_) if self.lies.abandon => {}
                Message::Status(_) if self.lies.status => {}
                Message::Pause { .. } | Message::Resume { .. } if self.lies.pause => {}
                Message::Inputs(i) => {
                    // Its own input stays true (a peer that sends different
                    // input for its own seat to different peers is caught by
                    // checksums, not prevented); acks may lie.
                    let mut acks = i.acks.to_vec();
                    if self.lies.acks {
                        for a in &mut acks {
                            a.1 = near(&mut self.rng, 8, 40);
                        }
                    }
                    let mut runs = i.runs.to_vec();
                    runs.extend(forged.iter().map(|(seat, start, count, chain)| InputRun {
                        seat: *seat,
                        start: *start,
                        count: *count,
                        back: 0,
                        check: 0,
                        chain,
                    }));
                    let _ = w.push(&Message::Inputs(Inputs {
                        acks: (&acks).into(),
                        runs: (&runs).into(),
                    }));
                }
                other => {
                    let _ = w.push(other);
                }
            }
        }
        if self.lies.abandon && self.rng.chance(0.7) {
            let pick = |rng: &mut SimRng| -> Vec<PlayerId> {
                let mut v: Vec<PlayerId> = (0..self.seats)
                    .map(PlayerId)
                    .filter(|_| rng.chance(0.4))
                    .collect();
                v.dedup();
                v
            };
            let votes = pick(&mut self.rng);
            let frozen = pick(&mut self.rng)
                .into_iter()
                .map(|s| (s, near(&mut self.rng, 4, 30)))
                .collect();
            let endorsements = (0..self.rng.below(3))
                .map(|_| Endorsement {
                    seat: seat(&mut self.rng),
                    from: near(&mut self.rng, 4, 30),
                    digest: self.rng.next_u64() % 4,
                    left: self.rng.next_u64() & 1 == 0,
                })
                .collect();
            let _ = w.push(&Message::Abandon(Abandon {
                votes,
                frozen,
                endorsements,
            }));
        }
        if self.lies.pause {
            if self.rng.chance(0.3) {
                let frame = near(&mut self.rng, 4, 12);
                let _ = w.push(&Message::Pause { frame });
            }
            if self.rng.chance(0.5) {
                let lifted = near(&mut self.rng, 8, 16);
                let _ = w.push(&Message::Resume { lifted });
            }
        }
        if self.lies.status && self.rng.chance(0.5) {
            let waiting = vec![seat(&mut self.rng)];
            let _ = w.push(&Message::Status(Status {
                open: near(&mut self.rng, 4, 4),
                slack: 0,
                waiting,
            }));
        }
        w.finish();
        Some(out)
    }
}

/// A peer: an honest session, or one whose datagrams a [`Liar`] rewrites.
struct Node {
    session: Session,
    liar: Option<Liar>,
}

impl Endpoint for Node {
    type Error = DatagramError;

    fn handle_datagram(&mut self, from: PeerId, d: &[u8], now: Instant) -> Result<(), Self::Error> {
        self.session.handle_datagram(from, d, now)
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.session.handle_timeout(now);
    }

    fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        let t = self.session.poll_transmit(buf)?;
        let Some(liar) = self.liar.as_mut() else {
            return Some(t);
        };
        let own = self.session.seat()?;
        let rewritten = liar.rewrite(own, self.session.frame(), &buf[..t.len])?;
        buf.clear();
        buf.extend_from_slice(&rewritten);
        Some(Transmit {
            destination: t.destination,
            len: buf.len(),
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.session.poll_timeout()
    }
}

#[derive(Debug, Clone)]
struct Case {
    players: usize,
    liar: u16,
    lies: Lies,
    crash: Option<(u16, u64)>,
    delay: u32,
    max_lead: u32,
    period: u64,
    link: lockstep_core::sim::LinkConditions,
    seed: u64,
}

prop_compose! {
    fn case()(
        players in 3usize..=5,
        liar in 0u16..5,
        lies in (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        crash in proptest::option::of((0u16..5, 500u64..6_000)),
        delay in 0u32..4,
        max_lead in 1u32..8,
        period in 16u64..50,
        link in link(100, 40),
        seed in any::<u64>(),
    ) -> Case {
        let mut link = link;
        link.loss = link.loss.min(0.3);
        let liar = liar % players as u16;
        // The crash victim is an honest player.
        let crash = crash
            .map(|(v, at)| ((liar + 1 + v % (players as u16 - 1)) % players as u16, at));
        Case {
            players,
            liar,
            lies: Lies { abandon: lies.0, inputs: lies.1, acks: lies.2, pause: lies.3, status: lies.4 },
            crash,
            delay,
            max_lead,
            period,
            link,
            seed,
        }
    }
}

/// The case's mesh on the simulated network, with its liar, and a record
/// per peer.
fn build(c: &Case) -> (Sim<Node>, BTreeMap<PeerId, Record>) {
    let config = MeshConfig {
        delay: c.delay,
        max_lead: c.max_lead,
        abandon_after: Some(Duration::from_secs(2)),
        ..MeshConfig::default()
    };
    let mut roster = Roster::new();
    for i in 0..c.players {
        roster = roster.player(PeerId(i as u32), PlayerId(i as u16));
    }
    let mut sim = Sim::new(SimNetwork::new(c.seed, c.link.clone()));
    let mut records = BTreeMap::new();
    for i in 0..c.players as u16 {
        let id = PeerId(u32::from(i));
        let session = Session::new(config.clone(), roster.clone(), id, Instant::ZERO)
            .unwrap_or_else(|e| panic!("config: {e}"));
        let liar = (i == c.liar).then(|| Liar {
            rng: SimRng::new(c.seed ^ 0x5EED),
            lies: c.lies,
            seats: c.players as u16,
        });
        sim.add(id, Node { session, liar });
        records.insert(id, Record::new(c.seed ^ (u64::from(i) + 1), Tick::ZERO));
    }
    (sim, records)
}

proptest! {
    #![proptest_config(cases(48))]

    /// Whatever one peer sends (votes, frozen seats and endorsements it
    /// makes up, input forged for other seats, lies about what it holds,
    /// pause and resume spam, different to each peer), and whether or not
    /// an honest player crashes meanwhile, the honest peers' confirmed
    /// streams never differ, and no buffer grows past its bound.
    #[test]
    fn one_dishonest_peer_cannot_split_the_honest_ones(c in case()) {
        let (mut sim, mut records) = build(&c);
        let period = Duration::from_millis(c.period);
        let step = |sim: &mut Sim<Node>, records: &mut BTreeMap<PeerId, Record>, until: Instant| {
            sim.run(until, period, |id, n, _| {
                if let Some(rec) = records.get_mut(&id) {
                    play(&mut n.session, rec, 10);
                }
            }, |_| false)
        };
        if let Some((victim, at)) = c.crash {
            let warm = step(&mut sim, &mut records, Instant::from_millis(at));
            prop_assert_eq!(warm, Outcome::TimedOut);
            sim.freeze(PeerId(u32::from(victim)));
        }
        let end = step(&mut sim, &mut records, secs(20));
        prop_assert_eq!(end, Outcome::TimedOut);

        let honest: Vec<PeerId> = (0..c.players as u16)
            .filter(|&i| i != c.liar && c.crash.is_none_or(|(v, _)| v != i))
            .map(|i| PeerId(u32::from(i)))
            .collect();
        for a in &honest {
            for b in &honest {
                let (ra, rb) = (&records[a].chain, &records[b].chain);
                let n = ra.len().min(rb.len());
                if n > 0 && ra[n - 1] != rb[n - 1] {
                    let first = (0..n).find(|&i| ra[i] != rb[i]).unwrap_or(n);
                    prop_assert!(false, "seed {}: {} and {} diverge at tick {}", c.seed, a, b, first);
                }
            }
        }
        // The crashed player agrees with them as far as any abandonment
        // of it allows: up to the tick its seat was emptied from. (Unless
        // the liar forges input: it may then make up the crashed player's
        // last few ticks for everyone, a documented limit.)
        if let Some((victim, _)) = c.crash.filter(|_| !c.lies.inputs) {
            let v = PeerId(u32::from(victim));
            let from = sim
                .endpoint(honest[0])
                .and_then(|n| {
                    n.session.abandoned().iter().find(|(p, _)| p.0 == victim).map(|(_, t)| t.get())
                })
                .unwrap_or(u32::MAX) as usize;
            for h in &honest {
                let (rv, rh) = (&records[&v].chain, &records[h].chain);
                let n = rv.len().min(rh.len()).min(from);
                prop_assert!(n == 0 || rv[n - 1] == rh[n - 1],
                    "seed {}: the crashed {} disagrees with {} before its abandonment", c.seed, v, h);
            }
        }
        for (id, n) in sim.endpoints() {
            prop_assert!(n.session.stats().buffered_ticks <= n.session.buffer_bound(), "{}", id);
        }
    }
}

proptest! {
    #![proptest_config(cases(32))]

    /// Liveness where it is owed: a dishonest peer stops sending input while
    /// it goes on lying. If it only lies about abandonments and forges
    /// input for other seats, the honest peers vote it out on their own
    /// (its own abandonment needs no word of its). If it also lies about
    /// what it holds or whom it waits on, or spams pauses, the match stalls
    /// until the players vote it out (each honest game calls `abandon` after
    /// 3 s without a frame, as a vote-kick button would, and `resume` if a
    /// pause is left). Either way the honest peers then play on, in
    /// agreement.
    #[test]
    fn a_dishonest_peer_that_stops_playing_is_voted_out(c in case(), mute_at in 500u64..4_000) {
        let (mut sim, mut records) = build(&c);
        let liar = PeerId(u32::from(c.liar));
        let by_vote = c.lies.acks || c.lies.status || c.lies.pause;
        let period = Duration::from_millis(c.period);
        let warm = sim.run(Instant::from_millis(mute_at), period, |id, n, _| {
            if let Some(rec) = records.get_mut(&id) {
                play(&mut n.session, rec, 10);
            }
        }, |_| false);
        prop_assert_eq!(warm, Outcome::TimedOut);
        if let Some(r) = records.get_mut(&liar) {
            r.mute = true;
        }
        let honest: Vec<PeerId> =
            (0..c.players as u32).map(PeerId).filter(|&id| id != liar).collect();
        let target = honest
            .iter()
            .filter_map(|id| sim.endpoint(*id).map(|n| n.session.frame()))
            .max()
            .unwrap_or(Tick::ZERO)
            .saturating_add(200);
        let mut last_frame: BTreeMap<PeerId, (Tick, Instant)> = BTreeMap::new();
        let seat = PlayerId(c.liar);
        let done = sim.run(secs(300), period, |id, n, now| {
            if id != liar && by_vote {
                let frame = n.session.frame();
                let since = last_frame.entry(id).or_insert((frame, now));
                if since.0 != frame {
                    *since = (frame, now);
                } else if now - since.1 >= Duration::from_secs(3) {
                    // The players kick the liar, and press resume on a
                    // pause it left behind.
                    let _ = n.session.abandon(seat);
                    if n.session.paused() {
                        n.session.resume();
                    }
                }
            }
            if let Some(rec) = records.get_mut(&id) {
                play(&mut n.session, rec, 10);
            }
        }, |sim| {
            sim.live().filter(|(id, _)| *id != liar).all(|(_, n)| n.session.frame() >= target)
        });
        prop_assert_eq!(done, Outcome::Done, "seed {}: the honest peers play on", c.seed);
        for a in &honest {
            for b in &honest {
                let (ra, rb) = (&records[a].chain, &records[b].chain);
                let n = ra.len().min(rb.len());
                prop_assert!(n == 0 || ra[n - 1] == rb[n - 1], "seed {}: {} and {} diverge", c.seed, a, b);
            }
            let s = &sim.endpoint(*a).map(|n| n.session.abandoned().to_vec()).unwrap_or_default();
            prop_assert!(s.iter().any(|(p, _)| *p == seat), "{} abandoned the liar", a);
        }
    }
}
