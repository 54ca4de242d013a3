//! Join tickets: a matchmaker's signed permission to take one place in a
//! room.
//!
//! A ticket binds a room, a player name, a role (player or spectator), an
//! expiry time and a random nonce with an HMAC-SHA256 under a secret shared
//! by the matchmaker and the relay. The key id names which secret signed
//! it, so a new secret can be introduced beside the old one and the old one
//! retired once its tickets have expired (rotation without a flag day):
//!
//! ```text
//! ticket := version:u8 key_id:u8 expiry:u64le (unix seconds) role:u8 (0 player, 1 spectator)
//!           nonce:16 room_len:u8 room name_len:u8 name [relay_len:u8 relay] mac:32
//! mac    := HMAC-SHA256(secret, every byte before it)
//! ```
//!
//! Version 2 has no relay; version 3 names the relay of a fleet that
//! should serve the room (a matchmaker's placement): a relay of the fleet
//! the Hello reaches first sends the client there when the room is new.
//!
//! With keys configured, the relay refuses any Hello whose ticket is
//! missing, forged, expired, signed by an unknown key, for another room,
//! name or role, or whose nonce has already been used as often as the relay
//! allows (once, by default). The relay remembers spent nonces until their
//! tickets expire, so a ticket's lifetime is capped.
//!
//! ```
//! use lockstep_relay::ticket::{self, Claims, Role, TicketError, TicketKey};
//! let key = TicketKey::new(1, "a secret of at least sixteen bytes")?;
//! let claims = Claims { room: "arena", name: "alice", role: Role::Player, expiry: 2_000_000_000, relay: None };
//! let t = ticket::issue(&key, &claims, [9; 16])?;
//! let keys = [key];
//! let ok = ticket::verify(&keys, &t, "arena", "alice", Role::Player, 1_900_000_000)?;
//! assert_eq!(ok.nonce, [9; 16]);
//! assert_eq!(ticket::verify(&keys, &t, "arena", "bob", Role::Player, 1_900_000_000), Err(TicketError::WrongName));
//! assert_eq!(ticket::verify(&keys, &t, "arena", "alice", Role::Spectator, 1_900_000_000), Err(TicketError::WrongRole));
//! assert_eq!(ticket::verify(&keys, &t, "arena", "alice", Role::Player, 2_000_000_001), Err(TicketError::Expired));
//! let other = [TicketKey::new(1, "another secret, also long enough")?];
//! assert_eq!(ticket::verify(&other, &t, "arena", "alice", Role::Player, 1_900_000_000), Err(TicketError::BadSignature));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use hmac::{Hmac, KeyInit, Mac};
use lockstep_core::wire::{MAX_NAME, MAX_ROOM};
use sha2::Sha256;
use std::collections::HashMap;

/// A ticket that names no relay.
const VERSION: u8 = 2;
/// A ticket that names the relay of a fleet to serve the room.
const VERSION_WITH_RELAY: u8 = 3;
const MAC_LEN: usize = 32;
/// Bytes of a ticket besides its room, name and MAC.
const FIXED: usize = 1 + 1 + 8 + 1 + 16 + 1 + 1;
/// The shortest secret a relay or matchmaker accepts.
pub const MIN_SECRET_LEN: usize = 16;

/// Why a ticket was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TicketError {
    /// No ticket was given.
    #[error("no ticket")]
    Missing,
    /// The bytes are not a ticket of this version.
    #[error("malformed ticket")]
    Malformed,
    /// Signed with a key id this relay does not hold.
    #[error("ticket signed with an unknown key")]
    UnknownKey,
    /// The signature does not match: forged, or another secret.
    #[error("ticket signature does not match")]
    BadSignature,
    /// Past its expiry.
    #[error("ticket expired")]
    Expired,
    /// Valid further ahead than the relay tracks tickets.
    #[error("ticket expires too far in the future")]
    TooLong,
    /// For another room.
    #[error("ticket is for another room")]
    WrongRoom,
    /// For another player.
    #[error("ticket is for another player")]
    WrongName,
    /// For a player, presented by a spectator, or the other way round.
    #[error("ticket is for another role")]
    WrongRole,
    /// Already used as often as allowed.
    #[error("ticket already used")]
    Spent,
    /// The relay tracks as many unexpired tickets as it may.
    #[error("too many tickets in flight")]
    LedgerFull,
}

/// Who a ticket lets in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A seat.
    Player,
    /// Watching only.
    Spectator,
}

/// A secret that signs tickets, with the id tickets name it by.
#[derive(Clone)]
pub struct TicketKey {
    id: u8,
    secret: Vec<u8>,
}

impl std::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// A secret shorter than [`MIN_SECRET_LEN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("ticket secret {id} is {len} bytes; at least {MIN_SECRET_LEN} are needed")]
pub struct ShortSecret {
    /// The key id.
    pub id: u8,
    /// Its length.
    pub len: usize,
}

impl TicketKey {
    /// Key `id` with `secret`, which must be at least [`MIN_SECRET_LEN`]
    /// bytes (an empty or short secret would let anyone sign tickets).
    pub fn new(id: u8, secret: impl AsRef<[u8]>) -> Result<Self, ShortSecret> {
        let secret = secret.as_ref();
        if secret.len() < MIN_SECRET_LEN {
            return Err(ShortSecret {
                id,
                len: secret.len(),
            });
        }
        Ok(Self {
            id,
            secret: secret.to_vec(),
        })
    }

    /// The key id.
    pub fn id(&self) -> u8 {
        self.id
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes keys of any length; the fallback only keeps this free
        // of panics.
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.secret)
            .unwrap_or_else(|_| <Hmac<Sha256> as KeyInit>::new(&Default::default()))
    }
}

/// What a ticket says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claims<'a> {
    /// The room.
    pub room: &'a str,
    /// The player's name.
    pub name: &'a str,
    /// Player or spectator.
    pub role: Role,
    /// Unix seconds after which it is refused.
    pub expiry: u64,
    /// The relay of a fleet (its id) that should serve the room, if the
    /// matchmaker placed it: a relay the client reaches first sends it
    /// there while the room is new (if that relay is registered and ready;
    /// else the room is placed as any other, and the relay logs it). An id
    /// [`check_relay_id`](crate::directory::check_relay_id) refuses is an
    /// [`IssueError`].
    pub relay: Option<&'a str>,
}

/// A ticket that passed [`verify`]: what the relay must remember of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Its nonce, counted against its use limit.
    pub nonce: [u8; 16],
    /// Its expiry: how long the nonce must be remembered.
    pub expiry: u64,
    /// The relay it names, if any.
    pub relay: Option<String>,
}

/// Why a ticket could not be issued: its claims could never be accepted,
/// so it is refused here rather than by every relay later.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IssueError {
    /// The room name is longer than a Hello may carry.
    #[error("room name of {0} bytes; the protocol allows at most {MAX_ROOM}")]
    RoomTooLong(usize),
    /// The player name is longer than a Hello may carry.
    #[error("player name of {0} bytes; the protocol allows at most {MAX_NAME}")]
    NameTooLong(usize),
    /// The relay named is not an id a directory takes.
    #[error(transparent)]
    BadRelayId(#[from] crate::directory::DirectoryError),
    /// The operating system gave no random bytes for the nonce.
    #[error("no random bytes for the ticket's nonce: {0}")]
    Entropy(getrandom::Error),
}

/// A ticket for `claims`, signed with `key`. `nonce` must be unpredictable
/// and unique per ticket (16 bytes from a CSPRNG); [`issue_random`] takes
/// one from the operating system.
///
/// Claims no relay would accept are an error, not a ticket: a room or name
/// longer than a Hello carries ([`MAX_ROOM`], [`MAX_NAME`] bytes), or a
/// relay id [`check_relay_id`](crate::directory::check_relay_id) refuses.
///
/// ```
/// use lockstep_relay::ticket::{self, Claims, IssueError, Role, TicketKey};
/// let key = TicketKey::new(1, "a secret of at least sixteen bytes")?;
/// let claims = Claims { room: "arena", name: "alice", role: Role::Player, expiry: 2_000_000_000, relay: Some("eu 2") };
/// assert!(matches!(ticket::issue(&key, &claims, [9; 16]), Err(IssueError::BadRelayId(_))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn issue(key: &TicketKey, claims: &Claims<'_>, nonce: [u8; 16]) -> Result<Vec<u8>, IssueError> {
    if claims.room.len() > MAX_ROOM {
        return Err(IssueError::RoomTooLong(claims.room.len()));
    }
    if claims.name.len() > MAX_NAME {
        return Err(IssueError::NameTooLong(claims.name.len()));
    }
    if let Some(relay) = claims.relay {
        crate::directory::check_relay_id(relay)?;
    }
    let room = claims.room.as_bytes();
    let name = claims.name.as_bytes();
    let relay = claims.relay.map(str::as_bytes);
    let mut t = Vec::with_capacity(
        FIXED + room.len() + name.len() + relay.map_or(0, |r| 1 + r.len()) + MAC_LEN,
    );
    t.push(if relay.is_some() {
        VERSION_WITH_RELAY
    } else {
        VERSION
    });
    t.push(key.id);
    t.extend_from_slice(&claims.expiry.to_le_bytes());
    t.push(match claims.role {
        Role::Player => 0,
        Role::Spectator => 1,
    });
    t.extend_from_slice(&nonce);
    // Every length was checked against a bound under 256 above.
    for field in [Some(room), Some(name), relay].into_iter().flatten() {
        t.push(field.len() as u8);
        t.extend_from_slice(field);
    }
    let mut m = key.mac();
    m.update(&t);
    t.extend_from_slice(&m.finalize().into_bytes());
    Ok(t)
}

/// [`issue`] with a nonce from the operating system's generator.
pub fn issue_random(key: &TicketKey, claims: &Claims<'_>) -> Result<Vec<u8>, IssueError> {
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(IssueError::Entropy)?;
    issue(key, claims, nonce)
}

/// Checks `ticket` for `name` joining `room` as `role` at `now` (unix
/// seconds) against `keys`. Use limits are the caller's (see
/// [`Ledger`]).
pub fn verify(
    keys: &[TicketKey],
    ticket: &[u8],
    room: &str,
    name: &str,
    role: Role,
    now: u64,
) -> Result<Verified, TicketError> {
    if ticket.is_empty() {
        return Err(TicketError::Missing);
    }
    if ticket.len() < FIXED + MAC_LEN || !matches!(ticket[0], VERSION | VERSION_WITH_RELAY) {
        return Err(TicketError::Malformed);
    }
    let key = keys
        .iter()
        .find(|k| k.id == ticket[1])
        .ok_or(TicketError::UnknownKey)?;
    let (signed, tag) = ticket.split_at(ticket.len() - MAC_LEN);
    let mut m = key.mac();
    m.update(signed);
    m.verify_slice(tag).map_err(|_| TicketError::BadSignature)?;
    let mut expiry = [0u8; 8];
    expiry.copy_from_slice(&signed[2..10]);
    let expiry = u64::from_le_bytes(expiry);
    let t_role = match signed[10] {
        0 => Role::Player,
        1 => Role::Spectator,
        _ => return Err(TicketError::Malformed),
    };
    let mut nonce = [0u8; 16];
    nonce.copy_from_slice(&signed[11..27]);
    let room_len = usize::from(signed[27]);
    let t_room = signed
        .get(28..28 + room_len)
        .ok_or(TicketError::Malformed)?;
    let name_at = 28 + room_len;
    let name_len = usize::from(*signed.get(name_at).ok_or(TicketError::Malformed)?);
    let t_name = signed
        .get(name_at + 1..name_at + 1 + name_len)
        .ok_or(TicketError::Malformed)?;
    let relay_at = name_at + 1 + name_len;
    let relay = if signed[0] == VERSION_WITH_RELAY {
        let len = usize::from(*signed.get(relay_at).ok_or(TicketError::Malformed)?);
        let r = signed
            .get(relay_at + 1..relay_at + 1 + len)
            .ok_or(TicketError::Malformed)?;
        let r = core::str::from_utf8(r).map_err(|_| TicketError::Malformed)?;
        crate::directory::check_relay_id(r).map_err(|_| TicketError::Malformed)?;
        Some(r)
    } else {
        None
    };
    let end = relay_at + relay.map_or(0, |r| 1 + r.len());
    if signed.len() != end {
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
    if t_role != role {
        return Err(TicketError::WrongRole);
    }
    Ok(Verified {
        nonce,
        expiry,
        relay: relay.map(str::to_owned),
    })
}

/// The relay's memory of spent tickets: how often each nonce was used, until
/// its ticket expires. Bounded: it refuses new tickets rather than grow past
/// its capacity, and refuses tickets valid for longer than it remembers.
///
/// ```
/// use lockstep_relay::ticket::{Ledger, TicketError, Verified};
/// let mut ledger = Ledger::new(1, 3600, 1000);
/// let t = Verified { nonce: [1; 16], expiry: 1_000, relay: None };
/// assert_eq!(ledger.check(&t, 500), Ok(()));
/// ledger.spend(&t);
/// assert_eq!(ledger.check(&t, 500), Err(TicketError::Spent));
/// ledger.forget_expired(1_001);
/// assert!(ledger.is_empty());
/// ```
#[derive(Debug)]
pub struct Ledger {
    uses: HashMap<[u8; 16], (u32, u64)>,
    max_uses: u32,
    max_lifetime: u64,
    capacity: usize,
}

impl Ledger {
    /// A ledger allowing `max_uses` per ticket, for tickets expiring at most
    /// `max_lifetime` seconds ahead, remembering at most `capacity` of them.
    pub fn new(max_uses: u32, max_lifetime: u64, capacity: usize) -> Self {
        Self {
            uses: HashMap::new(),
            max_uses: max_uses.max(1),
            max_lifetime,
            capacity,
        }
    }

    /// Whether `t` may be used (once more) at `now` (unix seconds).
    pub fn check(&self, t: &Verified, now: u64) -> Result<(), TicketError> {
        if t.expiry > now.saturating_add(self.max_lifetime) {
            return Err(TicketError::TooLong);
        }
        match self.uses.get(&t.nonce) {
            Some((n, _)) if *n >= self.max_uses => Err(TicketError::Spent),
            Some(_) => Ok(()),
            None if self.uses.len() >= self.capacity => Err(TicketError::LedgerFull),
            None => Ok(()),
        }
    }

    /// Records one use of `t` (after [`check`](Self::check) passed and the
    /// connection was made).
    pub fn spend(&mut self, t: &Verified) {
        let e = self.uses.entry(t.nonce).or_insert((0, t.expiry));
        e.0 = e.0.saturating_add(1);
    }

    /// Forgets tickets expired at `now`: they are refused for their expiry
    /// from now on.
    pub fn forget_expired(&mut self, now: u64) {
        self.uses.retain(|_, (_, expiry)| *expiry >= now);
    }

    /// Tickets remembered.
    pub fn len(&self) -> usize {
        self.uses.len()
    }

    /// Whether no ticket is remembered.
    pub fn is_empty(&self) -> bool {
        self.uses.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u8) -> TicketKey {
        TicketKey::new(id, format!("secret number {id} of the tests")).unwrap()
    }

    fn claims() -> Claims<'static> {
        Claims {
            room: "r",
            name: "n",
            role: Role::Player,
            expiry: 100,
            relay: None,
        }
    }

    #[test]
    fn short_secrets_are_refused() {
        assert_eq!(
            TicketKey::new(0, "").unwrap_err(),
            ShortSecret { id: 0, len: 0 }
        );
        assert!(TicketKey::new(0, "fifteen bytes..").is_err());
        assert!(TicketKey::new(0, "sixteen bytes...").is_ok());
    }

    #[test]
    fn two_keys_are_valid_during_a_rotation() {
        let (old, new) = (key(1), key(2));
        let keys = [old.clone(), new.clone()];
        for k in [&old, &new] {
            let t = issue(k, &claims(), [0; 16]).unwrap();
            assert!(verify(&keys, &t, "r", "n", Role::Player, 50).is_ok());
        }
        let t = issue(&key(3), &claims(), [0; 16]).unwrap();
        assert_eq!(
            verify(&keys, &t, "r", "n", Role::Player, 50),
            Err(TicketError::UnknownKey)
        );
    }

    #[test]
    fn every_byte_is_signed() {
        let k = key(1);
        let placed = Claims {
            relay: Some("eu-2"),
            ..claims()
        };
        for c in [claims(), placed] {
            let t = issue(&k, &c, [5; 16]).unwrap();
            for i in 0..t.len() {
                let mut bad = t.clone();
                bad[i] ^= 0x40;
                assert!(
                    verify(std::slice::from_ref(&k), &bad, "r", "n", Role::Player, 50).is_err()
                );
            }
        }
    }

    /// A ticket that names a relay carries it, signed; one without reads
    /// as before (version 2, byte for byte); a bad relay id is refused.
    #[test]
    fn a_ticket_may_name_its_relay() {
        let k = key(1);
        let keys = std::slice::from_ref(&k);
        let plain = issue(&k, &claims(), [5; 16]).unwrap();
        assert_eq!(plain[0], 2);
        let ok = verify(keys, &plain, "r", "n", Role::Player, 50).unwrap();
        assert_eq!(ok.relay, None);
        let placed = Claims {
            relay: Some("eu-2"),
            ..claims()
        };
        let t = issue(&k, &placed, [5; 16]).unwrap();
        assert_eq!(t[0], 3);
        assert_eq!(t.len(), plain.len() + 5);
        let ok = verify(keys, &t, "r", "n", Role::Player, 50).unwrap();
        assert_eq!(ok.relay.as_deref(), Some("eu-2"));
        // A ticket signed for a bad relay id, as another issuer might make
        // it: refused as malformed.
        let mut forged = plain.clone();
        forged.truncate(forged.len() - MAC_LEN);
        forged[0] = VERSION_WITH_RELAY;
        forged.push(9);
        forged.extend_from_slice(b"two words");
        let mut m = k.mac();
        m.update(&forged);
        forged.extend_from_slice(&m.finalize().into_bytes());
        assert_eq!(
            verify(keys, &forged, "r", "n", Role::Player, 50),
            Err(TicketError::Malformed)
        );
    }

    /// Claims no relay would take are refused when the ticket is issued,
    /// not by every relay when it is used.
    #[test]
    fn claims_no_relay_takes_are_not_signed() {
        let k = key(1);
        let bad_relay = Claims {
            relay: Some("two words"),
            ..claims()
        };
        assert!(matches!(
            issue(&k, &bad_relay, [5; 16]),
            Err(IssueError::BadRelayId(_))
        ));
        let room = "r".repeat(MAX_ROOM + 1);
        let long_room = Claims {
            room: &room,
            ..claims()
        };
        assert!(matches!(
            issue(&k, &long_room, [5; 16]),
            Err(IssueError::RoomTooLong(65))
        ));
        let name = "n".repeat(MAX_NAME + 1);
        let long_name = Claims {
            name: &name,
            ..claims()
        };
        assert!(matches!(
            issue(&k, &long_name, [5; 16]),
            Err(IssueError::NameTooLong(33))
        ));
        // At the bounds, tickets are issued and verify.
        let (room, name) = ("r".repeat(MAX_ROOM), "n".repeat(MAX_NAME));
        let widest = Claims {
            room: &room,
            name: &name,
            relay: Some("relay-7.eu"),
            ..claims()
        };
        let t = issue(&k, &widest, [5; 16]).unwrap();
        let ok = verify(&[k], &t, &room, &name, Role::Player, 50).unwrap();
        assert_eq!(ok.relay.as_deref(), Some("relay-7.eu"));
    }

    #[test]
    fn the_ledger_is_bounded_and_honours_use_counts() {
        let mut l = Ledger::new(2, 10, 2);
        let t = |n: u8| Verified {
            nonce: [n; 16],
            expiry: 20,
            relay: None,
        };
        assert_eq!(
            l.check(
                &Verified {
                    nonce: [0; 16],
                    expiry: 21,
                    relay: None,
                },
                10
            ),
            Err(TicketError::TooLong)
        );
        l.spend(&t(1));
        assert_eq!(l.check(&t(1), 10), Ok(()));
        l.spend(&t(1));
        assert_eq!(l.check(&t(1), 10), Err(TicketError::Spent));
        l.spend(&t(2));
        assert_eq!(l.check(&t(3), 10), Err(TicketError::LedgerFull));
        l.forget_expired(21);
        assert_eq!(l.check(&t(3), 21), Ok(()));
    }
}
