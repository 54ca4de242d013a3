//! Host migration under attack and under partial failures, on the
//! simulated network: cuts in one direction, partitions that heal,
//! reports forged or replayed, poisoned epochs. Each test is an attack a
//! hostile review found to work (its doc comment says what it did then),
//! and asserts that it no longer does.
#![allow(dead_code)]

use crate::common;
use common::hosted::{Game, play};
use lockstep_core::sequenced::{CloseReason, HostedConfig, HostedSession, Rejection};
use lockstep_core::sim::{LinkConditions, Sim, SimNetwork};
use lockstep_core::wire::{Datagram, DatagramWriter, Message, ResumeToken};
use lockstep_core::{Endpoint, Instant, PeerId, PlayerId, Tick, Transmit};
use std::collections::BTreeMap;
use std::time::Duration;

type Session = HostedSession<u16>;

/// A session with byte counters per peer, and an optional filter on what it sends.
struct Node {
    inner: Session,
    tx_to: BTreeMap<PeerId, (u64, u64)>,
    rx_from: BTreeMap<PeerId, (u64, u64)>,
    /// Sends nothing (a silent peer that still listens).
    mute: bool,
    /// Takeover reports seen: (from, seat, token).
    seen: Vec<(PeerId, PlayerId, ResumeToken)>,
}

impl Node {
    fn new(inner: Session) -> Self {
        Self {
            inner,
            tx_to: BTreeMap::new(),
            rx_from: BTreeMap::new(),
            mute: false,
            seen: Vec::new(),
        }
    }
}

impl Endpoint for Node {
    type Error = lockstep_core::sequenced::SequencerError;
    fn handle_datagram(&mut self, from: PeerId, d: &[u8], now: Instant) -> Result<(), Self::Error> {
        let e = self.rx_from.entry(from).or_default();
        e.0 += 1;
        e.1 += d.len() as u64;
        if let Ok(dg) = Datagram::decode(d, self.inner.frame()) {
            for m in &dg.messages {
                if let Message::Takeover { seat, token, .. } = *m {
                    self.seen.push((from, seat, token));
                }
            }
        }
        self.inner.handle_datagram(from, d, now)
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.inner.handle_timeout(now);
    }
    fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        loop {
            let t = self.inner.poll_transmit(buf)?;
            if self.mute {
                continue;
            }
            let e = self.tx_to.entry(t.destination).or_default();
            e.0 += 1;
            e.1 += t.len as u64;
            return Some(t);
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }
}

struct World {
    sim: Sim<Node>,
    games: BTreeMap<PeerId, Game>,
}

fn lan() -> LinkConditions {
    LinkConditions {
        latency: Duration::from_millis(10),
        ..LinkConditions::default()
    }
}
fn cut() -> LinkConditions {
    LinkConditions {
        loss: 1.0,
        ..LinkConditions::default()
    }
}

impl World {
    fn new(players: u32, config: HostedConfig, seed: u64) -> Self {
        Self::over(players, config, seed, lan())
    }

    /// `players` sessions (the first hosting) on links of `link`.
    fn over(players: u32, config: HostedConfig, seed: u64, link: LinkConditions) -> Self {
        let mut sim = Sim::new(SimNetwork::new(seed, link));
        sim.add(
            PeerId(0),
            Node::new(Session::host(config.clone(), Instant::ZERO).unwrap()),
        );
        for k in 1..players {
            sim.add(
                PeerId(k),
                Node::new(Session::join(config.clone(), PeerId(0), Instant::ZERO).unwrap()),
            );
        }
        Self {
            sim,
            games: BTreeMap::new(),
        }
    }
    /// `players` seated and `frames` frames into the match (or panics).
    fn started(players: u32, seed: u64, frames: usize) -> Self {
        let mut w = Self::new(players, HostedConfig::default(), seed);
        let all: Vec<PeerId> = (0..players).map(PeerId).collect();
        assert!(w.until(&all, frames, Duration::from_secs(30)));
        w
    }

    /// Every link between a player of `a` and one of `b`, both ways.
    fn split(&mut self, a: &[u32], b: &[u32], conditions: LinkConditions) {
        for x in a {
            for y in b {
                self.sim
                    .net
                    .set_link_both(PeerId(*x), PeerId(*y), conditions.clone());
            }
        }
    }

    fn step(&mut self, d: Duration) {
        let until = self.sim.now() + d;
        let games = &mut self.games;
        let _ = self.sim.run(
            until,
            Duration::from_millis(33),
            |id, n, now| play(id, &mut n.inner, games.entry(id).or_default(), now),
            |_| false,
        );
    }
    fn run_for(&mut self, d: Duration) {
        let end = self.sim.now() + d;
        while self.sim.now() < end {
            self.step(Duration::from_millis(50));
        }
    }
    fn until(&mut self, ids: &[PeerId], frames: usize, limit: Duration) -> bool {
        let end = self.sim.now() + limit;
        loop {
            if ids
                .iter()
                .all(|id| self.games.get(id).is_some_and(|g| g.ran.len() >= frames))
            {
                return true;
            }
            if self.sim.now() >= end {
                return false;
            }
            self.step(Duration::from_millis(100));
        }
    }
    fn s(&self, id: u32) -> &Session {
        &self.sim.endpoint(PeerId(id)).unwrap().inner
    }
    fn s_mut(&mut self, id: u32) -> &mut Session {
        &mut self.sim.endpoint_mut(PeerId(id)).unwrap().inner
    }
    fn seat(&self, id: u32) -> PlayerId {
        self.s(id).seat().unwrap()
    }
    /// Peer ids other than 0, lowest seat first.
    fn by_seat(&self, n: u32) -> Vec<u32> {
        let mut v: Vec<u32> = (1..n).collect();
        v.sort_by_key(|k| self.seat(*k));
        v
    }
    fn hosts(&self, n: u32) -> Vec<u32> {
        (0..n)
            .filter(|k| {
                self.sim
                    .endpoint(PeerId(*k))
                    .is_some_and(|x| x.inner.hosting() && !x.inner.deposed())
            })
            .collect()
    }
    fn frames(&self, id: u32) -> usize {
        self.games.get(&PeerId(id)).map_or(0, |g| g.ran.len())
    }
    /// First tick two players ran differently.
    fn differ(&self, a: u32, b: u32) -> Option<Tick> {
        let ga = &self.games[&PeerId(a)].ran;
        let gb = &self.games[&PeerId(b)].ran;
        ga.iter()
            .find(|(t, f)| gb.get(t).is_some_and(|g| g != *f))
            .map(|(t, _)| *t)
    }
}

fn report(seat: PlayerId, token: ResumeToken, epoch: u32, lacks: u32) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = DatagramWriter::new(&mut buf, Tick::new(lacks), 1200);
    w.put(Message::Takeover {
        epoch,
        seat,
        token,
        lacks: Tick::new(lacks),
    });
    w.finish();
    buf
}

fn ack(
    epoch: u32,
    ready: bool,
    late: bool,
    alive: bool,
    host: Option<PlayerId>,
    base: u32,
) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = DatagramWriter::new(&mut buf, Tick::new(base), 1200);
    w.put(Message::TakeoverAck {
        epoch,
        ready,
        want: None,
        late,
        alive,
        host,
    });
    w.finish();
    buf
}

fn bye(base: u32) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = DatagramWriter::new(&mut buf, Tick::new(base), 1200);
    w.put(Message::Bye {
        reason: lockstep_core::wire::ByeReason::Kicked,
        text: "go away",
    });
    w.finish();
    buf
}

fn status(w: &World, n: u32) -> String {
    (0..n)
        .map(|k| {
            let s = w.s(k);
            format!(
                "p{k}(seat {:?}): hosting={} deposed={} taking_over={} epoch={} frames={} closed={:?}",
                s.seat(), s.hosting(), s.deposed(), s.taking_over(), s.epoch(), w.frames(k), s.client().closed()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Partition {host, first candidate} | {three others} for 3 s, then heal.
/// The majority side takes over (correctly); the old host is deposed on
/// heal. The first candidate that followed the old host then finds itself
/// candidate again; nobody reported to it, and after `takeover_alone` it
/// hosted a match of its own (two hosts, each with honest players). Now a
/// collecting candidate asks every other player where it stands, and the
/// new host tells it the match went on without it.
#[test]
fn a_follower_of_a_deposed_host_does_not_host_a_second_match() {
    let n = 5;
    let mut w = World::started(n, 41, 90);
    let order = w.by_seat(n);
    let b = order[0];
    let rest = [order[1], order[2], order[3]];
    for r in rest {
        for x in [0, b] {
            w.sim.net.set_link_both(PeerId(r), PeerId(x), cut());
        }
    }
    w.run_for(Duration::from_secs(3));
    eprintln!("during partition:\n{}", status(&w, n));
    for r in rest {
        for x in [0, b] {
            w.sim.net.set_link_both(PeerId(r), PeerId(x), lan());
        }
    }
    w.run_for(Duration::from_secs(15));
    eprintln!("15 s after heal:\n{}", status(&w, n));
    let hosts = w.hosts(n);
    let fb = w.frames(b);
    w.run_for(Duration::from_secs(3));
    eprintln!("b ran {} -> {} frames in 3 s", fb, w.frames(b));
    assert_eq!(hosts.len(), 1, "hosts now: {hosts:?}");
}

/// Two short partitions into halves (each healed after 3 s, each rightly
/// called off: no host change). In each, a reporter that the candidate
/// had counted hears the host again before the candidate's "alive" and
/// tells the host it left it; the host counts that seat as a deposer for
/// good. After the second, a majority of "deposers" had piled up and the
/// live host, which nobody replaced, was deposed. Now a seat that plays
/// with the host again is no deposer.
#[test]
fn healed_partitions_never_depose_a_live_host() {
    let n = 4;
    let mut w = World::started(n, 31, 90);
    let order = w.by_seat(n);
    let y = order[0];
    for (round, x) in [order[1], order[2]].into_iter().enumerate() {
        let with_host = order.iter().copied().find(|k| *k != y && *k != x).unwrap();
        w.split(&[y, x], &[0, with_host], cut());
        w.run_for(Duration::from_secs(3));
        w.split(&[y, x], &[0, with_host], lan());
        w.run_for(Duration::from_secs(3));
        eprintln!("after heal {round}:\n{}", status(&w, n));
    }
    assert!(!w.s(0).deposed(), "a host nobody replaced was deposed");
}

/// One healed partition leaves one stale deposer; one report from a
/// single malicious player (which alone cannot depose: see
/// one_player_cannot_depose_a_live_host) completed the majority.
#[test]
fn a_healed_partition_and_one_liar_do_not_depose_a_live_host() {
    let n = 4;
    let mut w = World::started(n, 31, 90);
    let order = w.by_seat(n);
    let (y, x, liar) = (order[0], order[1], order[2]);
    w.split(&[y, x], &[0, liar], cut());
    w.run_for(Duration::from_secs(3));
    w.split(&[y, x], &[0, liar], lan());
    w.run_for(Duration::from_secs(3));
    assert!(!w.s(0).deposed());
    assert_eq!(w.hosts(n), vec![0]);
    let (seat, token) = (w.seat(liar), w.s(liar).client().welcome().unwrap().token);
    let now = w.sim.now();
    let _ = w
        .s_mut(0)
        .handle_datagram(PeerId(liar), &report(seat, token, 1, 1), now);
    w.run_for(Duration::from_secs(2));
    eprintln!("{}", status(&w, n));
    assert!(
        !w.s(0).deposed(),
        "live host deposed by one liar + a stale partition report"
    );
}

/// A seated player sends its live host (no takeover ever happened) one
/// report with its own real token and epoch 0, from a forged source (the
/// victims, which never speak). The host took each for a survivor coming
/// back, and sent it `Ready` every resend interval for `takeover_alone`
/// (10 s): 80 times the bytes in. Now a report is answered once.
#[test]
fn a_report_to_a_live_host_is_answered_once_not_flooded() {
    let n = 3;
    let mut w = World::started(n, 5, 60);
    let (seat, token) = (w.seat(2), w.s(2).client().welcome().unwrap().token);
    let mut sent_in = 0u64;
    let victims = 60u32;
    for v in 0..victims {
        let d = report(seat, token, 0, 1);
        sent_in += d.len() as u64;
        let now = w.sim.now();
        let _ = w.s_mut(0).handle_datagram(PeerId(1000 + v), &d, now);
    }
    w.run_for(Duration::from_secs(12));
    let host = w.sim.endpoint(PeerId(0)).unwrap();
    let (mut count, mut bytes) = (0u64, 0u64);
    for v in 0..victims {
        if let Some((c, b)) = host.tx_to.get(&PeerId(1000 + v)) {
            count += c;
            bytes += b;
        }
    }
    eprintln!(
        "{victims} forged reports, {sent_in} bytes in; host sent {count} datagrams, {bytes} bytes to the victims ({:.0}x)",
        bytes as f64 / sent_in as f64
    );
    assert!(bytes <= sent_in, "reply traffic bigger than the requests");
}

/// Reply size check: a stranger's report to a client that still hears its
/// host (answered `alive`) and to a host (answered `late`).
#[test]
fn answers_to_a_strangers_reports_are_no_bigger() {
    let n = 3;
    let mut w = World::started(n, 5, 60);
    let d = report(PlayerId(1), ResumeToken([9; 16]), 0, 1);
    for to in [0u32, 1] {
        for _ in 0..100 {
            let now = w.sim.now();
            let _ = w.s_mut(to).handle_datagram(PeerId(500 + to), &d, now);
        }
        w.run_for(Duration::from_secs(1));
        let e = w.sim.endpoint(PeerId(to)).unwrap();
        eprintln!(
            "to p{to}: 100 x {} bytes in -> {:?} out",
            d.len(),
            e.tx_to.get(&PeerId(500 + to))
        );
    }
}

/// A stranger sends the collecting candidate one report with a made-up
/// token and epoch u32::MAX: the candidate adopted the epoch before it
/// checked the token, and handed it to everyone. At the next takeover the
/// epoch wrapped to 0, so when that host (cut off, not dead) came back, the
/// survivors' reports never looked newer: it was never deposed. Now an
/// epoch comes only from a proven report, and never wraps.
#[test]
fn a_poisoned_epoch_does_not_keep_a_cut_off_host_from_being_deposed() {
    epoch_case(u32::MAX);
}
#[test]
fn a_cut_off_host_is_deposed() {
    epoch_case(2);
}
fn epoch_case(poison: u32) {
    let n = 5;
    let mut w = World::started(n, 81, 90);
    let order = w.by_seat(n);
    let c = order[0];
    w.sim.freeze(PeerId(0));
    for _ in 0..100 {
        w.step(Duration::from_millis(10));
        if w.s(c).taking_over() {
            let now = w.sim.now();
            let _ = w.s_mut(c).handle_datagram(
                PeerId(99),
                &report(PlayerId(3), ResumeToken([1; 16]), poison, 1),
                now,
            );
        }
        if w.s(c).hosting() {
            break;
        }
    }
    w.run_for(Duration::from_secs(3));
    eprintln!("after takeover 1:\n{}", status(&w, n));
    // The new host is cut off for 3 s, then comes back.
    for k in 1..n {
        if k != c {
            w.sim.net.set_link_both(PeerId(c), PeerId(k), cut());
        }
    }
    w.run_for(Duration::from_secs(3));
    for k in 1..n {
        if k != c {
            w.sim.net.set_link_both(PeerId(c), PeerId(k), lan());
        }
    }
    w.run_for(Duration::from_secs(5));
    eprintln!("after takeover 2 and heal:\n{}", status(&w, n));
    assert!(w.s(c).deposed(), "the cut-off host was never deposed");
}

use proptest::prelude::*;

proptest! {
    #![proptest_config(common::props::cases(48))]

    /// Host crash under loss, plus a one-way cut of one random link for a
    /// random time around the crash. The survivors end under one host, on
    /// one stream; a survivor whose reports a majority went on without is
    /// told so.
    #[test]
    fn survivors_of_a_crash_and_a_one_way_cut_keep_one_match(
        players in 3u32..=6,
        crash_at in 60u32..150,
        loss in 0.0f64..0.2,
        a in 0u32..6, b in 0u32..6,
        cut_from in 0u64..1500, cut_len in 100u64..3000,
        seed in any::<u64>(),
    ) {
        crash_and_cut(players, crash_at, loss, (a, b), (cut_from, cut_len), seed)?;
    }
}

/// Three players; the host crashes and, for 1 s, nothing the first
/// candidate sends reaches the other survivor (the other way works). The
/// candidate counted the survivor and took over; the survivor, hearing no
/// answer, gave it up and became candidate itself; it ignored the new
/// host's `Ready` (it was collecting, not reporting) and after
/// `takeover_alone` hosted a second match alone. Now a collecting
/// candidate yields to a new host, or an earlier candidate, that answers.
#[test]
fn a_one_way_cut_during_a_takeover_forks_nothing() {
    let n = 3;
    let mut w = World::started(n, 58, 60);
    let order = w.by_seat(n);
    let (c, v) = (order[0], order[1]);
    w.sim.freeze(PeerId(0));
    w.sim.net.set_link(PeerId(c), PeerId(v), cut());
    w.run_for(Duration::from_millis(1000));
    w.sim.net.set_link(PeerId(c), PeerId(v), lan());
    w.run_for(Duration::from_secs(15));
    eprintln!("{}", status(&w, n));
    let hosts: Vec<u32> = (1..n).filter(|k| w.s(*k).hosting()).collect();
    assert_eq!(hosts.len(), 1, "survivors hosting: {hosts:?}");
}

/// The first candidate (a seated player) goes silent when the host dies,
/// but keeps listening: every survivor reports to it first, token in the
/// clear, for `host_timeout` before giving it up. It now holds every
/// survivor's token, and resumed victim V's seat on the next candidate as
/// soon as that one hosted (its Hello every 5 ms beat V's). Now a seat is
/// held for the peer that reported it.
#[test]
fn a_silent_first_candidate_cannot_steal_a_seat_with_the_tokens_it_saw() {
    let n = 5;
    let config = HostedConfig::default();
    let mut w = World::started(n, 61, 90);
    let order = w.by_seat(n);
    let (m, b, v) = (order[0], order[1], order[2]);
    let v_seat = w.seat(v);
    w.sim.freeze(PeerId(0));
    w.sim.endpoint_mut(PeerId(m)).unwrap().mute = true;
    let mut stolen = None;
    for _ in 0..100 {
        w.step(Duration::from_millis(20));
        stolen = w
            .sim
            .endpoint(PeerId(m))
            .unwrap()
            .seen
            .iter()
            .find(|(_, s, _)| *s == v_seat)
            .map(|x| x.2);
        if stolen.is_some() {
            break;
        }
    }
    let stolen = stolen.expect("m got v's report");
    assert_eq!(stolen, w.s(v).client().welcome().unwrap().token);
    let mut thief = config.clone();
    thief.client.resume = Some(stolen);
    thief.client.hello_interval = Duration::from_millis(5);
    w.sim.add(
        PeerId(50),
        Node::new(Session::join(thief, PeerId(b), w.sim.now()).unwrap()),
    );
    w.run_for(Duration::from_secs(15));
    let holder: Vec<(PeerId, Option<PlayerId>)> = w
        .sim
        .endpoint_mut(PeerId(b))
        .unwrap()
        .inner
        .sequencer()
        .map(|s| s.connections().collect())
        .unwrap_or_default();
    eprintln!(
        "{}\nthief seat {:?}, connections on the new host: {holder:?}",
        status(&w, n),
        w.s(50).seat()
    );
    assert!(
        !holder.contains(&(PeerId(50), Some(v_seat))),
        "the thief plays v's seat {v_seat:?} on the new host"
    );
}

/// The host goes silent, then uses a token it minted for victim V (every
/// host knows them all) to resume V's seat on the new host, Hello every
/// 5 ms: it used to win the race. Now a seat is held for the peer that
/// reported it.
#[test]
fn a_departed_host_cannot_take_a_survivors_seat_with_the_token_it_minted() {
    let n = 4;
    let config = HostedConfig::default();
    let mut w = World::started(n, 63, 90);
    let order = w.by_seat(n);
    let (b, v) = (order[0], order[2]);
    let v_seat = w.seat(v);
    let minted = w.s(v).client().welcome().unwrap().token;
    // A host that goes silent (a crash, or pretending to): its process
    // lives on, with the tokens it minted.
    w.sim.freeze(PeerId(0));
    let mut thief = config.clone();
    thief.client.resume = Some(minted);
    thief.client.hello_interval = Duration::from_millis(5);
    w.sim.add(
        PeerId(50),
        Node::new(Session::join(thief, PeerId(b), w.sim.now()).unwrap()),
    );
    w.run_for(Duration::from_secs(5));
    eprintln!(
        "{}\nthief seat {:?} closed {:?} rx {:?}",
        status(&w, n),
        w.s(50).seat(),
        w.s(50).client().closed(),
        w.sim.endpoint(PeerId(50)).unwrap().rx_from
    );
    assert_ne!(
        w.s(50).seat(),
        Some(v_seat),
        "the departed host holds V's seat"
    );
}

fn welcome_token(w: &World, k: u32) -> ResumeToken {
    w.s(k).client().welcome().unwrap().token
}

/// The host (which minted every token) goes quiet towards the first
/// candidate B a moment before it stops altogether, and, from one socket
/// of its own per victim (no forged address), reports each victim's seat to
/// B the moment B collects. B had "every seat" at once and took over,
/// holding each victim's seat for the thief's socket; the victims were
/// refused, and the thieves took their seats (in 20 seeds of 20). Now a
/// report counts only from the address the roster names for its seat.
#[test]
fn a_departed_host_cannot_report_for_its_players() {
    departed_host(63, 200);
}

/// The same, over 20 seeds, with no head start.
#[test]
fn a_departed_host_cannot_report_for_its_players_in_any_seed() {
    for seed in 0..20 {
        departed_host(seed, 0);
    }
}

fn departed_host(seed: u64, head_start: u64) {
    let n = 4;
    let config = HostedConfig::default();
    let mut w = World::new(n, config.clone(), seed);
    let all: Vec<PeerId> = (0..n).map(PeerId).collect();
    assert!(w.until(&all, 90, Duration::from_secs(30)));
    let order = w.by_seat(n);
    let b = order[0];
    let victims = [order[1], order[2]];
    let stolen: Vec<(u32, PlayerId, ResumeToken)> = victims
        .iter()
        .enumerate()
        .map(|(i, v)| (70 + i as u32, w.seat(*v), welcome_token(&w, *v)))
        .collect();
    // Quiet towards B first, then dead.
    w.sim.net.set_link(PeerId(0), PeerId(b), cut());
    w.step(Duration::from_millis(head_start));
    w.sim.freeze(PeerId(0));
    let mut injected = 0;
    for _ in 0..400 {
        w.step(Duration::from_millis(2));
        if w.s(b).taking_over() && !w.s(b).hosting() {
            for (p, seat, token) in &stolen {
                let now = w.sim.now();
                let _ = w
                    .s_mut(b)
                    .handle_datagram(PeerId(*p), &report(*seat, *token, 1, 1), now);
                injected += 1;
            }
        }
        if w.s(b).hosting() {
            break;
        }
    }
    eprintln!(
        "reports injected: {injected}; b hosting: {}",
        w.s(b).hosting()
    );
    for (p, _, token) in &stolen {
        let mut thief = config.clone();
        thief.client.resume = Some(*token);
        w.sim.add(
            PeerId(*p),
            Node::new(Session::join(thief, PeerId(b), w.sim.now()).unwrap()),
        );
    }
    w.run_for(Duration::from_secs(10));
    let conns: Vec<(PeerId, Option<PlayerId>)> = w
        .s_mut(b)
        .sequencer()
        .map(|s| s.connections().collect())
        .unwrap_or_default();
    eprintln!("{}\nconnections on the new host: {conns:?}", status(&w, n));
    for (p, seat, _) in &stolen {
        eprintln!(
            "thief p{p}: seat {:?} frames {} closed {:?}",
            w.s(*p).seat(),
            w.frames(*p),
            w.s(*p).client().closed()
        );
        assert_ne!(
            w.s(*p).seat(),
            Some(*seat),
            "thief p{p} plays seat {seat:?}"
        );
    }
    // The honest players ran one stream, the attack notwithstanding.
    for v in victims {
        assert_eq!(w.differ(b, v), None, "p{v} ran a tick differently");
    }
}

/// A seated player M answers the collecting candidate's probe (or every
/// report it gets) with `alive`, naming itself as the host it follows. The
/// candidate yielded to M and told its reporters to follow M; M never
/// answered as a host; they gave M up, collected again, M answered again:
/// the match never went on (or the first candidate was cut out for good).
/// Now a player naming itself is not followed, a candidate that keeps
/// naming a seat already tried counts as failed, and a seat is followed on
/// another's word once per takeover.
#[test]
fn a_player_naming_itself_host_cannot_cut_the_first_candidate_out() {
    naming_itself(false);
}

/// The same, M answering every player.
#[test]
fn a_player_naming_itself_host_cannot_stall_the_takeover() {
    naming_itself(true);
}

fn naming_itself(all_victims: bool) {
    stall_by_answers(3, !all_victims, Claim::Alive, 60);
}

/// A partition {M, X} | {host, Y} for 3 s, healed (the takeover is rightly
/// called off). Meanwhile X reported to the first candidate M, token in
/// the clear. Much later, M sends the live host one deposing report per
/// seat it saw (epoch 5, from its own address): it used to make "more than
/// half of the other seats", and the live host was deposed. Now a deposing
/// report counts only from the seat's own connection.
#[test]
fn tokens_seen_in_a_called_off_takeover_depose_a_live_host() {
    let n = 4;
    let mut w = World::started(n, 33, 90);
    let order = w.by_seat(n);
    let m = order[0];
    let (x, y) = (order[1], order[2]);
    w.split(&[m, x], &[0, y], cut());
    w.run_for(Duration::from_secs(3));
    w.split(&[m, x], &[0, y], lan());
    w.run_for(Duration::from_secs(5));
    eprintln!("after the glitch:\n{}", status(&w, n));
    assert_eq!(w.hosts(n), vec![0]);
    let mut seen: BTreeMap<PlayerId, ResumeToken> = BTreeMap::new();
    for (_, s, t) in &w.sim.endpoint(PeerId(m)).unwrap().seen {
        seen.insert(*s, *t);
    }
    seen.insert(w.seat(m), welcome_token(&w, m));
    eprintln!(
        "M saw the tokens of seats {:?}",
        seen.keys().collect::<Vec<_>>()
    );
    w.run_for(Duration::from_secs(10));
    let now = w.sim.now();
    for (s, t) in &seen {
        let _ = w
            .s_mut(0)
            .handle_datagram(PeerId(m), &report(*s, *t, 5, 1), now);
    }
    w.run_for(Duration::from_secs(5));
    eprintln!(
        "after M's three reports:\n{}\nhosts {:?}",
        status(&w, n),
        w.hosts(n)
    );
    assert!(
        !w.s(0).deposed(),
        "a live host nobody replaced was deposed by one player"
    );
}

/// Partition {host, B} | {three others} for `secs`, then heal. The majority
/// side takes over; the old host plays on with B (it needs no majority).
/// When the partition heals before the old host gave the other side's
/// seats up (`abandon_after`), it is deposed, and B is told the match went
/// on without it: one match. (Longer partitions leave two: a known limit.)
fn long_partition(secs: u64) {
    let n = 5;
    let mut w = World::started(n, 41, 90);
    let order = w.by_seat(n);
    let b = order[0];
    let rest = [order[1], order[2], order[3]];
    let set = |w: &mut World, c: LinkConditions| {
        for r in rest {
            for x in [0, b] {
                w.sim.net.set_link_both(PeerId(r), PeerId(x), c.clone());
            }
        }
    };
    set(&mut w, cut());
    w.run_for(Duration::from_secs(secs));
    eprintln!(
        "during the partition ({secs} s):\n{}\nhosts {:?}",
        status(&w, n),
        w.hosts(n)
    );
    set(&mut w, lan());
    w.run_for(Duration::from_secs(30));
    eprintln!(
        "30 s after heal:\n{}\nhosts {:?}",
        status(&w, n),
        w.hosts(n)
    );
    let fb = w.frames(b);
    w.run_for(Duration::from_secs(3));
    eprintln!("B ran {fb} -> {} frames in 3 s", w.frames(b));
    assert_eq!(
        w.hosts(n).len(),
        1,
        "hosts 30 s after heal: {:?}",
        w.hosts(n)
    );
}

#[test]
fn an_8s_partition_heals_into_one_match() {
    long_partition(8);
}

/// R holds (and ran) a few frames the candidate B and X never got (the
/// host's link to them went quiet 150 ms before it died). R's report
/// claims them; then R is cut off from B for 12 s, so B never gets them,
/// stops believing the claim, and takes over from its own first missing
/// tick. R came back after `abandon_after` (10 s): its seat was no longer
/// "handed over", so nobody checked, and R was resumed at the tick it
/// named, having run the old host's frames where everyone else ran the new
/// host's. Now the check lasts until the seat's player is back (and a
/// player told a match goes on elsewhere never goes on alone).
#[test]
fn a_survivor_that_ran_replaced_frames_is_put_right_however_late_it_comes_back() {
    let n = 4;
    let mut w = World::started(n, 7, 90);
    let order = w.by_seat(n);
    let (b, r, x) = (order[0], order[1], order[2]);
    w.sim.net.set_link(PeerId(0), PeerId(b), cut());
    w.sim.net.set_link(PeerId(0), PeerId(x), cut());
    w.step(Duration::from_millis(150));
    w.sim.freeze(PeerId(0));
    let (fb, fr) = (w.frames(b), w.frames(r));
    let mut cut_at = None;
    for _ in 0..3000 {
        w.step(Duration::from_millis(2));
        let counted = w
            .sim
            .endpoint(PeerId(b))
            .unwrap()
            .seen
            .iter()
            .any(|y| y.0 == PeerId(r));
        if counted && w.s(b).taking_over() {
            w.sim.net.set_link_both(PeerId(b), PeerId(r), cut());
            cut_at = Some(w.sim.now());
            break;
        }
    }
    assert!(cut_at.is_some());
    w.run_for(Duration::from_secs(12));
    eprintln!("while cut:\n{}", status(&w, n));
    w.sim.net.set_link_both(PeerId(b), PeerId(r), lan());
    w.run_for(Duration::from_secs(8));
    eprintln!(
        "frames when the host died: b {fb} r {fr}\n{}",
        status(&w, n)
    );
    eprintln!("r closed: {:?}", w.s(r).client().closed());
    assert!(fr > fb, "r holds frames b lacks");
    // Refused (the room hands out no snapshot), and told why; never
    // playing on with a state the others do not have.
    assert!(
        matches!(w.s(r).client().closed(), Some(CloseReason::Rejected(Rejection::Other(t))) if t.contains("replaced")),
        "r not told: {:?}",
        w.s(r).client().closed()
    );
    assert!(!w.s(r).hosting(), "r hosts a match of its own");
}

/// Seat `m_index` of the order (M) stays silent when the host dies (every
/// survivor gives it up), and answers each report or probe it gets (only
/// the first candidate's, with `first_only`), from its own address, for
/// `secs`: `alive` naming its own seat as the host it follows, or else the
/// "I collect" mark (`TakeoverAck { host: its seat }`, no flags). An honest
/// survivor must host, and every other survivor play on or be told why not.
/// What the attacker answers a collecting candidate's probe with.
#[derive(Clone, Copy)]
enum Claim {
    /// The "I collect" mark.
    Mark,
    /// `alive`, naming itself as the host it follows.
    Alive,
    /// `ready`: it hosts.
    Ready,
    /// `ready`, then a goodbye to the Hello that follows.
    ReadyThenBye,
    /// `late`: the match went on without the candidate.
    Late,
}

fn stall_by_answers(m_index: usize, first_only: bool, claim: Claim, secs: u64) {
    stall_by_answers_of(5, &[m_index], first_only, claim, secs);
}

/// `n` players; the host (p0) dies; the players at `m_indices` in seat
/// order lie with `claim` to the survivors taking over.
fn stall_by_answers_of(n: u32, m_indices: &[usize], first_only: bool, claim: Claim, secs: u64) {
    let mut w = World::started(n, 71, 90);
    let order = w.by_seat(n);
    let c = order[0];
    let ms: Vec<u32> = m_indices.iter().map(|i| order[*i]).collect();
    for &m in &ms {
        w.sim.endpoint_mut(PeerId(m)).unwrap().mute = true;
    }
    w.sim.freeze(PeerId(0));
    let honest: Vec<u32> = (1..n).filter(|k| !ms.contains(k)).collect();
    let before: Vec<usize> = honest.iter().map(|k| w.frames(*k)).collect();
    let mut answered = vec![0; ms.len()];
    let mut sent = 0;
    for _ in 0..(secs * 1000 / 20) {
        w.step(Duration::from_millis(20));
        for (i, &m) in ms.iter().enumerate() {
            let m_seat = w.seat(m);
            let seen = &w.sim.endpoint(PeerId(m)).unwrap().seen;
            let mut from: std::collections::BTreeSet<u32> =
                seen[answered[i]..].iter().map(|x| x.0.0).collect();
            answered[i] = seen.len();
            if let Claim::ReadyThenBye = claim {
                // Whoever says hello to M as its new host is sent away.
                for &k in from.iter().filter(|k| honest.contains(k)) {
                    if !w.s(k).taking_over() && w.s(k).host_seat() == Some(m_seat) {
                        let now = w.sim.now();
                        let base = w.s(k).frame().get();
                        let _ = w.s_mut(k).handle_datagram(PeerId(m), &bye(base), now);
                        sent += 1;
                    }
                }
            }
            if !matches!(claim, Claim::Mark | Claim::Alive) {
                // Asked or not.
                from.extend(1..n);
            }
            for k in from
                .into_iter()
                .filter(|k| honest.contains(k) && (!first_only || *k == c))
            {
                if w.s(k).taking_over() && !w.s(k).hosting() {
                    let now = w.sim.now();
                    let e = w.s(k).epoch();
                    let base = w.s(k).frame().get();
                    let _ = w.s_mut(k).handle_datagram(
                        PeerId(m),
                        &match claim {
                            Claim::Mark => ack(e, false, false, false, Some(m_seat), base),
                            Claim::Alive => ack(e, false, false, true, Some(m_seat), base),
                            Claim::Ready | Claim::ReadyThenBye => {
                                ack(e, true, false, false, None, base)
                            }
                            Claim::Late => ack(e, false, true, false, None, base),
                        },
                        now,
                    );
                    sent += 1;
                }
            }
        }
    }
    let after: Vec<usize> = honest.iter().map(|k| w.frames(*k)).collect();
    eprintln!(
        "{}\nliars sent {sent} answers in {secs} s\nframes before {before:?} after {after:?}\nhosts {:?}",
        status(&w, n),
        w.hosts(n)
    );
    assert!(sent > 0, "the liars were never asked");
    let h = w.hosts(n).into_iter().find(|h| honest.contains(h));
    let Some(h) = h else {
        panic!("no honest survivor hosts {secs} s after the host died");
    };
    for (i, &k) in honest.iter().enumerate() {
        assert!(
            after[i] > before[i] + 100
                // (Told it was left behind, by a host: not the liars' aim.)
                || matches!(claim, Claim::Mark | Claim::Alive)
                    && w.s(k)
                        .client()
                        .closed()
                        .is_some_and(|r| matches!(r, CloseReason::Bye(..))),
            "p{k} stuck for {secs} s, never told"
        );
        // ... and the honest ones ran one stream.
        assert_eq!(w.differ(h, k), None, "p{k} ran a tick differently");
    }
}

/// The lowest seat stays silent when the host dies, then answers every
/// probe with the "I collect" mark: the next candidate yielded to it each
/// time (taking it out of the failed ones), and no takeover ever finished
/// (found in the third hostile review). A candidate now yields to a mark
/// once per takeover, and its waits count from its first collection.
#[test]
fn a_silent_lowest_seat_marking_probes_cannot_stall_the_takeover() {
    stall_by_answers(0, false, Claim::Mark, 60);
}

/// The same from the second-lowest seat.
#[test]
fn a_silent_second_seat_marking_probes_cannot_stall_the_takeover() {
    stall_by_answers(1, false, Claim::Mark, 60);
}

/// A seated player M answers every collecting candidate's probe with
/// `ready`, claiming to host: the candidate followed M, M never welcomed
/// it, the candidate collected again after `host_timeout`, M claimed
/// again, and the match never went on. A seat's own claim to host is now
/// believed only when another seat says it follows that seat, and a host
/// moved to counts as silent until it welcomes.
#[test]
fn a_player_claiming_to_host_cannot_stall_the_takeover() {
    stall_by_answers(3, false, Claim::Ready, 60);
}

/// The same from the lowest seat (the first candidate), silent until it
/// claims.
#[test]
fn a_silent_lowest_seat_claiming_to_host_cannot_stall_the_takeover() {
    stall_by_answers(0, false, Claim::Ready, 60);
}

/// Two seated players take turns claiming to host, in a room of seven
/// (neither vouching for the other): neither is followed.
#[test]
fn two_players_taking_turns_claiming_to_host_cannot_stall_the_takeover() {
    stall_by_answers_of(7, &[2, 4], false, Claim::Ready, 60);
}

/// A seated player claims to host, then sends a goodbye to the Hello of
/// every player that follows it: each would have ended its session. A
/// host that never welcomed us cannot end it: it is silent, and taken
/// over.
#[test]
fn a_claimed_host_saying_goodbye_ends_nobody() {
    stall_by_answers(3, false, Claim::ReadyThenBye, 60);
}

/// A seated player tells every player taking over that the match went on
/// without it (`late`): each collecting candidate in turn ended its
/// session, until one was left. A seat's own word that we are late is
/// not believed (a real host is reached through its players).
#[test]
fn a_player_saying_the_match_went_on_ends_nobody() {
    stall_by_answers(3, false, Claim::Late, 60);
}

fn welcome_dg(seat: PlayerId, like: lockstep_core::wire::Welcome, at: u32) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = DatagramWriter::new(&mut buf, Tick::new(at), 1200);
    w.put(Message::Welcome(lockstep_core::wire::Welcome {
        seat: Some(seat),
        start: Tick::new(at),
        tick: Tick::new(at),
        snapshot: false,
        token: ResumeToken([7; 16]),
        ..like
    }));
    w.finish();
    buf
}

fn ping_dg(at: u32) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = DatagramWriter::new(&mut buf, Tick::new(at), 1200);
    w.put(Message::Ping { stamp: 1 });
    w.finish();
    buf
}

/// The host dies; M (muted otherwise) answers `ready` to the players at
/// `hook` (in seat order) while they take over, sends a made-up `Welcome`
/// to whoever says hello to it, pings those it welcomed (`keep`), and
/// answers `late` to the other players taking over (`late_to_rest`).
fn hook_with_welcome(
    n: u32,
    m_index: usize,
    hook: &[usize],
    late_to_rest: bool,
    keep: bool,
    secs: u64,
) -> World {
    let mut w = World::started(n, 71, 90);
    let order = w.by_seat(n);
    let m = order[m_index];
    let hook: Vec<u32> = hook.iter().map(|i| order[*i]).collect();
    w.sim.endpoint_mut(PeerId(m)).unwrap().mute = true;
    let like = *w.s(m).client().welcome().unwrap();
    let m_seat = w.seat(m);
    w.sim.freeze(PeerId(0));
    let honest: Vec<u32> = (1..n).filter(|k| *k != m).collect();
    let mut sent = 0;
    for _ in 0..(secs * 1000 / 20) {
        w.step(Duration::from_millis(20));
        for &k in &honest {
            let s = w.s(k);
            if s.client().closed().is_some() || s.hosting() {
                continue;
            }
            let base = s.frame().get();
            let now = w.sim.now();
            let d = if s.host_seat() == Some(m_seat) && !s.taking_over() {
                if s.client().connected() {
                    if !keep {
                        continue;
                    }
                    ping_dg(base)
                } else {
                    welcome_dg(w.seat(k), like, base)
                }
            } else if s.taking_over() && hook.contains(&k) {
                ack(s.epoch(), true, false, false, None, base)
            } else if s.taking_over() && late_to_rest {
                ack(s.epoch(), false, true, false, None, base)
            } else {
                continue;
            };
            let _ = w.s_mut(k).handle_datagram(PeerId(m), &d, now);
            sent += 1;
        }
    }
    eprintln!(
        "{}\nM (p{m}) sent {sent} datagrams; hosts {:?}",
        status(&w, n),
        w.hosts(n)
    );
    assert!(sent > 0, "M was never asked");
    w
}

/// A seated player answers every candidate with `ready`, welcomes
/// whoever follows with a made-up `Welcome`, and pings them: the followers
/// counted as connected to it, and every takeover of it was called off by
/// its next datagram; nobody honest ever played on (found in the fourth
/// hostile review). A seat's own claim to host is now followed only when
/// another seat says it follows it (or nobody else is left).
#[test]
fn a_claimant_that_welcomes_and_pings_cannot_stall_the_takeover() {
    claimant_cannot_stall(true);
}

/// The same, welcoming once and sending nothing else.
#[test]
fn a_claimant_that_welcomes_once_cannot_stall_the_takeover() {
    claimant_cannot_stall(false);
}

fn claimant_cannot_stall(keep: bool) {
    let w = hook_with_welcome(5, 3, &[0, 1, 2, 3], false, keep, 60);
    let honest = w.by_seat(5)[..3].to_vec();
    let Some(h) = w.hosts(5).into_iter().find(|h| honest.contains(h)) else {
        panic!("no honest survivor hosts 60 s after the host died");
    };
    for &k in &honest {
        assert!(w.s(k).client().closed().is_none(), "p{k} ended");
        assert_eq!(w.differ(h, k), None, "p{k} ran a tick differently");
    }
}

/// M hooks the first candidate with a made-up `Welcome`; that candidate,
/// a client of M now, answered the others' probes with `alive` naming M,
/// which made M's `late` believed, and it ended every other candidate's
/// session in turn. M now hooks nobody in the first place.
#[test]
fn a_hooked_player_vouching_for_a_claimant_ends_nobody() {
    let w = hook_with_welcome(5, 3, &[0], true, true, 60);
    for &k in &w.by_seat(5)[..3] {
        assert!(
            w.s(k).client().closed().is_none(),
            "p{k}'s session ended: {:?}",
            w.s(k).client().closed()
        );
    }
}

/// The one-way-cut property's case: `players`, the host frozen once it ran
/// `crash_at` frames, then `a` cut off from `b` (one way) from `cut_from`
/// ms after the crash for `cut_len` ms.
fn crash_and_cut(
    players: u32,
    crash_at: u32,
    loss: f64,
    (a, b): (u32, u32),
    (cut_from, cut_len): (u64, u64),
    seed: u64,
) -> Result<(), TestCaseError> {
    let link = LinkConditions {
        latency: Duration::from_millis(15),
        jitter: Duration::from_millis(5),
        loss,
        duplicate: 0.02,
        reorder: 0.05,
        max_datagram: Some(1200),
        bandwidth: None,
    };
    let mut w = World::over(players, HostedConfig::default(), seed, link.clone());
    let all: Vec<PeerId> = (0..players).map(PeerId).collect();
    prop_assert!(w.until(&all, crash_at as usize, Duration::from_secs(60)));
    w.sim.freeze(PeerId(0));
    let (a, b) = (1 + a % (players - 1), 1 + b % (players - 1));
    w.run_for(Duration::from_millis(cut_from));
    if a != b {
        w.sim.net.set_link(PeerId(a), PeerId(b), cut());
    }
    w.run_for(Duration::from_millis(cut_len));
    w.sim.net.set_link(PeerId(a), PeerId(b), link);
    w.run_for(Duration::from_secs(25));
    let survivors: Vec<u32> = (1..players).collect();
    let hosts: Vec<u32> = survivors
        .iter()
        .copied()
        .filter(|k| w.s(*k).hosting())
        .collect();
    let before: Vec<usize> = survivors.iter().map(|k| w.frames(*k)).collect();
    w.run_for(Duration::from_secs(2));
    let after: Vec<usize> = survivors.iter().map(|k| w.frames(*k)).collect();
    prop_assert_eq!(
        hosts.len(),
        1,
        "seed {}: hosts {:?}\n{}",
        seed,
        hosts,
        status(&w, players)
    );
    for k in &survivors {
        // Left out (it reported after a majority went on without it),
        // and told so; or playing on.
        // (Or it ran frames the new host replaced, its claim to hold
        // them not believed when they did not come, and the room hands
        // out no snapshot: it is refused, and told why.)
        let told = match w.s(*k).client().closed() {
            Some(CloseReason::Bye(_, t)) => t.contains("without this player"),
            Some(CloseReason::Rejected(Rejection::Other(t))) => t.contains("replaced"),
            _ => false,
        };
        if told {
            continue;
        }
        prop_assert!(
            after[(*k - 1) as usize] > before[(*k - 1) as usize] + 20,
            "seed {}: {} stuck\n{}",
            seed,
            k,
            status(&w, players)
        );
        prop_assert_eq!(
            w.differ(hosts[0], *k),
            None,
            "seed {}: {} ran a tick differently",
            seed,
            k
        );
    }
    Ok(())
}

/// A seed the property found: the survivor cut off from the new host
/// moved to it, was refused (it ran frames the new host replaced), and,
/// taking over the host that never welcomed it meanwhile, went on to host
/// a second match alone. A believed refusal now ends its takeover.
#[test]
fn a_refused_survivor_never_hosts_a_second_match() {
    crash_and_cut(
        3,
        104,
        0.14603489708842252,
        (5, 0),
        (501, 851),
        7617311070763326304,
    )
    .unwrap();
}
