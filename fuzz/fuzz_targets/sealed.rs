//! Sealed datagrams under an adversary: arbitrary bytes, and the peer's own
//! datagrams altered, replayed, reordered and dropped. No panic; what opens
//! is exactly something the peer sealed, each at most once.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use lockstep_core::secure::{SecureChannel, client_public, server_handshake};

#[derive(Arbitrary, Debug)]
enum Op {
    /// The client seals this.
    Seal(Vec<u8>),
    /// Datagram `index` (of those sealed) reaches the server, with byte
    /// `at` flipped by `xor`.
    Deliver { index: u8, at: u16, xor: u8 },
    /// Arbitrary bytes reach the server.
    Garbage(Vec<u8>),
}

fuzz_target!(|input: ([u8; 32], [u8; 32], Vec<u8>, Vec<Op>)| {
    let (server_key, client_secret, cookie, ops) = input;
    let Ok((server_pub, mut server)) =
        server_handshake(&server_key, &cookie, &client_public(&client_secret), &[7; 32])
    else {
        return;
    };
    let Ok(mut client) = SecureChannel::client(&client_secret, &server_pub, &cookie, &[7; 32]) else {
        return;
    };
    let mut sealed: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut opened = vec![false; 0];
    for op in ops.into_iter().take(500) {
        match op {
            Op::Seal(plain) => {
                let mut out = Vec::new();
                client.seal(&plain, &mut out);
                sealed.push((plain, out));
                opened.push(false);
            }
            Op::Deliver { index, at, xor } => {
                if sealed.is_empty() {
                    continue;
                }
                let k = usize::from(index) % sealed.len();
                let (plain, bytes) = &sealed[k];
                let mut d = bytes.clone();
                let at = usize::from(at) % d.len();
                d[at] ^= xor;
                match server.open(&mut d) {
                    Ok(p) => {
                        assert_eq!(xor, 0, "an altered datagram opened");
                        assert_eq!(p, &plain[..]);
                        assert!(!opened[k], "a datagram opened twice");
                        opened[k] = true;
                    }
                    Err(_) => {}
                }
            }
            Op::Garbage(mut bytes) => {
                assert!(server.open(&mut bytes).is_err(), "garbage opened");
            }
        }
    }
});
