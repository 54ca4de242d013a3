//! The relay loop's side of a fleet: a room is claimed in the directory
//! before it opens, given up when it closes, closed if another relay took
//! it over.

use super::Core;
use crate::directory::{Claim, RoomOwner};
use crate::fleet::{FleetNews, FleetOp};
use crate::room::RoomName;
use lockstep_core::wire::RejectReason;
use std::collections::HashMap;
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
    /// Another relay's.
    Taken(RoomOwner),
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
    pub(super) fn fleet_door(&mut self, key: super::ConnKey, room: &RoomName) -> Door {
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
            Some(ClaimState::Taken(owner)) => {
                info!(room = %room, owner = %owner.relay, "room is another relay's");
                f.claims.remove(room);
                self.reply_reject(key, RejectReason::Other("the room is on another relay"));
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
                if waiting < MAX_CLAIMS && f.ops.send(FleetOp::Claim(room.clone())).is_ok() {
                    f.claims.insert(room.clone(), (ClaimState::Asked, now));
                } else {
                    self.reply_reject(key, RejectReason::ServerFull);
                }
                Door::Closed
            }
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
                    Ok(Claim::Ours { .. }) => ClaimState::Ours,
                    Ok(Claim::Taken(owner)) => ClaimState::Taken(owner),
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
