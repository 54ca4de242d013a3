//! A ready-made input type for action games.

use crate::input::{Input, InputDecodeError};
use crate::wire::InputCodec;
use crate::wire::codec::{Reader, put_varint};
use half::f16;

/// Most extra bytes a [`PlayerInputs`] may carry.
pub const MAX_EXTRA: usize = 64;

const MOVEMENT: u8 = 1 << 0;
const AIM: u8 = 1 << 1;
const POINTER: u8 = 1 << 2;
const BUTTONS: u8 = 1 << 3;
const EXTRA: u8 = 1 << 4;
const ALL: u8 = MOVEMENT | AIM | POINTER | BUTTONS | EXTRA;

/// The common controls of an action game, in a compact, deterministic form.
///
/// Sticks are quantized to 255 steps per axis (`-127..=127`), the pointer is
/// two IEEE 754 half floats, buttons are a bitset, and `extra` carries up to
/// [`MAX_EXTRA`] game-specific bytes. Everything is an integer, so the
/// simulation reads exactly the same values on every machine; quantize once,
/// when sampling, with the helpers.
///
/// On the wire, an input is a mask of the fields that differ from the
/// previous tick's followed by those fields only; an input equal to the
/// previous one costs one bit in its chain.
///
/// ```
/// use lockstep_core::PlayerInputs;
///
/// let held = PlayerInputs::default().with_movement(0.0, 1.0).with_button(0, true);
/// let mut aiming = held.clone();
/// aiming.aim = PlayerInputs::quantize_stick(0.5, -0.5);
///
/// assert_eq!(held.changed_since(&held), None);
/// let delta = aiming.changed_since(&held).expect("the aim moved");
/// assert!(delta.movement.is_none() && delta.aim.is_some());
/// assert_eq!(held.apply(&delta), aiming);
/// ```
#[derive(Debug, Default, Eq)]
pub struct PlayerInputs {
    /// Movement (left) stick, x then y, each in `-127..=127`.
    pub movement: [i8; 2],
    /// Aim (right) stick, x then y, each in `-127..=127`.
    pub aim: [i8; 2],
    /// Pointer position, x then y, as half-float bits.
    pub pointer: [u16; 2],
    /// Buttons, one bit each.
    pub buttons: u32,
    /// Game-specific bytes, at most [`MAX_EXTRA`].
    pub extra: Vec<u8>,
}

/// Field by field, as derived, but without a library call for the extra
/// bytes when there are none (the usual case): every input of every chain
/// is compared with the one before it.
impl PartialEq for PlayerInputs {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.movement == other.movement
            && self.aim == other.aim
            && self.pointer == other.pointer
            && self.buttons == other.buttons
            && same_bytes(&self.extra, &other.extra)
    }
}

/// Field by field, as derived, but without a library call for the extra
/// bytes when there are none: chains clone every input they read.
impl Clone for PlayerInputs {
    #[inline]
    fn clone(&self) -> Self {
        Self {
            movement: self.movement,
            aim: self.aim,
            pointer: self.pointer,
            buttons: self.buttons,
            extra: clone_bytes(&self.extra),
        }
    }
}

/// Field by field, as derived: consistent with the equality above.
impl core::hash::Hash for PlayerInputs {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.movement.hash(state);
        self.aim.hash(state);
        self.pointer.hash(state);
        self.buttons.hash(state);
        self.extra.hash(state);
    }
}

/// `a.to_vec()`, with the empty case in line.
#[inline]
fn clone_bytes(a: &[u8]) -> Vec<u8> {
    if a.is_empty() { Vec::new() } else { a.to_vec() }
}

/// `a == b`, with the empty case in line.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

/// The fields of a [`PlayerInputs`] that changed; `None` means unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct InputDelta {
    /// The new movement stick.
    pub movement: Option<[i8; 2]>,
    /// The new aim stick.
    pub aim: Option<[i8; 2]>,
    /// The new pointer.
    pub pointer: Option<[u16; 2]>,
    /// The new buttons.
    pub buttons: Option<u32>,
    /// The new extra bytes.
    pub extra: Option<Vec<u8>>,
}

impl PlayerInputs {
    /// One stick axis in `-1.0..=1.0` as one of 255 steps. Out-of-range
    /// values clamp; NaN is centred.
    pub fn quantize_axis(v: f32) -> i8 {
        if v.is_nan() {
            return 0;
        }
        (v.clamp(-1.0, 1.0) * 127.0).round() as i8
    }

    /// A stick as two quantized axes.
    pub fn quantize_stick(x: f32, y: f32) -> [i8; 2] {
        [Self::quantize_axis(x), Self::quantize_axis(y)]
    }

    /// A quantized axis back in `-1.0..=1.0`.
    pub fn axis(v: i8) -> f32 {
        f32::from(v) / 127.0
    }

    /// This input with the movement stick set from floats.
    pub fn with_movement(mut self, x: f32, y: f32) -> Self {
        self.movement = Self::quantize_stick(x, y);
        self
    }

    /// This input with the aim stick set from floats.
    pub fn with_aim(mut self, x: f32, y: f32) -> Self {
        self.aim = Self::quantize_stick(x, y);
        self
    }

    /// This input with the pointer set from floats (stored as half floats).
    pub fn with_pointer(mut self, x: f32, y: f32) -> Self {
        self.pointer = [f16::from_f32(x).to_bits(), f16::from_f32(y).to_bits()];
        self
    }

    /// This input with button `bit` (0..32) down or up.
    pub fn with_button(mut self, bit: u8, down: bool) -> Self {
        self.set_button(bit, down);
        self
    }

    /// Sets button `bit` (0..32); bits past 31 are ignored.
    pub fn set_button(&mut self, bit: u8, down: bool) {
        if let Some(m) = 1u32.checked_shl(u32::from(bit)) {
            if down {
                self.buttons |= m;
            } else {
                self.buttons &= !m;
            }
        }
    }

    /// Whether button `bit` is down.
    pub fn button(&self, bit: u8) -> bool {
        1u32.checked_shl(u32::from(bit))
            .is_some_and(|m| self.buttons & m != 0)
    }

    /// The pointer as floats.
    pub fn pointer_f32(&self) -> [f32; 2] {
        self.pointer.map(|b| f16::from_bits(b).to_f32())
    }

    /// What changed since `prev`, or `None` if nothing did.
    pub fn changed_since(&self, prev: &Self) -> Option<InputDelta> {
        if self == prev {
            return None;
        }
        let pick = |changed: bool| changed.then_some(());
        Some(InputDelta {
            movement: pick(self.movement != prev.movement).map(|()| self.movement),
            aim: pick(self.aim != prev.aim).map(|()| self.aim),
            pointer: pick(self.pointer != prev.pointer).map(|()| self.pointer),
            buttons: pick(self.buttons != prev.buttons).map(|()| self.buttons),
            extra: pick(self.extra != prev.extra).map(|()| self.extra.clone()),
        })
    }

    /// This input with `delta`'s changes applied.
    pub fn apply(&self, delta: &InputDelta) -> Self {
        Self {
            movement: delta.movement.unwrap_or(self.movement),
            aim: delta.aim.unwrap_or(self.aim),
            pointer: delta.pointer.unwrap_or(self.pointer),
            buttons: delta.buttons.unwrap_or(self.buttons),
            extra: delta.extra.clone().unwrap_or_else(|| self.extra.clone()),
        }
    }

    /// Appends the fields in `mask`. The fixed fields are gathered in one
    /// 128-bit word, appended as one fixed-size copy and cut to their
    /// length: a copy of a length known only at run time is a library
    /// call, and bytes gathered one by one in memory and then copied as
    /// words stall the copy until every byte store has landed. This runs
    /// for every input of every chain and every reference check.
    #[inline]
    fn put_fields(&self, mask: u8, out: &mut Vec<u8>) {
        // The mask, two sticks, the pointer, buttons as a varint of at
        // most 5 bytes: 14 bytes, little-endian in `word`.
        let mut word = u128::from(mask);
        let mut bits = 8;
        let mut put = |value: u64, width: u32| {
            word |= u128::from(value) << bits;
            bits += width;
        };
        if mask & MOVEMENT != 0 {
            put(
                u64::from(u16::from_le_bytes(self.movement.map(|v| v as u8))),
                16,
            );
        }
        if mask & AIM != 0 {
            put(u64::from(u16::from_le_bytes(self.aim.map(|v| v as u8))), 16);
        }
        if mask & POINTER != 0 {
            let [x, y] = self.pointer.map(u64::from);
            put(x | y << 16, 32);
        }
        if mask & BUTTONS != 0 {
            let mut v = u64::from(self.buttons);
            while v >= 0x80 {
                put((v & 0x7F) | 0x80, 8);
                v >>= 7;
            }
            put(v, 8);
        }
        let at = out.len();
        out.extend_from_slice(&word.to_le_bytes());
        out.truncate(at + bits as usize / 8);
        if mask & EXTRA != 0 {
            put_varint(out, self.extra.len() as u64);
            out.extend_from_slice(&self.extra);
        }
    }

    /// Reads fields named by the mask over `base`; each present field must
    /// differ from `base`'s (the encoding is canonical).
    #[inline]
    fn read_fields(base: &Self, r: &mut Reader<'_>) -> Result<Self, InputDecodeError> {
        let bad = |_| InputDecodeError::Invalid("truncated player input");
        let unchanged = || InputDecodeError::Invalid("field marked changed is unchanged");
        let mask = r.u8().map_err(bad)?;
        if mask & !ALL != 0 {
            return Err(InputDecodeError::Invalid("unknown player input field"));
        }
        let stick = |r: &mut Reader<'_>, was: [i8; 2]| -> Result<[i8; 2], InputDecodeError> {
            let b = r.bytes(2).map_err(bad)?;
            let s = [b[0] as i8, b[1] as i8];
            if s.contains(&i8::MIN) {
                return Err(InputDecodeError::Invalid("stick axis out of range"));
            }
            if s == was {
                return Err(unchanged());
            }
            Ok(s)
        };
        let movement = if mask & MOVEMENT != 0 {
            stick(r, base.movement)?
        } else {
            base.movement
        };
        let aim = if mask & AIM != 0 {
            stick(r, base.aim)?
        } else {
            base.aim
        };
        let pointer = if mask & POINTER != 0 {
            let p = [r.u16_le().map_err(bad)?, r.u16_le().map_err(bad)?];
            if p == base.pointer {
                return Err(unchanged());
            }
            p
        } else {
            base.pointer
        };
        let buttons = if mask & BUTTONS != 0 {
            let b = r.varint_u32().map_err(bad)?;
            if b == base.buttons {
                return Err(unchanged());
            }
            b
        } else {
            base.buttons
        };
        let extra = if mask & EXTRA != 0 {
            let n = r
                .len("extra", MAX_EXTRA)
                .map_err(|_| InputDecodeError::Invalid("extra bytes over the limit"))?;
            let e = r.bytes(n).map_err(bad)?;
            if e == base.extra.as_slice() {
                return Err(unchanged());
            }
            e.to_vec()
        } else {
            clone_bytes(&base.extra)
        };
        Ok(Self {
            movement,
            aim,
            pointer,
            buttons,
            extra,
        })
    }

    #[inline]
    fn mask_against(&self, other: &Self) -> u8 {
        let mut m = 0;
        if self.movement != other.movement {
            m |= MOVEMENT;
        }
        if self.aim != other.aim {
            m |= AIM;
        }
        if self.pointer != other.pointer {
            m |= POINTER;
        }
        if self.buttons != other.buttons {
            m |= BUTTONS;
        }
        if !same_bytes(&self.extra, &other.extra) {
            m |= EXTRA;
        }
        m
    }
}

/// `mask` then the fields that differ from the neutral input; the delta is
/// the same against the previous input.
impl Input for PlayerInputs {
    const CODEC: InputCodec = InputCodec::PlayerInputs;

    #[inline(always)]
    fn encode(&self, out: &mut Vec<u8>) {
        self.put_fields(self.mask_against(&Self::default()), out);
    }

    fn decode(bytes: &[u8]) -> Result<Self, InputDecodeError> {
        let mut r = Reader::new(bytes);
        let v = Self::read_fields(&Self::default(), &mut r)?;
        if !r.is_empty() {
            return Err(InputDecodeError::Invalid(
                "trailing bytes after player input",
            ));
        }
        if v.movement.contains(&i8::MIN) || v.aim.contains(&i8::MIN) {
            return Err(InputDecodeError::Invalid("stick axis out of range"));
        }
        Ok(v)
    }

    #[inline]
    fn encode_delta(&self, prev: &Self, out: &mut Vec<u8>) {
        self.put_fields(self.mask_against(prev), out);
    }

    #[inline]
    fn decode_delta(prev: &Self, input: &mut &[u8]) -> Result<Self, InputDecodeError> {
        if input.first() == Some(&0) {
            return Err(InputDecodeError::Invalid("a delta that changes nothing"));
        }
        let mut r = Reader::new(input);
        let v = Self::read_fields(prev, &mut r)?;
        *input = &input[input.len() - r.remaining()..];
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantization_has_255_steps_and_clamps() {
        assert_eq!(PlayerInputs::quantize_axis(1.0), 127);
        assert_eq!(PlayerInputs::quantize_axis(-1.0), -127);
        assert_eq!(PlayerInputs::quantize_axis(5.0), 127);
        assert_eq!(PlayerInputs::quantize_axis(f32::NAN), 0);
        assert_eq!(PlayerInputs::quantize_axis(0.5), 64);
        let p = PlayerInputs::default().with_pointer(0.25, -3.5);
        assert_eq!(p.pointer_f32(), [0.25, -3.5]);
    }

    #[test]
    fn sizes_on_the_wire() {
        let mut out = Vec::new();
        PlayerInputs::default().encode(&mut out);
        assert_eq!(out, [0], "neutral: the mask alone");
        let a = PlayerInputs::default()
            .with_movement(1.0, 0.0)
            .with_button(3, true);
        out.clear();
        a.encode(&mut out);
        assert_eq!(out.len(), 1 + 2 + 1);
        let b = a.clone().with_button(4, true);
        out.clear();
        b.encode_delta(&a, &mut out);
        assert_eq!(out.len(), 2, "a button change: mask and buttons");
    }

    #[test]
    fn equality_clone_and_hash_are_field_by_field_as_derived() {
        use core::hash::{Hash, Hasher};
        use std::collections::hash_map::DefaultHasher;
        let hash = |v: &dyn Fn(&mut DefaultHasher)| {
            let mut h = DefaultHasher::new();
            v(&mut h);
            h.finish()
        };
        let a = PlayerInputs::default()
            .with_movement(0.5, -1.0)
            .with_pointer(0.25, 2.0)
            .with_button(7, true);
        let mut b = a.clone();
        b.extra = vec![1, 2, 3];
        for p in [&a, &b, &PlayerInputs::default()] {
            let fields = (p.movement, p.aim, p.pointer, p.buttons, &p.extra);
            assert_eq!(hash(&|h| p.hash(h)), hash(&|h| fields.hash(h)));
            assert_eq!(p.clone(), *p);
        }
        assert_ne!(a, b);
        let mut c = b.clone();
        c.extra = vec![1, 2, 4];
        assert_ne!(b, c);
        c.extra = vec![1, 2, 3];
        assert_eq!(b, c);
    }

    #[test]
    fn every_field_has_its_bytes() {
        let full = PlayerInputs {
            movement: [1, -1],
            aim: [2, 3],
            pointer: [0x1234, 0xABCD],
            buttons: u32::MAX,
            extra: vec![9, 8],
        };
        let mut out = vec![0xEE];
        full.encode(&mut out);
        assert_eq!(
            out,
            [
                0xEE, // what was there before
                0x1F, // every field
                0x01, 0xFF, // movement
                0x02, 0x03, // aim
                0x34, 0x12, 0xCD, 0xAB, // pointer, x then y
                0xFF, 0xFF, 0xFF, 0xFF, 0x0F, // buttons, a varint of 5 bytes
                0x02, 0x09, 0x08, // extra: length, bytes
            ]
        );
        assert_eq!(PlayerInputs::decode(&out[1..]), Ok(full.clone()));
        // Against an input with other buttons only: the mask and buttons.
        let prev = PlayerInputs {
            buttons: 0x80,
            ..full.clone()
        };
        out.clear();
        full.encode_delta(&prev, &mut out);
        assert_eq!(out, [BUTTONS, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]);
        let mut cursor = &out[..];
        assert_eq!(PlayerInputs::decode_delta(&prev, &mut cursor), Ok(full));
        assert!(cursor.is_empty());
    }

    #[test]
    fn non_canonical_bytes_are_refused() {
        assert!(PlayerInputs::decode(&[0x20]).is_err(), "unknown field");
        assert!(PlayerInputs::decode(&[MOVEMENT, 0x80, 0]).is_err(), "-128");
        assert!(
            PlayerInputs::decode(&[MOVEMENT, 0, 0]).is_err(),
            "neutral marked present"
        );
        assert!(PlayerInputs::decode(&[0, 0]).is_err(), "trailing");
        assert!(
            PlayerInputs::decode(&[EXTRA, 65]).is_err(),
            "extra too long"
        );
        assert!(PlayerInputs::decode(&[BUTTONS]).is_err(), "truncated");
    }
}
