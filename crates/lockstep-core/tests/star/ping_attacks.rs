//! A client that answers pings as late as it may, to hide behind its own
//! link's noise while it holds the room up, or forges its pongs' counts.

use lockstep_core::sequenced::{ClientConfig, ClientSession, Policy, Sequencer, SequencerConfig};
use lockstep_core::wire::{Datagram, DatagramWriter, Message};
use lockstep_core::{Instant, PeerId, PlayerId};
use std::collections::VecDeque;
use std::time::Duration;

const SERVER: PeerId = PeerId(0);
const HONEST: PeerId = PeerId(1);
const EVIL: PeerId = PeerId(2);

struct World {
    server: Sequencer<u16>,
    honest: ClientSession<u16>,
    evil: ClientSession<u16>,
    now: Instant,
    inflate: bool,
    /// Pings the server sent the attacker: stamp, when it came.
    pings: VecDeque<(u32, Instant)>,
    answered: u32,
    got: u32,
    sent: u32,
}

impl World {
    fn new(inflate: bool) -> Self {
        let config = SequencerConfig {
            policy: Policy::WaitForAll {
                abandon_after: Duration::from_secs(120),
            },
            max_seats: 2,
            ..SequencerConfig::default()
        };
        let now = Instant::ZERO;
        Self {
            server: Sequencer::new(config, now).expect("ok"),
            honest: ClientSession::new(ClientConfig::default(), SERVER, now).expect("ok"),
            evil: ClientSession::new(ClientConfig::default(), SERVER, now).expect("ok"),
            now,
            inflate,
            pings: VecDeque::new(),
            answered: 0,
            got: 0,
            sent: 0,
        }
    }

    fn strip_pongs(&self, bytes: &[u8]) -> Vec<u8> {
        let d = Datagram::decode(bytes, self.server.open_tick()).expect("ok");
        let mut out = Vec::new();
        let mut w = DatagramWriter::new(&mut out, d.base, 65_000);
        for m in &d.messages {
            if !matches!(m, Message::Pong { .. }) {
                w.push(m).expect("ok");
            }
        }
        w.finish();
        out
    }

    fn settle(&mut self) {
        let now = self.now;
        let mut buf = Vec::new();
        let connected = now > Instant::from_millis(3_000);
        for _ in 0..50 {
            let mut moved = false;
            self.honest.handle_timeout(now);
            while let Some(t) = self.honest.poll_transmit(&mut buf) {
                let _ = self.server.handle_datagram(HONEST, &buf[..t.len], now);
                moved = true;
            }
            self.evil.handle_timeout(now);
            while let Some(t) = self.evil.poll_transmit(&mut buf) {
                let bytes = if self.inflate && connected {
                    self.strip_pongs(&buf[..t.len])
                } else {
                    buf[..t.len].to_vec()
                };
                self.sent += 1;
                let _ = self.server.handle_datagram(EVIL, &bytes, now);
                moved = true;
            }
            self.server.handle_timeout(now);
            while let Some(t) = self.server.poll_transmit(&mut buf) {
                moved = true;
                let bytes = &buf[..t.len];
                if t.destination == HONEST {
                    let _ = self.honest.handle_datagram(SERVER, bytes, now);
                } else if t.destination == EVIL {
                    self.got += 1;
                    if let Ok(d) = Datagram::decode(bytes, self.evil.frame()) {
                        for m in &d.messages {
                            if let Message::Ping { stamp } = m {
                                self.pings.push_back((*stamp, now));
                            }
                        }
                    }
                    let _ = self.evil.handle_datagram(SERVER, bytes, now);
                }
            }
            if !moved {
                break;
            }
        }
        if self.inflate && connected {
            self.answer_pings();
        }
    }

    /// Answers the oldest ping just before the sequencer would take it as
    /// lost, with a round trip of all or nothing in turn.
    fn answer_pings(&mut self) {
        let rtt = self.server.rtt(EVIL).unwrap_or_default();
        // As late as the sequencer still takes a pong (at most 4 s).
        let lost_after = ((Duration::from_secs(1) + rtt) * 2).min(Duration::from_secs(4));
        while let Some(&(stamp, came)) = self.pings.front() {
            let waited = self.now.saturating_duration_since(came);
            let answer_at =
                (lost_after - Duration::from_millis(150)).min(Duration::from_millis(59_000));
            if waited < answer_at {
                return;
            }
            self.pings.pop_front();
            let elapsed = waited.as_millis() as u32;
            let held_ms = if self.answered % 4 != 3 { 0 } else { elapsed };
            self.answered += 1;
            let mut out = Vec::new();
            let mut w = DatagramWriter::new(&mut out, self.evil.frame(), 65_000);
            w.push(&Message::Pong {
                stamp,
                held_ms,
                received: self.got,
                sent: self.sent + 1,
            })
            .expect("ok");
            w.finish();
            self.sent += 1;
            let _ = self.server.handle_datagram(EVIL, &out, self.now);
        }
    }

    fn tick(&mut self, evil_plays: bool) {
        let _ = self.honest.commit_local(1);
        if evil_plays {
            let _ = self.evil.commit_local(2);
        }
        self.now += Duration::from_millis(33);
        self.settle();
        while self.honest.advance().is_some() {}
        while self.evil.advance().is_some() {}
    }
}

/// Returns (the attacker's RTT as the sequencer sees it, how long the room
/// waited on the attacker before it was named, if within 60 s).
fn run(inflate: bool) -> (Option<Duration>, Option<Duration>) {
    let mut w = World::new(inflate);
    w.settle();
    // Four minutes of play, the attacker playing (and answering pings its way).
    for _ in 0..(240_000 / 33) {
        w.tick(true);
    }
    let rtt = w.server.rtt(EVIL);
    assert!(w.server.waiting().is_empty());
    let frame_before = w.honest.frame();
    // The attacker stops sending input: the room waits on it.
    let began = w.now;
    for _ in 0..(60_000 / 33) {
        w.tick(false);
        if w.server.waiting().contains(&PlayerId(1)) {
            assert!(
                w.honest.frame() <= frame_before.saturating_add(20),
                "the room is held"
            );
            return (rtt, Some(w.now.saturating_duration_since(began)));
        }
    }
    (rtt, None)
}

/// A client answering each ping as late as the sequencer waits for its
/// pong inflates the round trip (and its jitter) it is measured with; a
/// wait for its input is still named within a second, as an honest one's
/// is within a fifth of one, and the round trip it can claim is bounded.
#[test]
fn a_client_answering_pings_late_is_still_named_when_it_stalls_the_room() {
    let (_, named0) = run(false);
    assert!(
        named0.is_some_and(|d| d < Duration::from_millis(200)),
        "{named0:?}"
    );
    let (rtt1, named1) = run(true);
    assert!(
        rtt1.is_some_and(|r| r <= Duration::from_secs(4)),
        "{rtt1:?}"
    );
    assert!(
        named1.is_some_and(|d| d < Duration::from_secs(1)),
        "{named1:?}"
    );
}

/// A player whose pongs claim it received nothing, as its round trip
/// rises and stays (a longer route), makes the relay take its link for an
/// overflowing queue and bundle the frames sent to it; the relay's reading
/// of each link is that link's own, so the honest players' frames still go
/// a datagram a tick, and every stream agrees.
#[test]
fn forged_losses_bundle_only_the_liars_own_frames() {
    use crate::common::star::{Node, StarScenario, play};
    use crate::common::{Record, secs};
    use lockstep_core::sim::Outcome;

    let mut sc = StarScenario::new(4, 0x11e5);
    sc.link.latency = Duration::from_millis(20);
    sc.link.jitter = Duration::from_millis(2);
    let mut h = sc.build();
    let liar = PeerId(1);
    let honest: Vec<PeerId> = sc
        .client_ids()
        .into_iter()
        .filter(|id| *id != liar)
        .collect();
    let Some(Node::Client(c)) = h.sim.remove(liar) else {
        panic!("a client at {liar}");
    };
    h.sim.add(liar, Node::LyingPongs(c));
    let mut lies = Record::new(7, sc.server.first_tick);
    let mut run = |h: &mut crate::common::star::StarHarness, until| {
        h.drive(
            until,
            |_, node, _| {
                if let Node::LyingPongs(c) = node {
                    play(c, &mut lies);
                }
            },
            |_, c, rec| play(c, rec),
            |_| false,
        )
    };
    assert_eq!(run(&mut h, secs(10)), Outcome::TimedOut);
    let mut far = sc.link.clone();
    far.latency += Duration::from_millis(200);
    h.sim.net.set_link_both(SERVER, liar, far);
    assert_eq!(run(&mut h, secs(20)), Outcome::TimedOut);
    // What each got in the last 10 s: a datagram a frame and more (acks,
    // pings) unbundled, fewer bundled.
    let before: Vec<(u64, u64)> = sc
        .client_ids()
        .iter()
        .map(|id| {
            let st = h
                .sim
                .endpoint(*id)
                .and_then(Node::client)
                .expect("a client")
                .stats();
            (st.datagrams_received, st.frames)
        })
        .collect();
    assert_eq!(run(&mut h, secs(30)), Outcome::TimedOut);
    for (k, id) in sc.client_ids().iter().enumerate() {
        let st = h
            .sim
            .endpoint(*id)
            .and_then(Node::client)
            .expect("a client")
            .stats();
        let (d0, f0) = before[k];
        let per_frame = (st.datagrams_received - d0) as f64 / (st.frames - f0).max(1) as f64;
        assert!(
            st.frames - f0 > 100,
            "{id} plays on: {} frames",
            st.frames - f0
        );
        if *id == liar {
            assert!(
                per_frame < 0.9,
                "the liar's frames are bundled: {per_frame:.2}"
            );
        } else {
            assert!(
                per_frame >= 1.0,
                "{id} gets a datagram a tick: {per_frame:.2}"
            );
        }
    }
    h.assert_streams_agree(&honest);
    h.assert_no_desync();
}
