//! Delta-coded runs of inputs.
//!
//! Consecutive inputs of one seat are sent as a *chain*: a bitmap with one
//! bit per input (set when the input differs from the one before it; the
//! one before the first is the neutral input), then, for each set bit, the
//! input coded as a change from its predecessor with
//! [`Input::encode_delta`]. An unchanged input costs one bit, so resending
//! ten ticks of a held stick costs a couple of bytes, not ten copies.
//!
//! ```text
//! chain := bitmap: ceil(count / 8) bytes, bit i = byte i/8, bit i%8 (LSB first);
//!          unused high bits of the last byte are zero
//!          delta* (one per set bit, in order)
//! ```
//!
//! Chains are self-contained: the first input is coded against the neutral
//! input, never against something the receiver may have pruned, so any
//! chain decodes on its own.

use super::WireError;
use super::codec::{Reader, put_varint};
use crate::input::{Input, InputDecodeError};

/// Builds a chain within a byte budget.
#[derive(Debug)]
pub struct ChainWriter<I> {
    bits: Vec<u8>,
    payload: Vec<u8>,
    count: usize,
    prev: I,
}

impl<I: Input> Default for ChainWriter<I> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I: Input> ChainWriter<I> {
    /// An empty chain.
    pub fn new() -> Self {
        Self::after(I::default())
    }

    /// An empty chain whose first input is coded against `prev` (an input
    /// the reader holds: see [`InputRun::back`](super::InputRun::back))
    /// instead of the neutral one.
    pub fn after(prev: I) -> Self {
        Self {
            bits: Vec::new(),
            payload: Vec::new(),
            count: 0,
            prev,
        }
    }

    /// Empties the chain for reuse, its first input to be coded against
    /// `prev` (the neutral input for a self-contained chain), keeping the
    /// memory it grew: a sender that keeps one writer encodes every
    /// datagram's chain without allocating.
    ///
    /// ```
    /// use lockstep_core::wire::{ChainWriter, decode_chain_after};
    ///
    /// let mut w = ChainWriter::new();
    /// let mut out = Vec::new();
    /// for (prev, inputs) in [(0u32, [1, 1, 2]), (2, [2, 2, 3])] {
    ///     w.restart(prev);
    ///     inputs.iter().for_each(|i| assert!(w.push(i, 100)));
    ///     out.clear();
    ///     w.write(&mut out);
    ///     assert_eq!(decode_chain_after(&out, 3, prev), Ok(inputs.to_vec()));
    /// }
    /// ```
    pub fn restart(&mut self, prev: I) {
        self.bits.clear();
        self.payload.clear();
        self.count = 0;
        self.prev = prev;
    }

    /// Inputs in the chain.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The chain's encoded size.
    pub fn len(&self) -> usize {
        self.bits.len() + self.payload.len()
    }

    /// Whether the chain holds no input.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Appends `input` if the chain then still fits in `budget` bytes;
    /// returns whether it did.
    pub fn push(&mut self, input: &I, budget: usize) -> bool {
        let at = self.payload.len();
        let changed = *input != self.prev;
        if changed {
            input.encode_delta(&self.prev, &mut self.payload);
        }
        let bits = (self.count + 1).div_ceil(8);
        if bits + self.payload.len() > budget {
            self.payload.truncate(at);
            return false;
        }
        if self.bits.len() < bits {
            self.bits.push(0);
        }
        if changed {
            if let Some(b) = self.bits.last_mut() {
                *b |= 1 << (self.count % 8);
            }
            self.prev = input.clone();
        }
        self.count += 1;
        true
    }

    /// Appends the chain to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bits);
        out.extend_from_slice(&self.payload);
    }
}

/// Decodes a chain of exactly `count` inputs from exactly `bytes`.
pub fn decode_chain<I: Input>(bytes: &[u8], count: usize) -> Result<Vec<I>, WireError> {
    decode_chain_after(bytes, count, I::default())
}

/// Decodes a chain of exactly `count` inputs from exactly `bytes`, its
/// first input coded against `prev` (see [`ChainWriter::after`]).
pub fn decode_chain_after<I: Input>(
    bytes: &[u8],
    count: usize,
    prev: I,
) -> Result<Vec<I>, WireError> {
    let mut out = Vec::new();
    decode_chain_into(bytes, count, &prev, &mut out)?;
    Ok(out)
}

/// [`decode_chain_after`], appending to `out` (a buffer the caller reuses,
/// so decoding allocates nothing once it has grown). On an error `out` is
/// left as it was.
pub fn decode_chain_into<I: Input>(
    bytes: &[u8],
    count: usize,
    prev: &I,
    out: &mut Vec<I>,
) -> Result<(), WireError> {
    let at = out.len();
    let decoded = decode_chain_onto(bytes, count, prev, out);
    if decoded.is_err() {
        out.truncate(at);
    }
    decoded
}

/// Each input is read against the one before it where `out` holds it: no
/// input is copied but into `out`, once.
#[inline]
fn decode_chain_onto<I: Input>(
    bytes: &[u8],
    count: usize,
    first_prev: &I,
    out: &mut Vec<I>,
) -> Result<(), WireError> {
    let nbits = count.div_ceil(8);
    let (Some(bits), Some(mut rest)) = (bytes.get(..nbits), bytes.get(nbits..)) else {
        return Err(WireError::Truncated);
    };
    if !count.is_multiple_of(8) && bits.last().is_some_and(|b| b >> (count % 8) != 0) {
        return Err(WireError::Invalid("chain bitmap has bits past its count"));
    }
    // Every input costs at least a bit of the bitmap, which is there: no
    // more is reserved than the bytes allow.
    out.reserve(count);
    let at = out.len();
    for i in 0..count {
        let prev = match i {
            0 => first_prev,
            _ => &out[at + i - 1],
        };
        let next = if bits[i / 8] & (1 << (i % 8)) != 0 {
            let next = I::decode_delta(prev, &mut rest)?;
            if next == *prev {
                return Err(WireError::Invalid(
                    "chain marks an unchanged input as changed",
                ));
            }
            next
        } else {
            prev.clone()
        };
        out.push(next);
    }
    if !rest.is_empty() {
        return Err(WireError::TrailingBytes(rest.len()));
    }
    Ok(())
}

/// Inputs up to this size are XOR-coded with a mask of changed bytes;
/// longer ones with runs of zeros and literals.
const MASKED_MAX: usize = 64;

/// The default [`Input::encode_delta`]: the new encoding XOR the old one,
/// with unchanged bytes left out.
///
/// ```text
/// xor := len:varint                      length of the new encoding
///        if len <= 64: mask:varint       bit i set: byte i changed
///                      changed byte XORs, in order
///        else:         (zeros:varint literal:varint byte*literal)*
///                      until len bytes are covered
/// ```
pub fn xor_delta(prev: &[u8], next: &[u8], out: &mut Vec<u8>) {
    put_varint(out, next.len() as u64);
    let x = |i: usize| next[i] ^ prev.get(i).copied().unwrap_or(0);
    if next.len() <= MASKED_MAX {
        let mask = (0..next.len())
            .filter(|&i| x(i) != 0)
            .fold(0u64, |m, i| m | 1 << i);
        put_varint(out, mask);
        out.extend((0..next.len()).map(x).filter(|b| *b != 0));
        return;
    }
    let mut i = 0;
    while i < next.len() {
        let zeros = (i..next.len()).take_while(|&j| x(j) == 0).count();
        i += zeros;
        let literal = (i..next.len()).take_while(|&j| x(j) != 0).count();
        put_varint(out, zeros as u64);
        put_varint(out, literal as u64);
        out.extend((i..i + literal).map(x));
        i += literal;
    }
}

/// Reverses [`xor_delta`], reading from the front of `input` and advancing
/// it; returns the new encoding.
pub fn xor_undelta(prev: &[u8], input: &mut &[u8]) -> Result<Vec<u8>, InputDecodeError> {
    let mut r = Reader::new(input);
    let bad = |_| InputDecodeError::Invalid("malformed XOR delta");
    let len = r.len("input", super::MAX_INPUT_LEN).map_err(bad)?;
    let mut next: Vec<u8> = (0..len)
        .map(|i| prev.get(i).copied().unwrap_or(0))
        .collect();
    if len <= MASKED_MAX {
        let mask = r.varint().map_err(bad)?;
        if len < 64 && mask >> len != 0 {
            return Err(InputDecodeError::Invalid("XOR mask past the input"));
        }
        for (i, byte) in next.iter_mut().enumerate() {
            if mask & (1 << i) != 0 {
                let x = r.u8().map_err(bad)?;
                if x == 0 {
                    return Err(InputDecodeError::Invalid(
                        "XOR mask names an unchanged byte",
                    ));
                }
                *byte ^= x;
            }
        }
    } else {
        // Runs are maximal, as the encoder writes them: only the first may
        // start without zeros, only the last may end without a literal, and
        // literal bytes are never zero.
        let mut i = 0;
        let mut first = true;
        while i < len {
            let zeros = r.len("zeros", len - i).map_err(bad)?;
            let literal = r.len("literal", len - i - zeros).map_err(bad)?;
            if (zeros == 0 && !first) || (literal == 0 && i + zeros < len) {
                return Err(InputDecodeError::Invalid("XOR runs are not maximal"));
            }
            first = false;
            i += zeros;
            for b in r.bytes(literal).map_err(bad)? {
                if *b == 0 {
                    return Err(InputDecodeError::Invalid(
                        "XOR literal holds an unchanged byte",
                    ));
                }
                next[i] ^= b;
                i += 1;
            }
        }
    }
    let used = input.len() - r.remaining();
    *input = &input[used..];
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(prev: &[u8], next: &[u8]) -> usize {
        let mut out = Vec::new();
        xor_delta(prev, next, &mut out);
        let mut cursor = &out[..];
        assert_eq!(xor_undelta(prev, &mut cursor).as_deref(), Ok(next));
        assert!(cursor.is_empty());
        out.len()
    }

    #[test]
    fn xor_deltas_round_trip_at_every_size() {
        assert_eq!(
            round(&[1, 2, 3, 4], &[1, 2, 9, 4]),
            3,
            "len, mask, one byte"
        );
        round(&[], &[5; 10]);
        round(&[5; 10], &[]);
        round(&[1; 64], &[2; 64]);
        let long_prev: Vec<u8> = (0..300).map(|i| i as u8).collect();
        let mut long_next = long_prev.clone();
        long_next[7] ^= 0xFF;
        long_next[250] ^= 1;
        assert!(round(&long_prev, &long_next) < 12);
        round(&long_prev, &[0; 65]);
    }

    #[test]
    fn chains_cost_a_bit_per_unchanged_input() {
        let inputs: Vec<u32> = [7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 9, 9].to_vec();
        let mut w = ChainWriter::new();
        for i in &inputs {
            assert!(w.push(i, 1000));
        }
        let mut out = Vec::new();
        w.write(&mut out);
        // 2 bitmap bytes + two deltas of 3 bytes (length, mask, one byte).
        assert_eq!(out.len(), 2 + 3 + 3);
        assert_eq!(decode_chain::<u32>(&out, inputs.len()), Ok(inputs));
        // Twelve neutral inputs: the bitmap alone.
        let mut w = ChainWriter::new();
        for _ in 0..12 {
            w.push(&0u32, 1000);
        }
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn chains_respect_the_budget() {
        let mut w = ChainWriter::new();
        let mut n = 0u32;
        while w.push(&n, 20) {
            n += 1;
        }
        assert!(w.len() <= 20);
        let mut out = Vec::new();
        w.write(&mut out);
        assert_eq!(
            decode_chain::<u32>(&out, w.count()).map(|v| v.len()),
            Ok(w.count())
        );
    }

    #[test]
    fn malformed_chains_are_typed_errors() {
        assert_eq!(decode_chain::<u32>(&[], 3), Err(WireError::Truncated));
        assert!(matches!(
            decode_chain::<u32>(&[0b1000], 3),
            Err(WireError::Invalid(_))
        ));
        assert!(matches!(
            decode_chain::<u32>(&[0, 1], 3),
            Err(WireError::TrailingBytes(1))
        ));
        // A set bit with a delta that changes nothing.
        assert!(matches!(
            decode_chain::<u32>(&[1, 4, 0], 1),
            Err(WireError::Invalid(_))
        ));
        // An endless run of empty XOR tokens.
        let mut long = vec![0b1u8];
        put_varint(&mut long, 100);
        long.extend_from_slice(&[0, 0, 0, 0]);
        assert!(decode_chain::<Vec<u8>>(&long, 1).is_err());
    }
}
