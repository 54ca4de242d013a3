//! Strangers' datagrams to a sequencer a host runs (no relay in front, so
//! no address is proven and any source can be forged), while two honest
//! players play in the same room: what comes back is never larger than
//! what came, and a player the room dropped is not told to go away.

use lockstep_core::sequenced::{ClientConfig, ClientSession, Policy, Sequencer, SequencerConfig};
use lockstep_core::wire::{Datagram, DatagramWriter, Hello, InputCodec, Message};
use lockstep_core::{Frame, Instant, PeerId, StreamHash, Tick};
use std::time::Duration;

const SERVER: PeerId = PeerId(0);

struct Room {
    server: Sequencer<u16>,
    clients: Vec<(PeerId, ClientSession<u16>, StreamHash)>,
    now: Instant,
    to_strangers: Vec<(PeerId, Vec<u8>)>,
}

impl Room {
    fn new() -> Self {
        let config = SequencerConfig {
            policy: Policy::WaitForAll {
                abandon_after: Duration::from_secs(5),
            },
            max_seats: 3,
            ..SequencerConfig::default()
        };
        let mut room = Self {
            server: Sequencer::new(config, Instant::ZERO).unwrap(),
            clients: Vec::new(),
            now: Instant::ZERO,
            to_strangers: Vec::new(),
        };
        for id in [1, 2] {
            let c = ClientSession::new(ClientConfig::default(), SERVER, room.now).unwrap();
            room.clients.push((PeerId(id), c, StreamHash::new()));
            room.settle();
        }
        room
    }

    fn settle(&mut self) {
        let now = self.now;
        let mut buf = Vec::new();
        for _ in 0..100 {
            let mut moved = false;
            for (id, c, _) in self.clients.iter_mut() {
                c.handle_timeout(now);
                while let Some(t) = c.poll_transmit(&mut buf) {
                    let _ = self.server.handle_datagram(*id, &buf[..t.len], now);
                    moved = true;
                }
            }
            self.server.handle_timeout(now);
            while let Some(t) = self.server.poll_transmit(&mut buf) {
                moved = true;
                match self
                    .clients
                    .iter_mut()
                    .find(|(p, _, _)| *p == t.destination)
                {
                    Some((_, c, _)) => {
                        let _ = c.handle_datagram(SERVER, &buf[..t.len], now);
                    }
                    None => self
                        .to_strangers
                        .push((t.destination, buf[..t.len].to_vec())),
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn tick(&mut self) {
        for (_, c, _) in self.clients.iter_mut() {
            let _ = c.commit_local(7);
        }
        self.now += Duration::from_millis(33);
        self.settle();
        for (_, c, h) in self.clients.iter_mut() {
            while let Some(f) = c.advance() {
                let f: Frame<u16> = f;
                h.push(&f);
            }
        }
    }

    fn agree(&self) {
        let (a, b) = (&self.clients[0].2, &self.clients[1].2);
        assert!(a.frames() > 20, "the honest players played: {}", a.frames());
        assert_eq!(a.frames(), b.frames());
        assert_eq!(a.value(), b.value(), "the honest players agree");
    }
}

fn bare_hello(h: Hello<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = DatagramWriter::new(&mut out, Tick::ZERO, 1200);
    w.push(&Message::Hello(h)).unwrap();
    w.finish();
    out
}

/// Bare, unpadded Hellos the room refuses (another codec: a `Reject` in
/// words), from 50 forged sources: each refusal is cut to the Hello's size
/// (it was a 41-byte answer to 18 bytes, aimed wherever the Hello claimed
/// to come from).
#[test]
fn a_refusal_of_a_forged_hello_is_no_larger_than_the_hello() {
    let mut room = Room::new();
    for _ in 0..20 {
        room.tick();
    }
    let opaque = bare_hello(Hello {
        codec: InputCodec::PlayerInputs,
        ..Hello::default()
    });
    let mut worst = (0usize, 0usize);
    for k in 0..50u32 {
        let victim = PeerId(1000 + k);
        let _ = room.server.handle_datagram(victim, &opaque, room.now);
        room.tick();
    }
    for (p, d) in &room.to_strangers {
        assert!(
            Datagram::decode(d, Tick::ZERO).is_ok(),
            "the answer to {p:?} is a datagram"
        );
        if d.len() > worst.0 {
            worst = (d.len(), opaque.len());
        }
    }
    for _ in 0..20 {
        room.tick();
    }
    room.agree();
    let sent: usize = room.to_strangers.iter().map(|(_, d)| d.len()).sum();
    assert_eq!(room.to_strangers.len(), 50, "each Hello is refused");
    assert!(
        room.to_strangers
            .iter()
            .all(|(_, d)| d.len() <= opaque.len()),
        "{} answers, {sent} bytes, for 50 Hellos of {} bytes: the largest {} bytes",
        room.to_strangers.len(),
        opaque.len(),
        worst.0
    );
}

/// A datagram without a Hello from an address the room does not know
/// (most likely a player it dropped, still sending its inputs) gets no
/// answer: an `Error` would end that player for good, where it may still
/// reconnect to its held seat.
#[test]
fn a_datagram_without_a_hello_from_a_stranger_is_not_answered() {
    let mut room = Room::new();
    for _ in 0..20 {
        room.tick();
    }
    // What an honest player sends in play, from an address the room
    // never saw.
    let mut buf = Vec::new();
    let _ = room.clients[0].1.commit_local(7);
    let t = room.clients[0]
        .1
        .poll_transmit(&mut buf)
        .expect("a datagram");
    let inputs = buf[..t.len].to_vec();
    for k in 0..20u32 {
        let _ = room
            .server
            .handle_datagram(PeerId(2000 + k), &inputs, room.now);
        room.tick();
    }
    assert!(
        room.to_strangers.is_empty(),
        "answers to a datagram without a Hello: {:?}",
        room.to_strangers
            .iter()
            .map(|(p, d)| (p, d.len()))
            .collect::<Vec<_>>()
    );
    room.agree();
}
