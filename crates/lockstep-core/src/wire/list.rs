//! Lists inside a message that neither side allocates for: a sender lends a
//! slice, a receiver reads the items from the datagram's own bytes as it
//! walks them (they were checked whole when the datagram was decoded).

use super::WireError;
use crate::Tick;
use core::fmt;

/// An item a [`List`] can hold: one of the protocol's, read from the wire
/// against a datagram's base tick.
pub trait ListItem<'a>: Copy {
    /// Reads one item from the front of `bytes` (checked: a malformed one
    /// is an error); returns it and how many bytes it took.
    #[doc(hidden)]
    fn read_item(bytes: &'a [u8], base: Tick) -> Result<(Self, usize), WireError>;
}

/// A list of items in a message.
///
/// Built from a slice to send; read from a received datagram, it walks the
/// datagram's bytes, so decoding allocates nothing for it. Either way it is
/// `Copy`, and [`iter`](Self::iter) yields the items by value.
///
/// ```
/// use lockstep_core::{PlayerId, Tick};
/// use lockstep_core::wire::{Datagram, DatagramWriter, Inputs, List, Message};
///
/// let acks = [(PlayerId(1), Tick::new(40)), (PlayerId(2), Tick::new(38))];
/// let mut buf = Vec::new();
/// let mut w = DatagramWriter::new(&mut buf, Tick::new(40), 1200);
/// w.push(&Message::Inputs(Inputs { acks: List::from(&acks[..]), runs: List::EMPTY }))?;
/// w.finish();
/// let d = Datagram::decode(&buf, Tick::new(40))?;
/// let Message::Inputs(i) = &d.messages[0] else { unreachable!() };
/// assert_eq!(i.acks.len(), 2);
/// assert!(i.acks.iter().eq(acks));
/// assert_eq!(i.acks, List::from(&acks[..]));
/// # Ok::<(), lockstep_core::wire::WireError>(())
/// ```
#[derive(Clone, Copy)]
pub struct List<'a, T> {
    repr: Repr<'a, T>,
}

#[derive(Clone, Copy)]
enum Repr<'a, T> {
    Slice(&'a [T]),
    /// `len` items, checked, in `bytes`, ticks relative to `base`.
    Wire {
        bytes: &'a [u8],
        len: usize,
        base: Tick,
    },
}

impl<T> List<'_, T> {
    /// No items.
    pub const EMPTY: Self = Self {
        repr: Repr::Slice(&[]),
    };

    /// How many items.
    pub fn len(&self) -> usize {
        match self.repr {
            Repr::Slice(s) => s.len(),
            Repr::Wire { len, .. } => len,
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'a, T: ListItem<'a>> List<'a, T> {
    /// The items, in order.
    pub fn iter(&self) -> Iter<'a, T> {
        let inner = match self.repr {
            Repr::Slice(s) => IterRepr::Slice(s.iter()),
            Repr::Wire { bytes, len, base } => IterRepr::Wire {
                bytes,
                left: len,
                base,
            },
        };
        Iter { inner }
    }

    /// The first item, if any.
    pub fn first(&self) -> Option<T> {
        self.iter().next()
    }

    /// The items, collected (to edit them, say, and lend the edit to
    /// another message).
    pub fn to_vec(&self) -> Vec<T> {
        self.iter().collect()
    }

    /// Reads `len` items from the front of `bytes`, checking each; returns
    /// them as a list over the bytes they took, and how many that was.
    #[inline]
    pub(crate) fn read(
        bytes: &'a [u8],
        len: usize,
        base: Tick,
    ) -> Result<(Self, usize), WireError> {
        let mut used = 0;
        for _ in 0..len {
            let rest = bytes.get(used..).ok_or(WireError::Truncated)?;
            used += T::read_item(rest, base)?.1;
        }
        let bytes = bytes.get(..used).ok_or(WireError::Truncated)?;
        let list = Self {
            repr: Repr::Wire { bytes, len, base },
        };
        Ok((list, used))
    }
}

impl<T> Default for List<'_, T> {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl<'a, T> From<&'a [T]> for List<'a, T> {
    fn from(s: &'a [T]) -> Self {
        Self {
            repr: Repr::Slice(s),
        }
    }
}

impl<'a, T> From<&'a Vec<T>> for List<'a, T> {
    fn from(v: &'a Vec<T>) -> Self {
        Self::from(v.as_slice())
    }
}

impl<'a, T, const N: usize> From<&'a [T; N]> for List<'a, T> {
    fn from(a: &'a [T; N]) -> Self {
        Self::from(a.as_slice())
    }
}

impl<'a, T: ListItem<'a> + PartialEq> PartialEq for List<'a, T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<'a, T: ListItem<'a> + Eq> Eq for List<'a, T> {}

impl<'a, T: ListItem<'a> + fmt::Debug> fmt::Debug for List<'a, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a, T: ListItem<'a>> IntoIterator for List<'a, T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

impl<'a, T: ListItem<'a>> IntoIterator for &List<'a, T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

/// The items of a [`List`], by value.
#[derive(Debug, Clone)]
pub struct Iter<'a, T> {
    inner: IterRepr<'a, T>,
}

#[derive(Debug, Clone)]
enum IterRepr<'a, T> {
    Slice(core::slice::Iter<'a, T>),
    Wire {
        bytes: &'a [u8],
        left: usize,
        base: Tick,
    },
}

impl<'a, T: ListItem<'a>> Iterator for Iter<'a, T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        match &mut self.inner {
            IterRepr::Slice(s) => s.next().copied(),
            IterRepr::Wire { bytes, left, base } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                // Every item was read once already, when the datagram was
                // decoded: this cannot fail. Were it to, the list ends.
                match T::read_item(bytes, *base) {
                    Ok((item, used)) => {
                        *bytes = bytes.get(used..).unwrap_or_default();
                        Some(item)
                    }
                    Err(_) => {
                        *left = 0;
                        None
                    }
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.inner {
            IterRepr::Slice(s) => s.len(),
            IterRepr::Wire { left, .. } => *left,
        };
        (0, Some(n))
    }
}
