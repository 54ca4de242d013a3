//! The roster a sequencer shares (host mode): every seated client learns
//! every seat's holder, a commitment to its resume token and its contact,
//! under loss, and keeps up as seats change. What host migration builds on.

use crate::common;
use common::star::{Node, SERVER, StarScenario};
use lockstep_core::admission::token_commitment;
use lockstep_core::sequenced::{ClientConfig, ClientSession, Sequencer, SequencerConfig};
use lockstep_core::sim::{LinkConditions, Outcome};
use lockstep_core::wire::{Datagram, DatagramWriter, Message};
use lockstep_core::{Instant, PeerId, PlayerId};
use std::time::Duration;

fn contact(peer: PeerId) -> Vec<u8> {
    format!("sim:{}", peer.0).into_bytes()
}

/// The host's application names each connection's contact as it sees it.
fn name_contacts(node: &mut Node) {
    if let Node::Server(s) = node {
        let peers: Vec<PeerId> = s.connections().map(|(p, _)| p).collect();
        for p in peers {
            s.set_contact(p, &contact(p)).unwrap();
        }
    }
}

fn lossy(players: usize, seed: u64, share: bool) -> StarScenario {
    let mut sc = StarScenario::new(players, seed);
    sc.spectators = 1;
    sc.server.share_roster = share;
    sc.link = LinkConditions {
        latency: Duration::from_millis(20),
        jitter: Duration::from_millis(10),
        loss: 0.2,
        duplicate: 0.05,
        reorder: 0.05,
        max_datagram: Some(1200),
        bandwidth: None,
    };
    sc
}

#[test]
fn every_player_learns_the_roster_under_loss_and_follows_its_changes() {
    for seed in 1..=8 {
        let sc = lossy(4, seed, true);
        let mut h = sc.build();
        let until = Instant::from_millis(120_000);
        let o = h.run(
            until,
            |_, n, _| name_contacts(n),
            |sim| {
                sim.live()
                    .filter_map(|(_, n)| n.client())
                    .all(|c| c.stats().frames >= 150)
            },
        );
        assert_eq!(o, Outcome::Done, "seed {seed}");
        let ids = sc.client_ids();
        // Who holds which seat, and with which token.
        let holders: Vec<(PeerId, PlayerId, [u8; 16])> = ids
            .iter()
            .filter_map(|&id| {
                let c = h.client(id);
                Some((id, c.seat()?, token_commitment(&c.welcome()?.token)))
            })
            .collect();
        assert_eq!(holders.len(), 4);
        for &id in &ids {
            let c = h.client(id);
            let roster: Vec<_> = c.roster().cloned().collect();
            if c.seat().is_none() {
                assert!(roster.is_empty(), "seed {seed}: a spectator got {roster:?}");
                continue;
            }
            assert_eq!(roster.len(), 4, "seed {seed}: {id} has {roster:?}");
            for (peer, seat, commitment) in &holders {
                let e = roster.iter().find(|e| e.seat == *seat).unwrap();
                assert!(e.playing);
                assert_eq!(&e.commitment, commitment, "seed {seed}");
                assert_eq!(e.contact, contact(*peer), "seed {seed}");
            }
        }
        // One player leaves: the others' rosters drop its seat.
        let gone = ids[1];
        let gone_seat = h.client(gone).seat().unwrap();
        if let Some(Node::Client(c)) = h.sim.endpoint_mut(gone) {
            c.leave();
        }
        let o = h.run(
            until,
            |_, n, _| name_contacts(n),
            |sim| {
                sim.live()
                    .filter_map(|(id, n)| Some((id, n.client()?)))
                    .filter(|(id, c)| *id != gone && c.seat().is_some())
                    .all(|(_, c)| c.roster().count() == 3)
            },
        );
        assert_eq!(o, Outcome::Done, "seed {seed}");
        for &id in &ids {
            let c = h.client(id);
            if id != gone && c.seat().is_some() {
                assert!(c.roster().all(|e| e.seat != gone_seat), "seed {seed}");
            }
        }
    }
}

/// A room that does not share contacts still names its players to every
/// client, spectators included, but tells nobody where anyone is.
#[test]
fn a_room_that_does_not_share_contacts_sends_names_only() {
    let sc = lossy(3, 9, false);
    let mut h = sc.build();
    let o = h.run(
        Instant::from_millis(60_000),
        |_, n, _| name_contacts(n),
        |sim| {
            sim.live()
                .filter_map(|(_, n)| n.client())
                .all(|c| c.stats().frames >= 100)
        },
    );
    assert_eq!(o, Outcome::Done);
    for id in sc.client_ids() {
        let c = h.client(id);
        assert_eq!(c.roster().count(), 3, "{id}");
        assert!(c.roster().all(|e| e.contact.is_empty()), "{id}");
        let names: Vec<&str> = c.roster().map(|e| e.name.as_str()).collect();
        assert!(names.iter().all(|n| !n.is_empty()), "{names:?}");
    }
}

/// Moves every datagram between a sequencer (at `SERVER`) and clients (at
/// `PeerId(1..)`) until quiet, 40 ms of clock each round.
fn pump(room: &mut Sequencer<u16>, clients: &mut [ClientSession<u16>], now: &mut Instant) {
    let mut buf = Vec::new();
    for _ in 0..20 {
        *now += Duration::from_millis(40);
        room.handle_timeout(*now);
        for (k, c) in clients.iter_mut().enumerate() {
            c.handle_timeout(*now);
            while let Some(t) = c.poll_transmit(&mut buf) {
                let _ = room.handle_datagram(PeerId(k as u32 + 1), &buf[..t.len], *now);
            }
        }
        while let Some(t) = room.poll_transmit(&mut buf) {
            if let Some(c) = clients.get_mut(t.destination.0 as usize - 1) {
                let _ = c.handle_datagram(SERVER, &buf[..t.len], *now);
            }
        }
        for c in clients.iter_mut() {
            while c.advance().is_some() {}
        }
    }
}

/// Acknowledgements for seats that do not exist, for versions never sent,
/// and a flood of them, change nothing for anyone else: the other players
/// still get every entry (and the liar only spares itself resends).
#[test]
fn forged_roster_acknowledgements_change_nothing_for_the_others() {
    let config = SequencerConfig {
        share_roster: true,
        ..SequencerConfig::default()
    };
    let mut now = Instant::ZERO;
    let mut room = Sequencer::<u16>::new(config, now).unwrap();
    let mut clients: Vec<ClientSession<u16>> = (0..3)
        .map(|_| ClientSession::new(ClientConfig::default(), SERVER, now).unwrap())
        .collect();
    pump(&mut room, &mut clients, &mut now);
    for k in 0..3u32 {
        room.set_contact(PeerId(k + 1), &contact(PeerId(k + 1)))
            .unwrap();
    }
    // The liar (client 1, at PeerId(1)) acknowledges everything it can
    // name, before and after the roster went out.
    let mut forged = Vec::new();
    let mut w = DatagramWriter::new(&mut forged, clients[0].frame(), 1200);
    for seat in [0u16, 1, 2, 7, 255] {
        for version in [0, 1, 2, 3, u32::MAX] {
            let _ = w.push(&Message::MemberAck {
                seat: PlayerId(seat),
                version,
            });
        }
    }
    w.finish();
    assert!(Datagram::decode(&forged, clients[0].frame()).is_ok());
    let _ = room.handle_datagram(PeerId(1), &forged, now);
    pump(&mut room, &mut clients, &mut now);
    let _ = room.handle_datagram(PeerId(1), &forged, now);
    pump(&mut room, &mut clients, &mut now);
    for c in &clients[1..] {
        let roster: Vec<_> = c.roster().collect();
        assert_eq!(roster.len(), 3, "{roster:?}");
        for (k, e) in roster.iter().enumerate() {
            assert_eq!(e.contact, contact(PeerId(k as u32 + 1)));
        }
    }
}
