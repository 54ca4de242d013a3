//! UDP over `std::net`.

use crate::{MAX_DATAGRAM, Transport, TransportError};
use lockstep_core::PeerId;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};

/// Windows' error for a datagram larger than the buffer it is read into.
const WSAEMSGSIZE: i32 = 10040;

/// The largest id [`UdpTransport::insert_peer`] takes.
pub const MAX_PEER_ID: u32 = 65_535;

/// A non-blocking UDP socket whose peers are named by [`PeerId`].
///
/// As a client, [`add_peer`](Self::add_peer) names the server. In a mesh,
/// [`insert_peer`](Self::insert_peer) names each other player under its
/// roster [`PeerId`], which is the id the session knows it by (ids that
/// `add_peer` hands out are its own, in the order it is called). As a server,
/// [`accept_unknown`](Self::accept_unknown) gives each new source address
/// the next free id, up to a limit; datagrams from further strangers are
/// dropped, so a flood of spoofed sources cannot grow the table.
///
/// ```
/// use lockstep_net::{Transport, UdpTransport};
/// let mut a = UdpTransport::bind("127.0.0.1:0")?;
/// let mut b = UdpTransport::bind("127.0.0.1:0")?.accept_unknown(16);
/// let to_b = a.add_peer(b.local_addr()?);
/// a.send(to_b, b"hello")?;
/// let mut buf = vec![0; lockstep_net::MAX_DATAGRAM];
/// let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
/// let (from, len) = loop {
///     if let Some(got) = b.recv(&mut buf)? { break got; }
///     assert!(std::time::Instant::now() < deadline, "nothing arrived");
///     std::thread::yield_now();
/// };
/// assert_eq!(&buf[..len], b"hello");
/// assert_eq!(b.addr(from), Some(a.local_addr()?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct UdpTransport {
    socket: UdpSocket,
    addrs: Vec<Option<SocketAddr>>,
    ids: HashMap<SocketAddr, PeerId>,
    accept: usize,
    dropped: u64,
}

impl UdpTransport {
    /// Binds a non-blocking socket.
    pub fn bind(addr: impl ToSocketAddrs) -> std::io::Result<Self> {
        Self::from_socket(UdpSocket::bind(addr)?)
    }

    /// Wraps a bound socket (made non-blocking).
    pub fn from_socket(socket: UdpSocket) -> std::io::Result<Self> {
        socket.set_nonblocking(true)?;
        Ok(Self {
            socket,
            addrs: Vec::new(),
            ids: HashMap::new(),
            accept: 0,
            dropped: 0,
        })
    }

    /// Accepts datagrams from unknown addresses, giving each a new id, while
    /// fewer than `max_peers` are known.
    pub fn accept_unknown(mut self, max_peers: usize) -> Self {
        self.accept = max_peers;
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Names `addr`, returning its id (the same id if already known).
    pub fn add_peer(&mut self, addr: SocketAddr) -> PeerId {
        if let Some(id) = self.ids.get(&addr) {
            return *id;
        }
        let slot = self.addrs.iter().position(Option::is_none);
        let id = match slot {
            Some(i) => {
                self.addrs[i] = Some(addr);
                i
            }
            None => {
                self.addrs.push(Some(addr));
                self.addrs.len() - 1
            }
        };
        let id = PeerId(u32::try_from(id).unwrap_or(u32::MAX));
        self.ids.insert(addr, id);
        id
    }

    /// Names `addr` as `peer`, the id the session knows it by (a mesh
    /// roster's [`PeerId`]s, say), in place of any name either had. Ids
    /// [`add_peer`](Self::add_peer) hands out later skip it. Ids are
    /// indexes here: at most [`MAX_PEER_ID`].
    ///
    /// ```
    /// use lockstep_core::PeerId;
    /// use lockstep_net::UdpTransport;
    /// let mut udp = UdpTransport::bind("127.0.0.1:0")?;
    /// let other = "127.0.0.1:9000".parse()?;
    /// udp.insert_peer(PeerId(2), other)?;
    /// assert_eq!(udp.addr(PeerId(2)), Some(other));
    /// assert_eq!(udp.add_peer(other), PeerId(2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn insert_peer(&mut self, peer: PeerId, addr: SocketAddr) -> Result<(), TransportError> {
        if peer.0 > MAX_PEER_ID {
            return Err(TransportError::PeerIdTooLarge {
                peer,
                max: MAX_PEER_ID,
            });
        }
        if let Some(old) = self.ids.get(&addr).copied() {
            self.forget(old);
        }
        self.forget(peer);
        let i = peer.0 as usize;
        if self.addrs.len() <= i {
            self.addrs.resize(i + 1, None);
        }
        self.addrs[i] = Some(addr);
        self.ids.insert(addr, peer);
        Ok(())
    }

    /// Forgets `peer` (its id may be reused).
    pub fn forget(&mut self, peer: PeerId) {
        if let Some(slot) = self.addrs.get_mut(peer.0 as usize)
            && let Some(addr) = slot.take()
        {
            self.ids.remove(&addr);
        }
    }

    /// The address of `peer`.
    pub fn addr(&self, peer: PeerId) -> Option<SocketAddr> {
        *self.addrs.get(peer.0 as usize)?
    }

    /// Known peers.
    pub fn peers(&self) -> usize {
        self.ids.len()
    }

    /// Datagrams dropped: from strangers past the limit, or refused by a
    /// full send buffer.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

impl Transport for UdpTransport {
    fn send(&mut self, to: PeerId, datagram: &[u8]) -> Result<(), TransportError> {
        if datagram.len() > MAX_DATAGRAM {
            return Err(TransportError::TooLarge {
                len: datagram.len(),
                max: MAX_DATAGRAM,
            });
        }
        let addr = self.addr(to).ok_or(TransportError::UnknownPeer(to))?;
        match self.socket.send_to(datagram, addr) {
            Ok(_) => Ok(()),
            // Like a router with a full queue: drop it; the session resends.
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                self.dropped += 1;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<Option<(PeerId, usize)>, TransportError> {
        loop {
            match self.socket.recv_from(buf) {
                Ok((len, from)) => {
                    if let Some(id) = self.ids.get(&from) {
                        return Ok(Some((*id, len)));
                    }
                    if self.ids.len() < self.accept {
                        return Ok(Some((self.add_peer(from), len)));
                    }
                    self.dropped += 1;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                // An ICMP "port unreachable" from an earlier send shows up
                // here on some systems: not this datagram's problem.
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits on the socket itself: returns as soon as a datagram arrives.
    fn wait(&mut self, timeout: std::time::Duration) -> Result<(), TransportError> {
        if timeout.is_zero() {
            return Ok(());
        }
        self.socket.set_nonblocking(false)?;
        let waited = self
            .socket
            .set_read_timeout(Some(timeout))
            .and_then(|()| self.socket.peek_from(&mut [0u8; 1]));
        self.socket.set_nonblocking(true)?;
        match waited {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock
                        | ErrorKind::TimedOut
                        | ErrorKind::Interrupted
                        | ErrorKind::ConnectionReset
                ) =>
            {
                Ok(())
            }
            // Windows says WSAEMSGSIZE when the datagram waiting is larger
            // than the one byte peeked: it is there.
            Err(e) if e.raw_os_error() == Some(WSAEMSGSIZE) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
