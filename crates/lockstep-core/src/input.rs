//! The per-seat, per-tick value a game feeds the engine.

use core::fmt;

/// Why bytes could not be turned back into an input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputDecodeError {
    /// The encoding has a fixed size and these bytes are not that size.
    #[error("input encoding is {got} bytes, expected {expected}")]
    WrongLength {
        /// The size the type encodes to.
        expected: usize,
        /// The size received.
        got: usize,
    },
    /// The bytes are the right size but do not name a valid value.
    #[error("invalid input encoding: {0}")]
    Invalid(&'static str),
}

/// One seat's input for one tick.
///
/// The engine never looks inside an input: it stores, sends, compares and
/// hands it back. What it needs is a neutral value ([`Default`]: no buttons,
/// sticks centred, no commands), equality, and a byte codec that round-trips
/// exactly (`decode(encode(x)) == x`) and is the same on every machine.
///
/// Continuous controls and discrete commands are both inputs: a game with a
/// command list per tick uses a type holding that list.
///
/// ```
/// use lockstep_core::{Input, InputDecodeError};
///
/// #[derive(Clone, PartialEq, Eq, Default, Debug)]
/// struct Pad { buttons: u8, stick: i8 }
///
/// impl Input for Pad {
///     fn encode(&self, out: &mut Vec<u8>) {
///         out.extend_from_slice(&[self.buttons, self.stick as u8]);
///     }
///     fn decode(bytes: &[u8]) -> Result<Self, InputDecodeError> {
///         match bytes {
///             [b, s] => Ok(Pad { buttons: *b, stick: *s as i8 }),
///             _ => Err(InputDecodeError::WrongLength { expected: 2, got: bytes.len() }),
///         }
///     }
/// }
///
/// let mut buf = Vec::new();
/// Pad { buttons: 3, stick: -7 }.encode(&mut buf);
/// assert_eq!(Pad::decode(&buf), Ok(Pad { buttons: 3, stick: -7 }));
/// ```
pub trait Input: Clone + Eq + Default + fmt::Debug + 'static {
    /// Appends this input's encoding to `out`.
    fn encode(&self, out: &mut Vec<u8>);

    /// Decodes an input from exactly `bytes` (the whole slice is the input).
    ///
    /// Bytes come from the network: return an error, never panic.
    fn decode(bytes: &[u8]) -> Result<Self, InputDecodeError>;

    /// How [`encode_delta`](Self::encode_delta) codes: what a client says
    /// in its Hello, so that a relay, which holds inputs without knowing
    /// the game's type, reads the room's deltas as they were written. The
    /// default delta is [`InputCodec::Opaque`](crate::wire::InputCodec::Opaque);
    /// [`PlayerInputs`](crate::PlayerInputs) says its own. A type with
    /// deltas of its own plays through a relay only if they are one of
    /// these (a mesh or a host of the same game reads any).
    const CODEC: crate::wire::InputCodec = crate::wire::InputCodec::Opaque;

    /// Appends `self` coded as a change from `prev` (only called when they
    /// differ). Consecutive inputs travel this way, so a compact delta is
    /// where bandwidth is won.
    ///
    /// The default XORs the two encodings and leaves out unchanged bytes
    /// (see [`wire::xor_delta`](crate::wire::xor_delta)), which suits any
    /// type; override it together with [`decode_delta`](Self::decode_delta)
    /// for a tighter code, as [`PlayerInputs`](crate::PlayerInputs) does.
    fn encode_delta(&self, prev: &Self, out: &mut Vec<u8>) {
        let mut a = Vec::new();
        prev.encode(&mut a);
        let mut b = Vec::new();
        self.encode(&mut b);
        crate::wire::xor_delta(&a, &b, out);
    }

    /// Reads an input written by [`encode_delta`](Self::encode_delta) from
    /// the front of `input`, advancing it past what was read.
    ///
    /// Bytes come from the network: return an error, never panic.
    fn decode_delta(prev: &Self, input: &mut &[u8]) -> Result<Self, InputDecodeError> {
        let mut a = Vec::new();
        prev.encode(&mut a);
        let b = crate::wire::xor_undelta(&a, input)?;
        Self::decode(&b)
    }
}

/// Inputs as a relay of opaque inputs holds them: a relay knows no input
/// type, holds each input as the bytes it reads from the chains it is sent,
/// and codes its own chains over those. A chain's first input is coded
/// against the neutral input, whose bytes on the relay are none, so an
/// input's relay bytes are its encoding XOR the neutral input's encoding
/// (that padded with zeros, or cut, to the input's length). One rule, for
/// every reader of a relay's frames (a client, a replay of a relay's
/// recording or of any opaque game's).
pub(crate) mod relay {
    use super::{Input, InputDecodeError};
    use crate::{Frame, PlayerId};

    /// The neutral input's encoding.
    pub(crate) fn neutral<I: Input>() -> Vec<u8> {
        let mut v = Vec::new();
        I::default().encode(&mut v);
        v
    }

    /// `input`'s relay bytes; `neutral` is [`neutral`]'s.
    pub(crate) fn bytes_of<I: Input>(input: &I, neutral: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        input.encode(&mut v);
        for (b, n) in v.iter_mut().zip(neutral) {
            *b ^= n;
        }
        v
    }

    /// The input whose relay bytes are `bytes` (`scratch` a buffer to
    /// work in): no bytes are the neutral input (a relay holds none for a
    /// seat whose input it never saw); bytes that do not decode as `I`
    /// are an error, for the caller to run as the neutral input.
    pub(crate) fn input_of<I: Input>(
        bytes: &[u8],
        neutral: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Result<I, InputDecodeError> {
        scratch.clear();
        scratch.extend_from_slice(bytes);
        for (b, n) in scratch.iter_mut().zip(neutral) {
            *b ^= n;
        }
        match I::decode(scratch) {
            Err(_) if bytes.is_empty() => Ok(I::default()),
            decoded => decoded,
        }
    }

    /// A frame whose inputs are relay bytes, as the game's inputs (see
    /// [`input_of`]): bytes that do not decode are the neutral input, and
    /// `undecodable` hears of each (its seat and why), so that every
    /// reader of a build reads a frame alike.
    pub(crate) fn frame_of<I: Input>(
        f: &Frame<Vec<u8>>,
        neutral: &[u8],
        mut undecodable: impl FnMut(PlayerId, InputDecodeError),
    ) -> Frame<I> {
        let mut scratch = Vec::new();
        let inputs = f
            .inputs
            .iter()
            .enumerate()
            .map(|(seat, cell)| {
                cell.as_ref().map(|bytes| {
                    input_of(bytes, neutral, &mut scratch).unwrap_or_else(|e| {
                        undecodable(PlayerId(seat as u16), e);
                        I::default()
                    })
                })
            })
            .collect();
        Frame {
            tick: f.tick,
            inputs,
            events: f.events.clone(),
        }
    }
}

macro_rules! int_input {
    ($($t:ty),*) => {$(
        impl Input for $t {
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }

            fn decode(bytes: &[u8]) -> Result<Self, InputDecodeError> {
                let arr = bytes.try_into().map_err(|_| InputDecodeError::WrongLength {
                    expected: size_of::<$t>(),
                    got: bytes.len(),
                })?;
                Ok(<$t>::from_le_bytes(arr))
            }
        }
    )*};
}

int_input!(u8, u16, u32, u64, i8, i16, i32, i64);

impl Input for () {
    fn encode(&self, _out: &mut Vec<u8>) {}

    fn decode(bytes: &[u8]) -> Result<Self, InputDecodeError> {
        if bytes.is_empty() {
            Ok(())
        } else {
            Err(InputDecodeError::WrongLength {
                expected: 0,
                got: bytes.len(),
            })
        }
    }
}

impl Input for bool {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }

    fn decode(bytes: &[u8]) -> Result<Self, InputDecodeError> {
        match bytes {
            [0] => Ok(false),
            [1] => Ok(true),
            [_] => Err(InputDecodeError::Invalid("bool must be 0 or 1")),
            _ => Err(InputDecodeError::WrongLength {
                expected: 1,
                got: bytes.len(),
            }),
        }
    }
}

/// Raw bytes, for games that encode inputs themselves (a command list, say).
impl Input for Vec<u8> {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }

    fn decode(bytes: &[u8]) -> Result<Self, InputDecodeError> {
        Ok(bytes.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<I: Input>(v: I) {
        let mut buf = Vec::new();
        v.encode(&mut buf);
        assert_eq!(I::decode(&buf), Ok(v));
    }

    #[test]
    fn primitives_round_trip() {
        round_trip(0xABu8);
        round_trip(-5i16);
        round_trip(u32::MAX);
        round_trip(i64::MIN);
        round_trip(());
        round_trip(true);
        round_trip(vec![1u8, 2, 3]);
    }

    #[test]
    fn wrong_sizes_are_errors() {
        assert_eq!(
            u32::decode(&[1, 2, 3]),
            Err(InputDecodeError::WrongLength {
                expected: 4,
                got: 3
            })
        );
        assert!(bool::decode(&[7]).is_err());
        assert!(<()>::decode(&[0]).is_err());
    }
}
