//! Attacks on the mesh abandonment protocol by one dishonest seated peer,
//! each written against an earlier version of it that they broke. Each test
//! drives real sessions by hand, with full control over which datagram
//! reaches whom and when; the dishonest peer runs a real session whose
//! outgoing datagrams are rewritten.

use crate::common;
use common::Session;
use lockstep_core::wire::{
    Abandon, ChainWriter, Datagram, DatagramWriter, Endorsement, InputRun, Inputs, List, Message,
};
use lockstep_core::{CommitError, Event, Frame, Instant, MeshConfig, PeerId, PlayerId, Tick};
use std::time::Duration;

/// Decides the fate of a datagram `(from, to, bytes, sender)`: `None` drops
/// it, else what is delivered.
type Route<'a> = dyn FnMut(usize, usize, Vec<u8>, &Session) -> Option<Vec<u8>> + 'a;
/// Edits the acks of an `Inputs` message.
type EditAcks<'a> = dyn Fn(&mut Vec<(PlayerId, Tick)>) + 'a;

/// Hand-driven mesh: peer `i` plays seat `i`.
struct Net {
    s: Vec<Session>,
    frames: Vec<Vec<Frame<u16>>>,
    events: Vec<Vec<Event>>,
    queue: Vec<(usize, usize, Vec<u8>)>,
    now: Instant,
}

impl Net {
    fn new(n: usize, config: MeshConfig) -> Self {
        let s = common::hand::players(n, &config);
        Self {
            s,
            frames: vec![Vec::new(); n],
            events: vec![Vec::new(); n],
            queue: Vec::new(),
            now: Instant::ZERO,
        }
    }

    /// Moves the clock on 40 ms and queues whatever every session sends.
    fn send(&mut self) {
        self.now += Duration::from_millis(40);
        let mut buf = Vec::new();
        for i in 0..self.s.len() {
            self.s[i].handle_timeout(self.now);
            while let Some(t) = self.s[i].poll_transmit(&mut buf) {
                self.queue
                    .push((i, t.destination.0 as usize, buf[..t.len].to_vec()));
            }
        }
    }

    /// Delivers the queued datagrams `route` lets through (possibly
    /// rewritten); the rest are dropped.
    fn deliver(&mut self, route: &mut Route<'_>) {
        let q = std::mem::take(&mut self.queue);
        for (f, t, b) in q {
            let Some(b) = route(f, t, b, &self.s[f]) else {
                continue;
            };
            let now = self.now;
            self.s[t]
                .handle_datagram(PeerId(f as u32), &b, now)
                .unwrap_or_else(|e| panic!("{f} -> {t}: {e}"));
        }
        self.collect_events();
    }

    /// Delivers only the queued datagrams from `from` to `to`, keeping the
    /// others queued.
    fn deliver_one(
        &mut self,
        from: usize,
        to: usize,
        rewrite: &mut dyn FnMut(Vec<u8>, &Session) -> Vec<u8>,
    ) {
        let q = std::mem::take(&mut self.queue);
        for (f, t, b) in q {
            if f == from && t == to {
                let b = rewrite(b, &self.s[f]);
                let now = self.now;
                self.s[t]
                    .handle_datagram(PeerId(f as u32), &b, now)
                    .unwrap_or_else(|e| panic!("{f} -> {t}: {e}"));
            } else {
                self.queue.push((f, t, b));
            }
        }
        self.collect_events();
    }

    fn pump(&mut self, rounds: usize, route: &mut Route<'_>) {
        for _ in 0..rounds {
            self.send();
            self.deliver(route);
        }
    }

    fn advance(&mut self, i: usize) {
        while let Some(f) = self.s[i].advance() {
            self.frames[i].push(f);
        }
        self.collect_events();
    }

    fn collect_events(&mut self) {
        for i in 0..self.s.len() {
            while let Some(e) = self.s[i].poll_event() {
                self.events[i].push(e);
            }
        }
    }

    fn frame_at(&self, i: usize, tick: Tick) -> Option<&Frame<u16>> {
        self.frames[i].iter().find(|f| f.tick == tick)
    }

    /// Every peer commits one input and the network runs until quiet;
    /// then every peer runs what it can.
    fn round(&mut self, input: u16) {
        for i in 0..self.s.len() {
            self.s[i].commit_local(input + i as u16).unwrap();
        }
        self.pump(3, &mut |_, _, b, _| Some(b));
        for i in 0..self.s.len() {
            self.advance(i);
        }
    }
}

/// Rewrites a datagram: `abandon` maps the Abandon message (if any) to the
/// one to send; `acks` edits every Inputs message's acks; `extra` runs are
/// appended as one more Inputs message.
fn rewrite(
    bytes: &[u8],
    reference: Tick,
    abandon: &dyn Fn(Option<&Abandon>) -> Option<Abandon>,
    acks: &EditAcks<'_>,
    extra: &[(PlayerId, Tick, Vec<u16>)],
) -> Vec<u8> {
    let d = Datagram::decode(bytes, reference).unwrap();
    let mut out = Vec::new();
    let mut w = DatagramWriter::new(&mut out, d.base, 1200);
    let mut had_abandon = false;
    for m in &d.messages {
        match m {
            Message::Abandon(a) => {
                had_abandon = true;
                if let Some(a) = abandon(Some(a)) {
                    w.push(&Message::Abandon(a)).unwrap();
                }
            }
            Message::Inputs(i) => {
                let mut edited = i.acks.to_vec();
                acks(&mut edited);
                let i = Inputs {
                    acks: (&edited).into(),
                    ..*i
                };
                w.push(&Message::Inputs(i)).unwrap();
            }
            other => w.push(other).unwrap(),
        }
    }
    if !had_abandon && let Some(a) = abandon(None) {
        w.push(&Message::Abandon(a)).unwrap();
    }
    let chains: Vec<(PlayerId, Tick, u32, Vec<u8>)> = extra
        .iter()
        .map(|(s, t, v)| {
            let mut c = ChainWriter::new();
            for x in v {
                assert!(c.push(x, usize::MAX));
            }
            let mut b = Vec::new();
            c.write(&mut b);
            (*s, *t, v.len() as u32, b)
        })
        .collect();
    if !chains.is_empty() {
        let runs: Vec<InputRun<'_>> = chains
            .iter()
            .map(|(seat, start, count, chain)| InputRun {
                seat: *seat,
                start: *start,
                count: *count,
                back: 0,
                check: 0,
                chain,
            })
            .collect();
        w.push(&Message::Inputs(Inputs {
            acks: List::EMPTY,
            runs: (&runs).into(),
        }))
        .unwrap();
    }
    w.finish();
    out
}

/// The abandon digest of `seat` before `from` as peer `who` holds it: what
/// it ran (its frames), then `extra` held but not run. Follows
/// docs/protocol.md ("Abandon").
fn digest(net: &Net, who: usize, seat: usize, from: Tick, extra: &[(Tick, Option<u16>)]) -> u64 {
    use lockstep_core::Input;
    use sha2::{Digest, Sha256};
    let s = &net.s[who];
    let window = s.abandon_window();
    let first = s.config().first_tick;
    let start = Tick::new(from.get().saturating_sub(window)).max(first);
    let mut h = Sha256::new();
    h.update(b"lockstep abandon v1");
    h.update((seat as u16).to_le_bytes());
    h.update(from.get().to_le_bytes());
    h.update(start.get().to_le_bytes());
    for t in start.get()..from.get() {
        let t = Tick::new(t);
        let cell = net
            .frame_at(who, t)
            .map(|f| f.inputs[seat])
            .or_else(|| extra.iter().find(|(x, _)| *x == t).map(|(_, v)| *v))
            .unwrap_or_else(|| panic!("{who} holds nothing for tick {t}"));
        match cell {
            None => h.update([0]),
            Some(i) => {
                let mut b = Vec::new();
                i.encode(&mut b);
                h.update([1]);
                h.update((b.len() as u32).to_le_bytes());
                h.update(&b);
            }
        }
    }
    let out = h.finalize();
    u64::from_le_bytes(out[..8].try_into().unwrap())
}

/// Every datagram's word on votes is taken at once (`vote_hold` zero), so
/// that each attack below can place a freeze between two chosen datagrams:
/// what the attacks aim at is the endorsement rules, which do not lean on
/// the hold. (The hold itself is attacked in `thaw_attacks.rs`.)
fn config() -> MeshConfig {
    MeshConfig {
        abandon_after: None,
        vote_hold: Duration::ZERO,
        ..MeshConfig::default()
    }
}

/// Adds `extra` to what an Abandon says (votes, frozen seats as they are).
fn with_endorsement(a: Option<&Abandon>, extra: Endorsement) -> Option<Abandon> {
    let mut a = a.cloned().unwrap_or(Abandon {
        votes: vec![],
        frozen: vec![],
        endorsements: vec![],
    });
    if !a.endorsements.iter().any(|e| e.seat == extra.seat) {
        a.endorsements.push(extra);
    }
    Some(a)
}

/// Safety. A dishonest non-deciding peer B lists an endorsement `(C, t)`
/// of its own for the crashed C, below input the honest decider D holds
/// straight from C, and holds back its own input for `t` to D a moment so D
/// has not run `t`. If D adopted `t` (an earlier version did), D would run
/// ticks from `t` on C's real input before the endorsements came back while
/// the honest Y applies the decision: their streams would differ. No peer
/// endorses a tick it holds the player's own input for.
#[test]
fn a_non_deciding_liar_cannot_make_the_decider_run_past_its_tick() {
    const D: usize = 0;
    const B: usize = 1;
    const Y: usize = 2;
    const C: usize = 3;
    let mut net = Net::new(4, config());
    for r in 0..5 {
        net.round(100 + 10 * r);
    }
    let n = net.s[D].frame();
    assert!(net.s.iter().all(|s| s.frame() == n), "all in step at {n}");
    // C commits two more inputs (ticks n, n+1); only D gets them. Then C
    // crashes for good.
    net.s[C].commit_local(7000).unwrap();
    net.s[C].commit_local(7001).unwrap();
    net.send();
    net.deliver(&mut |f, t, b, _| (f == C && t == D).then_some(b));
    // D, B and Y play on; B holds its own input back from D for now.
    for i in [D, B, Y] {
        for k in 0..3 {
            net.s[i].commit_local(200 + k).unwrap();
        }
    }
    let mut no_c_no_b_to_d = |f: usize, t: usize, b: Vec<u8>, _: &Session| {
        (f != C && t != C && !(f == B && t == D)).then_some(b)
    };
    net.pump(3, &mut no_c_no_b_to_d);
    for i in [D, B, Y] {
        net.advance(i);
    }
    assert_eq!(net.s[D].frame(), n, "D waits on B's input");
    assert_eq!(net.s[D].awaiting(), vec![PlayerId(B as u16)]);
    assert_eq!(net.s[Y].frame(), n, "Y waits on C's input");
    assert_eq!(net.s[Y].awaiting(), vec![PlayerId(C as u16)]);

    // Y (an honest vote-kick) and B vote C out; they freeze it.
    net.s[Y].abandon(PlayerId(C as u16)).unwrap();
    net.s[B].abandon(PlayerId(C as u16)).unwrap();
    net.pump(3, &mut |f, t, b, _| {
        (f != C && t != C && t != D).then_some(b)
    });
    // Y's report reaches D; D's game votes too, and D freezes C.
    net.send();
    net.deliver_one(Y, D, &mut |b, _| b);
    net.queue.clear();
    net.s[D].abandon(PlayerId(C as u16)).unwrap();
    // B's datagram reaches D before anything D sends: it reports C frozen,
    // its (true) ack, its input for tick n, and an endorsement of (C, n).
    // B computes the digest D will compute (the spec is public and B ran
    // the same frames), so not even `AbandonDisputed` is raised.
    let fake = Endorsement {
        seat: PlayerId(C as u16),
        from: n,
        digest: digest(&net, B, C, n, &[]),
        left: false,
    };
    net.send();
    net.deliver_one(B, D, &mut |b, s| {
        rewrite(&b, s.frame(), &|a| with_endorsement(a, fake), &|_| {}, &[])
    });
    // D's game runs what it can: tick n at least, on C's input (B's
    // inputs went a few times each, over datagrams D never got, so D may
    // not hold B's for n + 1 yet).
    net.advance(D);
    assert!(net.s[D].frame() > n, "D ran tick {n}");
    assert!(net.s[D].abandoned().is_empty(), "nothing applied yet");
    // From here on the network is fair (C stays dead); B just keeps
    // listing its endorsement until its own session makes one.
    net.pump(10, &mut |f, t, b, s| {
        if f == C || t == C {
            return None;
        }
        if f == B {
            return Some(rewrite(
                &b,
                s.frame(),
                &|a| with_endorsement(a, fake),
                &|_| {},
                &[],
            ));
        }
        Some(b)
    });
    for i in [D, B, Y] {
        net.advance(i);
    }
    let fd = net.frame_at(D, n).cloned();
    let fy = net.frame_at(Y, n).cloned();
    assert!(fd.is_some() && fy.is_some(), "both ran tick {n}");
    assert_eq!(fd, fy, "two honest peers ran different frames at tick {n}");
}

/// Plays `rounds` more rounds among `who` (everyone else cut off): each
/// commits when it can, the network runs, each runs what it can.
fn play_on(net: &mut Net, who: &[usize], rounds: usize, input: u16) {
    for r in 0..rounds {
        for &i in who {
            let _ = net.s[i].commit_local(input + r as u16);
        }
        net.pump(2, &mut |f, t, b, _| {
            (who.contains(&f) && who.contains(&t)).then_some(b)
        });
        for &i in who {
            net.advance(i);
        }
    }
}

/// A dishonest decider B splits the honest peers' endorsements for a
/// crashed player C: it proposes `(C, n)` to X and, after forwarding Y a
/// made-up input of C for tick `n`, `(C, n + 1)` to Y. Neither applies, and
/// neither ever runs tick `n`: the two never differ. (The abandonment stays
/// stuck even once B is voted out, since an endorsement never changes: a
/// known limit, the price of the next test passing.)
#[test]
fn a_liar_that_splits_honest_endorsements_cannot_make_them_differ() {
    const B: usize = 0;
    const X: usize = 1;
    const Y: usize = 2;
    const C: usize = 3;
    let mut net = Net::new(4, config());
    for r in 0..5 {
        net.round(100 + 10 * r);
    }
    let n = net.s[X].frame();
    // C crashes; the others play on and stall on tick n.
    play_on(&mut net, &[B, X, Y], 3, 300);
    assert_eq!(net.s[X].frame(), n);
    assert_eq!(net.s[Y].awaiting(), vec![PlayerId(C as u16)]);
    // X and Y vote C out. B's session decides honestly, (C, n), and X gets
    // that; Y gets a forged input of C for tick n and (C, n + 1).
    net.s[X].abandon(PlayerId(C as u16)).unwrap();
    net.s[Y].abandon(PlayerId(C as u16)).unwrap();
    let seat_c = PlayerId(C as u16);
    net.pump(10, &mut |f, t, b, s| {
        if f == C || t == C {
            return None;
        }
        if f == B && t == Y {
            let split = |a: Option<&Abandon>| {
                let mut a = a.cloned()?;
                for e in &mut a.endorsements {
                    if e.seat == seat_c {
                        e.from = n.saturating_add(1);
                    }
                }
                Some(a)
            };
            return Some(rewrite(
                &b,
                s.frame(),
                &split,
                &|_| {},
                &[(seat_c, n, vec![999])],
            ));
        }
        Some(b)
    });
    // The honest players vote B out; B falls silent. That works...
    net.s[X].abandon(PlayerId(B as u16)).unwrap();
    net.s[Y].abandon(PlayerId(B as u16)).unwrap();
    play_on(&mut net, &[X, Y], 200, 400);
    for i in [X, Y] {
        assert!(
            net.s[i].abandoned().iter().any(|(p, _)| p.index() == B),
            "{i} abandoned the liar: {:?}",
            net.s[i].abandoned()
        );
    }
    // ...C's abandonment stays stuck, and the two never differ.
    assert_eq!((net.s[X].frame(), net.s[Y].frame()), (n, n));
    assert!(net.s[X].abandoned().iter().all(|(p, _)| p.index() != C));
    assert!(net.s[Y].abandoned().iter().all(|(p, _)| p.index() != C));
    let disputed = |i: usize| {
        net.events[i]
            .iter()
            .any(|e| matches!(e, Event::AbandonDisputed { .. }))
    };
    assert!(disputed(X) || disputed(Y), "the split is reported");
}

/// Three players; C crashes and is frozen by A and B; B, the decider,
/// withholds its proposal for C and endorses A's own abandonment instead.
/// Checked only against the other live seats of A's view (B alone), A
/// would apply its own abandonment on B's word though nobody else voted
/// for it. A decision applies only when its endorsers are a strict
/// majority of the seat's voters, and C still counts while it is not
/// known to be silent.
#[test]
fn the_liar_alone_cannot_abandon_an_honest_player_while_a_third_is_frozen() {
    const B: usize = 0;
    const A: usize = 1;
    const C: usize = 2;
    let mut net = Net::new(3, config());
    for r in 0..5 {
        net.round(100 + 10 * r);
    }
    play_on(&mut net, &[B, A], 3, 300);
    let n = net.s[A].frame();
    net.s[A].abandon(PlayerId(C as u16)).unwrap();
    net.s[B].abandon(PlayerId(C as u16)).unwrap();
    let kick = Endorsement {
        seat: PlayerId(A as u16),
        from: n,
        digest: 0,
        left: false,
    };
    let seat_c = PlayerId(C as u16);
    net.pump(10, &mut |f, t, b, s| {
        if f == C || t == C {
            return None;
        }
        if f == B {
            let lie = |a: Option<&Abandon>| {
                let mut a = a.cloned()?;
                a.endorsements.retain(|e| e.seat != seat_c);
                a.endorsements.push(kick);
                Some(a)
            };
            return Some(rewrite(&b, s.frame(), &lie, &|_| {}, &[]));
        }
        Some(b)
    });
    assert!(
        !net.s[A].abandoned().iter().any(|(p, _)| p.index() == A),
        "A was abandoned on B's word alone: {:?}",
        net.s[A].abandoned()
    );
    assert!(!matches!(
        net.s[A].commit_local(1),
        Err(CommitError::Abandoned { .. })
    ));
}

/// Liveness without kicking an innocent player. One honest player X
/// vote-kicks C; nobody else agrees, so C must stay. B sends a vote for C
/// to X alone: X counts a majority (X and B of B, X, Y) and freezes C,
/// while Y and C never see one. When a freeze could not be undone, voting B
/// out changed nothing: X never took C's input again, and the only way on
/// was to vote out C too. A peer whose majority is gone thaws the seat
/// (here with the default `vote_hold`: the freeze and the thaw each wait
/// for what X heard to stand).
#[test]
fn a_vote_sent_to_one_peer_does_not_freeze_an_innocent_player_for_good() {
    const B: usize = 0;
    const X: usize = 1;
    const Y: usize = 2;
    const C: usize = 3;
    let mut net = Net::new(
        4,
        MeshConfig {
            abandon_after: None,
            ..MeshConfig::default()
        },
    );
    for r in 0..5 {
        net.round(100 + 10 * r);
    }
    net.s[X].abandon(PlayerId(C as u16)).unwrap();
    let seat_c = PlayerId(C as u16);
    for r in 0..30u16 {
        for i in 0..4 {
            let _ = net.s[i].commit_local(500 + r);
        }
        net.pump(2, &mut |f, t, b, s| {
            if f == B && t == X {
                let vote = |a: Option<&Abandon>| {
                    let mut a = a.cloned().unwrap_or(Abandon {
                        votes: vec![],
                        frozen: vec![],
                        endorsements: vec![],
                    });
                    if !a.votes.contains(&seat_c) {
                        a.votes.push(seat_c);
                    }
                    Some(a)
                };
                return Some(rewrite(&b, s.frame(), &vote, &|_| {}, &[]));
            }
            Some(b)
        });
        for i in 0..4 {
            net.advance(i);
        }
    }
    let stuck = net.s[Y].frame();
    // X and Y vote the liar out; it goes silent.
    net.s[X].abandon(PlayerId(B as u16)).unwrap();
    net.s[Y].abandon(PlayerId(B as u16)).unwrap();
    play_on(&mut net, &[X, Y, C], 200, 700);
    for i in [X, Y] {
        assert!(
            net.s[i].abandoned().iter().any(|(p, _)| p.index() == B),
            "{i} voted B out"
        );
    }
    assert!(
        net.s[Y].frame().since(stuck) >= 100,
        "still stuck at {} (was {stuck}) after the liar was voted out",
        net.s[Y].frame()
    );
}

/// Replaces (or adds) the endorsement for `e.seat` and adds `votes`.
fn lie(a: Option<&Abandon>, e: Option<Endorsement>, votes: &[PlayerId]) -> Option<Abandon> {
    let mut a = a.cloned().unwrap_or(Abandon {
        votes: vec![],
        frozen: vec![],
        endorsements: vec![],
    });
    if let Some(e) = e {
        a.endorsements.retain(|x| x.seat != e.seat);
        a.endorsements.push(e);
    }
    for v in votes {
        if !a.votes.contains(v) {
            a.votes.push(*v);
        }
    }
    Some(a)
}

/// Spoils the digest of every endorsement for `seat`.
fn spoil(a: Option<&Abandon>, seat: PlayerId) -> Option<Abandon> {
    let mut a = a.cloned()?;
    for e in &mut a.endorsements {
        if e.seat == seat {
            e.digest ^= 1;
        }
    }
    Some(a)
}

/// Common opening: C crashes at tick `n`; every other peer votes it out.
/// The liar L (the decider) lets X apply its own honest `(C, n)` while it
/// spoils its digest towards Y, so Y (which endorses `(C, n)` too, and so
/// lets X apply) does not apply. Then L tells Y it now stands for
/// `(C, n + 1)` and forwards Y a made-up input of C for tick `n` (a peer
/// that switched to it would be in trouble). Returns `n`.
fn split_after_apply(net: &mut Net, l: usize, x: usize, y: usize, c: usize) -> Tick {
    for r in 0..5 {
        net.round(100 + 10 * r);
    }
    let n = net.s[x].frame();
    play_on(net, &[l, x, y], 3, 300);
    for i in [l, x, y] {
        assert_eq!(net.s[i].frame(), n, "{i} waits on C at {n}");
    }
    let seat_c = PlayerId(c as u16);
    for i in [l, x, y] {
        net.s[i].abandon(seat_c).unwrap();
    }
    // Phase A: L's endorsement reaches Y spoiled.
    for _ in 0..10 {
        net.pump(1, &mut |f, t, b, s| {
            if f == c || t == c {
                return None;
            }
            if f == l && t == y {
                return Some(rewrite(&b, s.frame(), &|a| spoil(a, seat_c), &|_| {}, &[]));
            }
            Some(b)
        });
        if !net.s[x].abandoned().is_empty() {
            break;
        }
    }
    assert_eq!(net.s[x].abandoned(), &[(seat_c, n)], "X applied (C, n)");
    assert!(net.s[y].abandoned().is_empty(), "Y has not applied");
    // Phase B: L switches Y to (C, n + 1), with a made-up input for tick n.
    let switch = Endorsement {
        seat: seat_c,
        from: n.saturating_add(1),
        digest: 0,
        left: false,
    };
    net.pump(3, &mut |f, t, b, s| {
        if f == c || t == c {
            return None;
        }
        if f == l && t == y {
            return Some(rewrite(
                &b,
                s.frame(),
                &|a| lie(a, Some(switch), &[]),
                &|_| {},
                &[(seat_c, n, vec![999])],
            ));
        }
        Some(b)
    });
    assert!(net.s[y].abandoned().is_empty(), "Y has not applied");
    // X runs tick n (C empty) and on.
    net.advance(x);
    assert!(net.s[x].frame() > n, "X ran tick {n}");
    n
}

/// Liveness after the liar is voted out. Had Y switched to `(C, n + 1)`
/// after X applied `(C, n)` (an earlier version followed the decider), Y
/// would keep a decision X never endorses and both would stay stuck once L
/// is voted out. Y keeps its first endorsement, which X applied, and both
/// play on.
#[test]
fn a_peer_that_did_not_apply_keeps_the_decision_another_applied() {
    const L: usize = 0;
    const Y: usize = 1;
    const X: usize = 2;
    const C: usize = 3;
    let mut net = Net::new(4, config());
    let n = split_after_apply(&mut net, L, X, Y, C);
    net.s[X].abandon(PlayerId(L as u16)).unwrap();
    net.s[Y].abandon(PlayerId(L as u16)).unwrap();
    play_on(&mut net, &[X, Y], 300, 400);
    for i in [X, Y] {
        assert!(
            net.s[i].abandoned().iter().any(|(p, _)| p.index() == L),
            "{i} voted the liar out: {:?}",
            net.s[i].abandoned()
        );
    }
    assert!(
        net.s[Y].frame() > n.saturating_add(50),
        "Y stuck at {} (C waits since {n}) after the liar was voted out; Y: {:?}, X: {:?} at {}",
        net.s[Y].frame(),
        net.s[Y].abandoned(),
        net.s[X].abandoned(),
        net.s[X].frame(),
    );
}

/// Safety. Same opening; then Y's player vote-kicks X and L votes X to Y,
/// so Y freezes X and X leaves Y's live set. If Y then applied `(C, n + 1)`
/// on L's word it would run tick n on the made-up input while X ran it with
/// C empty (an earlier version did). Y never endorses a second decision,
/// and a frozen seat endorsing another decision (X's applied one) blocks it.
#[test]
fn freezing_an_applied_peer_out_does_not_let_another_apply_a_different_tick() {
    const L: usize = 0;
    const X: usize = 1;
    const Y: usize = 2;
    const C: usize = 3;
    let mut net = Net::new(4, config());
    let n = split_after_apply(&mut net, L, X, Y, C);
    let seat_c = PlayerId(C as u16);
    let seat_x = PlayerId(X as u16);
    // Y's player votes X (an honest vote-kick; silence would do the same).
    net.s[Y].abandon(seat_x).unwrap();
    let d = digest(&net, Y, C, n.saturating_add(1), &[(n, Some(999))]);
    let agree = Endorsement {
        seat: seat_c,
        from: n.saturating_add(1),
        digest: d,
        left: false,
    };
    net.pump(5, &mut |f, t, b, s| {
        if f == C || t == C {
            return None;
        }
        if f == L && t == Y {
            return Some(rewrite(
                &b,
                s.frame(),
                &|a| lie(a, Some(agree), &[seat_x]),
                &|_| {},
                &[(seat_c, n, vec![999])],
            ));
        }
        Some(b)
    });
    for i in [L, X, Y] {
        net.advance(i);
    }
    let fx = net.frame_at(X, n).cloned();
    let fy = net.frame_at(Y, n).cloned();
    assert!(fx.is_some(), "X ran tick {n}");
    assert!(
        fy.is_none() || fx == fy,
        "honest X and Y ran different frames at tick {n}: X {fx:?}, Y {fy:?}; X abandoned {:?}, Y abandoned {:?}",
        net.s[X].abandoned(),
        net.s[Y].abandoned()
    );
}

/// Liveness, innocent player. X vote-kicks C alone; L sends its vote for C
/// to X only, so X freezes C, and forwards X inputs "of C" for ticks X
/// lacks. Had X acknowledged those to C as its own (an earlier version did),
/// C would never resend them, and once L is voted out and X thaws C, X would
/// wait on C for good. A player is told only how far its own input is held.
#[test]
fn forwarded_input_never_stands_for_the_players_own() {
    const L: usize = 0;
    const X: usize = 1;
    const Y: usize = 2;
    const C: usize = 3;
    let mut net = Net::new(4, config());
    for r in 0..5 {
        net.round(100 + 10 * r);
    }
    net.s[X].abandon(PlayerId(C as u16)).unwrap();
    let seat_c = PlayerId(C as u16);
    for r in 0..30u16 {
        for i in 0..4 {
            let _ = net.s[i].commit_local(500 + r);
        }
        let base = net.s[X].frame();
        net.pump(2, &mut |f, t, b, s| {
            if f == L && t == X {
                let fwd: Vec<u16> = (0..9).map(|k| 7000 + k).collect();
                return Some(rewrite(
                    &b,
                    s.frame(),
                    &|a| lie(a, None, &[seat_c]),
                    &|_| {},
                    &[(seat_c, base, fwd)],
                ));
            }
            Some(b)
        });
        for i in 0..4 {
            net.advance(i);
        }
    }
    let stuck = net.s[Y].frame();
    net.s[X].abandon(PlayerId(L as u16)).unwrap();
    net.s[Y].abandon(PlayerId(L as u16)).unwrap();
    play_on(&mut net, &[X, Y, C], 200, 700);
    for i in [X, Y] {
        assert!(
            net.s[i].abandoned().iter().any(|(p, _)| p.index() == L),
            "{i} voted L out"
        );
    }
    assert!(
        net.s[X].frame().since(stuck) >= 100,
        "X still stuck at {} (Y at {}, was {stuck}) after the liar was voted out; X awaits {:?}",
        net.s[X].frame(),
        net.s[Y].frame(),
        net.s[X].awaiting()
    );
}

/// Whether a datagram carries `seat`'s input for `tick`.
fn covers(bytes: &[u8], reference: Tick, seat: PlayerId, tick: Tick) -> bool {
    let d = Datagram::decode(bytes, reference).unwrap();
    d.messages.iter().any(|m| match m {
        Message::Inputs(i) => i
            .runs
            .iter()
            .any(|r| r.seat == seat && r.start <= tick && tick.since(r.start) < r.count),
        _ => false,
    })
}

/// Inputs may arrive in any order, so a player can leave each peer a
/// different hole: it sends every peer all of its inputs but one tick,
/// another for each (none for one of them), and then falls silent. The
/// peers freeze it holding different stretches past their holes (each
/// forgets what it held past its own), and must still abandon it at one
/// tick, run the same frames, and see no conflict or dispute.
#[test]
fn a_player_leaving_each_peer_a_different_hole_then_falling_silent_is_abandoned_alike() {
    const C: usize = 3;
    let config = MeshConfig {
        abandon_after: Some(Duration::from_secs(2)),
        ..MeshConfig::default()
    };
    for holes in [
        [Some(2), Some(0), None],
        [Some(0), Some(1), Some(3)],
        [Some(4), Some(1), Some(7)],
    ] {
        let mut net = Net::new(4, config.clone());
        for r in 0..5 {
            net.round(100 + 10 * r);
        }
        let gap = net.s[C].next_commit();
        for step in 0..200u16 {
            let silent = step >= 8;
            for i in 0..4 {
                if i != C || !silent {
                    let _ = net.s[i].commit_local(300 + step + i as u16);
                }
            }
            net.send();
            net.deliver(&mut |f, t, b, s| {
                if f == C {
                    let hole = holes[t].map(|h| gap.saturating_add(h));
                    let skip = silent
                        || hole.is_some_and(|h| covers(&b, s.frame(), PlayerId(C as u16), h));
                    return (!skip).then_some(b);
                }
                (t != C || !silent).then_some(b)
            });
            for i in 0..4 {
                net.advance(i);
            }
        }
        let decided: Vec<_> = (0..C).map(|i| net.s[i].abandoned().to_vec()).collect();
        assert!(
            decided.iter().all(|d| d.len() == 1 && *d == decided[0]),
            "holes {holes:?}: {decided:?}"
        );
        for (a, b) in [(0, 1), (1, 2)] {
            let n = net.frames[a].len().min(net.frames[b].len());
            assert!(
                net.frames[a][..n] == net.frames[b][..n],
                "holes {holes:?}: {a} and {b} differ"
            );
        }
        for i in 0..C {
            assert!(
                net.s[i].frame().since(gap) > 30,
                "holes {holes:?}: {i} stalled"
            );
            let bad = net.events[i].iter().any(|e| {
                matches!(
                    e,
                    Event::AbandonConflict { .. } | Event::AbandonDisputed { .. }
                )
            });
            assert!(!bad, "holes {holes:?}: {i}: {:?}", net.events[i]);
        }
    }
}
