//! Join tickets: a matchmaker's signed permission to join a room.
//!
//! A ticket binds a room, a player name and an expiry time with an
//! HMAC-SHA256 under a secret shared by the matchmaker and the relay:
//!
//! ```text
//! ticket := 0x01 expiry:u64le (unix seconds) room_len:u8 room name_len:u8 name mac:32
//! ```
//!
//! With a secret configured, the relay refuses any Hello whose ticket is
//! missing, forged, expired, or for another room or name.
//!
//! ```
//! use lockstep_relay::ticket::{self, TicketError};
//! let t = ticket::issue(b"secret", "arena", "alice", 2_000_000_000);
//! assert_eq!(ticket::verify(b"secret", &t, "arena", "alice", 1_900_000_000), Ok(()));
//! assert_eq!(ticket::verify(b"secret", &t, "arena", "bob", 1_900_000_000), Err(TicketError::WrongName));
//! assert_eq!(ticket::verify(b"secret", &t, "arena", "alice", 2_000_000_001), Err(TicketError::Expired));
//! assert_eq!(ticket::verify(b"other", &t, "arena", "alice", 1_900_000_000), Err(TicketError::BadSignature));
//! ```

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

const VERSION: u8 = 1;
const MAC_LEN: usize = 32;

/// Why a ticket was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TicketError {
    /// No ticket was given.
    #[error("no ticket")]
    Missing,
    /// The bytes are not a ticket.
    #[error("malformed ticket")]
    Malformed,
    /// The signature does not match: forged, or another secret.
    #[error("ticket signature does not match")]
    BadSignature,
    /// Past its expiry.
    #[error("ticket expired")]
    Expired,
    /// For another room.
    #[error("ticket is for another room")]
    WrongRoom,
    /// For another player.
    #[error("ticket is for another player")]
    WrongName,
}

#[allow(clippy::expect_used)]
fn mac(secret: &[u8]) -> Hmac<Sha256> {
    <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes keys of any length")
}

fn body(expiry: u64, room: &str, name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(11 + room.len() + name.len() + MAC_LEN);
    b.push(VERSION);
    b.extend_from_slice(&expiry.to_le_bytes());
    b.push(room.len().min(255) as u8);
    b.extend_from_slice(&room.as_bytes()[..room.len().min(255)]);
    b.push(name.len().min(255) as u8);
    b.extend_from_slice(&name.as_bytes()[..name.len().min(255)]);
    b
}

/// A ticket for `name` to join `room` until `expiry` (unix seconds).
pub fn issue(secret: &[u8], room: &str, name: &str, expiry: u64) -> Vec<u8> {
    let mut t = body(expiry, room, name);
    let mut m = mac(secret);
    m.update(&t);
    t.extend_from_slice(&m.finalize().into_bytes());
    t
}

/// Checks `ticket` for `name` joining `room` at `now` (unix seconds).
pub fn verify(
    secret: &[u8],
    ticket: &[u8],
    room: &str,
    name: &str,
    now: u64,
) -> Result<(), TicketError> {
    if ticket.is_empty() {
        return Err(TicketError::Missing);
    }
    if ticket.len() < 11 + MAC_LEN || ticket[0] != VERSION {
        return Err(TicketError::Malformed);
    }
    let (signed, tag) = ticket.split_at(ticket.len() - MAC_LEN);
    let mut m = mac(secret);
    m.update(signed);
    m.verify_slice(tag).map_err(|_| TicketError::BadSignature)?;
    let mut expiry = [0u8; 8];
    expiry.copy_from_slice(&signed[1..9]);
    let expiry = u64::from_le_bytes(expiry);
    let room_len = usize::from(signed[9]);
    let t_room = signed
        .get(10..10 + room_len)
        .ok_or(TicketError::Malformed)?;
    let name_len = usize::from(*signed.get(10 + room_len).ok_or(TicketError::Malformed)?);
    let t_name = signed
        .get(11 + room_len..11 + room_len + name_len)
        .ok_or(TicketError::Malformed)?;
    if signed.len() != 11 + room_len + name_len {
        return Err(TicketError::Malformed);
    }
    if now > expiry {
        return Err(TicketError::Expired);
    }
    if t_room != room.as_bytes() {
        return Err(TicketError::WrongRoom);
    }
    if t_name != name.as_bytes() {
        return Err(TicketError::WrongName);
    }
    Ok(())
}
