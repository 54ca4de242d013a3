//! Byte-level reading and writing shared by every message.
//!
//! Writers append to a caller-owned `Vec<u8>`; the reader walks a borrowed
//! slice and returns a typed [`WireError`] on anything malformed. No length
//! read from the wire is trusted before it is checked against both a bound
//! and the bytes actually remaining.

use super::WireError;
use crate::Tick;

/// Appends `v` as an unsigned LEB128 varint (1 to 10 bytes).
#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The number of bytes [`put_varint`] writes for `v`.
#[cfg(test)]
pub(crate) const fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

#[inline]
pub(crate) fn put_tick(out: &mut Vec<u8>, t: Tick) {
    put_varint(out, u64::from(t.get()));
}

#[inline]
pub(crate) fn put_u64_le(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// The largest distance a tick field may be from its datagram's base tick.
pub const MAX_TICK_DELTA: i64 = 1 << 20;

/// Appends `t` as a zigzag varint of its distance from `base`.
#[inline]
pub(crate) fn put_tick_delta(out: &mut Vec<u8>, base: Tick, t: Tick) {
    let d = i64::from(t.get()) - i64::from(base.get());
    put_varint(out, ((d << 1) ^ (d >> 63)) as u64);
}

/// Appends a length-prefixed UTF-8 string.
#[inline]
pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Appends length-prefixed bytes.
#[inline]
pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// The full tick whose low 16 bits are `low`, nearest to `reference`.
///
/// Both ends of a link are within a few seconds of each other, far inside
/// the ±32 768 ticks this resolves, so the nearest candidate is the one
/// meant; near tick 0 and `u32::MAX` only candidates inside `u32` count.
///
/// ```text
/// reference 0x0001_FFF0, low 0x0005  ->  0x0002_0005 (forward across the wrap)
/// reference 0x0002_0003, low 0xFFFE  ->  0x0001_FFFE (backward across it)
/// ```
pub fn expand_tick(low: u16, reference: Tick) -> Tick {
    let r = i64::from(reference.get());
    let candidate = (r & !0xFFFF) | i64::from(low);
    [candidate - 0x1_0000, candidate, candidate + 0x1_0000]
        .into_iter()
        .filter(|c| (0..=i64::from(u32::MAX)).contains(c))
        .min_by_key(|c| (c - r).abs())
        .map_or(reference, |c| Tick::new(c as u32))
}

/// A cursor over untrusted bytes.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The next byte, left unread.
    #[inline]
    pub(crate) fn peek_u8(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    #[inline]
    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        let b = *self.bytes.get(self.pos).ok_or(WireError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated);
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut arr = [0u8; N];
        arr.copy_from_slice(self.bytes(N)?);
        Ok(arr)
    }

    #[inline]
    pub(crate) fn u32_le(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    #[inline]
    pub(crate) fn u64_le(&mut self) -> Result<u64, WireError> {
        let b = self.bytes(8)?;
        let mut arr = [0u8; 8];
        arr.copy_from_slice(b);
        Ok(u64::from_le_bytes(arr))
    }

    /// An unsigned LEB128 varint of at most 10 bytes that fits in 64 bits.
    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64, WireError> {
        // Most varints on the wire are one byte: read those in line.
        match self.bytes.get(self.pos) {
            Some(&b) if b < 0x80 => {
                self.pos += 1;
                Ok(u64::from(b))
            }
            _ => self.varint_long(),
        }
    }

    fn varint_long(&mut self) -> Result<u64, WireError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.u8()?;
            let part = u64::from(b & 0x7f);
            if i == 9 && part > 1 {
                return Err(WireError::VarintOverflow);
            }
            v |= part << (7 * i);
            if b & 0x80 == 0 {
                // A final zero byte after the first adds nothing: the same
                // number has a shorter encoding, and only that one is valid.
                if i > 0 && b == 0 {
                    return Err(WireError::Invalid("varint is not minimal"));
                }
                return Ok(v);
            }
        }
        Err(WireError::VarintOverflow)
    }

    /// A varint that must fit in 32 bits.
    #[inline]
    pub(crate) fn varint_u32(&mut self) -> Result<u32, WireError> {
        u32::try_from(self.varint()?).map_err(|_| WireError::VarintOverflow)
    }

    #[inline]
    pub(crate) fn tick(&mut self) -> Result<Tick, WireError> {
        self.varint_u32().map(Tick::new)
    }

    #[inline]
    pub(crate) fn u16_le(&mut self) -> Result<u16, WireError> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    /// A tick written by [`put_tick_delta`] against `base`.
    #[inline]
    pub(crate) fn tick_delta(&mut self, base: Tick) -> Result<Tick, WireError> {
        let z = self.varint()?;
        let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
        if !(-MAX_TICK_DELTA..=MAX_TICK_DELTA).contains(&d) {
            return Err(WireError::TickOutOfWindow);
        }
        let t = i64::from(base.get()) + d;
        u32::try_from(t)
            .map(Tick::new)
            .map_err(|_| WireError::TickOutOfWindow)
    }

    /// A length-prefixed UTF-8 string of at most `max` bytes.
    #[inline]
    pub(crate) fn str(&mut self, what: &'static str, max: usize) -> Result<&'a str, WireError> {
        let n = self.len(what, max)?;
        core::str::from_utf8(self.bytes(n)?).map_err(|_| WireError::BadUtf8(what))
    }

    /// Length-prefixed bytes, at most `max`.
    #[inline(always)]
    pub(crate) fn byte_string(
        &mut self,
        what: &'static str,
        max: usize,
    ) -> Result<&'a [u8], WireError> {
        let n = self.len(what, max)?;
        self.bytes(n)
    }

    /// A count or length that may not exceed `max` nor the bytes left
    /// (every counted item takes at least one byte).
    #[inline]
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
    #[inline]
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

    /// Reads something of its own length from the front of what remains:
    /// `read` returns it and how many bytes it took.
    #[inline]
    pub(crate) fn read_with<T>(
        &mut self,
        read: impl FnOnce(&'a [u8]) -> Result<(T, usize), WireError>,
    ) -> Result<T, WireError> {
        let rest = &self.bytes[self.pos..];
        let (v, used) = read(rest)?;
        if used > rest.len() {
            return Err(WireError::Truncated);
        }
        self.pos += used;
        Ok(v)
    }

    #[inline]
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
    fn tick_deltas_round_trip_and_refuse_far_ticks() {
        for (base, t) in [
            (0u32, 0u32),
            (100, 90),
            (100, 5000),
            (u32::MAX, u32::MAX - 7),
            (7, u32::MAX),
        ] {
            let mut buf = Vec::new();
            put_tick_delta(&mut buf, Tick::new(base), Tick::new(t));
            let got = Reader::new(&buf).tick_delta(Tick::new(base));
            if (i64::from(t) - i64::from(base)).abs() <= MAX_TICK_DELTA {
                assert_eq!(got, Ok(Tick::new(t)), "{base} -> {t}");
            } else {
                assert_eq!(got, Err(WireError::TickOutOfWindow), "{base} -> {t}");
            }
        }
        // A delta that leaves u32.
        let mut buf = Vec::new();
        put_tick_delta(&mut buf, Tick::new(3), Tick::new(0));
        assert_eq!(
            Reader::new(&buf).tick_delta(Tick::new(1)),
            Err(WireError::TickOutOfWindow)
        );
    }

    #[test]
    fn sixteen_bit_ticks_expand_across_every_wrap() {
        let cases = [
            (0x0001_FFF0u32, 0x0005u16, 0x0002_0005u32),
            (0x0002_0003, 0xFFFE, 0x0001_FFFE),
            (0, 0xFFFF, 0xFFFF),
            (5, 3, 3),
            (u32::MAX, 0x0002, u32::MAX),
            (u32::MAX - 3, 0xFFF0, 0xFFFF_FFF0),
            (0x0000_8000, 0x0000, 0x0000_0000),
        ];
        for (reference, low, want) in cases {
            let got = expand_tick(low, Tick::new(reference));
            if want == u32::MAX && low == 0x0002 {
                // Past u32::MAX there is nothing; the nearest legal tick wins.
                assert_eq!(got, Tick::new(0xFFFF_0002), "{reference:#x} {low:#x}");
            } else {
                assert_eq!(got, Tick::new(want), "{reference:#x} {low:#x}");
            }
        }
        // Every tick within ±32 767 of the reference round-trips.
        for reference in [
            0u32,
            1,
            0x7FFF,
            0xFFFF,
            0x1_0000,
            0x1234_5678,
            u32::MAX - 1,
            u32::MAX,
        ] {
            for d in [-32_767i64, -1, 0, 1, 32_767] {
                let t = i64::from(reference) + d;
                let Ok(t) = u32::try_from(t) else { continue };
                assert_eq!(expand_tick(t as u16, Tick::new(reference)), Tick::new(t));
            }
        }
    }

    #[test]
    fn non_minimal_varints_are_refused() {
        assert_eq!(
            Reader::new(&[0x87, 0x00]).varint(),
            Err(WireError::Invalid("varint is not minimal"))
        );
        assert_eq!(Reader::new(&[0x80, 0x01]).varint(), Ok(128));
        assert_eq!(Reader::new(&[0x00]).varint(), Ok(0));
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
