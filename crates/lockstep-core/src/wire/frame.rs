//! The canonical encoding of a confirmed frame.
//!
//! ```text
//! frame  := tick:varint body
//! body   := seats:varint cell*seats events:varint event*events
//! cell   := 0x00                       seat empty at this tick
//!         | 0x01 len:varint bytes      the seat's input, as Input::encode
//! event  := 0x01 player:varint         Joined
//!         | 0x02 player:varint         Abandoned
//! ```
//!
//! The encoding is what [`StreamHash`](crate::StreamHash) hashes, so it is
//! fixed for a protocol version.

use super::WireError;
use super::chain::{ChainWriter, decode_chain};
use super::codec::{Reader, put_len_prefixed, put_tick, put_varint};
use crate::frame::{Frame, SystemEvent};
use crate::input::Input;
use crate::{PlayerId, Tick};

const CELL_EMPTY: u8 = 0;
const CELL_INPUT: u8 = 1;
const EVENT_JOINED: u8 = 1;
const EVENT_ABANDONED: u8 = 2;
const EVENT_LEFT: u8 = 3;
const EVENT_CAUGHT_UP: u8 = 4;
const EVENT_HOST_CHANGED: u8 = 5;
const EVENT_DELAY_CHANGED: u8 = 6;

/// Most system events one frame may carry on the wire.
pub(crate) const MAX_EVENTS: usize = 256;

/// Appends the canonical encoding of `frame`.
pub fn encode_frame<I: Input>(frame: &Frame<I>, out: &mut Vec<u8>) {
    put_tick(out, frame.tick);
    put_body(out, frame.inputs.iter().map(Option::as_ref), &frame.events);
}

/// One seat's entry in a frame body, typed or already encoded.
pub(crate) trait Cell {
    fn put(&self, out: &mut Vec<u8>);
}

impl<I: Input> Cell for Option<&I> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(CELL_EMPTY),
            Some(input) => {
                out.push(CELL_INPUT);
                put_len_prefixed(out, |o| input.encode(o));
            }
        }
    }
}

impl Cell for Option<&[u8]> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(CELL_EMPTY),
            Some(bytes) => {
                out.push(CELL_INPUT);
                put_varint(out, bytes.len() as u64);
                out.extend_from_slice(bytes);
            }
        }
    }
}

/// Appends a frame body (everything but the tick).
pub(crate) fn put_body<C: Cell>(
    out: &mut Vec<u8>,
    cells: impl ExactSizeIterator<Item = C>,
    events: &[SystemEvent],
) {
    put_varint(out, cells.len() as u64);
    for cell in cells {
        cell.put(out);
    }
    put_varint(out, events.len() as u64);
    for ev in events {
        put_event(out, ev);
    }
}

pub(crate) fn put_event(out: &mut Vec<u8>, ev: &SystemEvent) {
    let tag = match ev {
        SystemEvent::Joined { .. } => EVENT_JOINED,
        SystemEvent::Abandoned { .. } => EVENT_ABANDONED,
        SystemEvent::Left { .. } => EVENT_LEFT,
        SystemEvent::CaughtUp { .. } => EVENT_CAUGHT_UP,
        SystemEvent::HostChanged { .. } => EVENT_HOST_CHANGED,
        SystemEvent::DelayChanged { delay } => {
            out.push(EVENT_DELAY_CHANGED);
            put_varint(out, u64::from(*delay));
            return;
        }
    };
    out.push(tag);
    put_varint(out, u64::from(ev.player().map_or(0, |p| p.0)));
}

pub(crate) fn read_event(r: &mut Reader<'_>) -> Result<SystemEvent, WireError> {
    let tag = r.u8()?;
    if tag == EVENT_DELAY_CHANGED {
        return match u32::try_from(r.varint()?) {
            Ok(delay) if (1..=super::MAX_DELAY).contains(&delay) => {
                Ok(SystemEvent::DelayChanged { delay })
            }
            _ => Err(WireError::Invalid("delay not 1 to 1024 ticks")),
        };
    }
    let player = read_player(r)?;
    match tag {
        EVENT_JOINED => Ok(SystemEvent::Joined { player }),
        EVENT_ABANDONED => Ok(SystemEvent::Abandoned { player }),
        EVENT_LEFT => Ok(SystemEvent::Left { player }),
        EVENT_CAUGHT_UP => Ok(SystemEvent::CaughtUp { player }),
        EVENT_HOST_CHANGED => Ok(SystemEvent::HostChanged { player }),
        _ => Err(WireError::Invalid("unknown system event")),
    }
}

#[inline]
pub(crate) fn read_player(r: &mut Reader<'_>) -> Result<PlayerId, WireError> {
    let v = r.varint()?;
    match u16::try_from(v) {
        Ok(p) if usize::from(p) < super::MAX_SEATS => Ok(PlayerId(p)),
        _ => Err(WireError::Invalid("seat out of range")),
    }
}

/// A decoded frame whose inputs are still bytes (the game's input type
/// decodes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameRef<'a> {
    /// The tick.
    pub tick: Tick,
    /// One entry per seat: the encoded input, or `None` for an empty seat.
    pub inputs: Vec<Option<&'a [u8]>>,
    /// System events at this tick.
    pub events: Vec<SystemEvent>,
}

impl<'a> FrameRef<'a> {
    /// Decodes one canonical frame from exactly `bytes`.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let tick = r.tick()?;
        let f = Self::read_body(&mut r, tick)?;
        r.finish()?;
        Ok(f)
    }

    pub(crate) fn read_body(r: &mut Reader<'a>, tick: Tick) -> Result<Self, WireError> {
        let seats = r.count("seat", super::MAX_SEATS, 1)?;
        let mut inputs = Vec::with_capacity(seats);
        for _ in 0..seats {
            match r.u8()? {
                CELL_EMPTY => inputs.push(None),
                CELL_INPUT => {
                    let len = r.len("input length", super::MAX_INPUT_LEN)?;
                    inputs.push(Some(r.bytes(len)?));
                }
                _ => return Err(WireError::Invalid("unknown frame cell")),
            }
        }
        let n = r.count("event", MAX_EVENTS, 2)?;
        let mut events = Vec::with_capacity(n);
        for _ in 0..n {
            events.push(read_event(r)?);
        }
        Ok(Self {
            tick,
            inputs,
            events,
        })
    }

    /// Decodes the inputs as `I`, giving the frame the game runs.
    pub fn to_frame<I: Input>(&self) -> Result<Frame<I>, WireError> {
        let inputs = self
            .inputs
            .iter()
            .map(|c| c.map(I::decode).transpose())
            .collect::<Result<_, _>>()?;
        Ok(Frame {
            tick: self.tick,
            inputs,
            events: self.events.clone(),
        })
    }
}

/// A seat part's code (the low three bits of its head): an input at every
/// frame.
const ALL_PRESENT: u64 = 0;
/// Empty at every frame.
const ALL_EMPTY: u64 = 1;
/// Some of each: a presence bitmap follows.
const MIXED: u64 = 2;
/// Codes from here to [`HELD_LONG`] (excluded): the reference's cell for
/// `code - HELD_FROM + 1` frames, then an input at every frame.
const HELD_FROM: u64 = 3;
/// The reference's cell for `hold` frames (a varint that follows, at least
/// `HELD_LONG - HELD_FROM + 1`), then an input at every frame.
const HELD_LONG: u64 = 7;

/// One seat's cell in a frame.
fn cell<I>(f: &Frame<I>, seat: usize) -> Option<&I> {
    f.inputs.get(seat).and_then(Option::as_ref)
}

/// One seat's cell in a reference frame (`None`: a frame of empty seats).
fn reference_cell<I>(reference: Option<&[Option<I>]>, seat: usize) -> Option<&I> {
    reference.and_then(|r| r.get(seat)).and_then(Option::as_ref)
}

/// Appends the body of a `Frames` message holding `frames` (consecutive
/// ticks, each with `seats` entries), coded against `reference`: the cells
/// of a frame the receiver holds, or `None` for a frame of empty seats.
///
/// ```text
/// body := events_map: ceil(count/8) bytes               bit i: frame i has events
///         (events:varint(>=1) event*events) per marked frame
///         changed:ceil(seats/8) bytes                   bit s: seat s differs
///                                                       from the reference
///         seat_part * (bits set in changed)             per changed seat
/// seat_part := head:varint (chain_len << 3 | code) part chain
///   code 0: input at every frame                        part: nothing
///   code 1: empty at every frame (chain_len 0)          part: nothing
///   code 2: some of each                                part: presence:ceil(count/8) bytes
///   code 3..=6: the reference's cell for code-2 frames, then an input at every frame
///   code 7: the reference's cell for hold frames (>= 5), part: hold:varint
///           then an input at every frame
/// ```
///
/// A seat whose cell equals the reference's at every frame costs one bit.
/// A changed seat's inputs form one delta chain across the frames,
/// self-contained (its first input coded against the neutral one), so a
/// seat holding a stick costs one bit per frame; a reader holding the
/// reference in another form than the sender (a relay's byte strings, a
/// client's values) reads the same frames. A seat that holds the
/// reference's input for the first frames and then changes does not repeat
/// it (codes 3 to 7).
///
/// ```
/// use lockstep_core::wire::{decode_frames_body, encode_frames_body};
/// use lockstep_core::{Frame, Tick};
///
/// let frames = vec![Frame { tick: Tick::new(10), inputs: vec![Some(7u16), None], events: vec![] }];
/// let reference = [Some(7u16), None];
/// let mut body = Vec::new();
/// encode_frames_body(&frames, 2, Some(&reference), &mut body);
/// assert_eq!(body, [0, 0], "no events, no seat changed");
/// assert_eq!(decode_frames_body(Tick::new(10), 1, 2, Some(&reference), &body), Ok(frames));
/// ```
pub fn encode_frames_body<I: Input>(
    frames: &[Frame<I>],
    seats: usize,
    reference: Option<&[Option<I>]>,
    out: &mut Vec<u8>,
) {
    let map_at = out.len();
    out.resize(map_at + frames.len().div_ceil(8), 0);
    for (i, f) in frames.iter().enumerate() {
        if f.events.is_empty() {
            continue;
        }
        out[map_at + i / 8] |= 1 << (i % 8);
        put_varint(out, f.events.len() as u64);
        for ev in &f.events {
            put_event(out, ev);
        }
    }
    let changed_at = out.len();
    out.resize(changed_at + seats.div_ceil(8), 0);
    for seat in 0..seats {
        let base = reference_cell(reference, seat);
        let held = frames.iter().take_while(|f| cell(f, seat) == base).count();
        if held == frames.len() {
            continue;
        }
        out[changed_at + seat / 8] |= 1 << (seat % 8);
        let present = frames.iter().filter(|f| cell(f, seat).is_some()).count();
        if present == 0 {
            put_varint(out, ALL_EMPTY);
            continue;
        }
        let held_then_present = held > 0 && frames[held..].iter().all(|f| cell(f, seat).is_some());
        let from = if held_then_present { held } else { 0 };
        let mut chain = ChainWriter::new();
        for input in frames[from..].iter().filter_map(|f| cell(f, seat)) {
            chain.push(input, usize::MAX);
        }
        let head = (chain.len() as u64) << 3;
        if held_then_present {
            let code = HELD_FROM + held as u64 - 1;
            if code < HELD_LONG {
                put_varint(out, head | code);
            } else {
                put_varint(out, head | HELD_LONG);
                put_varint(out, held as u64);
            }
        } else if present == frames.len() {
            put_varint(out, head | ALL_PRESENT);
        } else {
            put_varint(out, head | MIXED);
            let at = out.len();
            out.resize(at + frames.len().div_ceil(8), 0);
            for (i, f) in frames.iter().enumerate() {
                if cell(f, seat).is_some() {
                    out[at + i / 8] |= 1 << (i % 8);
                }
            }
        }
        chain.write(out);
    }
}

/// Reads a bitmap of `n` bits, refusing set bits past `n`.
fn read_bits<'a>(r: &mut Reader<'a>, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
    let bits = r.bytes(n.div_ceil(8))?;
    if !n.is_multiple_of(8) && bits.last().is_some_and(|b| b >> (n % 8) != 0) {
        return Err(WireError::Invalid(what));
    }
    Ok(bits)
}

fn bit(bits: &[u8], i: usize) -> bool {
    bits[i / 8] & (1 << (i % 8)) != 0
}

/// Which of a changed seat's frames carry its chain's inputs.
enum Carried<'a> {
    /// Every frame from this one on (those before hold the reference's).
    From(usize),
    /// Those marked.
    Marked(&'a [u8]),
}

/// Decodes a `Frames` body written by [`encode_frames_body`] against the
/// same `reference`.
pub fn decode_frames_body<I: Input>(
    start: Tick,
    count: usize,
    seats: usize,
    reference: Option<&[Option<I>]>,
    body: &[u8],
) -> Result<Vec<Frame<I>>, WireError> {
    if count > super::MAX_FRAMES || seats > super::MAX_SEATS {
        return Err(WireError::Invalid("frame list over its bounds"));
    }
    let mut r = Reader::new(body);
    let mut frames = Vec::with_capacity(count.min(body.len().saturating_mul(8)));
    let marked = read_bits(&mut r, count, "event map is not canonical")?;
    for i in 0..count {
        let mut events = Vec::new();
        if bit(marked, i) {
            let n = r.count("event", MAX_EVENTS, 2)?;
            if n == 0 {
                return Err(WireError::Invalid("a frame marked with events has none"));
            }
            events.reserve(n);
            for _ in 0..n {
                events.push(read_event(&mut r)?);
            }
        }
        let tick = start
            .checked_add(i as u32)
            .ok_or(WireError::Invalid("frames pass the last tick"))?;
        frames.push(Frame {
            tick,
            inputs: Vec::with_capacity(seats),
            events,
        });
    }
    let changed = read_bits(&mut r, seats, "changed-seat bitmap is not canonical")?;
    for seat in 0..seats {
        let base = reference_cell(reference, seat);
        if !bit(changed, seat) {
            for f in &mut frames {
                f.inputs.push(base.cloned());
            }
            continue;
        }
        let head = r.varint()?;
        let chain_len = usize::try_from(head >> 3).unwrap_or(usize::MAX);
        let (present, carried) = match head & 7 {
            ALL_PRESENT => (count, Carried::From(0)),
            ALL_EMPTY if chain_len != 0 => {
                return Err(WireError::Invalid("an empty seat with a chain"));
            }
            ALL_EMPTY if base.is_some() => {
                for f in &mut frames {
                    f.inputs.push(None);
                }
                continue;
            }
            ALL_EMPTY => return Err(WireError::Invalid("a changed seat repeats its reference")),
            MIXED => {
                let bits = read_bits(&mut r, count, "presence bitmap is not canonical")?;
                let n = (0..count).filter(|&i| bit(bits, i)).count();
                if n == 0 || n == count {
                    return Err(WireError::Invalid("presence bitmap is not canonical"));
                }
                (n, Carried::Marked(bits))
            }
            code => {
                let hold = if code == HELD_LONG {
                    let hold = r.len("held frame", count)?;
                    if hold < (HELD_LONG - HELD_FROM + 1) as usize {
                        return Err(WireError::Invalid("a short hold in a long form"));
                    }
                    hold
                } else {
                    (code - HELD_FROM + 1) as usize
                };
                if hold >= count {
                    return Err(WireError::Invalid("a changed seat holds every frame"));
                }
                (count - hold, Carried::From(hold))
            }
        };
        if chain_len > super::MAX_DATAGRAM_LEN {
            return Err(WireError::TooLong {
                what: "chain",
                len: chain_len,
                max: super::MAX_DATAGRAM_LEN,
            });
        }
        let chain = r.bytes(chain_len)?;
        let inputs = decode_chain::<I>(chain, present)?;
        // One encoding per body: frames from the first that equal the
        // reference's cell are held (a hold code, not carried), and a seat
        // absent, then present to the end, is a hold of an empty reference.
        let canonical = match carried {
            Carried::From(_) => base.is_none() || inputs.first() != base,
            Carried::Marked(bits) => {
                let leading = (0..count).take_while(|&i| !bit(bits, i)).count();
                base.is_some() || leading == 0 || (leading..count).any(|i| !bit(bits, i))
            }
        };
        if !canonical {
            return Err(WireError::Invalid(
                "a seat's frames are not coded canonically",
            ));
        }
        let mut inputs = inputs.into_iter();
        for (i, f) in frames.iter_mut().enumerate() {
            f.inputs.push(match carried {
                Carried::From(from) if i < from => base.cloned(),
                Carried::From(_) => inputs.next(),
                Carried::Marked(bits) => {
                    if bit(bits, i) {
                        inputs.next()
                    } else {
                        None
                    }
                }
            });
        }
    }
    r.finish()?;
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let f = Frame {
            tick: Tick::new(123_456),
            inputs: vec![Some(vec![1u8, 2, 3]), None, Some(vec![0; 200])],
            events: vec![
                SystemEvent::Joined {
                    player: PlayerId(2),
                },
                SystemEvent::Abandoned {
                    player: PlayerId(1),
                },
            ],
        };
        let mut buf = Vec::new();
        encode_frame(&f, &mut buf);
        let back = FrameRef::decode(&buf).and_then(|r| r.to_frame::<Vec<u8>>());
        assert_eq!(back, Ok(f));
    }

    #[test]
    fn frame_bodies_round_trip_with_empty_and_mixed_seats() {
        let frames: Vec<Frame<u16>> = (0..20u32)
            .map(|i| Frame {
                tick: Tick::new(1000 + i),
                inputs: vec![
                    Some(7),
                    None,
                    if i % 3 == 0 { None } else { Some(i as u16 / 4) },
                ],
                events: if i == 5 {
                    vec![SystemEvent::Abandoned {
                        player: PlayerId(1),
                    }]
                } else {
                    vec![]
                },
            })
            .collect();
        let mut body = Vec::new();
        encode_frames_body(&frames, 3, None, &mut body);
        assert_eq!(
            decode_frames_body::<u16>(Tick::new(1000), 20, 3, None, &body),
            Ok(frames.clone())
        );
        // The count is the message's to say: a body read with another count
        // whose bitmaps take other room is refused.
        assert!(decode_frames_body::<u16>(Tick::new(1000), 25, 3, None, &body).is_err());
        // A seat past the last marked changed, and a seat marked empty
        // where it already was.
        assert_eq!(
            decode_frames_body::<u16>(Tick::new(1000), 1, 3, None, &[0, 0b1000]),
            Err(WireError::Invalid("changed-seat bitmap is not canonical"))
        );
        assert_eq!(
            decode_frames_body::<u16>(Tick::new(1000), 1, 3, None, &[0, 0b1, ALL_EMPTY as u8]),
            Err(WireError::Invalid("a changed seat repeats its reference"))
        );
        // Against a reference, every way a seat can differ from it.
        for reference in [
            [Some(7), Some(1), Some(0)],
            [None, None, None],
            [Some(0), None, Some(4)],
        ] {
            let mut body = Vec::new();
            encode_frames_body(&frames, 3, Some(&reference), &mut body);
            assert_eq!(
                decode_frames_body::<u16>(Tick::new(1000), 20, 3, Some(&reference), &body),
                Ok(frames.clone())
            );
        }
    }

    #[test]
    fn a_seat_that_holds_its_reference_then_changes_sends_only_the_change() {
        // Seat 0 holds 7 (the reference's) for `hold` frames, then plays 8.
        for hold in [1, 2, 4, 5, 9] {
            let frames: Vec<Frame<u16>> = (0..12u32)
                .map(|i| Frame {
                    tick: Tick::new(100 + i),
                    inputs: vec![Some(if (i as usize) < hold { 7 } else { 8 }), None],
                    events: vec![],
                })
                .collect();
            let reference = [Some(7u16), None];
            let mut body = Vec::new();
            encode_frames_body(&frames, 2, Some(&reference), &mut body);
            // Events map (2 bytes), changed (1), head, [hold], then a
            // chain of one change (bitmap, 8 against neutral).
            let code = if hold < 5 { 2 + hold as u8 } else { 7 };
            assert_eq!(body[3] & 7, code, "hold {hold}");
            assert_eq!(
                decode_frames_body(Tick::new(100), 12, 2, Some(&reference), &body),
                Ok(frames.clone())
            );
        }
        // A hold of every frame, of none in the long form, or a long form
        // for a short hold, is refused.
        let refused = |part: &[u8]| {
            let mut body = vec![0, 0b1];
            body.extend_from_slice(part);
            decode_frames_body::<u16>(Tick::new(100), 4, 1, Some(&[Some(7)]), &body)
        };
        assert_eq!(
            refused(&[HELD_FROM as u8 + 3, 0]),
            Err(WireError::Invalid("a changed seat holds every frame"))
        );
        assert_eq!(
            refused(&[HELD_LONG as u8, 2]),
            Err(WireError::Invalid("a short hold in a long form"))
        );
        assert_eq!(
            refused(&[(1 << 3) | ALL_EMPTY as u8, 0]),
            Err(WireError::Invalid("an empty seat with a chain"))
        );
        // A seat's frames in another form than the encoder's: carried from
        // a first input equal to the reference's (a hold), or absent then
        // present to the end against an empty reference (a hold of it).
        let mut chain = ChainWriter::new();
        chain.push(&7u16, usize::MAX);
        let mut seven = Vec::new();
        chain.write(&mut seven);
        let mut body = vec![0, 0b1, ((seven.len() as u8) << 3) | ALL_PRESENT as u8];
        body.extend_from_slice(&seven);
        let not_canonical = Err(WireError::Invalid(
            "a seat's frames are not coded canonically",
        ));
        assert_eq!(
            decode_frames_body::<u16>(Tick::new(100), 1, 1, Some(&[Some(7)]), &body),
            not_canonical
        );
        assert_eq!(
            decode_frames_body::<u16>(Tick::new(100), 1, 1, None, &body).map(|f| f.len()),
            Ok(1)
        );
        let mut body = vec![0, 0b1, ((seven.len() as u8) << 3) | MIXED as u8, 0b10];
        body.extend_from_slice(&seven);
        assert_eq!(
            decode_frames_body::<u16>(Tick::new(100), 2, 1, Some(&[None]), &body),
            not_canonical
        );
        // Events: a frame marked with events must have some.
        assert_eq!(
            decode_frames_body::<u16>(Tick::new(100), 1, 1, None, &[0b1, 0, 0]),
            Err(WireError::Invalid("a frame marked with events has none"))
        );
    }

    #[test]
    fn bad_frames_are_typed_errors() {
        assert_eq!(FrameRef::decode(&[]), Err(WireError::Truncated));
        // One seat with an unknown cell tag.
        assert_eq!(
            FrameRef::decode(&[0, 1, 9]),
            Err(WireError::Invalid("unknown frame cell"))
        );
        // An event naming seat 70000.
        assert_eq!(
            FrameRef::decode(&[0, 0, 1, 1, 0xf0, 0xa2, 0x04]),
            Err(WireError::Invalid("seat out of range"))
        );
        // Trailing junk.
        assert_eq!(
            FrameRef::decode(&[0, 0, 0, 5]),
            Err(WireError::TrailingBytes(1))
        );
    }
}
