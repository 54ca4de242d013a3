//! Strangers: a datagram from an address with no connection, screened,
//! its address proven, its ticket checked, and a connection opened in a
//! room; and every answer to a stranger, within its budget.

use super::rooms::SPECTATORS_DRAIN;
use super::*;
use lockstep_core::wire::Hello;

/// A rate over all addresses and one per source IP, for work done for
/// addresses that have not proven much yet.
#[derive(Debug)]
pub(super) struct Budget {
    total: TokenBucket,
    per_ip: IpLimiter,
}

impl Budget {
    pub(super) fn new(total: u32, per_ip: u32) -> Self {
        let per_ip = NonZeroU32::new(per_ip).unwrap_or(NonZeroU32::MIN);
        Self {
            total: TokenBucket::full(total, CoreInstant::ZERO),
            per_ip: RateLimiter::keyed(Quota::per_second(per_ip)),
        }
    }

    /// Takes one unit for `ip` at `now`, if both rates allow. Past
    /// [`TRACKED_ADDRESSES`] new addresses get nothing until housekeeping.
    pub(super) fn take(&mut self, ip: IpAddr, now: CoreInstant) -> bool {
        self.per_ip.len() < TRACKED_ADDRESSES
            && self.total.take(1, now)
            && self.per_ip.check_key(&ip).is_ok()
    }

    pub(super) fn tidy(&self) {
        self.per_ip.retain_recent();
        self.per_ip.shrink_to_fit();
    }
}

pub(super) type IpLimiter = RateLimiter<IpAddr, DefaultKeyedStateStore<IpAddr>, DefaultClock>;

/// A sealed Hello's client key and binding (what it asked for).
type HelloKeys = ([u8; 32], [u8; 32]);

/// Ended sealed connections remembered at once; past it, new sealed
/// connections wait until housekeeping forgets old ones.
pub(super) const RETIRED_IDS: usize = 100_000;

/// Source addresses whose reply rate is tracked at once; beyond it, new
/// addresses get no answer until housekeeping forgets quiet ones.
pub(super) const TRACKED_ADDRESSES: usize = 65_536;

/// The bytes of `addr` a cookie is bound to.
pub(super) fn addr_bytes(addr: SocketAddr) -> ([u8; 18], usize) {
    let mut out = [0u8; 18];
    let n = match addr.ip() {
        IpAddr::V4(ip) => {
            out[..4].copy_from_slice(&ip.octets());
            4
        }
        IpAddr::V6(ip) => {
            out[..16].copy_from_slice(&ip.octets());
            16
        }
    };
    out[n..n + 2].copy_from_slice(&addr.port().to_le_bytes());
    (out, n + 2)
}

/// The key a per-address limit counts `ip` under: an IPv6 address by its
/// /64 (one subscriber's network), an IPv4 address whole.
pub(super) fn limit_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Core {
    /// A datagram from an address with no connection: it must open one.
    ///
    /// Until a UDP address has echoed a cookie minted for it, the relay keeps
    /// nothing for it and answers at most once per datagram, never with more
    /// bytes than it received, never to an answer, and at a bounded rate.
    pub(super) fn stranger(&mut self, key: ConnKey, bytes: &[u8]) {
        let n = bytes.len();
        let hello = match admission::screen_stranger(bytes, self.config.limits.max_message) {
            Ok((_, hello)) => hello,
            Err(unwelcome) => {
                if let Unwelcome::Version(_) = unwelcome {
                    self.metrics.rejects.fetch_add(1, Ordering::Relaxed);
                }
                return self.answer_unwelcome(key, n, &unwelcome);
            }
        };
        let now = self.now();
        let channel = match key {
            ConnKey::Udp(addr) => match self.prove_udp(key, addr, &hello, n, now) {
                Some(channel) => channel,
                None => return,
            },
            _ => None,
        };
        if matches!(key, ConnKey::Ws(_)) && (hello.cookie.is_some() || hello.key.is_some()) {
            // A resume proof is bound to a cookie and key: over a transport
            // that checks neither, someone else's would pass.
            return self.reply_reject(
                key,
                RejectReason::Other("cookies and keys are for UDP; leave them out over WebSocket"),
            );
        }
        // The address is proven (UDP) or came through a TCP handshake
        // (WebSocket): from here on the relay may keep state for it.
        let existing: Option<RoomName> = self.rooms.get(hello.room).map(|r| r.name.clone());
        let Some(to_spend) = self.check_ticket(key, &hello, existing.as_ref(), now) else {
            return;
        };
        // Full, a relay of a fleet still places a new room elsewhere.
        let placeable = self.fleet.is_some() && existing.is_none();
        if self.conns.len() + self.sealed.len() >= self.config.limits.max_connections && !placeable
        {
            return self.reply_reject(key, RejectReason::ServerFull);
        }
        let at = fleet::HelloAt {
            len: n,
            channel: channel.as_ref().map(|(c, _)| c),
            relay: to_spend.as_ref().and_then(|t| t.relay.as_deref()),
        };
        let Some(room) = self.room_for(key, &hello, at, existing, now) else {
            return;
        };
        let issued = sealed::cookie_issued(hello.cookie.unwrap_or_default());
        let channel =
            channel.map(|(c, binding)| (c, (hello.key.unwrap_or_default(), binding), issued));
        self.open_connection(key, bytes, room, channel, to_spend, now);
    }

    /// A UDP Hello from `addr`: without a cookie minted for that address
    /// it is challenged (and nothing kept); with one, and a key, its sealed
    /// connection's keys, within the handshake budget and the per-address
    /// cap. `None`: it was answered, refused or ignored here; `Some(None)`:
    /// it goes on plain; `Some(Some(..))`: sealed, with the keys and what
    /// the Hello asked for (the keys' binding).
    fn prove_udp(
        &mut self,
        key: ConnKey,
        addr: SocketAddr,
        hello: &Hello<'_>,
        n: usize,
        now: CoreInstant,
    ) -> Option<Option<(SecureChannel, [u8; 32])>> {
        // What a keyed Hello asks for: its keys are bound to it (worked
        // out on the path that needs it, once).
        let binding = || secure::hello_binding(hello);
        let (a, len) = addr_bytes(addr);
        let proven = hello
            .cookie
            .filter(|c| self.validator.check(&a[..len], c, now));
        let Some(cookie) = proven else {
            // The budget first: the challenge's key costs an X25519.
            if !self.may_answer(key) {
                {
                    self.ignore();
                    return None;
                }
            }
            let cookie = self.validator.cookie(&a[..len], now);
            let server_key = hello.key.and_then(|k| {
                self.metrics.handshakes.fetch_add(1, Ordering::Relaxed);
                self.validator.handshake(&cookie, &k, &binding()).ok()
            });
            let server_key = server_key.map(|(public, _)| public);
            self.metrics.challenges.fetch_add(1, Ordering::Relaxed);
            let challenge = Message::Challenge {
                cookie: &cookie,
                key: server_key,
            };
            {
                self.answer_now(key, n, &challenge);
                return None;
            }
        };
        if hello.key.is_some() {
            if !self.handshakes.take(limit_key(addr.ip()), now) {
                {
                    self.ignore();
                    return None;
                }
            }
            self.metrics.handshakes.fetch_add(1, Ordering::Relaxed);
        }
        let binding = binding();
        match hello
            .key
            .map(|k| self.validator.handshake(cookie, &k, &binding))
        {
            Some(Ok((_, c))) => {
                // The client resends its Hello until the Welcome comes:
                // the same cookie and key name the same connection. The
                // plain datagram itself never reaches the room (anyone
                // who saw it could add messages): the Welcome is sent
                // again, sealed, until the client has sealed anything.
                if let Some(open) = self.sealed.get(&c.id()) {
                    let (peer, room, confirmed) = (open.peer, open.room.clone(), open.confirmed);
                    if confirmed || !self.may_answer(key) {
                        {
                            self.ignore();
                            return None;
                        }
                    }
                    if let Some(r) = self.rooms.get_mut(&room) {
                        r.engine.resend_welcome(peer);
                    }
                    {
                        self.flush(&room, std::time::Instant::now());
                        return None;
                    }
                }
                if let Some((old, issued)) =
                    hello.key.and_then(|k| self.unconfirmed(addr, k, &binding))
                {
                    // Keys from an older cookie than the connection's are
                    // a late Hello: the client moved on from them.
                    if sealed::cookie_issued(cookie) > issued {
                        self.rekey(old, c, cookie);
                    } else {
                        self.ignore();
                    }
                    return None;
                }
                if self.retired.contains_key(&c.id()) || self.retired.len() >= RETIRED_IDS {
                    {
                        self.ignore();
                        return None;
                    }
                }
                let ip = limit_key(addr.ip());
                if self.udp_by_ip.get(&ip).copied().unwrap_or(0)
                    >= self.config.limits.max_udp_per_addr
                {
                    {
                        self.reply_reject(
                            key,
                            RejectReason::Other("too many connections from your address"),
                        );
                        return None;
                    }
                }
                return Some(Some((c, binding)));
            }
            Some(Err(_)) => {
                self.ignore();
                return None;
            }
            None if !self.config.plain_udp => {
                self.reply_reject(
                    key,
                    RejectReason::Other(
                        "this relay takes sealed datagrams only: give the client a secret",
                    ),
                );
                return None;
            }
            None => {}
        }
        Some(None)
    }

    /// The Hello's ticket, checked (unless it takes a seat back with its
    /// token, which is its credential): `None` when it was refused,
    /// `Some(ticket)` to spend once the connection opens.
    fn check_ticket(
        &mut self,
        key: ConnKey,
        hello: &Hello<'_>,
        existing: Option<&RoomName>,
        now: CoreInstant,
    ) -> Option<Option<Verified>> {
        // A ticket checked for the connection being opened, spent if it opens.
        let mut to_spend: Option<Verified> = None;
        // A seat taken back with its resume token needs no ticket: the
        // token is the credential (the ticket may have expired meanwhile).
        let resuming = existing
            .and_then(|r| self.rooms.get(r))
            .is_some_and(|r| r.engine.would_resume(hello, now));
        if !self.ticket_keys.is_empty() && !resuming {
            let role = if hello.spectator {
                Role::Spectator
            } else {
                Role::Player
            };
            let unix = unix_now();
            let checked = ticket::verify(
                &self.ticket_keys,
                hello.ticket,
                hello.room,
                hello.name,
                role,
                unix,
            )
            .and_then(|t| {
                self.ledger.check(&t, unix)?;
                Ok(t)
            });
            match checked {
                Ok(t) => to_spend = Some(t),
                Err(e) => {
                    info!(?key, room = %hello.room, name = %hello.name, "ticket refused: {e}");
                    self.metrics.bad_tickets.fetch_add(1, Ordering::Relaxed);
                    {
                        self.reply_reject(key, RejectReason::BadTicket);
                        return None;
                    }
                }
            }
        }
        Some(to_spend)
    }

    /// The unconfirmed sealed connection from `addr` made with client key
    /// `key` for a Hello asking for `hello`, if any. A handshake from there
    /// with that key and Hello under another
    /// cookie is the same client, which answered a later challenge (its
    /// first Hellos went unanswered long enough for the cookie's second to
    /// change, and both challenges came back) and has forgotten the first
    /// keys: the connection takes the new keys (see [`rekey`](Self::rekey));
    /// opening a second one would seat the client twice, the first seat
    /// one nobody plays. Only until the client seals a datagram: a
    /// confirmed connection never changes keys.
    /// Returns its id and when its cookie was minted.
    fn unconfirmed(&self, addr: SocketAddr, key: [u8; 32], hello: &[u8; 32]) -> Option<(u64, u32)> {
        self.sealed
            .iter()
            .find(|(_, c)| {
                !c.confirmed && c.addr == addr && c.client_key == key && c.hello == *hello
            })
            .map(|(id, c)| (*id, c.cookie_issued))
    }

    /// Sealed connection `old` (see [`unconfirmed`](Self::unconfirmed))
    /// takes `channel`'s keys, made with `cookie`, and its Welcome goes
    /// again under them.
    fn rekey(&mut self, old: u64, channel: SecureChannel, cookie: &[u8]) {
        let Some(mut conn) = self.sealed.remove(&old) else {
            return;
        };
        self.retired.insert(old, std::time::Instant::now());
        let id = channel.id();
        conn.channel = channel;
        conn.cookie_issued = sealed::cookie_issued(cookie);
        let (peer, room, addr) = (conn.peer, conn.room.clone(), conn.addr);
        self.sealed.insert(id, conn);
        self.keys.insert(peer, ConnKey::Sealed(id));
        info!(%peer, %addr, "handshake redone under a newer cookie: same connection, new keys");
        if let Some(r) = self.rooms.get_mut(&room) {
            r.engine.resend_welcome(peer);
        }
        self.flush(&room, std::time::Instant::now());
    }

    /// The room the Hello names, opened with its first client if it may
    /// be; `None` when the client was refused.
    fn room_for(
        &mut self,
        key: ConnKey,
        hello: &Hello<'_>,
        at: fleet::HelloAt<'_>,
        existing: Option<RoomName>,
        now: CoreInstant,
    ) -> Option<RoomName> {
        let room: RoomName = existing.unwrap_or_else(|| hello.room.into());
        // A match whose last player left is over, even before housekeeping
        // closes its room: the name starts a new match, once spectators
        // watching with a delay have its last frames (`SPECTATORS_DRAIN` at
        // most). Meanwhile a UDP Hello goes unanswered and the client says
        // it again; a WebSocket one, which must be answered within
        // `ws_hello_timeout_secs`, ends the drain.
        if let Some(r) = self.rooms.get(&room).filter(|r| r.engine.match_over()) {
            let draining = r.engine.spectators_behind()
                && r.over_since.is_none_or(|t| t.elapsed() < SPECTATORS_DRAIN);
            if draining && !matches!(key, ConnKey::Ws(_)) {
                return None;
            }
            self.close_room(&room, "the match is over");
        }
        if !self.rooms.contains_key(&room) {
            // Rooms, declared ones too, open with their first client, in the
            // input codec it speaks, and close when empty.
            let declared = self.config.rooms.iter().any(|r| *r.name == *room);
            if !declared && !self.config.on_demand() {
                {
                    self.reply_reject(key, RejectReason::NoSuchRoom);
                    return None;
                }
            }
            // A relay of a fleet that is full or drains sends the client
            // to another (see `fleet_door`).
            if self.rooms.len() >= self.config.limits.max_rooms && self.fleet.is_none() {
                self.reply_reject(key, RejectReason::ServerFull);
                return None;
            }
            if self.draining.is_some() && self.fleet.is_none() {
                self.reply_reject(
                    key,
                    RejectReason::Other("the relay is draining for a restart: try another"),
                );
                return None;
            }
            if let fleet::Door::Closed = self.fleet_door(key, at, &room) {
                return None;
            }
            if self.full() {
                // Placed here before it filled up (a claim settled then).
                self.fleet_release(&room);
                self.reply_reject(key, RejectReason::ServerFull);
                return None;
            }
            let mut secret = [0u8; 32];
            secret[..16].copy_from_slice(&self.room_keys.next_secret());
            secret[16..].copy_from_slice(&self.room_keys.next_secret());
            let seq = self.config.sequencer(&room, secret);
            match Engine::new(seq, hello.codec, now, self.config.game.as_ref()) {
                Ok(engine) => {
                    info!(room = %room, "room created");
                    let r = Room::new(room.clone(), engine);
                    self.rooms.insert(room.clone(), r);
                    self.note_full();
                }
                Err(e) => {
                    warn!(room = %room, "room refused its configuration: {e}");
                    self.fleet_release(&room);
                    {
                        self.reply_reject(key, RejectReason::Other("room misconfigured"));
                        return None;
                    }
                }
            }
        }
        Some(room)
    }

    /// Hands the Hello to `room` as a new connection, mapped from `key`
    /// (sealed under `channel` if it has one, made with the client's
    /// handshake key for a Hello asking for what the second field's
    /// binding says, and a cookie minted when the third field says), and
    /// spends its ticket if the room let it in.
    fn open_connection(
        &mut self,
        key: ConnKey,
        bytes: &[u8],
        room: RoomName,
        channel: Option<(SecureChannel, HelloKeys, u32)>,
        to_spend: Option<Verified>,
        now: CoreInstant,
    ) {
        let peer = self.allocate_peer();
        let Some(r) = self.rooms.get_mut(&room) else {
            return;
        };
        let started = std::time::Instant::now();
        let _ = r.engine.handle_datagram(peer, bytes, now);
        let connected = r.engine.is_connected(peer);
        // Mapped even if refused: the refusal goes out through the mapping.
        let conn_key = match (channel, key) {
            (Some((channel, (hello_key, hello), hello_cookie)), ConnKey::Udp(addr)) => {
                let id = channel.id();
                let room = room.clone();
                self.sealed.insert(
                    id,
                    SealedConn {
                        channel,
                        addr,
                        peer,
                        room,
                        confirmed: false,
                        probe: None,
                        counted: limit_key(addr.ip()),
                        client_key: hello_key,
                        hello,
                        cookie_issued: hello_cookie,
                    },
                );
                ConnKey::Sealed(id)
            }
            _ => key,
        };
        self.keys.insert(peer, conn_key);
        if let ConnKey::Udp(addr) = key {
            *self.udp_by_ip.entry(limit_key(addr.ip())).or_default() += 1;
        }
        if connected {
            if !matches!(conn_key, ConnKey::Sealed(_)) {
                self.conns.insert(key, (peer, room.clone()));
            }
            if let Some(t) = to_spend {
                self.ledger.spend(&t);
            }
        }
        self.flush(&room, started);
        if !connected {
            self.forget(peer);
        }
    }

    pub(super) fn ignore(&self) {
        self.metrics
            .strangers_ignored
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Answers a stranger's datagram of `request_len` bytes as `why` says
    /// (if at all), if the reply rates allow; over UDP, where the source
    /// may be forged, never with more bytes than came.
    pub(super) fn answer_unwelcome(&mut self, key: ConnKey, request_len: usize, why: &Unwelcome) {
        if matches!(why, Unwelcome::NotOurs | Unwelcome::AnAnswer) || !self.may_answer(key) {
            return self.ignore();
        }
        let mut buf = Vec::new();
        match why.answer(Tick::ZERO, self.answer_budget(key, request_len), &mut buf) {
            Some(len) => self.send_answer(key, &buf[..len]),
            None => self.ignore(),
        }
    }

    /// Whether a stranger at `key` may be answered now (takes the budget).
    pub(super) fn may_answer(&mut self, key: ConnKey) -> bool {
        let now = self.now();
        match key {
            ConnKey::Udp(addr) => self.stranger_replies.take(limit_key(addr.ip()), now),
            ConnKey::Ws(_) | ConnKey::Sealed(_) => true,
        }
    }

    /// The most bytes a stranger at `key` may be answered with, after a
    /// datagram of `request_len`.
    pub(super) fn answer_budget(&self, key: ConnKey, request_len: usize) -> usize {
        match key {
            ConnKey::Udp(_) => request_len.min(self.config.limits.max_message),
            ConnKey::Ws(_) | ConnKey::Sealed(_) => self.config.limits.max_message,
        }
    }

    /// Answers a stranger with `m` once the budget was taken.
    pub(super) fn answer_now(&mut self, key: ConnKey, request_len: usize, m: &Message<'_>) {
        let mut buf = Vec::new();
        let budget = self.answer_budget(key, request_len);
        match admission::write_answer(m, Tick::ZERO, budget, &mut buf) {
            Some(len) => self.send_answer(key, &buf[..len]),
            None => self.ignore(),
        }
    }

    /// Sends a stranger its answer; a WebSocket that opened with garbage
    /// is closed after it.
    pub(super) fn send_answer(&mut self, key: ConnKey, bytes: &[u8]) {
        self.send(key, bytes);
        if let ConnKey::Ws(id) = key {
            self.ws_out.remove(&id);
        }
    }

    pub(super) fn allocate_peer(&mut self) -> PeerId {
        loop {
            let p = PeerId(self.next_peer);
            self.next_peer = self.next_peer.wrapping_add(1);
            if p != HOST_PEER && !self.keys.contains_key(&p) {
                return p;
            }
        }
    }

    /// Refuses a proven address (UDP) or a WebSocket.
    pub(super) fn reply_reject(&mut self, key: ConnKey, reason: RejectReason<'_>) {
        self.metrics.rejects.fetch_add(1, Ordering::Relaxed);
        let reply = self.reject_datagram(reason);
        self.send_answer(key, &reply);
    }

    /// A datagram of one `Reject`, plain.
    pub(super) fn reject_datagram(&self, reason: RejectReason<'_>) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut w = DatagramWriter::new(&mut buf, Tick::ZERO, self.config.limits.max_message);
        w.put(Message::Reject(reason));
        let len = w.finish();
        buf.truncate(len);
        buf
    }
}
