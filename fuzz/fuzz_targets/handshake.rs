//! The stateless handshake: cookies and key agreement from arbitrary bytes.
//! No panic; a cookie is accepted only for the address it was minted for;
//! a key agreement either fails or gives both sides the same channel.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use lockstep_core::admission::{AddressValidator, resume_proof};
use lockstep_core::secure::{SecureChannel, client_public, server_handshake};
use lockstep_core::wire::ResumeToken;
use lockstep_core::Instant;

#[derive(Arbitrary, Debug)]
struct Input {
    server_key: [u8; 32],
    addr: Vec<u8>,
    other_addr: Vec<u8>,
    cookie: Vec<u8>,
    minted_ms: u32,
    checked_ms: u32,
    client_secret: [u8; 32],
    peer_key: [u8; 32],
    token: [u8; 16],
    /// A Hello's binding.
    hello: [u8; 32],
}

fuzz_target!(|i: Input| {
    let v = AddressValidator::new(i.server_key);
    let minted = Instant::from_millis(u64::from(i.minted_ms));
    let checked = Instant::from_millis(u64::from(i.checked_ms));
    // Arbitrary bytes as a cookie: no panic, and never a free pass.
    let _ = v.check(&i.addr, &i.cookie, checked);
    let real = v.cookie(&i.addr, minted);
    if i.addr != i.other_addr {
        assert!(!v.check(&i.other_addr, &real, checked));
    }
    assert!(v.check(&i.addr, &real, minted));
    // An arbitrary client key (a low-order point, say) fails cleanly.
    let _ = server_handshake(&i.server_key, &i.cookie, &i.peer_key, &i.hello);
    let _ = SecureChannel::client(&i.client_secret, &i.peer_key, &i.cookie, &i.hello);
    // A real client key agrees.
    let public = client_public(&i.client_secret);
    if let Ok((server_pub, mut server)) = v.handshake(&real, &public, &i.hello) {
        let mut client = SecureChannel::client(&i.client_secret, &server_pub, &real, &i.hello)
            .expect("agrees");
        assert_eq!(client.id(), server.id());
        let mut sealed = Vec::new();
        client.seal(&i.cookie, &mut sealed);
        assert_eq!(server.open(&mut sealed).expect("opens"), &i.cookie[..]);
    }
    // A resume proof is bound to its cookie and key.
    let t = ResumeToken(i.token);
    let p = resume_proof(&t, &i.cookie, Some(&public));
    if i.cookie != real.as_slice() {
        assert_ne!(p, resume_proof(&t, &real, Some(&public)));
    }
});
