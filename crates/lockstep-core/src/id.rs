//! Who is who: seats and network peers.

use core::fmt;

/// A seat in the game: the index of one entry in every [`Frame`](crate::Frame).
///
/// Seats are what the simulation sees. Which machine plays a seat is a
/// separate question (see [`PeerId`]); a seat can be empty, abandoned, or
/// later taken by a joining player, and all of that travels in the frame
/// stream.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PlayerId(pub u16);

impl PlayerId {
    /// The seat's position in a frame's input list.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for PlayerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "P{}", self.0)
    }
}

impl fmt::Display for PlayerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "player {}", self.0)
    }
}

/// A remote endpoint, as the caller names it.
///
/// The core never sees a socket address: the caller keeps the map from
/// `PeerId` to whatever its transport uses (a `SocketAddr`, a WebSocket
/// connection, a channel in a test) and passes the id to
/// `handle_datagram` and reads it back from [`Transmit`](crate::Transmit).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PeerId(pub u32);

impl fmt::Debug for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "peer#{}", self.0)
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "peer {}", self.0)
    }
}
