//! What sealing costs per datagram: bytes and CPU to seal and open, next
//! to decoding the same datagram plain, and what one handshake costs.

use criterion::Criterion;
use lockstep_core::secure::{SEALED_OVERHEAD, SecureChannel, client_public, server_handshake};
use lockstep_core::wire::{Datagram, DatagramWriter, Message};
use lockstep_core::{PlayerId, Tick};
use std::hint::black_box;
use std::time::Instant;

/// A datagram of about `len` bytes: a status and padding, as cheap to
/// decode as any of that size.
fn datagram(len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = DatagramWriter::new(&mut out, Tick::new(1_000), 1200);
    w.put(Message::Status(lockstep_core::wire::Status {
        open: Tick::new(1_001),
        slack: 2,
        waiting: vec![PlayerId(1)],
    }));
    w.pad_to(len);
    w.finish();
    out
}

fn pair() -> (SecureChannel, SecureChannel) {
    let secret = [7; 32];
    let cookie = [3; 20];
    let (server_pub, server) =
        server_handshake(&[9; 32], &cookie, &client_public(&secret), &[3; 32]).expect("a real key");
    let client =
        SecureChannel::client(&secret, &server_pub, &cookie, &[3; 32]).expect("a real key");
    (client, server)
}

/// Nanoseconds per call of `f`, over `n` calls.
fn time(n: u32, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed().as_nanos() as f64 / f64::from(n)
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    for len in [64usize, 256, 1165] {
        let plain = datagram(len);
        let (mut client, mut server) = pair();
        c.bench_function(&format!("seal+open {len} B"), |b| {
            let mut sealed = Vec::with_capacity(len + SEALED_OVERHEAD);
            b.iter(|| {
                sealed.clear();
                client.seal(black_box(&plain), &mut sealed);
                black_box(server.open(&mut sealed).map(<[u8]>::len)).ok();
            });
        });
    }
    c.bench_function("handshake (server + client)", |b| {
        b.iter(|| black_box(pair()));
    });
    c.final_summary();

    println!();
    println!("Sealing, per datagram (every figure from this run)");
    println!();
    println!("| datagram | sealed | seal + open | plain decode | seal + open / decode |");
    println!("|---:|---:|---:|---:|---:|");
    for len in [64usize, 256, 1165] {
        let plain = datagram(len);
        let (mut client, mut server) = pair();
        let mut sealed = Vec::with_capacity(len + SEALED_OVERHEAD);
        let crypt = time(200_000, || {
            sealed.clear();
            client.seal(black_box(&plain), &mut sealed);
            black_box(server.open(&mut sealed).map(<[u8]>::len)).ok();
        });
        let decode = time(200_000, || {
            black_box(
                Datagram::decode(black_box(&plain), Tick::new(1_000)).map(|d| d.messages.len()),
            )
            .ok();
        });
        println!(
            "| {} B | {} B (+{SEALED_OVERHEAD}) | {:.0} ns | {:.0} ns | {:.1}x |",
            plain.len(),
            plain.len() + SEALED_OVERHEAD,
            crypt,
            decode,
            crypt / decode
        );
    }
    let handshake = time(2_000, || {
        black_box(pair());
    });
    println!();
    println!(
        "One handshake (the server's side and the client's): {:.0} us",
        handshake / 1000.0
    );
}
