//! The datagram envelope: the header, a datagram's messages decoded in
//! order ([`Datagram`]), and a writer that keeps to a size budget
//! ([`DatagramWriter`]).

use super::codec::{Reader, expand_tick};
use super::message::{HEADER_LEN, MAX_MESSAGES, Message, message_type as ty, read_message};
use super::{MAGIC, MAX_DATAGRAM_LEN, VERSION, WireError};
use crate::Tick;

/// A decoded datagram: its base tick and its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// The sender's base tick (its next tick to run), expanded to 32 bits.
    pub base: Tick,
    /// The messages, in order.
    pub messages: Vec<Message<'a>>,
}

impl<'a> Datagram<'a> {
    /// Decodes a datagram. `reference` is the receiver's own position: the
    /// 16-bit base tick on the wire is expanded to the full tick nearest to
    /// it.
    ///
    /// ```
    /// use lockstep_core::Tick;
    /// use lockstep_core::wire::{Datagram, DatagramWriter, Message};
    ///
    /// let mut buf = Vec::new();
    /// let mut w = DatagramWriter::new(&mut buf, Tick::new(70_000), 1200);
    /// w.push(&Message::Pause { frame: Tick::new(70_004) })?;
    /// w.finish();
    /// let d = Datagram::decode(&buf, Tick::new(69_990))?;
    /// assert_eq!(d.base, Tick::new(70_000));
    /// assert_eq!(d.messages, vec![Message::Pause { frame: Tick::new(70_004) }]);
    /// # Ok::<(), lockstep_core::wire::WireError>(())
    /// ```
    pub fn decode(bytes: &'a [u8], reference: Tick) -> Result<Self, WireError> {
        Self::decode_into(bytes, reference, Vec::new())
    }

    /// [`decode`](Self::decode), its messages in `messages` (emptied
    /// first): see [`Decoder`], which lends one.
    #[inline]
    fn decode_into(
        bytes: &'a [u8],
        reference: Tick,
        mut messages: Vec<Message<'a>>,
    ) -> Result<Self, WireError> {
        messages.clear();
        if bytes.len() > MAX_DATAGRAM_LEN {
            return Err(WireError::Oversized(bytes.len()));
        }
        let mut r = Reader::new(bytes);
        let magic = [r.u8()?, r.u8()?];
        if magic != MAGIC {
            return Err(WireError::BadMagic);
        }
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::UnsupportedVersion {
                ours: VERSION,
                theirs: version,
            });
        }
        let base = expand_tick(r.u16_le()?, reference);
        while !r.is_empty() {
            if messages.len() == MAX_MESSAGES {
                return Err(WireError::TooLong {
                    what: "message",
                    len: MAX_MESSAGES + 1,
                    max: MAX_MESSAGES,
                });
            }
            messages.push(read_message(&mut r, base)?);
        }
        // A datagram of the header alone is a keepalive: it still says where
        // the sender is.
        Ok(Self { base, messages })
    }
}

/// Decodes datagrams into storage it keeps from one to the next, so that
/// a receiver that hands each decoded datagram back
/// ([`recycle`](Self::recycle)) allocates nothing per datagram.
///
/// ```
/// use lockstep_core::Tick;
/// use lockstep_core::wire::{Decoder, DatagramWriter, Message};
///
/// let mut decoder = Decoder::default();
/// for frame in 0..3 {
///     let mut buf = Vec::new();
///     let mut w = DatagramWriter::new(&mut buf, Tick::ZERO, 1200);
///     w.push(&Message::Pause { frame: Tick::new(frame) })?;
///     w.finish();
///     let d = decoder.decode(&buf, Tick::ZERO)?;
///     assert_eq!(d.messages, [Message::Pause { frame: Tick::new(frame) }]);
///     decoder.recycle(d);
/// }
/// # Ok::<(), lockstep_core::wire::WireError>(())
/// ```
#[derive(Debug, Default)]
pub struct Decoder {
    spare: Vec<Message<'static>>,
}

impl Decoder {
    /// [`Datagram::decode`], into the storage of the last datagram
    /// recycled.
    #[inline]
    pub fn decode<'a>(
        &mut self,
        bytes: &'a [u8],
        reference: Tick,
    ) -> Result<Datagram<'a>, WireError> {
        // Kept storage is empty and holds `'static` messages, which are
        // messages of any lifetime: it is lent as it is.
        Datagram::decode_into(bytes, reference, core::mem::take(&mut self.spare))
    }

    /// Takes `d`'s storage back for the next datagram.
    pub fn recycle(&mut self, d: Datagram<'_>) {
        self.spare = reuse(d.messages);
    }
}

/// `v`'s allocation, emptied, for items of another type of the same
/// layout (the same items of another lifetime: the only use): collecting
/// an iterator of nothing from it keeps its allocation, as the standard
/// library collects in place (an optimisation it does not promise; the
/// allocation tests hold it). A buffer of borrowing items is kept this
/// way from one datagram to the next.
pub(crate) fn reuse<A, B>(mut v: Vec<A>) -> Vec<B> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

/// The protocol version a datagram claims, if it is one of ours at all.
/// Lets an endpoint refuse another version with a reason instead of
/// silence.
pub fn peek_version(bytes: &[u8]) -> Option<u8> {
    match bytes {
        [m0, m1, v, ..] if [*m0, *m1] == MAGIC => Some(*v),
        _ => None,
    }
}

/// A mesh peer's full next tick, when the datagram opens with one: the
/// `resume_from` of a Hello or the `tick` of a Welcome, before any message
/// whose ticks are read against the header's. A receiver reads the 16-bit
/// header tick against it instead of its own guess, so a peer far behind
/// (an observer joining late) or jumping ahead (one restored from a
/// snapshot) is read right.
///
/// ```
/// use lockstep_core::Tick;
/// use lockstep_core::wire::{Datagram, DatagramWriter, Hello, Message, peek_anchor};
///
/// let mut buf = Vec::new();
/// let mut w = DatagramWriter::new(&mut buf, Tick::new(70_005), 1200);
/// w.push(&Message::Hello(Hello { resume_from: Some(Tick::new(70_005)), ..Hello::default() }))?;
/// w.push(&Message::Pause { frame: Tick::new(70_010) })?;
/// w.finish();
/// // Read against tick 0, the header alone would say 4 469.
/// assert_eq!(Datagram::decode(&buf, Tick::ZERO)?.base, Tick::new(4_469));
/// assert_eq!(peek_anchor(&buf), Some(Tick::new(70_005)));
/// # Ok::<(), lockstep_core::wire::WireError>(())
/// ```
pub fn peek_anchor(bytes: &[u8]) -> Option<Tick> {
    if bytes.len() > MAX_DATAGRAM_LEN || peek_version(bytes) != Some(VERSION) {
        return None;
    }
    let mut r = Reader::new(bytes.get(HEADER_LEN..)?);
    while !r.is_empty() {
        // Any other first message says no, unread (most datagrams).
        if !matches!(
            r.peek_u8(),
            Some(ty::HELLO | ty::WELCOME | ty::BYE | ty::PADDING)
        ) {
            return None;
        }
        // A message of the opening sort carries no tick read against the
        // header's, so any base will do.
        match read_message(&mut r, Tick::ZERO).ok()? {
            Message::Hello(h) => return h.resume_from,
            Message::Welcome(w) => return Some(w.tick),
            Message::Bye { .. } | Message::Padding { .. } => {}
            _ => return None,
        }
    }
    None
}

/// Writes messages into one datagram without exceeding a size budget.
///
/// ```
/// use lockstep_core::Tick;
/// use lockstep_core::wire::{DatagramWriter, Message, WireError};
///
/// use lockstep_core::wire::ByeReason::Leaving;
///
/// let mut buf = Vec::new();
/// let mut w = DatagramWriter::new(&mut buf, Tick::ZERO, 16);
/// w.push(&Message::Ping { stamp: 1 })?; // 5-byte header + 2
/// // 11 bytes would fit an empty datagram, not this one: start another.
/// let bye = Message::Bye { reason: Leaving, text: "8 bytes." };
/// assert!(matches!(w.push(&bye), Err(WireError::DoesNotFit { len: 11, remaining: 9 })));
/// // Too big for any datagram of this budget: split it or give up.
/// let huge = Message::Bye { reason: Leaving, text: "far too long for sixteen bytes" };
/// assert!(matches!(w.push(&huge), Err(WireError::MessageTooLarge { .. })));
/// assert_eq!(w.messages(), 1);
/// assert_eq!(w.finish(), 7);
/// # Ok::<(), WireError>(())
/// ```
#[derive(Debug)]
pub struct DatagramWriter<'b> {
    out: &'b mut Vec<u8>,
    start: usize,
    base: Tick,
    budget: usize,
    messages: usize,
}

impl<'b> DatagramWriter<'b> {
    /// Starts a datagram at the end of `out` whose tick fields are relative
    /// to `base` (the sender's next tick) and which may not grow past
    /// `budget` bytes.
    pub fn new(out: &'b mut Vec<u8>, base: Tick, budget: usize) -> Self {
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&(base.get() as u16).to_le_bytes());
        Self {
            out,
            start,
            base,
            budget,
            messages: 0,
        }
    }

    /// The base tick.
    pub fn base(&self) -> Tick {
        self.base
    }

    /// The datagram's size so far.
    pub fn len(&self) -> usize {
        self.out.len() - self.start
    }

    /// Whether no message has been written.
    pub fn is_empty(&self) -> bool {
        self.messages == 0
    }

    /// Messages written.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// Bytes left in the budget.
    pub fn remaining(&self) -> usize {
        self.budget.saturating_sub(self.len())
    }

    /// Appends a control message (a hello, an ack, a ping: bounded far
    /// below any datagram budget). Should one ever not fit, it is left out
    /// and the datagram stays valid; the sender's next datagram carries it.
    pub fn put(&mut self, m: Message<'_>) {
        let _ = self.push(&m);
    }

    /// Appends `m` if it fits. A field over its protocol bound is
    /// [`WireError::TooLong`]. A message too big for what is left is
    /// [`WireError::DoesNotFit`] (start another datagram); one too big for
    /// any datagram is [`WireError::MessageTooLarge`]. Nothing is ever
    /// truncated.
    pub fn push(&mut self, m: &Message<'_>) -> Result<(), WireError> {
        m.check_bounds()?;
        let at = self.out.len();
        m.encode(self.base, self.out);
        let len = self.out.len() - at;
        if self.len() > self.budget || self.messages == MAX_MESSAGES {
            self.out.truncate(at);
            if len + HEADER_LEN > self.budget {
                return Err(WireError::MessageTooLarge {
                    len,
                    budget: self.budget,
                });
            }
            return Err(WireError::DoesNotFit {
                len,
                remaining: self.remaining(),
            });
        }
        self.messages += 1;
        Ok(())
    }

    /// Appends a [`Message::Padding`] that brings the datagram to at least
    /// `min` bytes (exactly, unless one byte short), within the budget;
    /// nothing when it is that long already.
    pub fn pad_to(&mut self, min: usize) {
        let Some(gap) = min.min(self.budget).checked_sub(self.len()) else {
            return;
        };
        if gap == 0 {
            return;
        }
        // The type byte and a length varint of one, two or three bytes.
        let len = match gap.saturating_sub(2) {
            n if n < 1 << 7 => n,
            _ if gap - 3 < 1 << 14 => gap - 3,
            _ => gap.saturating_sub(4),
        };
        let _ = self.push(&Message::Padding { len });
    }

    /// Ends the datagram; returns its length.
    pub fn finish(self) -> usize {
        self.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decoder_reuses_the_storage_of_the_datagram_recycled() {
        let mut buf = Vec::new();
        let mut w = DatagramWriter::new(&mut buf, Tick::ZERO, 1200);
        for frame in 0..5 {
            w.put(Message::Pause {
                frame: Tick::new(frame),
            });
        }
        w.finish();
        let mut decoder = Decoder::default();
        let d = decoder.decode(&buf, Tick::ZERO).expect("decodes");
        let storage = d.messages.as_ptr() as usize;
        assert!(d.messages.capacity() >= 5);
        decoder.recycle(d);
        let other = buf.clone();
        let d = decoder.decode(&other, Tick::ZERO).expect("decodes");
        assert_eq!(d.messages.as_ptr() as usize, storage);
        assert_eq!(d.messages.len(), 5);
        // A datagram that fails to decode costs the storage, nothing else.
        decoder.recycle(d);
        assert!(decoder.decode(&other[..3], Tick::ZERO).is_err());
        assert!(decoder.decode(&other, Tick::ZERO).is_ok());
    }
}
