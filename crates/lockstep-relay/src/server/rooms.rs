//! The rooms: each one's datagrams sent as it produces them, its events
//! acted on, its timers kept in order, and rooms closed when empty.

use super::*;

/// Where datagrams leave, borrowed apart from the rooms so a room's
/// datagrams go out as it produces them.
pub(super) struct Outbox<'a> {
    pub(super) udp: Option<&'a UdpSocket>,
    pub(super) ws_out: &'a HashMap<u64, mpsc::Sender<Vec<u8>>>,
    pub(super) sealed: &'a mut HashMap<u64, SealedConn>,
    pub(super) scratch: &'a mut Vec<u8>,
    pub(super) metrics: &'a Metrics,
}

impl Outbox<'_> {
    fn send(&mut self, key: ConnKey, bytes: &[u8]) {
        let udp = |bytes: &[u8], addr| self.udp.is_some_and(|s| s.try_send_to(bytes, addr).is_ok());
        let (sent, len) = match key {
            ConnKey::Udp(addr) => (udp(bytes, addr), bytes.len()),
            ConnKey::Ws(id) => (
                self.ws_out
                    .get(&id)
                    .is_some_and(|tx| tx.try_send(bytes.to_vec()).is_ok()),
                bytes.len(),
            ),
            ConnKey::Sealed(id) => match self.sealed.get_mut(&id) {
                Some(c) => {
                    self.scratch.clear();
                    c.channel.seal(bytes, self.scratch);
                    (udp(self.scratch, c.addr), self.scratch.len())
                }
                None => (false, 0),
            },
        };
        if sent {
            self.metrics.datagrams_out.fetch_add(1, Ordering::Relaxed);
            self.metrics
                .bytes_out
                .fetch_add(len as u64, Ordering::Relaxed);
        } else {
            self.metrics.dropped_out.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Core {
    /// Files room `name` under its next timeout, so finding due rooms costs
    /// a lookup, not a scan of every room.
    pub(super) fn schedule(&mut self, name: &str) {
        let Some(room) = self.rooms.get_mut(name) else {
            return;
        };
        let due = room.engine.poll_timeout().map(|t| t.as_micros());
        if room.scheduled == due {
            return;
        }
        if let Some(old) = room.scheduled.take() {
            self.deadlines.remove(&(old, room.name.clone()));
        }
        if let Some(t) = due {
            self.deadlines.insert((t, room.name.clone()));
        }
        room.scheduled = due;
    }

    pub(super) fn deliver(&mut self, peer: PeerId, room: &str, bytes: &[u8]) {
        let now = self.now();
        if let Some(r) = self.rooms.get_mut(room) {
            let started = std::time::Instant::now();
            if let Err(e) = r.engine.handle_datagram(peer, bytes, now) {
                debug!(%peer, room = %room, "datagram refused: {e}");
            }
            self.flush(room, started);
        }
    }

    pub(super) fn send(&mut self, key: ConnKey, bytes: &[u8]) {
        Outbox {
            udp: self.udp.as_deref(),
            ws_out: &self.ws_out,
            sealed: &mut self.sealed,
            scratch: &mut self.crypt,
            metrics: &self.metrics,
        }
        .send(key, bytes);
    }

    /// Sends everything room `name` has to send and acts on its events.
    /// `started` is when the call that may have sealed a tick began: the
    /// seal-to-last-send latency is measured from there.
    pub(super) fn flush(&mut self, name: &str, started: std::time::Instant) {
        let Self {
            rooms,
            keys,
            udp,
            ws_out,
            sealed,
            crypt,
            metrics,
            buf,
            disk,
            ..
        } = self;
        let Some(room) = rooms.get_mut(name) else {
            return;
        };
        // A failover room names every UDP connection's address in its
        // roster (where the others reach it if the relay goes), as it
        // changes.
        share_contacts(room, keys, sealed);
        let mut out = Outbox {
            udp: udp.as_deref(),
            ws_out,
            sealed,
            scratch: crypt,
            metrics,
        };
        while let Some(t) = room.engine.poll_transmit(buf) {
            if let Some(key) = keys.get(&t.destination) {
                out.send(*key, &buf[..t.len]);
            }
        }
        let (closed, resumed) = take_events(name, room, metrics);
        count_ticks(room, metrics, started);
        if let Some(disk) = disk.as_mut() {
            let stopped = crate::record::feed(disk, name, &room.engine, &mut room.recording);
            report_recording(name, stopped, metrics);
        }
        // A seat taken back: its old address is nobody's now.
        for previous in resumed {
            self.forget(previous);
        }
        // Forget connections whose goodbye or error has gone out.
        for peer in closed {
            let connected = self
                .rooms
                .get(name)
                .is_some_and(|r| r.engine.is_connected(peer));
            if !connected {
                self.forget(peer);
            }
        }
        self.schedule(name);
    }

    pub(super) fn forget(&mut self, peer: PeerId) {
        let ip = match self.keys.remove(&peer) {
            Some(ConnKey::Sealed(id)) => {
                self.retired.insert(id, std::time::Instant::now());
                self.sealed.remove(&id).map(|c| c.counted)
            }
            Some(key) => {
                self.conns.remove(&key);
                match key {
                    ConnKey::Ws(id) => {
                        self.ws_out.remove(&id);
                        None
                    }
                    ConnKey::Udp(addr) => Some(limit_key(addr.ip())),
                    ConnKey::Sealed(_) => None,
                }
            }
            None => None,
        };
        // Uncounted where it was counted: where the connection was made.
        if let Some(ip) = ip
            && let Some(n) = self.udp_by_ip.get_mut(&ip)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.udp_by_ip.remove(&ip);
            }
        }
    }

    /// A WebSocket closed: its seat is freed at once.
    pub(super) fn ws_closed(&mut self, id: u64) {
        self.ws_out.remove(&id);
        if let Some((peer, room)) = self.conns.get(&ConnKey::Ws(id)).cloned() {
            if let Some(r) = self.rooms.get_mut(&room) {
                r.engine.disconnect(peer);
            }
            self.flush(&room, std::time::Instant::now());
            self.forget(peer);
        }
    }

    pub(super) fn timers(&mut self) {
        let now = self.now();
        if let Some((due, _)) = self.deadlines.first() {
            let late = now.as_micros().saturating_sub(*due);
            self.metrics.loop_lag_us.store(late, Ordering::Relaxed);
        }
        while self
            .deadlines
            .first()
            .is_some_and(|(t, _)| *t <= now.as_micros())
        {
            let Some((_, name)) = self.deadlines.pop_first() else {
                break;
            };
            let started = std::time::Instant::now();
            if let Some(r) = self.rooms.get_mut(&name) {
                r.scheduled = None;
                r.engine.handle_timeout(now);
            }
            self.flush(&name, started);
        }
        if self.last_housekeeping.elapsed() >= Duration::from_secs(1) {
            self.housekeeping();
        }
    }

    pub(super) fn housekeeping(&mut self) {
        self.note_full();
        self.last_housekeeping = std::time::Instant::now();
        self.fleet_housekeeping();
        self.ledger.forget_expired(unix_now());
        // A retired id's cookie has expired: its Hello cannot come back.
        let cookie_life = admission::COOKIE_LIFETIME + Duration::from_secs(2);
        self.retired.retain(|_, at| at.elapsed() < cookie_life);
        self.stranger_replies.tidy();
        self.handshakes.tidy();
        // Connections whose room closed them without an event reaching us.
        let plain = self.conns.values().map(|(p, room)| (*p, room));
        let sealed = self.sealed.values().map(|c| (c.peer, &c.room));
        let stale: Vec<PeerId> = plain
            .chain(sealed)
            .filter(|(p, room)| {
                !self
                    .rooms
                    .get(*room)
                    .is_some_and(|r| r.engine.is_connected(*p))
            })
            .map(|(p, _)| p)
            .collect();
        for p in stale {
            self.forget(p);
        }
        let (mut players, mut spectators, mut delay_max) = (0, 0, 0);
        let (mut remove, mut over) = (Vec::new(), Vec::new());
        for (name, r) in &mut self.rooms {
            let st = r.engine.stats();
            players += st.players as u64;
            spectators += st.spectators as u64;
            if st.players > 0 {
                delay_max = delay_max.max(u64::from(st.delay));
            }
            let now = (
                st.delay_changes,
                st.datagrams_lost_in,
                st.datagrams_lost_out,
            );
            let was = std::mem::replace(&mut r.reported, now);
            let m = &self.metrics;
            m.delay_changes
                .fetch_add(now.0.saturating_sub(was.0), Ordering::Relaxed);
            m.lost_in
                .fetch_add(now.1.saturating_sub(was.1), Ordering::Relaxed);
            m.lost_out
                .fetch_add(now.2.saturating_sub(was.2), Ordering::Relaxed);
            // A room goes once empty: a match ends with its last player,
            // and the next client under its name starts a new one (a
            // declared room keeps its settings for it). Spectators left
            // when the last player went are told the match is over, once
            // they have its last frames (watching with a delay, they lag;
            // one that never catches up is told after `SPECTATORS_DRAIN`).
            if r.engine.is_empty() {
                remove.push(name.clone());
            } else if r.engine.match_over() {
                let since = *r.over_since.get_or_insert_with(std::time::Instant::now);
                if !r.engine.spectators_behind() || since.elapsed() >= SPECTATORS_DRAIN {
                    over.push(name.clone());
                }
            }
        }
        for name in over {
            self.close_room(&name, "the match is over");
        }
        for name in remove {
            info!(room = %name, "empty room closed");
            self.forget_room(&name);
        }
        self.metrics
            .rooms
            .store(self.rooms.len() as u64, Ordering::Relaxed);
        let connections = self.conns.len() + self.sealed.len();
        self.metrics
            .connections
            .store(connections as u64, Ordering::Relaxed);
        self.metrics.players.store(players, Ordering::Relaxed);
        self.metrics.spectators.store(spectators, Ordering::Relaxed);
        self.metrics.delay_max.store(delay_max, Ordering::Relaxed);
    }

    /// Removes room `name` and its place in the deadline index, and
    /// finishes its recording.
    pub(super) fn forget_room(&mut self, name: &RoomName) {
        if let Some(mut r) = self.rooms.remove(name) {
            self.fleet_release(name);
            if let Some(t) = r.scheduled {
                self.deadlines.remove(&(t, name.clone()));
            }
            finish_recording(name, &mut r.recording, &self.metrics);
        }
    }

    /// Drains for a shutdown, for at most `deadline_in`: no new rooms,
    /// `/readyz` fails and a fleet's directory says `draining`; running
    /// matches go on, and the relay stops once the last room closes.
    pub(super) fn begin_drain(&mut self, deadline_in: Duration) {
        self.draining = Some(std::time::Instant::now() + deadline_in);
        self.metrics.draining.store(1, Ordering::Relaxed);
        // The fleet hears of it now, not at the next heartbeat: other
        // relays stop placing rooms here.
        self.fleet_refresh();
        info!(
            rooms = self.rooms.len(),
            secs = deadline_in.as_secs(),
            "draining: no new rooms; stopping once the last one closes"
        );
    }

    /// Closes room `name` now, telling whoever is still connected `why`
    /// (spectators of a match that is over, players of a room that moved).
    pub(super) fn close_room(&mut self, name: &RoomName, why: &str) {
        if let Some(r) = self.rooms.get_mut(name) {
            r.engine.shutdown(why);
        }
        self.flush(name, std::time::Instant::now());
        info!(room = %name, "room closed: {why}");
        self.forget_room(name);
    }

    pub(super) fn shutdown(&mut self, goodbye: bool) -> RelayReport {
        let names: Vec<RoomName> = self.rooms.keys().cloned().collect();
        for name in names.iter().filter(|_| goodbye) {
            if let Some(r) = self.rooms.get_mut(name) {
                let before = r.engine.stats();
                self.said_goodbye += (before.players + before.spectators) as u64;
                r.engine.shutdown("the server is shutting down");
            }
            self.flush(name, std::time::Instant::now());
        }
        for (name, room) in &mut self.rooms {
            finish_recording(name, &mut room.recording, &self.metrics);
        }
        // What is queued reaches the disk before the relay says it stopped.
        if let Some(disk) = self.disk.take() {
            disk.stop();
        }
        RelayReport {
            ticks: self.metrics.ticks.load(Ordering::Relaxed),
            datagrams_in: self.metrics.datagrams_in.load(Ordering::Relaxed),
            datagrams_out: self.metrics.datagrams_out.load(Ordering::Relaxed),
            rejects: self.metrics.rejects.load(Ordering::Relaxed),
            violations: self.metrics.violations.load(Ordering::Relaxed),
            said_goodbye: self.said_goodbye,
        }
    }
}

/// Tells a room that shares its roster (failover) where each UDP
/// connection is, when that changed.
fn share_contacts(
    room: &mut Room,
    keys: &HashMap<PeerId, ConnKey>,
    sealed: &HashMap<u64, SealedConn>,
) {
    if !room.engine.shares_roster() {
        return;
    }
    let peers = room.engine.connections();
    room.contacts.retain(|p, _| peers.contains(p));
    for peer in peers {
        let addr = match keys.get(&peer) {
            Some(ConnKey::Udp(a)) => Some(*a),
            Some(ConnKey::Sealed(id)) => sealed.get(id).map(|c| c.addr),
            _ => None,
        };
        if let Some(a) = addr
            && room.contacts.get(&peer) != Some(&a)
        {
            room.contacts.insert(peer, a);
            room.engine.set_contact(peer, a.to_string().as_bytes());
        }
    }
}

/// A room's events, logged and counted: returns the connections closed,
/// and those a seat moved away from.
fn take_events(name: &str, room: &mut Room, metrics: &Metrics) -> (Vec<PeerId>, Vec<PeerId>) {
    let mut closed = Vec::new();
    let mut resumed = Vec::new();
    while let Some(ev) = room.engine.poll_event() {
        match ev {
            SequencerEvent::Joined {
                peer,
                seat,
                tick,
                name: who,
            } => {
                info!(room = %name, %peer, ?seat, %tick, who = %who, "joined");
            }
            SequencerEvent::Resumed {
                peer,
                previous,
                seat,
            } => {
                info!(room = %name, %peer, ?previous, ?seat, "resumed");
                resumed.extend(previous);
            }
            SequencerEvent::Rejected { peer, reason } => {
                info!(room = %name, %peer, "refused: {reason}");
                metrics.rejects.fetch_add(1, Ordering::Relaxed);
            }
            SequencerEvent::Closed {
                peer,
                seat,
                tick,
                reason,
            } => {
                match &reason {
                    DropReason::Violation(code, text) => {
                        warn!(room = %name, %peer, ?code, "dropped: {text}");
                        metrics.violations.fetch_add(1, Ordering::Relaxed);
                    }
                    other => info!(room = %name, %peer, ?seat, %tick, "left: {other:?}"),
                }
                closed.push(peer);
            }
            SequencerEvent::SeatReleased { seat, tick } => {
                info!(room = %name, %seat, %tick, "seat given up: its player did not come back");
            }
            SequencerEvent::ChecksumSplit { tick, hashes } => {
                warn!(room = %name, %tick, hashes, "checksums split with no majority");
                metrics.desyncs.fetch_add(1, Ordering::Relaxed);
            }
            SequencerEvent::Desync {
                tick,
                peer,
                expected,
                got,
            } => {
                warn!(room = %name, %peer, %tick, "desync: expected {expected:016x}, got {got:016x}");
                metrics.desyncs.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
    (closed, resumed)
}

/// How long spectators of a match that is over have to take its last
/// frames before the room closes on them.
pub(super) const SPECTATORS_DRAIN: Duration = Duration::from_secs(10);

/// Says in the log, and in the metrics, why a recording stopped early.
fn report_recording(name: &str, stopped: Option<crate::record::Stopped>, metrics: &Metrics) {
    use crate::record::Stopped;
    match stopped {
        None => {}
        Some(Stopped::Cap(bytes)) => {
            warn!(room = %name, bytes, "recording finished at its cap (record.max_mib): the match plays on unrecorded");
        }
        Some(Stopped::Failed(e)) => {
            metrics.recording_failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(room = %name, "recording stopped: {e} (the match plays on unrecorded)");
        }
    }
}

/// Finishes a room's recording, if it has one going.
fn finish_recording(name: &str, recording: &mut crate::record::RoomRecording, metrics: &Metrics) {
    use crate::record::{RoomRecording, Stopped};
    let result = match std::mem::replace(recording, RoomRecording::Done) {
        RoomRecording::Opaque(mut r) => r.finish(),
        RoomRecording::Player(mut r) => r.finish(),
        RoomRecording::Waiting | RoomRecording::Done => return,
    };
    match result {
        Ok(()) => {
            metrics.recordings.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => report_recording(name, Some(Stopped::Failed(e)), metrics),
    }
}

/// Counts the ticks a room sealed and the stalls it began, and how long
/// sending a newly sealed tick took from `started`.
fn count_ticks(room: &mut Room, metrics: &Metrics, started: std::time::Instant) {
    let (sealed, stalls) = room.engine.counters();
    metrics
        .ticks
        .fetch_add(sealed - room.sealed, Ordering::Relaxed);
    metrics
        .stalls
        .fetch_add(stalls - room.stalls, Ordering::Relaxed);
    if sealed > room.sealed {
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        metrics.observe_latency(us);
    }
    room.sealed = sealed;
    room.stalls = stalls;
}
