//! The relay loop's side of a fleet: a room is claimed in the directory
//! before it opens, given up when it closes, closed if another relay took
//! it over.

use super::Core;
use crate::directory::{RelayEntry, RoomOwner};
use crate::fleet::{FleetNews, FleetOp, Placed};
use crate::room::RoomName;
use lockstep_core::secure;
use lockstep_core::secure::SecureChannel;
use lockstep_core::wire::RejectReason;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::{info, warn};

/// Claims asked of the directory and not yet settled, at most: a Hello for
/// yet another new room meanwhile is refused as if the relay were full.
pub(super) const MAX_CLAIMS: usize = 256;

/// How long a settled claim waits for its client's next Hello (sent every
/// 250 ms) before it is forgotten (a claim of ours given back), and how
/// long an unsettled one may take before the room is claimed again.
const CLAIM_KEPT: Duration = Duration::from_secs(2);

/// Where a room's claim stands.
#[derive(Debug)]
enum ClaimState {
    /// Asked; the directory has not answered.
    Asked,
    /// Ours: the room may open.
    Ours,
    /// Another relay's, and where that relay is (if registered).
    Taken(RoomOwner, Option<RelayEntry>),
    /// Nowhere: this relay drains and no other relay takes rooms.
    Nowhere,
    /// The directory could not be reached.
    Unavailable,
}

/// The loop's link to the fleet task.
#[derive(Debug)]
pub(super) struct FleetLink {
    ops: mpsc::UnboundedSender<FleetOp>,
    claims: HashMap<RoomName, (ClaimState, Instant)>,
}

impl FleetLink {
    pub(super) fn new(ops: mpsc::UnboundedSender<FleetOp>) -> Self {
        Self {
            ops,
            claims: HashMap::new(),
        }
    }
}

/// The Hello a reply answers: its size, and the keys its handshake
/// derived (UDP with a key).
#[derive(Debug, Clone, Copy)]
pub(super) struct HelloAt<'a> {
    /// The Hello datagram's length.
    pub(super) len: usize,
    /// The sealed connection's keys, for a Hello that offered one.
    pub(super) channel: Option<&'a SecureChannel>,
    /// The relay of the fleet its ticket names, if any.
    pub(super) relay: Option<&'a str>,
}

/// What the Hello for a room the relay does not run gets.
pub(super) enum Door {
    /// The room is ours: open it.
    Open,
    /// Not yet known (the Hello goes unanswered; the next one learns), or
    /// refused (already answered).
    Closed,
}

impl Core {
    /// In a fleet, whether room `room` may open here for the client at
    /// `key`: claimed first, the client refused if another relay holds it
    /// or the directory cannot be reached.
    pub(super) fn fleet_door(
        &mut self,
        key: super::ConnKey,
        hello: HelloAt<'_>,
        room: &RoomName,
    ) -> Door {
        let elsewhere = self.draining.is_some() || self.full();
        let Some(f) = &mut self.fleet else {
            return Door::Open;
        };
        let now = Instant::now();
        let state = f
            .claims
            .get(room)
            .filter(|(_, at)| now.duration_since(*at) < CLAIM_KEPT)
            .map(|(s, _)| s);
        match state {
            Some(ClaimState::Ours) => {
                f.claims.remove(room);
                Door::Open
            }
            Some(ClaimState::Asked) => Door::Closed,
            Some(ClaimState::Taken(owner, entry)) => {
                // Where the owner takes clients of this one's transport.
                let at = entry.as_ref().and_then(|e| match key {
                    super::ConnKey::Ws(_) => e.ws,
                    _ => e.udp,
                });
                info!(room = %room, owner = %owner.relay, ?at, "room is another relay's");
                f.claims.remove(room);
                match at {
                    Some(at) => self.reply_moved(key, hello, at),
                    None => {
                        self.reply_reject(key, RejectReason::Other("the room is on another relay"));
                    }
                }
                Door::Closed
            }
            Some(ClaimState::Nowhere) => {
                f.claims.remove(room);
                let why = if self.draining.is_some() {
                    RejectReason::Other("the relay is draining for a restart: try another")
                } else {
                    RejectReason::ServerFull
                };
                self.reply_reject(key, why);
                Door::Closed
            }
            Some(ClaimState::Unavailable) => {
                f.claims.remove(room);
                self.reply_reject(
                    key,
                    RejectReason::Other("the room directory is unavailable: try again"),
                );
                Door::Closed
            }
            None => {
                let waiting = f
                    .claims
                    .values()
                    .filter(|(s, _)| matches!(s, ClaimState::Asked))
                    .count();
                let op = FleetOp::Claim {
                    room: room.clone(),
                    named: hello.relay.map(str::to_owned),
                    elsewhere,
                    ws: matches!(key, super::ConnKey::Ws(_)),
                };
                if waiting < MAX_CLAIMS && f.ops.send(op).is_ok() {
                    f.claims.insert(room.clone(), (ClaimState::Asked, now));
                } else {
                    self.reply_reject(key, RejectReason::ServerFull);
                }
                Door::Closed
            }
        }
    }

    /// Sends the client at `key` to the relay at `to`: sealed under the
    /// keys its Hello's handshake derived (a client that asked for sealing
    /// takes a redirect no other way), plain over WebSocket or to a plain
    /// UDP client. Never larger than the Hello it answers.
    pub(super) fn reply_moved(&mut self, key: super::ConnKey, hello: HelloAt<'_>, to: SocketAddr) {
        let plain = self.reject_datagram(RejectReason::Moved(to));
        let reply = match hello.channel {
            Some(c) => {
                let mut sealed = Vec::with_capacity(plain.len() + secure::SEALED_OVERHEAD);
                c.seal_reply(&plain, &mut sealed);
                sealed
            }
            None => plain,
        };
        if matches!(key, super::ConnKey::Udp(_)) && reply.len() > hello.len {
            // Never an answer larger than the question (a Hello padded as
            // clients pad it always has room).
            self.ignore();
            return;
        }
        self.metrics.redirects.fetch_add(1, Ordering::Relaxed);
        self.send_answer(key, &reply);
    }

    /// Whether the relay is at its `max_rooms` or `max_connections`.
    pub(super) fn full(&self) -> bool {
        let limits = &self.config.limits;
        self.rooms.len() >= limits.max_rooms
            || self.conns.len() + self.sealed.len() >= limits.max_connections
    }

    /// Keeps the `full` gauge, and a fleet's entry, up to date: a relay
    /// that fills up registers as full at once, so other relays stop
    /// placing rooms on it.
    pub(super) fn note_full(&mut self) {
        let full = u64::from(self.full());
        if self.metrics.full.swap(full, Ordering::Relaxed) != full {
            self.fleet_refresh();
        }
    }

    /// This relay's entry is registered again now (its state changed).
    pub(super) fn fleet_refresh(&mut self) {
        if let Some(f) = &mut self.fleet {
            let _ = f.ops.send(FleetOp::Refresh);
        }
    }

    /// The room closed here: the directory is told.
    pub(super) fn fleet_release(&mut self, room: &RoomName) {
        if let Some(f) = &mut self.fleet {
            let _ = f.ops.send(FleetOp::Release(room.clone()));
        }
    }

    /// News from the fleet task.
    pub(crate) fn fleet_news(&mut self, news: FleetNews) {
        let now = Instant::now();
        match news {
            FleetNews::Claimed { room, result } => {
                let Some(f) = &mut self.fleet else { return };
                let state = match result {
                    Ok(Placed::Here(_)) => ClaimState::Ours,
                    Ok(Placed::There(owner, entry)) => ClaimState::Taken(owner, entry),
                    Ok(Placed::Nowhere) => ClaimState::Nowhere,
                    Err(e) => {
                        warn!(room = %room, "{e}");
                        ClaimState::Unavailable
                    }
                };
                f.claims.insert(room, (state, now));
            }
            FleetNews::Lost { room, owner } => {
                warn!(room = %room, owner = %owner.relay, "another relay holds this room now");
                self.close_room(&room, "the room moved to another relay");
            }
        }
    }

    /// Forgets settled claims nobody came back for; a room claimed for a
    /// client that never came back (a single Hello, an attacker naming
    /// rooms) is given back, so the directory holds only rooms that run.
    pub(super) fn fleet_housekeeping(&mut self) {
        let Some(f) = &mut self.fleet else { return };
        let now = Instant::now();
        let mut unused = Vec::new();
        f.claims.retain(|room, (state, at)| {
            let keep = now.duration_since(*at) < CLAIM_KEPT;
            if !keep && matches!(state, ClaimState::Ours) {
                unused.push(room.clone());
            }
            keep
        });
        for room in unused {
            if !self.rooms.contains_key(&room) {
                self.fleet_release(&room);
            }
        }
    }
}
