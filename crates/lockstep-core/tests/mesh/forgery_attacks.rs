//! Datagrams forged from a player's address, on a mesh without sealing
//! (where a source address is all a peer has to go on): what one costs
//! must stay bounded, whatever it carries.

use lockstep_core::wire::{DatagramWriter, Frames, Hello, Message};
use lockstep_core::{Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, Tick};

fn mesh(n: u32) -> Vec<MeshSession<u16>> {
    let config = MeshConfig {
        abandon_after: None,
        ..MeshConfig::default()
    };
    let mut roster = Roster::new();
    for i in 0..n {
        roster = roster.player(PeerId(i), PlayerId(i as u16));
    }
    (0..n)
        .map(|i| {
            MeshSession::new(config.clone(), roster.clone(), PeerId(i), Instant::ZERO)
                .expect("a session")
        })
        .collect()
}

/// A `Frames` message describes up to eight frames a byte: a player never
/// reads one (only observers take frames, from a player), so a forged one
/// costs it nothing, not even a look at the body.
#[test]
fn a_player_does_not_read_frames_sent_to_it() {
    let mut s = mesh(2);
    let now = Instant::ZERO;
    // A body that does not even decode: a player that read it would refuse
    // the datagram.
    let garbage = [0xFFu8; 40];
    let mut d = Vec::new();
    let mut w = DatagramWriter::new(&mut d, Tick::ZERO, 1200);
    w.push(&Message::Hello(Hello::default())).expect("fits");
    for _ in 0..8 {
        w.push(&Message::Frames(Frames {
            start: Tick::new(1),
            count: 1024,
            seats: 2,
            reference: None,
            body: &garbage,
        }))
        .expect("fits");
    }
    w.finish();
    assert_eq!(s[1].handle_datagram(PeerId(0), &d, now), Ok(()));
    assert_eq!(s[1].frame(), Tick::ZERO);
}
