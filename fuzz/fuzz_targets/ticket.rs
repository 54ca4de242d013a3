//! Join tickets from arbitrary bytes: no panic, and nothing verifies that a
//! key did not sign for exactly that room, name and role.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use lockstep_core::wire::{MAX_NAME, MAX_ROOM};
use lockstep_relay::ticket::{self, Claims, Ledger, Role, TicketKey};

#[derive(Arbitrary, Debug)]
struct Input {
    bytes: Vec<u8>,
    room: String,
    name: String,
    spectator: bool,
    now: u64,
    expiry: u64,
    nonce: [u8; 16],
    flip: Option<(u16, u8)>,
    /// A relay the ticket names (version 3).
    relay: Option<String>,
}

fuzz_target!(|i: Input| {
    let Ok(key) = TicketKey::new(1, "the fuzzer's ticket secret") else {
        return;
    };
    let keys = [key.clone()];
    let role = if i.spectator { Role::Spectator } else { Role::Player };
    // Arbitrary bytes: refused without a panic (a forgery would need the key).
    if let Ok(v) = ticket::verify(&keys, &i.bytes, &i.room, &i.name, role, i.now) {
        let mut ledger = Ledger::new(1, 3600, 16);
        let _ = ledger.check(&v, i.now);
        ledger.spend(&v);
    }
    // A signed ticket verifies for its own claims only; claims no relay
    // takes are not signed at all.
    let relay = i.relay.as_deref();
    let claims = Claims { room: &i.room, name: &i.name, role, expiry: i.expiry, relay };
    let issuable = i.room.len() <= MAX_ROOM
        && i.name.len() <= MAX_NAME
        && relay.is_none_or(|r| lockstep_relay::directory::check_relay_id(r).is_ok());
    let Ok(mut t) = ticket::issue(&key, &claims, i.nonce) else {
        assert!(!issuable, "valid claims were refused");
        return;
    };
    assert!(issuable, "claims no relay takes were signed");
    let flipped = match i.flip {
        Some((at, x)) if x != 0 => {
            let at = usize::from(at) % t.len();
            t[at] ^= x;
            true
        }
        _ => false,
    };
    let r = ticket::verify(&keys, &t, &i.room, &i.name, role, i.now);
    if flipped {
        assert!(r.is_err(), "an altered ticket verified");
    } else if i.now <= i.expiry {
        assert_eq!(r.map(|v| v.relay), Ok(relay.map(str::to_owned)));
    }
});
