//! A relay in a fleet: its entry kept in the room directory, the rooms it
//! opens claimed there first.
//!
//! A task beside the relay's loop does every directory call, so the loop
//! never waits on the directory: the loop asks for a room's claim and goes
//! on (the client's Hello, repeated every 250 ms, finds the answer), and
//! hears back when a claim is settled or a room it runs was lost.

use crate::directory::{
    Claim, Directory, DirectoryError, RelayEntry, RelayState, RoomOwner, least_loaded,
};
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
    /// Where clients reach it over UDP (its public address): where other
    /// relays send its rooms' clients. `None`: the address it listens on,
    /// refused at start if that is unspecified (`0.0.0.0`).
    pub udp: Option<SocketAddr>,
    /// Where clients reach it over WebSocket (as `udp`).
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
    /// Fills an address left `None` with the one the relay listens on (as
    /// given to `bind`), and refuses an address clients cannot be sent to:
    /// an unspecified one (`0.0.0.0`, `::`), which a relay listening on
    /// every interface would otherwise register.
    pub(crate) fn reachable_at(
        &mut self,
        udp: Option<SocketAddr>,
        ws: Option<SocketAddr>,
    ) -> Result<(), crate::RelayError> {
        self.udp = self.udp.or(udp);
        self.ws = self.ws.or(ws);
        self.check_reachable(None, None)
    }

    /// Refuses the addresses [`reachable_at`](Self::reachable_at) would
    /// register (with `udp` and `ws` filling those left `None`), without
    /// keeping them.
    pub(crate) fn check_reachable(
        &self,
        udp: Option<SocketAddr>,
        ws: Option<SocketAddr>,
    ) -> Result<(), crate::RelayError> {
        let named = [
            ("UDP", "udp", self.udp.or(udp)),
            ("WebSocket", "ws", self.ws.or(ws)),
        ];
        for (what, flag, at) in named {
            if let Some(at) = at.filter(|a| a.ip().is_unspecified()) {
                return Err(crate::RelayError::Fleet(format!(
                    "the relay listens for {what} on {at}, an address no client can be sent \
                     to: give its public address (Fleet::{flag}, lockstep relay --public-{flag})"
                )));
            }
        }
        Ok(())
    }

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
    /// Place this room, new here (its first client is at the door): on
    /// the relay its ticket names, else the least loaded; claimed for that
    /// relay. A relay that drains or is full places it elsewhere or
    /// nowhere.
    Claim {
        room: RoomName,
        named: Option<String>,
        elsewhere: bool,
        /// The client came over WebSocket (else UDP): only a relay with an
        /// address for it can take the room.
        ws: bool,
    },
    /// The room closed: give it up.
    Release(RoomName),
    /// Register the relay's entry again now (it began to drain).
    Refresh,
}

/// What the fleet task tells the relay's loop.
#[derive(Debug)]
pub(crate) enum FleetNews {
    /// A room was placed.
    Claimed {
        room: RoomName,
        result: Result<Placed, DirectoryError>,
    },
    /// Another relay holds a room this one runs (its lease lapsed while
    /// it could not renew it): it must stop serving it.
    Lost { room: RoomName, owner: RoomOwner },
}

/// Where a new room goes.
#[derive(Debug)]
pub(crate) enum Placed {
    /// Here: claimed for this relay, under this epoch.
    Here(u64),
    /// On another relay (claimed for it, by it or by us), registered with
    /// this entry if it is.
    There(RoomOwner, Option<RelayEntry>),
    /// Nowhere: this relay takes no room now (it drains or is full), and
    /// no other relay does.
    Nowhere,
}

/// Rooms this relay placed on each relay since the last heartbeat, which
/// the directory's figures do not show yet: counted as a client and a room
/// each, so a burst of new rooms spreads instead of all going to the relay
/// that looked least loaded.
type Recent = BTreeMap<String, u32>;

/// Places `room`, new at relay `id`: a room another relay already holds
/// is that relay's; else it is claimed for the relay its ticket `named`
/// (if registered and ready), or the least loaded ready relay (this one
/// on a tie), or this one; only relays with an address for the client's
/// transport (`ws`: WebSocket, else UDP), and a relay that drains or is
/// full (`elsewhere`) never places one on itself.
async fn place<D: Directory>(
    dir: &D,
    id: &str,
    room: &str,
    (named, elsewhere, ws): (Option<&str>, bool, bool),
    recent: &mut Recent,
    lease: Duration,
) -> Result<Placed, DirectoryError> {
    let relays = dir.relays().await?;
    let entry = |relay: &str| relays.iter().find(|r| r.id == relay).cloned();
    let there = |owner: RoomOwner| {
        let at = entry(&owner.relay);
        Placed::There(owner, at)
    };
    let here = async || match dir.claim(room, id, lease).await? {
        Claim::Ours { epoch } => Ok(Placed::Here(epoch)),
        Claim::Taken(owner) => Ok(there(owner)),
    };
    match dir.owner(room).await? {
        Some(owner) if owner.relay != id => return Ok(there(owner)),
        // Placed here by another relay (the client sent on to us) before
        // it knew we drain or are full: given back, and placed elsewhere.
        Some(owner) if elsewhere => {
            dir.release(room, id, owner.epoch).await?;
        }
        // Placed here by another relay, the client sent on to us.
        Some(_) => return here().await,
        None => {}
    }
    // Ready, reachable over the client's transport, and not this relay if
    // it takes no room now.
    let ready = |r: &&RelayEntry| {
        r.state == RelayState::Ready
            && !(elsewhere && r.id == id)
            && if ws { r.ws.is_some() } else { r.udp.is_some() }
    };
    let candidates: Vec<RelayEntry> = relays
        .iter()
        .filter(ready)
        .map(|r| {
            let placed = recent.get(&r.id).copied().unwrap_or(0);
            RelayEntry {
                clients: r.clients.saturating_add(placed),
                rooms: r.rooms.saturating_add(placed),
                ..r.clone()
            }
        })
        .collect();
    let chosen = named.and_then(|n| candidates.iter().find(|r| r.id == n));
    if let (Some(n), None) = (named, chosen) {
        warn!(room = %room, relay = %n, "the ticket names a relay that is not ready: placed by load");
    }
    let target = chosen
        .or_else(|| least_loaded(&candidates, Some(id)))
        .map(|r| r.id.clone());
    if let Some(t) = &target {
        *recent.entry(t.clone()).or_default() += 1;
    }
    let target = match target {
        Some(t) => t,
        None if elsewhere => return Ok(Placed::Nowhere),
        // Not registered yet (or the directory just lost its entries).
        None => id.to_owned(),
    };
    if target == id {
        return here().await;
    }
    Ok(match dir.claim(room, &target, lease).await? {
        Claim::Ours { epoch } => there(RoomOwner {
            relay: target,
            epoch,
        }),
        // Claimed meanwhile, maybe for us by another relay.
        Claim::Taken(owner) if owner.relay == id => here().await?,
        Claim::Taken(owner) => there(owner),
    })
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
    let mut recent = Recent::new();
    loop {
        tokio::select! {
            _ = beat.tick() => {
                // Every relay's figures are at most a heartbeat old now.
                recent.clear();
                let entry = RelayEntry {
                    id: id.clone(),
                    udp,
                    ws,
                    clients: u32::try_from(metrics.connections.load(Ordering::Relaxed)).unwrap_or(u32::MAX),
                    rooms: u32::try_from(metrics.rooms.load(Ordering::Relaxed)).unwrap_or(u32::MAX),
                    state: if metrics.draining.load(Ordering::Relaxed) != 0 {
                        RelayState::Draining
                    } else if metrics.full.load(Ordering::Relaxed) != 0 {
                        RelayState::Full
                    } else {
                        RelayState::Ready
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
                Some(FleetOp::Claim { room, named, elsewhere, ws }) => {
                    let asked = (named.as_deref(), elsewhere, ws);
                    let result = place(&dir, &id, &room, asked, &mut recent, lease).await;
                    if let Ok(Placed::Here(epoch)) = result {
                        owned.insert(room.clone(), epoch);
                    }
                    let _ = news.send(FleetNews::Claimed { room, result }).await;
                }
                Some(FleetOp::Release(room)) => {
                    if let Some(epoch) = owned.remove(&room) {
                        let _ = dir.release(&room, &id, epoch).await;
                    }
                }
                // The heartbeat, at once.
                Some(FleetOp::Refresh) => beat.reset_immediately(),
            }
        }
    }
    for (room, epoch) in owned {
        let _ = dir.release(&room, &id, epoch).await;
    }
    let _ = dir.deregister(&id).await;
}
