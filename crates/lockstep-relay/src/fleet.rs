//! A relay in a fleet: its entry kept in the room directory, the rooms it
//! opens claimed there first.
//!
//! A task beside the relay's loop does every directory call, so the loop
//! never waits on the directory: the loop asks for a room's claim and goes
//! on (the client's Hello, repeated every 250 ms, finds the answer), and
//! hears back when a claim is settled or a room it runs was lost.

use crate::directory::{Claim, Directory, DirectoryError, RelayEntry, RelayState, RoomOwner};
use crate::metrics::Metrics;
use crate::room::RoomName;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::{info, warn};

/// A relay's place in a fleet: the directory it shares with the others,
/// its id there, where clients reach it, and the leases it keeps.
#[derive(Debug, Clone)]
pub struct Fleet<D> {
    /// The directory.
    pub directory: D,
    /// This relay's id, unique in the fleet
    /// ([`check_relay_id`](crate::directory::check_relay_id)).
    pub id: String,
    /// Where clients reach it over UDP (its public address).
    pub udp: Option<SocketAddr>,
    /// Where clients reach it over WebSocket.
    pub ws: Option<SocketAddr>,
    /// How long its entry and its rooms' claims last unless renewed
    /// (renewed every third of it): how long a killed relay's rooms stay
    /// claimed. [`LEASE`] unless told otherwise; at least [`MIN_LEASE`].
    pub lease: Duration,
}

/// The lease a relay keeps unless told otherwise (`lockstep relay
/// --lease`).
pub const LEASE: Duration = Duration::from_secs(6);

/// The shortest lease a relay keeps: renewed every third of it, a shorter
/// one would lapse between renewals of a relay that is only busy.
pub const MIN_LEASE: Duration = Duration::from_millis(300);

impl<D> Fleet<D> {
    /// Refuses what would not run: a bad relay id, a lease under
    /// [`MIN_LEASE`].
    pub(crate) fn check(&self) -> Result<(), crate::RelayError> {
        crate::directory::check_relay_id(&self.id)
            .map_err(|e| crate::RelayError::Fleet(e.to_string()))?;
        if self.lease < MIN_LEASE {
            return Err(crate::RelayError::Fleet(format!(
                "a lease of {:?} is under the shortest, {MIN_LEASE:?}",
                self.lease
            )));
        }
        Ok(())
    }
}

/// What the relay's loop asks of the fleet task.
#[derive(Debug)]
pub(crate) enum FleetOp {
    /// Claim this room (its first client is at the door).
    Claim(RoomName),
    /// The room closed: give it up.
    Release(RoomName),
}

/// What the fleet task tells the relay's loop.
#[derive(Debug)]
pub(crate) enum FleetNews {
    /// A claim settled.
    Claimed {
        room: RoomName,
        result: Result<Claim, DirectoryError>,
        /// For a room another relay holds, that relay's entry (where its
        /// clients are redirected), if it is registered.
        owner: Option<RelayEntry>,
    },
    /// Another relay holds a room this one runs (its lease lapsed while
    /// it could not renew it): it must stop serving it.
    Lost { room: RoomName, owner: RoomOwner },
}

/// The fleet task, its directory's type erased: it runs until the loop's
/// side of `ops` is gone, then takes the relay's entry out.
pub(crate) type FleetTask = Box<
    dyn FnOnce(
            mpsc::UnboundedReceiver<FleetOp>,
            mpsc::Sender<FleetNews>,
            Arc<Metrics>,
        ) -> Pin<Box<dyn Future<Output = ()> + Send>>
        + Send,
>;

impl<D: Directory> Fleet<D> {
    pub(crate) fn task(self) -> FleetTask {
        Box::new(move |ops, news, metrics| Box::pin(run(self, ops, news, metrics)))
    }
}

async fn run<D: Directory>(
    fleet: Fleet<D>,
    mut ops: mpsc::UnboundedReceiver<FleetOp>,
    news: mpsc::Sender<FleetNews>,
    metrics: Arc<Metrics>,
) {
    let Fleet {
        directory: dir,
        id,
        udp,
        ws,
        lease,
    } = fleet;
    let mut owned: BTreeMap<RoomName, u64> = BTreeMap::new();
    let mut beat = tokio::time::interval(lease / 3);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut said_unavailable = false;
    loop {
        tokio::select! {
            _ = beat.tick() => {
                let entry = RelayEntry {
                    id: id.clone(),
                    udp,
                    ws,
                    clients: u32::try_from(metrics.connections.load(Ordering::Relaxed)).unwrap_or(u32::MAX),
                    rooms: u32::try_from(metrics.rooms.load(Ordering::Relaxed)).unwrap_or(u32::MAX),
                    state: if metrics.draining.load(Ordering::Relaxed) == 0 {
                        RelayState::Ready
                    } else {
                        RelayState::Draining
                    },
                };
                match dir.register(&entry, lease).await {
                    Ok(()) if said_unavailable => {
                        info!(relay = %id, "the room directory answers again");
                        said_unavailable = false;
                    }
                    Ok(()) => {}
                    Err(e) => {
                        if !said_unavailable {
                            warn!(relay = %id, "{e}: running rooms go on, new ones wait");
                        }
                        said_unavailable = true;
                        continue;
                    }
                }
                let rooms: Vec<(RoomName, u64)> = owned.iter().map(|(r, e)| (r.clone(), *e)).collect();
                for (room, epoch) in rooms {
                    match dir.renew(&room, &id, epoch, lease).await {
                        Ok(true) | Err(_) => {}
                        // Not held under our epoch any more: free again (the
                        // directory lost it, as a restarted Redis does) or
                        // someone else's.
                        Ok(false) => match dir.claim(&room, &id, lease).await {
                            Ok(Claim::Ours { epoch }) => {
                                owned.insert(room, epoch);
                            }
                            Ok(Claim::Taken(owner)) => {
                                owned.remove(&room);
                                warn!(room = %room, owner = %owner.relay, "room lost to another relay");
                                let _ = news.send(FleetNews::Lost { room, owner }).await;
                            }
                            Err(_) => {}
                        },
                    }
                }
            }
            op = ops.recv() => match op {
                None => break,
                Some(FleetOp::Claim(room)) => {
                    let result = dir.claim(&room, &id, lease).await;
                    let mut owner = None;
                    match &result {
                        Ok(Claim::Ours { epoch }) => {
                            owned.insert(room.clone(), *epoch);
                        }
                        Ok(Claim::Taken(o)) => {
                            owner = dir.relays().await.ok().and_then(|relays| {
                                relays.into_iter().find(|r| r.id == o.relay)
                            });
                        }
                        Err(_) => {}
                    }
                    let _ = news.send(FleetNews::Claimed { room, result, owner }).await;
                }
                Some(FleetOp::Release(room)) => {
                    if let Some(epoch) = owned.remove(&room) {
                        let _ = dir.release(&room, &id, epoch).await;
                    }
                }
            }
        }
    }
    for (room, epoch) in owned {
        let _ = dir.release(&room, &id, epoch).await;
    }
    let _ = dir.deregister(&id).await;
}
