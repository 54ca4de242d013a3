//! Frames coded against a reference frame, from a client's side: a message
//! whose reference has not arrived waits for it, and nothing that waits
//! may outlive the server that sent it or the datagram that carried it.
//! Datagrams are written by hand, as a hostile host or a forger would.

use crate::common::hand::datagram;
use lockstep_core::sequenced::{ClientConfig, ClientSession};
use lockstep_core::wire::{self, Frames, Message, ResumeToken, Welcome};
use lockstep_core::{Frame, Instant, PeerId, PlayerId, SystemEvent, Tick};

const A: PeerId = PeerId(100);
const B: PeerId = PeerId(200);

fn welcome() -> Welcome {
    Welcome {
        seat: Some(PlayerId(0)),
        start: Tick::ZERO,
        tick: Tick::ZERO,
        deadline: false,
        tick_rate: 30,
        delay: 2,
        seats: 2,
        token: ResumeToken([7; 16]),
        snapshot: false,
        lobby: false,
        match_id: 0,
    }
}

fn frame(t: u32, inputs: [Option<u16>; 2], events: Vec<SystemEvent>) -> Frame<u16> {
    Frame {
        tick: Tick::new(t),
        inputs: inputs.to_vec(),
        events,
    }
}

/// A datagram of `frames`, coded against `reference` (its tick and cells).
fn frames(frames: &[Frame<u16>], reference: Option<(u32, &[Option<u16>])>) -> Vec<u8> {
    let mut body = Vec::new();
    wire::encode_frames_body(frames, 2, reference.map(|r| r.1), &mut body);
    let start = frames[0].tick;
    datagram(
        start,
        &[Message::Frames(Frames {
            start,
            count: frames.len() as u32,
            seats: 2,
            reference: reference.map(|r| Tick::new(r.0)),
            body: &body,
        })],
    )
}

fn connected(server: PeerId) -> ClientSession<u16> {
    let now = Instant::ZERO;
    let mut c = ClientSession::new(ClientConfig::default(), server, now).expect("a client");
    let w = datagram(Tick::ZERO, &[Message::Welcome(welcome())]);
    c.handle_datagram(server, &w, now).expect("welcomed");
    assert!(c.connected());
    c
}

/// The old host's message waiting for frame 5 is not read against the new
/// host's frame 5, which sequenced those ticks otherwise (the old host's
/// seat abandoned): the client runs what its new host sends.
#[test]
fn a_message_waiting_from_the_old_host_is_not_read_after_moving() {
    let now = Instant::ZERO;
    let mut c = connected(A);
    let old: Vec<_> = (0..7)
        .map(|t| frame(t, [Some(1), Some(1)], vec![]))
        .collect();
    c.handle_datagram(A, &frames(&old[..5], None), now)
        .expect("taken");
    // Frame 5 is lost; 6 comes coded against it, and waits.
    c.handle_datagram(A, &frames(&old[6..7], Some((5, &old[5].inputs))), now)
        .expect("taken");
    assert_eq!(c.lacks(), Tick::new(5));
    c.reconnect(B, None, now).expect("a seat to take back");
    let w = datagram(Tick::new(5), &[Message::Welcome(welcome())]);
    c.handle_datagram(B, &w, now).expect("welcomed");
    let abandoned = SystemEvent::Abandoned {
        player: PlayerId(1),
    };
    let new5 = frame(5, [Some(2), None], vec![abandoned]);
    let new6 = frame(6, [Some(3), None], vec![]);
    c.handle_datagram(
        B,
        &frames(std::slice::from_ref(&new5), Some((4, &old[4].inputs))),
        now,
    )
    .expect("taken");
    c.handle_datagram(
        B,
        &frames(std::slice::from_ref(&new6), Some((5, &new5.inputs))),
        now,
    )
    .expect("taken");
    let ran: Vec<_> = std::iter::from_fn(|| c.advance()).collect();
    let six = ran
        .iter()
        .find(|f| f.tick == Tick::new(6))
        .expect("frame 6 ran");
    assert_eq!(
        six.inputs, new6.inputs,
        "the client runs what its host sequenced"
    );
}

/// A datagram refused for a bad message changes nothing: a message in it
/// that waited for its reference is not kept to run later.
#[test]
fn a_refused_datagram_leaves_nothing_waiting() {
    let now = Instant::ZERO;
    let mut c = connected(A);
    let honest: Vec<_> = (0..3)
        .map(|t| frame(t, [Some(1), Some(1)], vec![]))
        .collect();
    c.handle_datagram(A, &frames(&honest[..1], None), now)
        .expect("taken");
    // Forged: frame 2 as [9, 9] against frame 1 (not held yet), then junk.
    let forged = frame(2, [Some(9), Some(9)], vec![]);
    let mut body = Vec::new();
    wire::encode_frames_body(&[forged], 2, Some(&[Some(1), Some(1)]), &mut body);
    let d = datagram(
        Tick::new(2),
        &[
            Message::Frames(Frames {
                start: Tick::new(2),
                count: 1,
                seats: 2,
                reference: Some(Tick::new(1)),
                body: &body,
            }),
            Message::Frames(Frames {
                start: Tick::new(5),
                count: 1,
                seats: 2,
                reference: None,
                body: &[0, 0, 9],
            }),
        ],
    );
    assert!(c.handle_datagram(A, &d, now).is_err(), "refused");
    c.handle_datagram(A, &frames(&honest[1..2], Some((0, &honest[0].inputs))), now)
        .expect("taken");
    let ran: Vec<_> = std::iter::from_fn(|| c.advance()).collect();
    assert_eq!(ran.len(), 2, "frames 0 and 1, and not the forged 2");
}
