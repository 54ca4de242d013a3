//! Byte-level reading and writing shared by every message.
//!
//! Writers append to a caller-owned `Vec<u8>`; the reader walks a borrowed
//! slice and returns a typed [`WireError`] on anything malformed. No length
//! read from the wire is trusted before it is checked against both a bound
//! and the bytes actually remaining.

use super::WireError;
use crate::Tick;

/// Appends `v` as an unsigned LEB128 varint (1 to 10 bytes).
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The number of bytes [`put_varint`] writes for `v`.
pub(crate) const fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

pub(crate) fn put_tick(out: &mut Vec<u8>, t: Tick) {
    put_varint(out, u64::from(t.get()));
}

pub(crate) fn put_u64_le(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A cursor over untrusted bytes.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        let b = *self.bytes.get(self.pos).ok_or(WireError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated);
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn u64_le(&mut self) -> Result<u64, WireError> {
        let b = self.bytes(8)?;
        let mut arr = [0u8; 8];
        arr.copy_from_slice(b);
        Ok(u64::from_le_bytes(arr))
    }

    /// An unsigned LEB128 varint of at most 10 bytes that fits in 64 bits.
    pub(crate) fn varint(&mut self) -> Result<u64, WireError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.u8()?;
            let part = u64::from(b & 0x7f);
            if i == 9 && part > 1 {
                return Err(WireError::VarintOverflow);
            }
            v |= part << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(WireError::VarintOverflow)
    }

    /// A varint that must fit in 32 bits.
    pub(crate) fn varint_u32(&mut self) -> Result<u32, WireError> {
        u32::try_from(self.varint()?).map_err(|_| WireError::VarintOverflow)
    }

    pub(crate) fn tick(&mut self) -> Result<Tick, WireError> {
        self.varint_u32().map(Tick::new)
    }

    /// A count or length that may not exceed `max` nor the bytes left
    /// (every counted item takes at least one byte).
    pub(crate) fn len(&mut self, what: &'static str, max: usize) -> Result<usize, WireError> {
        let n = self.varint()?;
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if n > max {
            return Err(WireError::TooLong { what, len: n, max });
        }
        Ok(n)
    }

    /// A count of items, each at least `min_item` bytes: bounded by `max`
    /// and by what the remaining bytes could possibly hold, so a forged
    /// count can never drive an allocation.
    pub(crate) fn count(
        &mut self,
        what: &'static str,
        max: usize,
        min_item: usize,
    ) -> Result<usize, WireError> {
        let n = self.len(what, max)?;
        if n.saturating_mul(min_item.max(1)) > self.remaining() {
            return Err(WireError::Truncated);
        }
        Ok(n)
    }

    pub(crate) fn finish(self) -> Result<(), WireError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(WireError::TrailingBytes(self.remaining()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_report_their_length() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            assert_eq!(buf.len(), varint_len(v), "{v}");
            let mut r = Reader::new(&buf);
            assert_eq!(r.varint(), Ok(v));
            assert!(r.finish().is_ok());
        }
    }

    #[test]
    fn overlong_varints_are_refused() {
        let eleven = [0xffu8; 11];
        assert_eq!(
            Reader::new(&eleven).varint(),
            Err(WireError::VarintOverflow)
        );
        // Ten bytes whose last one carries more than the 64th bit.
        let mut too_big = [0xffu8; 10];
        too_big[9] = 0x02;
        assert_eq!(
            Reader::new(&too_big).varint(),
            Err(WireError::VarintOverflow)
        );
        let mut buf = Vec::new();
        put_varint(&mut buf, u64::from(u32::MAX) + 1);
        assert_eq!(
            Reader::new(&buf).varint_u32(),
            Err(WireError::VarintOverflow)
        );
    }

    #[test]
    fn counts_cannot_exceed_the_bytes_left() {
        let mut buf = Vec::new();
        put_varint(&mut buf, 1_000);
        buf.extend_from_slice(&[0; 10]);
        assert_eq!(
            Reader::new(&buf).count("things", 5_000, 1),
            Err(WireError::Truncated)
        );
        assert!(matches!(
            Reader::new(&buf).count("things", 10, 1),
            Err(WireError::TooLong {
                len: 1_000,
                max: 10,
                ..
            })
        ));
    }
}

/// Appends `varint(len) ++ bytes` where `bytes` is whatever `write` appends,
/// without encoding twice: one length byte is reserved and widened in place
/// in the rare case the payload reaches 128 bytes.
pub(crate) fn put_len_prefixed(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.push(0);
    write(out);
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(3);
        put_varint(&mut prefix, len as u64);
        out.splice(at..=at, prefix);
    }
}

#[cfg(test)]
mod prefix_tests {
    use super::*;

    #[test]
    fn length_prefix_is_widened_for_long_payloads() {
        for n in [0usize, 1, 127, 128, 300, 20_000] {
            let mut out = vec![9u8];
            put_len_prefixed(&mut out, |o| o.extend(std::iter::repeat_n(7u8, n)));
            let mut r = Reader::new(&out[1..]);
            let len = r.len("payload", usize::MAX).unwrap_or(usize::MAX);
            assert_eq!(len, n);
            assert_eq!(r.bytes(len).map(<[u8]>::len), Ok(n));
            assert!(r.finish().is_ok());
        }
    }
}
