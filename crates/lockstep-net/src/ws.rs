//! A WebSocket client transport, without an async runtime.

use crate::{MAX_DATAGRAM, Transport, TransportError};
use lockstep_core::PeerId;
use std::io::ErrorKind;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;
use tungstenite::Connector;
use tungstenite::protocol::WebSocketConfig;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Error as WsError, Message, WebSocket};

/// One WebSocket connection to a server, one datagram per binary message,
/// over TLS for a `wss://` URL. The server is [`WsClientTransport::SERVER`].
///
/// The handshakes block (up to a timeout); afterwards the socket is
/// non-blocking like every other transport here. For networks where UDP is
/// blocked; loss never happens (TCP), latency spikes instead.
#[derive(Debug)]
pub struct WsClientTransport {
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    closed: bool,
}

/// A TLS client configuration that trusts the certificates in `pem` (a
/// self-hosted relay's own certificate or CA), for
/// [`WsClientTransport::connect_with_tls`]. `wss://` to a server with a
/// publicly trusted certificate needs none: [`WsClientTransport::connect`]
/// trusts the usual roots.
pub fn tls_trusting(pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, TransportError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let bad = |e: String| TransportError::WebSocket(format!("TLS roots: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        roots
            .add(cert.map_err(|e| bad(e.to_string()))?)
            .map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no certificate in the file".into()));
    }
    // ring builds with a C compiler alone (aws-lc-rs wants CMake). rustls
    // 0.23.48 deprecates ring's provider for lacking post-quantum key
    // exchange: a build against it would warn in every game that uses us.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
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

    /// Connects to `url` (`ws://host:port/path`, or `wss://` over TLS with
    /// the publicly trusted roots), resolving `addr` for the TCP
    /// connection, within `timeout`.
    pub fn connect(
        url: &str,
        addr: impl ToSocketAddrs,
        timeout: Duration,
    ) -> Result<Self, TransportError> {
        Self::open(url, addr, timeout, None)
    }

    /// [`connect`](Self::connect) to a `wss://` URL trusting what `tls`
    /// trusts (see [`tls_trusting`]).
    pub fn connect_with_tls(
        url: &str,
        addr: impl ToSocketAddrs,
        timeout: Duration,
        tls: Arc<rustls::ClientConfig>,
    ) -> Result<Self, TransportError> {
        Self::open(url, addr, timeout, Some(Connector::Rustls(tls)))
    }

    fn open(
        url: &str,
        addr: impl ToSocketAddrs,
        timeout: Duration,
        connector: Option<Connector>,
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
        let (ws, _) = tungstenite::client_tls_with_config(url, stream, Some(config), connector)
            .map_err(|e| TransportError::WebSocket(e.to_string()))?;
        match ws.get_ref() {
            MaybeTlsStream::Plain(s) => s.set_nonblocking(true)?,
            MaybeTlsStream::Rustls(s) => s.get_ref().set_nonblocking(true)?,
            _ => {}
        }
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
