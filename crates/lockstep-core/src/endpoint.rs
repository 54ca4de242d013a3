//! The sans-IO surface every session shares.

use crate::{Instant, PeerId};

/// A datagram ready to send: the bytes are the first `len` bytes of the
/// buffer passed to `poll_transmit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Who to send it to.
    pub destination: PeerId,
    /// How many bytes of the buffer to send.
    pub len: usize,
}

/// The network-facing half of a session: what a transport loop or the
/// simulated network drives.
///
/// One iteration: hand over received datagrams, then `handle_timeout`,
/// then drain `poll_transmit`, then sleep until `poll_timeout` or the next
/// datagram, whichever comes first.
pub trait Endpoint {
    /// The error a rejected datagram produces.
    type Error;

    /// Takes a datagram from `from` received at `now`.
    fn handle_datagram(
        &mut self,
        from: PeerId,
        datagram: &[u8],
        now: Instant,
    ) -> Result<(), Self::Error>;

    /// Lets timers that are due at `now` fire.
    fn handle_timeout(&mut self, now: Instant);

    /// Writes the next datagram to send into `buf` (cleared first).
    fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit>;

    /// When `handle_timeout` next needs calling, if ever.
    fn poll_timeout(&self) -> Option<Instant>;
}
