//! Sealed UDP connections: datagrams opened under their connection's
//! keys, and a connection that follows its client to a new address only
//! once that address answers a probe.

use super::*;

/// A connection whose datagrams are sealed.
#[derive(Debug)]
pub(super) struct SealedConn {
    pub(super) channel: SecureChannel,
    /// Where its latest authentic datagram came from: where replies go.
    pub(super) addr: SocketAddr,
    pub(super) peer: PeerId,
    pub(super) room: RoomName,
    /// Whether a sealed datagram from the client has opened: it has the
    /// keys, and sends no more plain Hellos.
    pub(super) confirmed: bool,
    /// A new address authentic datagrams came from, and the stamp of the
    /// probe sent there: the connection moves when it is answered.
    pub(super) probe: Option<(SocketAddr, u32)>,
    /// Where its per-address count is kept (where it was made).
    pub(super) counted: IpAddr,
    /// The client's handshake key: a handshake the same client redoes
    /// under a newer cookie (it answered a later challenge) names the same
    /// connection until it is confirmed.
    pub(super) client_key: [u8; 32],
    /// What its Hello asked for ([`hello_binding`](lockstep_core::secure::hello_binding)):
    /// a Hello with the same key asking for something else (a copy made
    /// by whoever watched the path) is not the same client.
    pub(super) hello: [u8; 32],
    /// When the cookie its keys came from was minted (its first four
    /// bytes, seconds): it takes keys from a newer one only.
    pub(super) cookie_issued: u32,
}

/// When a cookie (already checked) was minted: its first four bytes.
pub(super) fn cookie_issued(cookie: &[u8]) -> u32 {
    let mut b = [0u8; 4];
    for (d, s) in b.iter_mut().zip(cookie) {
        *d = *s;
    }
    u32::from_le_bytes(b)
}

/// A path probe's size: a sealed Ping with a 32-bit stamp.
pub(super) const PROBE_LEN: usize = secure::SEALED_OVERHEAD + wire::HEADER_LEN + 1 + 5;

impl Core {
    /// A sealed datagram: it belongs to the connection it opens under, from
    /// wherever it came; anything that does not open is dropped unanswered.
    pub(super) fn sealed_datagram(&mut self, addr: SocketAddr, bytes: &[u8]) {
        // Opened whatever its size: only an authentic datagram may cost its
        // sender the connection (the room refuses one over the limit).
        let found = secure::connection_id(bytes).and_then(|id| self.sealed.get_mut(&id));
        let Some(c) = found else {
            self.metrics.unauthenticated.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut buf = std::mem::take(&mut self.crypt);
        buf.clear();
        buf.extend_from_slice(bytes);
        let opened = c.channel.open(&mut buf).map(|p| p.len());
        match opened {
            Ok(len) => {
                c.confirmed = true;
                let start = secure::SEALED_HEADER_LEN;
                let plain = &buf[start..start + len];
                let probe = if c.addr == addr {
                    None
                } else {
                    Self::follow(c, addr, plain)
                };
                let (peer, room) = (c.peer, c.room.clone());
                if let Some(id) = probe {
                    self.probe_path(id, addr, bytes.len());
                }
                self.deliver(peer, &room, &buf[start..start + len]);
            }
            Err(e) => {
                debug!(%addr, "sealed datagram refused: {e}");
                self.metrics.unauthenticated.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.crypt = buf;
    }

    /// An authentic datagram from `addr`, not where `c` is: the connection
    /// moves only once `addr` has answered a probe sent there (whoever holds
    /// the keys could forge the source address and aim the room's traffic
    /// at a victim). Returns the connection to probe, if a probe is due.
    pub(super) fn follow(c: &mut SealedConn, addr: SocketAddr, plain: &[u8]) -> Option<u64> {
        match c.probe {
            Some((at, stamp)) if at == addr => {
                let answered = Datagram::decode(plain, Tick::ZERO).is_ok_and(|d| {
                    d.messages
                        .iter()
                        .any(|m| matches!(m, Message::Pong { stamp: s, .. } if *s == stamp))
                });
                if answered {
                    info!(peer = %c.peer, from = %c.addr, to = %addr, "connection moved");
                    c.addr = addr;
                    c.probe = None;
                }
                None
            }
            _ => Some(c.channel.id()),
        }
    }

    /// Sends sealed connection `id` a probe (a Ping with an unguessable
    /// stamp) at `addr`, within the budget for unproven addresses and never
    /// larger than the `request_len` bytes that came from there (a
    /// keepalive is too small to answer; the next real datagram is not).
    pub(super) fn probe_path(&mut self, id: u64, addr: SocketAddr, request_len: usize) {
        if request_len < PROBE_LEN {
            return;
        }
        let now = self.now();
        if !self.stranger_replies.take(limit_key(addr.ip()), now) {
            return self.ignore();
        }
        let mut stamp = [0u8; 4];
        stamp.copy_from_slice(&self.room_keys.next_secret()[..4]);
        let stamp = u32::from_le_bytes(stamp);
        let Some(c) = self.sealed.get_mut(&id) else {
            return;
        };
        c.probe = Some((addr, stamp));
        let mut plain = Vec::new();
        let mut w = DatagramWriter::new(&mut plain, Tick::ZERO, 64);
        w.put(Message::Ping { stamp });
        let len = w.finish();
        let mut sealed = Vec::with_capacity(len + secure::SEALED_OVERHEAD);
        c.channel.seal(&plain[..len], &mut sealed);
        if let Some(s) = self.udp.as_deref() {
            let _ = s.try_send_to(&sealed, addr);
        }
    }
}
