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

/// Implements [`Endpoint`] for a session generic over its input by calling
/// the session's inherent methods of the same names, which carry the docs.
macro_rules! forward_to_inherent {
    ($session:ident, $error:ty) => {
        impl<I: $crate::Input> $crate::Endpoint for $session<I> {
            type Error = $error;

            fn handle_datagram(
                &mut self,
                from: $crate::PeerId,
                datagram: &[u8],
                now: $crate::Instant,
            ) -> Result<(), $error> {
                Self::handle_datagram(self, from, datagram, now)
            }

            fn handle_timeout(&mut self, now: $crate::Instant) {
                Self::handle_timeout(self, now);
            }

            fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<$crate::Transmit> {
                Self::poll_transmit(self, buf)
            }

            fn poll_timeout(&self) -> Option<$crate::Instant> {
                Self::poll_timeout(self)
            }
        }
    };
}
pub(crate) use forward_to_inherent;
