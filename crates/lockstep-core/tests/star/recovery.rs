//! How a client gets back a frame that lost every copy: it says it lacks
//! it at once, and again at the resend interval until it comes, and every
//! frame that came meanwhile (coded against the lost one) runs when it
//! does. Datagrams are written by hand, as the sequencer would.

use crate::common::hand::datagram;
use lockstep_core::sequenced::{ClientConfig, ClientSession};
use lockstep_core::wire::{self, Datagram, Frames, Message, ResumeToken, Welcome};
use lockstep_core::{Frame, Instant, PeerId, PlayerId, Tick};
use std::time::Duration;

const SERVER: PeerId = PeerId(100);

fn connected() -> ClientSession<u16> {
    let now = Instant::ZERO;
    let mut c = ClientSession::new(ClientConfig::default(), SERVER, now).expect("a client");
    let w = Welcome {
        seat: Some(PlayerId(0)),
        start: Tick::ZERO,
        tick: Tick::ZERO,
        deadline: true,
        tick_rate: 60,
        delay: 2,
        seats: 2,
        token: ResumeToken([7; 16]),
        snapshot: false,
        lobby: false,
        match_id: 0,
    };
    c.handle_datagram(SERVER, &datagram(Tick::ZERO, &[Message::Welcome(w)]), now)
        .expect("welcomed");
    c
}

fn frame(t: u32) -> Frame<u16> {
    Frame {
        tick: Tick::new(t),
        inputs: vec![Some(t as u16 / 4), None],
        events: vec![],
    }
}

/// Frame `t` alone, coded against the frame before it (none for 0), as a
/// sequencer sends each new frame.
fn single(t: u32) -> Vec<u8> {
    let f = frame(t);
    let reference = t.checked_sub(1).map(frame);
    let mut body = Vec::new();
    wire::encode_frames_body(
        std::slice::from_ref(&f),
        2,
        reference.as_ref().map(|r| r.inputs.as_slice()),
        &mut body,
    );
    datagram(
        f.tick,
        &[Message::Frames(Frames {
            start: f.tick,
            count: 1,
            seats: 2,
            reference: reference.map(|r| r.tick),
            body: &body,
        })],
    )
}

/// Sends what is due at `now`; returns the bases of the datagrams sent.
fn bases(c: &mut ClientSession<u16>, now: Instant) -> Vec<Tick> {
    c.handle_timeout(now);
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while let Some(t) = c.poll_transmit(&mut buf) {
        let d = Datagram::decode(&buf[..t.len], Tick::ZERO).expect("a datagram");
        out.push(d.base);
    }
    out
}

/// Frame 5 lost every copy; frames 6 to 9 came, each coded against the
/// one before, and wait. The client says at once that it lacks 5, and
/// again every resend interval until 5 comes, not only at its keepalive.
#[test]
fn a_client_says_at_once_and_until_it_comes_that_it_lacks_a_frame() {
    let mut c = connected();
    let mut now = Instant::ZERO;
    for t in 0..5 {
        c.handle_datagram(SERVER, &single(t), now).expect("taken");
    }
    while c.advance().is_some() {}
    bases(&mut c, now);
    now += Duration::from_millis(10);
    c.handle_datagram(SERVER, &single(6), now).expect("taken");
    assert_eq!(bases(&mut c, now), [Tick::new(5)], "said at once");
    let resend = ClientConfig::default().resend_interval;
    for t in 7..10 {
        now += Duration::from_millis(17);
        c.handle_datagram(SERVER, &single(t), now).expect("taken");
    }
    assert!(
        c.poll_timeout().is_some_and(|at| at <= now + resend),
        "a datagram is due within the resend interval, not the keepalive"
    );
    now += resend;
    assert_eq!(bases(&mut c, now), [Tick::new(5)], "and said again");
    c.handle_datagram(SERVER, &single(5), now).expect("taken");
    let ran: Vec<Tick> = std::iter::from_fn(|| c.advance()).map(|f| f.tick).collect();
    assert_eq!(ran, (5..10).map(Tick::new).collect::<Vec<_>>());
    let keepalive = ClientConfig::default().keepalive_interval;
    bases(&mut c, now);
    // The game waits for frame 10: two ticks on a stall begins (a timer
    // that sends nothing), and then nothing is due before the keepalive.
    let stall = c.poll_timeout().expect("a timer");
    assert!(stall < now + keepalive);
    assert!(bases(&mut c, stall).is_empty(), "a stall sends nothing");
    assert!(c.stalled());
    assert!(
        c.poll_timeout().is_some_and(|at| at >= now + keepalive),
        "nothing lacking: back to the keepalive"
    );
}

/// Four seconds of frames at 60 Hz came while frame 5 was being resent,
/// each coded against the one before: when 5 comes, every one of them runs
/// at once, none has to be sent again.
#[test]
fn every_frame_that_waited_on_a_lost_one_runs_when_it_comes() {
    let mut c = connected();
    let now = Instant::ZERO;
    for t in (0..245).filter(|t| *t != 5) {
        c.handle_datagram(SERVER, &single(t), now).expect("taken");
    }
    assert_eq!(c.lacks(), Tick::new(5));
    c.handle_datagram(SERVER, &single(5), now).expect("taken");
    assert_eq!(c.lacks(), Tick::new(245));
    let ran = std::iter::from_fn(|| c.advance()).count();
    assert_eq!(ran, 245);
}
