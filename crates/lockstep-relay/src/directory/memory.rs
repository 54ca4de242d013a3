//! The directory in one process's memory.

use super::{Claim, Directory, DirectoryError, RelayEntry, RoomOwner, check_relay_id};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What stands for the time: the real clock, or a test's.
type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// The directory in one process's memory: the relays of one process (or a
/// test) share it through clones. Expired leases are dropped as they are
/// met, so it holds only live entries and held rooms.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use lockstep_relay::directory::{Claim, Directory, MemoryDirectory};
/// use std::time::Duration;
/// let d = MemoryDirectory::new();
/// let lease = Duration::from_secs(5);
/// let Ok(Claim::Ours { epoch }) = d.claim("room", "relay-1", lease).await else { panic!() };
/// assert!(matches!(d.claim("room", "relay-2", lease).await, Ok(Claim::Taken(_))));
/// assert_eq!(d.renew("room", "relay-1", epoch, lease).await, Ok(true));
/// # });
/// ```
#[derive(Clone)]
pub struct MemoryDirectory {
    state: Arc<Mutex<State>>,
    clock: Clock,
}

#[derive(Default)]
struct State {
    relays: BTreeMap<String, (RelayEntry, Instant)>,
    rooms: BTreeMap<String, (RoomOwner, Instant)>,
    /// The last epoch given, for every room alike.
    epoch: u64,
}

impl State {
    fn expire(&mut self, now: Instant) {
        self.relays.retain(|_, (_, until)| *until > now);
        self.rooms.retain(|_, (_, until)| *until > now);
    }
}

impl core::fmt::Debug for MemoryDirectory {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MemoryDirectory").finish_non_exhaustive()
    }
}

impl Default for MemoryDirectory {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryDirectory {
    /// An empty directory on the real clock.
    pub fn new() -> Self {
        Self::with_clock(Instant::now)
    }

    /// An empty directory on `clock` (a test's).
    pub fn with_clock(clock: impl Fn() -> Instant + Send + Sync + 'static) -> Self {
        Self {
            state: Arc::default(),
            clock: Arc::new(clock),
        }
    }

    /// The state, its lapsed leases dropped.
    fn live(&self) -> (std::sync::MutexGuard<'_, State>, Instant) {
        let now = (self.clock)();
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.expire(now);
        (s, now)
    }
}

impl Directory for MemoryDirectory {
    async fn register(&self, entry: &RelayEntry, ttl: Duration) -> Result<(), DirectoryError> {
        check_relay_id(&entry.id)?;
        let (mut s, now) = self.live();
        s.relays
            .insert(entry.id.clone(), (entry.clone(), now + ttl));
        Ok(())
    }

    async fn deregister(&self, relay: &str) -> Result<(), DirectoryError> {
        let (mut s, _) = self.live();
        s.relays.remove(relay);
        Ok(())
    }

    async fn relays(&self) -> Result<Vec<RelayEntry>, DirectoryError> {
        let (s, _) = self.live();
        Ok(s.relays.values().map(|(e, _)| e.clone()).collect())
    }

    async fn claim(&self, room: &str, relay: &str, ttl: Duration) -> Result<Claim, DirectoryError> {
        check_relay_id(relay)?;
        let (mut s, now) = self.live();
        if let Some((owner, until)) = s.rooms.get_mut(room) {
            if owner.relay == relay {
                *until = now + ttl;
                return Ok(Claim::Ours { epoch: owner.epoch });
            }
            return Ok(Claim::Taken(owner.clone()));
        }
        s.epoch += 1;
        let epoch = s.epoch;
        let owner = RoomOwner {
            relay: relay.to_owned(),
            epoch,
        };
        s.rooms.insert(room.to_owned(), (owner, now + ttl));
        Ok(Claim::Ours { epoch })
    }

    async fn renew(
        &self,
        room: &str,
        relay: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<bool, DirectoryError> {
        let (mut s, now) = self.live();
        match s.rooms.get_mut(room) {
            Some((owner, until)) if owner.relay == relay && owner.epoch == epoch => {
                *until = now + ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, room: &str, relay: &str, epoch: u64) -> Result<bool, DirectoryError> {
        let (mut s, _) = self.live();
        let ours = s
            .rooms
            .get(room)
            .is_some_and(|(o, _)| o.relay == relay && o.epoch == epoch);
        if ours {
            s.rooms.remove(room);
        }
        Ok(ours)
    }

    async fn owner(&self, room: &str) -> Result<Option<RoomOwner>, DirectoryError> {
        let (s, _) = self.live();
        Ok(s.rooms.get(room).map(|(o, _)| o.clone()))
    }

    async fn rooms(&self) -> Result<Vec<(String, RoomOwner)>, DirectoryError> {
        let (s, _) = self.live();
        Ok(s.rooms
            .iter()
            .map(|(r, (o, _))| (r.clone(), o.clone()))
            .collect())
    }
}
