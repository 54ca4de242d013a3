//! A WebSocket client transport, without an async runtime.

use crate::{MAX_DATAGRAM, Transport, TransportError};
use lockstep_core::PeerId;
use std::io::ErrorKind;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Error as WsError, Message, WebSocket};

/// One WebSocket connection to a server, one datagram per binary message.
/// The server is [`WsClientTransport::SERVER`].
///
/// The handshake blocks (up to a timeout); afterwards the socket is
/// non-blocking like every other transport here. For networks where UDP is
/// blocked; loss never happens (TCP), latency spikes instead.
#[derive(Debug)]
pub struct WsClientTransport {
    ws: WebSocket<TcpStream>,
    closed: bool,
}

fn ws_error(e: WsError) -> TransportError {
    match e {
        WsError::ConnectionClosed | WsError::AlreadyClosed => TransportError::Closed,
        WsError::Io(io) => TransportError::Io(io),
        other => TransportError::WebSocket(other.to_string()),
    }
}

impl WsClientTransport {
    /// The id the server has.
    pub const SERVER: PeerId = PeerId(0);

    /// Connects to `url` (`ws://host:port/path`), resolving `addr` for the
    /// TCP connection, within `timeout`.
    pub fn connect(
        url: &str,
        addr: impl ToSocketAddrs,
        timeout: Duration,
    ) -> Result<Self, TransportError> {
        let addr = addr.to_socket_addrs()?.next().ok_or_else(|| {
            TransportError::Io(std::io::Error::new(ErrorKind::NotFound, "no address"))
        })?;
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_DATAGRAM))
            .max_frame_size(Some(MAX_DATAGRAM));
        let (ws, _) = tungstenite::client::client_with_config(url, stream, Some(config))
            .map_err(|e| TransportError::WebSocket(e.to_string()))?;
        ws.get_ref().set_nonblocking(true)?;
        Ok(Self { ws, closed: false })
    }

    /// Whether the connection has closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Starts a clean close.
    pub fn close(&mut self) {
        let _ = self.ws.close(None);
        let _ = self.ws.flush();
    }

    fn flush(&mut self) -> Result<(), TransportError> {
        match self.ws.flush() {
            Ok(()) => Ok(()),
            Err(WsError::Io(e)) if e.kind() == ErrorKind::WouldBlock => Ok(()),
            Err(e) => {
                self.closed = true;
                Err(ws_error(e))
            }
        }
    }
}

impl Transport for WsClientTransport {
    fn send(&mut self, to: PeerId, datagram: &[u8]) -> Result<(), TransportError> {
        if to != Self::SERVER {
            return Err(TransportError::UnknownPeer(to));
        }
        if self.closed {
            return Err(TransportError::Closed);
        }
        match self.ws.write(Message::Binary(datagram.to_vec().into())) {
            Ok(()) => {}
            // Too much queued already: drop it like a full UDP buffer.
            Err(WsError::WriteBufferFull(_)) => {}
            Err(WsError::Io(e)) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => {
                self.closed = true;
                return Err(ws_error(e));
            }
        }
        self.flush()
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<Option<(PeerId, usize)>, TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        loop {
            match self.ws.read() {
                Ok(Message::Binary(b)) => {
                    let len = b.len().min(buf.len());
                    buf[..len].copy_from_slice(&b[..len]);
                    return Ok(Some((Self::SERVER, len)));
                }
                Ok(Message::Close(_)) => {
                    self.closed = true;
                    return Err(TransportError::Closed);
                }
                // Pings are answered by the library; text is not ours.
                Ok(_) => {}
                Err(WsError::Io(e)) if e.kind() == ErrorKind::WouldBlock => {
                    self.flush()?;
                    return Ok(None);
                }
                Err(e) => {
                    self.closed = true;
                    return Err(ws_error(e));
                }
            }
        }
    }
}
