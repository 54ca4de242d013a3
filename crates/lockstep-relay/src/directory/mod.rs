//! The room directory a fleet of relays shares.
//!
//! Rooms are independent, so a game grows past one relay by running many
//! and agreeing, through the directory, on three things:
//!
//! - **which relays are alive**: each registers its entry (id, public
//!   addresses, load, state) under a lease it renews by heartbeat; an entry
//!   whose lease lapses is gone;
//! - **which relay owns each room**: a room is claimed under a lease with a
//!   *fencing epoch*, a number the directory never gives twice. The owner
//!   renews the lease with its epoch; once another relay has claimed the
//!   room (the lease having lapsed), the old owner's epoch no longer
//!   renews, releases or claims anything, so it cannot take the room back;
//! - **where a new room goes**: the least loaded live relay that takes
//!   rooms ([`least_loaded`]).
//!
//! [`Directory`] is the interface; [`MemoryDirectory`] keeps it in one
//! process (tests, a single machine's relays in one process) and
//! [`RedisDirectory`] in Redis, where a fleet keeps it.

mod local;
mod memory;
mod redis;

pub use self::local::LocalRedis;
pub use self::memory::MemoryDirectory;
pub use self::redis::RedisDirectory;

use serde::{Deserialize, Serialize};
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

/// The longest relay id the directory takes.
pub const MAX_RELAY_ID: usize = 64;

/// Whether a relay takes new rooms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RelayState {
    /// It takes new rooms.
    Ready,
    /// It is draining for a restart: its rooms run to their end, it takes
    /// no new ones.
    Draining,
    /// It is at its `max_rooms` or `max_connections`: it takes no new
    /// rooms until some close.
    Full,
    /// A state this relay does not know (a newer relay's, during a rolling
    /// upgrade): taken as taking no new rooms, rather than making the
    /// whole directory unreadable.
    ///
    /// ```
    /// use lockstep_relay::directory::RelayState;
    /// let s: RelayState = serde_json::from_str("\"resting\"").expect("reads");
    /// assert_eq!(s, RelayState::Unknown);
    /// ```
    #[serde(other)]
    Unknown,
}

/// A relay's entry in the directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayEntry {
    /// The relay's id, unique in the fleet (see [`check_relay_id`]).
    pub id: String,
    /// Where clients reach it over UDP.
    pub udp: Option<SocketAddr>,
    /// Where clients reach it over WebSocket.
    pub ws: Option<SocketAddr>,
    /// Clients it serves.
    pub clients: u32,
    /// Rooms it runs.
    pub rooms: u32,
    /// Whether it takes new rooms.
    pub state: RelayState,
}

/// Who owns a room, and under which epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomOwner {
    /// The owning relay's id.
    pub relay: String,
    /// The fencing epoch of its claim.
    pub epoch: u64,
}

/// What a claim on a room came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The room is ours, under this epoch (a new one if it was free; ours
    /// again if we held it already).
    Ours {
        /// The fencing epoch to renew and release it with.
        epoch: u64,
    },
    /// Another relay holds it.
    Taken(RoomOwner),
}

/// Why the directory did not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DirectoryError {
    /// It cannot be reached (Redis down, a timeout): running rooms go on,
    /// new ones wait.
    #[error("the room directory is unavailable: {0}")]
    Unavailable(String),
    /// It holds something this build cannot read.
    #[error("the room directory holds something unreadable: {0}")]
    Corrupt(String),
    /// Not a Redis URL (`redis://host:port/db`).
    #[error("bad directory URL: {0}")]
    BadUrl(String),
    /// A relay id that is empty, too long, or has other than ASCII
    /// letters, digits, `-`, `_` and `.`.
    #[error("bad relay id {0:?}: 1 to 64 of A-Z a-z 0-9 - _ .")]
    BadRelayId(String),
}

/// Checks a relay id: 1 to [`MAX_RELAY_ID`] ASCII letters, digits, `-`,
/// `_` or `.`.
///
/// ```
/// use lockstep_relay::directory::check_relay_id;
/// assert!(check_relay_id("relay-7.eu").is_ok());
/// assert!(check_relay_id("two words").is_err());
/// ```
pub fn check_relay_id(id: &str) -> Result<(), DirectoryError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_RELAY_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(DirectoryError::BadRelayId(id.to_owned()))
    }
}

/// Where a new room should go: the live relay taking rooms with the fewest
/// clients, then rooms; on a tie the relay `asking` (the client is there
/// already: no redirect), then the smallest id.
///
/// ```
/// use lockstep_relay::directory::{least_loaded, RelayEntry, RelayState};
/// let relay = |id: &str, clients, state| RelayEntry {
///     id: id.into(), udp: None, ws: None, clients, rooms: 0, state,
/// };
/// let relays = [
///     relay("a", 10, RelayState::Ready),
///     relay("b", 2, RelayState::Draining),
///     relay("c", 4, RelayState::Ready),
///     relay("d", 4, RelayState::Ready),
/// ];
/// assert_eq!(least_loaded(&relays, None).map(|r| r.id.as_str()), Some("c"));
/// assert_eq!(least_loaded(&relays, Some("d")).map(|r| r.id.as_str()), Some("d"));
/// ```
pub fn least_loaded<'a>(relays: &'a [RelayEntry], asking: Option<&str>) -> Option<&'a RelayEntry> {
    relays
        .iter()
        .filter(|r| r.state == RelayState::Ready)
        .min_by_key(|r| (r.clients, r.rooms, Some(r.id.as_str()) != asking, &r.id))
}

/// The directory a fleet of relays shares (see the [module](self) docs).
/// Every lease is `ttl` long from the call that sets or renews it.
pub trait Directory: Send + Sync + 'static {
    /// Registers `entry` (or renews it, with its new figures) for `ttl`.
    fn register(
        &self,
        entry: &RelayEntry,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), DirectoryError>> + Send;

    /// Takes the relay's entry out at once (a relay that exits cleanly).
    fn deregister(&self, relay: &str) -> impl Future<Output = Result<(), DirectoryError>> + Send;

    /// Every live relay, by id.
    fn relays(&self) -> impl Future<Output = Result<Vec<RelayEntry>, DirectoryError>> + Send;

    /// Claims `room` for `relay` for `ttl`, if no other relay holds it.
    fn claim(
        &self,
        room: &str,
        relay: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Claim, DirectoryError>> + Send;

    /// Renews `relay`'s lease on `room` under `epoch` for `ttl`: false if
    /// it no longer holds the room under that epoch (its lease lapsed, or
    /// another relay claimed it since), when it must stop serving it.
    fn renew(
        &self,
        room: &str,
        relay: &str,
        epoch: u64,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, DirectoryError>> + Send;

    /// Gives `room` up, if `relay` holds it under `epoch` (false if not).
    fn release(
        &self,
        room: &str,
        relay: &str,
        epoch: u64,
    ) -> impl Future<Output = Result<bool, DirectoryError>> + Send;

    /// Who holds `room`, if anyone.
    fn owner(
        &self,
        room: &str,
    ) -> impl Future<Output = Result<Option<RoomOwner>, DirectoryError>> + Send;

    /// Every held room and its owner, by room name.
    fn rooms(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, RoomOwner)>, DirectoryError>> + Send;
}
