//! The relay's HTTP endpoints (`/metrics`, `/healthz`, `/readyz`) against
//! a hostile TCP client, while two honest players play: it must not hold
//! the relay's memory or descriptors, and the players must finish on equal
//! hashes.

use crate::common::{honest, relay, still_fine};
use lockstep_net::Clock;
use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Whether the relay has answered or closed `s` (without waiting): a
/// peek sees the start of an answer, the end of the stream, or an error.
fn done_with(s: &TcpStream) -> bool {
    let mut b = [0u8; 64];
    match s.peek(&mut b) {
        Ok(_) => true,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    }
}

/// Polls until `f` holds or `within` passes.
fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::yield_now();
    }
    f()
}

/// Request heads that never end, 64 KiB each on 96 connections: each
/// connection is closed after 8 KiB of head (or at once, over the caps on
/// connections), well before the five seconds a head may take, so no
/// address holds more than a few times 8 KiB of the relay's memory.
#[test]
fn request_heads_that_never_end_are_cut_off_and_connections_are_capped() {
    let relay = relay();
    let clock = Clock::new();
    let players = honest(&relay, &clock);
    let started = Instant::now();
    let filler = vec![b'a'; 64 * 1024];
    let mut held = Vec::new();
    for _ in 0..96 {
        let Ok(mut s) = TcpStream::connect(relay.http) else {
            continue;
        };
        s.set_write_timeout(Some(Duration::from_secs(1)))
            .expect("timeout");
        // Written until the relay stops reading: it may close first.
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nx-filler: ");
        let _ = s.write_all(&filler);
        s.set_nonblocking(true).expect("nonblocking");
        held.push(s);
    }
    let all_closed = eventually(Duration::from_secs(4), || held.iter().all(done_with));
    let open = held.iter().filter(|s| !done_with(s)).count();
    assert!(
        all_closed,
        "{open} of {} connections still held open after {:?} (a head may take 5 s)",
        held.len(),
        started.elapsed()
    );
    drop(held);
    // Honest scrapes are served again once the attacker's places are free.
    assert!(
        eventually(Duration::from_secs(5), || relay
            .http_get("/metrics")
            .contains("200 OK")),
        "/metrics is served again"
    );
    still_fine(players, &clock);
}

/// One address holds at most four connections open: a fifth is closed at
/// once, and when the four go, the address is served again.
#[test]
fn one_address_holds_at_most_four_http_connections() {
    let relay = relay();
    let clock = Clock::new();
    let players = honest(&relay, &clock);
    let idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(relay.http).expect("connect"))
        .collect();
    // The relay accepts in turn: the fifth is refused once the four hold
    // their places (a place taken by a late fifth would leave one of the
    // four closed instead, which the loop also sees).
    let fifth = TcpStream::connect(relay.http).expect("connect");
    fifth.set_nonblocking(true).expect("nonblocking");
    assert!(
        eventually(Duration::from_secs(2), || done_with(&fifth)),
        "a fifth connection from one address is closed at once"
    );
    drop(idle);
    assert!(
        eventually(Duration::from_secs(5), || relay
            .http_get("/healthz")
            .contains("200 OK")),
        "the address is served again once its connections are gone"
    );
    still_fine(players, &clock);
}
