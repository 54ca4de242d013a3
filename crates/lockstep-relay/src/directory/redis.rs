//! The directory in Redis.
//!
//! Keys, under a prefix (`lockstep:` unless told otherwise):
//!
//! - `{prefix}relay:{id}`: a relay's entry as JSON, expiring with its lease;
//! - `{prefix}relays`: the set of relay ids registered (an id whose entry
//!   has expired is dropped from it when met);
//! - `{prefix}room:{name}`: `"{epoch} {relay id}"`, expiring with its lease;
//! - `{prefix}epoch`: the last fencing epoch given (one counter for every
//!   room, so an epoch is never given twice).
//!
//! Claims, renewals and releases are Lua scripts, each one atomic in Redis:
//! a renewal or release changes a room only if it still holds the exact
//! epoch and relay it names.

use super::{Claim, Directory, DirectoryError, RelayEntry, RoomOwner, check_relay_id};
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::Arc;
use std::time::Duration;

/// Claims a room: ours again if we hold it (lease renewed), someone else's
/// if they do, else ours under a new epoch.
const CLAIM: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur then
  local sp = string.find(cur, ' ', 1, true)
  local epoch = string.sub(cur, 1, sp - 1)
  local owner = string.sub(cur, sp + 1)
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, epoch, owner}
  end
  return {0, epoch, owner}
end
local epoch = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], epoch .. ' ' .. ARGV[1], 'PX', ARGV[2])
return {1, tostring(epoch), ARGV[1]}
";

/// Renews a room's lease if it holds exactly `ARGV[1]`.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

/// Deletes a room's lease if it holds exactly `ARGV[1]`.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

/// The directory in Redis (see the module docs for its keys). Its
/// connection reconnects by itself: while Redis is down every call fails
/// with [`DirectoryError::Unavailable`] within the response timeout, and
/// works again once it is back. The connection is made on the first call,
/// in that call's Tokio runtime, and lives there: a clone gets a
/// connection of its own, so relays on runtimes of their own (one per
/// core) may share one `RedisDirectory` by cloning it, and one stopping
/// does not take the others' connection with its runtime.
pub struct RedisDirectory {
    client: redis::Client,
    config: ConnectionManagerConfig,
    /// Made in the runtime of the first call (the relay's), not the
    /// caller's of `open`.
    redis: Arc<tokio::sync::OnceCell<ConnectionManager>>,
    prefix: String,
    claim: redis::Script,
    renew: redis::Script,
    release: redis::Script,
}

impl Clone for RedisDirectory {
    /// The same Redis and keys, with a connection of its own (made on its
    /// first call, in that call's runtime).
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            config: self.config.clone(),
            redis: Arc::default(),
            prefix: self.prefix.clone(),
            claim: self.claim.clone(),
            renew: self.renew.clone(),
            release: self.release.clone(),
        }
    }
}

impl core::fmt::Debug for RedisDirectory {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RedisDirectory")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: &redis::RedisError) -> DirectoryError {
    DirectoryError::Unavailable(e.to_string())
}

impl RedisDirectory {
    /// How long a call waits for Redis before it is `Unavailable`.
    pub const TIMEOUT: Duration = Duration::from_millis(500);

    /// A directory in the Redis at `url` (`redis://host:port/db`), its keys
    /// under `prefix` (`lockstep:` for a fleet's own Redis). It connects
    /// when first used, in the Tokio runtime that uses it, so a relay
    /// starts while Redis is down.
    pub fn open(url: &str, prefix: &str) -> Result<Self, DirectoryError> {
        let client =
            redis::Client::open(url).map_err(|e| DirectoryError::BadUrl(format!("{url}: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Self::TIMEOUT))
            .set_response_timeout(Some(Self::TIMEOUT))
            .set_number_of_retries(1);
        Ok(Self {
            client,
            config,
            redis: Arc::default(),
            prefix: prefix.to_owned(),
            claim: redis::Script::new(CLAIM),
            renew: redis::Script::new(RENEW),
            release: redis::Script::new(RELEASE),
        })
    }

    /// The connection (made on first use).
    async fn conn(&self) -> Result<ConnectionManager, DirectoryError> {
        self.redis
            .get_or_try_init(|| async {
                ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone())
                    .map_err(|e| unavailable(&e))
            })
            .await
            .cloned()
    }

    fn relay_key(&self, id: &str) -> String {
        format!("{}relay:{id}", self.prefix)
    }

    fn room_key(&self, room: &str) -> String {
        format!("{}room:{room}", self.prefix)
    }

    fn relays_key(&self) -> String {
        format!("{}relays", self.prefix)
    }

    fn epoch_key(&self) -> String {
        format!("{}epoch", self.prefix)
    }

    /// `"{epoch} {relay}"`, as a room's key holds it.
    fn read_owner(value: &str) -> Result<RoomOwner, DirectoryError> {
        let corrupt = || DirectoryError::Corrupt(format!("a room's owner {value:?}"));
        let (epoch, relay) = value.split_once(' ').ok_or_else(corrupt)?;
        Ok(RoomOwner {
            relay: relay.to_owned(),
            epoch: epoch.parse().map_err(|_| corrupt())?,
        })
    }
}

/// Milliseconds for Redis, at least 1.
fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Directory for RedisDirectory {
    async fn register(&self, entry: &RelayEntry, ttl: Duration) -> Result<(), DirectoryError> {
        check_relay_id(&entry.id)?;
        let json =
            serde_json::to_string(entry).map_err(|e| DirectoryError::Corrupt(e.to_string()))?;
        let mut r = self.conn().await?;
        redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(self.relay_key(&entry.id))
            .arg(json)
            .arg("PX")
            .arg(millis(ttl))
            .ignore()
            .sadd(self.relays_key(), &entry.id)
            .ignore()
            .query_async::<()>(&mut r)
            .await
            .map_err(|e| unavailable(&e))
    }

    async fn deregister(&self, relay: &str) -> Result<(), DirectoryError> {
        let mut r = self.conn().await?;
        redis::pipe()
            .atomic()
            .del(self.relay_key(relay))
            .ignore()
            .srem(self.relays_key(), relay)
            .ignore()
            .query_async::<()>(&mut r)
            .await
            .map_err(|e| unavailable(&e))
    }

    async fn relays(&self) -> Result<Vec<RelayEntry>, DirectoryError> {
        let mut r = self.conn().await?;
        let mut ids: Vec<String> = r
            .smembers(self.relays_key())
            .await
            .map_err(|e| unavailable(&e))?;
        ids.sort();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = ids.iter().map(|id| self.relay_key(id)).collect();
        let values: Vec<Option<String>> = r.mget(&keys).await.map_err(|e| unavailable(&e))?;
        let mut out = Vec::new();
        let mut gone = Vec::new();
        for (id, v) in ids.into_iter().zip(values) {
            match v {
                Some(json) => out
                    .push(serde_json::from_str::<RelayEntry>(&json).map_err(|e| {
                        DirectoryError::Corrupt(format!("relay {id}'s entry: {e}"))
                    })?),
                None => gone.push(id),
            }
        }
        if !gone.is_empty() {
            // Lapsed: out of the set too (a relay that registers again is
            // added back).
            let _: Result<(), _> = r.srem(self.relays_key(), &gone).await;
        }
        Ok(out)
    }

    async fn claim(&self, room: &str, relay: &str, ttl: Duration) -> Result<Claim, DirectoryError> {
        check_relay_id(relay)?;
        let mut r = self.conn().await?;
        let (ours, epoch, owner): (u8, String, String) = self
            .claim
            .key(self.room_key(room))
            .key(self.epoch_key())
            .arg(relay)
            .arg(millis(ttl))
            .invoke_async(&mut r)
            .await
            .map_err(|e| unavailable(&e))?;
        let owner = Self::read_owner(&format!("{epoch} {owner}"))?;
        Ok(if ours == 1 {
            Claim::Ours { epoch: owner.epoch }
        } else {
            Claim::Taken(owner)
        })
    }

    async fn renew(
        &self,
        room: &str,
        relay: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<bool, DirectoryError> {
        let mut r = self.conn().await?;
        let done: u8 = self
            .renew
            .key(self.room_key(room))
            .arg(format!("{epoch} {relay}"))
            .arg(millis(ttl))
            .invoke_async(&mut r)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(done == 1)
    }

    async fn release(&self, room: &str, relay: &str, epoch: u64) -> Result<bool, DirectoryError> {
        let mut r = self.conn().await?;
        let done: u8 = self
            .release
            .key(self.room_key(room))
            .arg(format!("{epoch} {relay}"))
            .invoke_async(&mut r)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(done == 1)
    }

    async fn owner(&self, room: &str) -> Result<Option<RoomOwner>, DirectoryError> {
        let mut r = self.conn().await?;
        let v: Option<String> = r
            .get(self.room_key(room))
            .await
            .map_err(|e| unavailable(&e))?;
        v.as_deref().map(Self::read_owner).transpose()
    }

    async fn rooms(&self) -> Result<Vec<(String, RoomOwner)>, DirectoryError> {
        let mut r = self.conn().await?;
        let pattern = format!("{}room:*", self.prefix);
        let mut keys: Vec<String> = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut r)
                .await
                .map_err(|e| unavailable(&e))?;
            keys.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        keys.sort();
        keys.dedup();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let values: Vec<Option<String>> = r.mget(&keys).await.map_err(|e| unavailable(&e))?;
        let strip = format!("{}room:", self.prefix);
        let mut out = Vec::new();
        for (k, v) in keys.iter().zip(values) {
            if let Some(v) = v {
                let room = k.strip_prefix(&strip).unwrap_or(k).to_owned();
                out.push((room, Self::read_owner(&v)?));
            }
        }
        Ok(out)
    }
}
