//! Play: `Inputs` (with acknowledgements), `Frames`, the sequencer's
//! `Status`, and the adaptive delay's `DelayWanted` and `DelayWants`, each
//! encoded beside its decoder.

use super::chain::decode_chain_into;
use super::codec::{Reader, put_bytes, put_tick_delta, put_varint};
use super::frame::{decode_frames_body, read_player};
use super::handshake::within;
use super::list::{List, ListItem};
use super::message::{MAX_DELAY_CHANGES, MAX_FRAMES, MAX_RUN, Message};
use super::{MAX_DATAGRAM_LEN, MAX_DELAY, MAX_SEATS, WireError};
use crate::{Frame, Input, PlayerId, Tick};
use xxhash_rust::xxh3::xxh3_64;

/// Consecutive inputs of one seat, as a delta chain (see
/// [`ChainWriter`](super::ChainWriter)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputRun<'a> {
    /// Whose inputs.
    pub seat: PlayerId,
    /// The tick of the first input.
    pub start: Tick,
    /// How many inputs (at least 1).
    pub count: u32,
    /// What the chain's first input is coded against: 0 for the neutral
    /// input; else the seat's input for tick `start - back` (at most
    /// [`MAX_INPUT_BACK`]), which the sender knows the recipient holds: it
    /// was sent by the seat's own sender and acknowledged. A recipient
    /// that does not hold it skips the run.
    pub back: u32,
    /// With a reference, [`reference_check`] of it as the sender holds it
    /// (on the wire only when `back` is not 0, and 0 when it is): a
    /// recipient holding another input for that tick (a forged one, say)
    /// skips the run instead of reading every later input wrong.
    pub check: u8,
    /// The encoded chain.
    pub chain: &'a [u8],
}

/// What an input run carries to prove its reference
/// ([`InputRun::check`]): the low 8 bits of xxh3-64 over the input's
/// [`encode`](Input::encode)d bytes XORed with the neutral input's (those
/// padded with zeros to the input's length), trailing zero bytes dropped.
/// A relay that does not know the game's input type holds inputs as the
/// bytes it reads them as, which are that XOR: its neutral input has no
/// bytes, and a chain's first input is coded against the neutral one.
/// Over the plain encoding, the check of every input but those whose
/// neutral encodes as nothing differed between a client and a relay (a
/// `u8` game's idle player made the room crawl). `scratch` is a buffer to
/// encode into (cleared first), so that a caller keeping one allocates
/// nothing.
///
/// ```
/// use lockstep_core::wire::reference_check;
///
/// let mut scratch = Vec::new();
/// assert_eq!(reference_check(&7u16, &mut scratch), reference_check(&7u16, &mut scratch));
/// assert_ne!(reference_check(&7u16, &mut scratch), reference_check(&8u16, &mut scratch));
/// // As a relay holding the bytes reads it: the same.
/// assert_eq!(reference_check(&7u16, &mut scratch), reference_check(&vec![7u8, 0], &mut scratch));
/// assert_eq!(reference_check(&7u16, &mut scratch), reference_check(&vec![7u8], &mut scratch));
/// // The neutral input's is that of no bytes, whatever it encodes as.
/// assert_eq!(reference_check(&0u8, &mut scratch), 0xc2);
/// assert_eq!(reference_check(&Vec::<u8>::new(), &mut scratch), 0xc2);
/// ```
pub fn reference_check<I: Input>(input: &I, scratch: &mut Vec<u8>) -> u8 {
    scratch.clear();
    I::default().encode(scratch);
    let neutral = scratch.len();
    input.encode(scratch);
    let (n, x) = scratch.split_at_mut(neutral);
    // Most neutral inputs encode as zeros: bytes left as they are are not
    // stored again, so the hash's word loads read them as encoded (a word
    // loaded over bytes just stored one by one waits for every store).
    for (b, m) in x.iter_mut().zip(n.iter()) {
        if *m != 0 {
            *b ^= *m;
        }
    }
    let end = x.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
    xxh3_64(&x[..end]) as u8
}

/// An input a recipient holds, with its [`reference_check`] worked out
/// from it: what [`InputRun::decode_into`] reads a run against. Outside
/// this crate it is only made by [`HeldInput::new`], which works the check
/// out, so a run's own claim can never stand in for it. A recipient keeps
/// one per input it takes (the check is the costly part), or makes one
/// when it needs it.
///
/// ```
/// use lockstep_core::wire::HeldInput;
///
/// let mut scratch = Vec::new();
/// let held = HeldInput::new(&7u16, &mut scratch);
/// assert_eq!(*held.input(), 7);
/// assert_ne!(held.check(), HeldInput::new(&8u16, &mut scratch).check());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldInput<'a, I> {
    input: &'a I,
    check: u8,
}

impl<'a, I: Input> HeldInput<'a, I> {
    /// `input` with its check, worked out in `scratch` (cleared first).
    pub fn new(input: &'a I, scratch: &mut Vec<u8>) -> Self {
        Self {
            input,
            check: reference_check(input, scratch),
        }
    }

    /// `input` with the check worked out from it when it was taken and
    /// kept since.
    pub(crate) fn kept(input: &'a I, check: u8) -> Self {
        Self { input, check }
    }

    /// The input.
    pub fn input(&self) -> &'a I {
        self.input
    }

    /// Its [`reference_check`].
    pub fn check(&self) -> u8 {
        self.check
    }
}

/// How far before its first input an input run's reference may be.
pub const MAX_INPUT_BACK: u32 = 64;

impl InputRun<'_> {
    /// The tick of the input the run is coded against, if any.
    pub fn reference(&self) -> Option<Tick> {
        (self.back > 0).then(|| Tick::new(self.start.get() - self.back))
    }

    /// Whether `held`, the recipient's input for the tick of
    /// [`self.reference()`](Self::reference), is the one the sender coded
    /// the run against (always, for a run without a reference). A run
    /// whose reference is not held, or not this one, is skipped.
    pub fn reads_against<I: Input>(&self, held: &I, scratch: &mut Vec<u8>) -> bool {
        self.back == 0 || reference_check(held, scratch) == self.check
    }

    /// The inputs, decoded as `I` against `reference`, the input at
    /// [`self.reference()`](Self::reference) (ignored when that is `None`;
    /// an error when it is not and `reference` is, or when the run's
    /// [`check`](Self::check) says it is not the input the sender coded
    /// against: see [`reads_against`](Self::reads_against)).
    pub fn decode<I: Input>(&self, reference: Option<&I>) -> Result<Vec<I>, WireError> {
        // Without a reference in the run, the input given is not read.
        let reference = reference
            .filter(|_| self.back > 0)
            .map(|r| HeldInput::new(r, &mut Vec::new()));
        let mut out = Vec::new();
        self.decode_into(reference, &mut out)?;
        Ok(out)
    }

    /// [`decode`](Self::decode), appending to `out` (a buffer the caller
    /// reuses, so nothing is allocated once it has grown), the reference
    /// given as a [`HeldInput`]: a recipient works out the check of each
    /// input once, when it takes it, not for every run read against it.
    /// `out` is left as it was on an error.
    ///
    /// ```
    /// use lockstep_core::{PlayerId, Tick};
    /// use lockstep_core::wire::{ChainWriter, HeldInput, InputRun, reference_check};
    ///
    /// // The sender holds 7 for tick 40, acknowledged: tick 41's run is
    /// // coded against it.
    /// let mut chain = ChainWriter::after(7u16);
    /// chain.push(&9, usize::MAX);
    /// let mut bytes = Vec::new();
    /// chain.write(&mut bytes);
    /// let mut scratch = Vec::new();
    /// let run = InputRun {
    ///     seat: PlayerId(0),
    ///     start: Tick::new(41),
    ///     count: 1,
    ///     back: 1,
    ///     check: reference_check(&7u16, &mut scratch),
    ///     chain: &bytes,
    /// };
    /// // The recipient took 7 for tick 40 and kept it with its check.
    /// let held = HeldInput::new(&7u16, &mut scratch);
    /// let mut out = Vec::new();
    /// run.decode_into(Some(held), &mut out)?;
    /// assert_eq!(out, [9]);
    /// // Another input for that tick (a forged one, say): refused.
    /// let forged = HeldInput::new(&8u16, &mut scratch);
    /// assert!(run.decode_into(Some(forged), &mut out).is_err());
    /// assert_eq!(out, [9]);
    /// # Ok::<(), lockstep_core::wire::WireError>(())
    /// ```
    pub fn decode_into<I: Input>(
        &self,
        reference: Option<HeldInput<'_, I>>,
        out: &mut Vec<I>,
    ) -> Result<(), WireError> {
        let neutral;
        let prev = match (self.back, reference) {
            (0, _) => {
                neutral = I::default();
                &neutral
            }
            (_, Some(held)) if held.check == self.check => held.input,
            (_, Some(_)) => {
                return Err(WireError::Invalid(
                    "an input run coded against another input than the one held",
                ));
            }
            (_, None) => {
                return Err(WireError::Invalid(
                    "an input run coded against an input not held",
                ));
            }
        };
        decode_chain_into(self.chain, self.count as usize, prev, out)
    }
}

/// Inputs with acknowledgements. Its lists are lent by the sender and
/// read from the datagram by the receiver: neither allocates.
///
/// ```
/// use lockstep_core::{PlayerId, Tick};
/// use lockstep_core::wire::{ChainWriter, InputRun, Inputs, List, Message};
///
/// let mut chain = ChainWriter::new();
/// chain.push(&7u16, usize::MAX);
/// let mut bytes = Vec::new();
/// chain.write(&mut bytes);
/// let runs = [InputRun {
///     seat: PlayerId(0),
///     start: Tick::new(41),
///     count: 1,
///     back: 0,
///     check: 0,
///     chain: &bytes,
/// }];
/// let acks = [(PlayerId(1), Tick::new(40))];
/// let m = Message::Inputs(Inputs {
///     acks: List::from(&acks),
///     runs: List::from(&runs),
/// });
/// # let _ = m;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Inputs<'a> {
    /// For each listed seat, the lowest tick of its input the sender still
    /// lacks: where the recipient should resend from.
    pub acks: List<'a, (PlayerId, Tick)>,
    /// Input runs.
    pub runs: List<'a, InputRun<'a>>,
}

impl<'a> ListItem<'a> for (PlayerId, Tick) {
    #[inline]
    fn read_item(bytes: &'a [u8], base: Tick) -> Result<(Self, usize), WireError> {
        let mut r = Reader::new(bytes);
        let ack = (read_player(&mut r)?, r.tick_delta(base)?);
        Ok((ack, bytes.len() - r.remaining()))
    }
}

impl<'a> ListItem<'a> for InputRun<'a> {
    #[inline]
    fn read_item(bytes: &'a [u8], base: Tick) -> Result<(Self, usize), WireError> {
        let mut r = Reader::new(bytes);
        let run = read_run(&mut r, base)?;
        Ok((run, bytes.len() - r.remaining()))
    }
}

/// Confirmed frames for consecutive ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frames<'a> {
    /// The first tick.
    pub start: Tick,
    /// How many frames (at least 1).
    pub count: u32,
    /// Seats in each frame.
    pub seats: u32,
    /// The frame the body is coded against, before `start` (at most
    /// [`MAX_REFERENCE_BACK`] ticks before it): one the recipient said it
    /// holds. `None`: a frame of empty seats.
    pub reference: Option<Tick>,
    /// The encoded frames (see [`encode_frames_body`](super::encode_frames_body)).
    pub body: &'a [u8],
}

/// How far before its first frame a `Frames` message's reference may be.
pub const MAX_REFERENCE_BACK: u32 = 65_535;

impl Frames<'_> {
    /// The frames, decoded as `I` against `reference`, the cells of the
    /// frame at [`self.reference`](Self::reference) (ignored when that is
    /// `None`; an error when it is not and `reference` is). A recipient
    /// that does not hold the reference skips the message: the sender's
    /// later ones name a frame it does.
    pub fn decode<I: Input>(
        &self,
        reference: Option<&[Option<I>]>,
    ) -> Result<Vec<Frame<I>>, WireError> {
        if self.reference.is_some() && reference.is_none() {
            return Err(WireError::Invalid("frames coded against a frame not held"));
        }
        decode_frames_body(
            self.start,
            self.count as usize,
            self.seats as usize,
            self.reference.and(reference),
            self.body,
        )
    }
}

/// What a sequencer tells each client besides frames.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// The next tick the sequencer will seal.
    pub open: Tick,
    /// How many ticks early (positive) or late (negative) this client's
    /// latest input arrived for the tick it was stamped for.
    pub slack: i32,
    /// The seats the open tick is waiting on (empty unless stalled).
    pub waiting: Vec<PlayerId>,
}

/// A list of `(seat, tick)`, ticks relative to `base`.
pub(super) fn put_seat_ticks(out: &mut Vec<u8>, base: Tick, list: &[(PlayerId, Tick)]) {
    put_varint(out, list.len() as u64);
    for (p, t) in list {
        put_varint(out, u64::from(p.0));
        put_tick_delta(out, base, *t);
    }
}

pub(super) fn read_seat_ticks(
    r: &mut Reader<'_>,
    base: Tick,
    what: &'static str,
) -> Result<Vec<(PlayerId, Tick)>, WireError> {
    let n = r.count(what, MAX_SEATS, 2)?;
    (0..n)
        .map(|_| Ok((read_player(r)?, r.tick_delta(base)?)))
        .collect()
}

// ----- Inputs `0x04` --------------------------------------------------------

pub(super) fn check_inputs(i: &Inputs<'_>) -> Result<(), WireError> {
    within("ack", i.acks.len(), MAX_SEATS)?;
    within("input run", i.runs.len(), MAX_SEATS)?;
    for r in i.runs {
        within("run input", r.count as usize, MAX_RUN)?;
        if r.count == 0 || r.start.checked_add(r.count - 1).is_none() {
            return Err(WireError::Invalid("input run passes the last tick"));
        }
        if r.back > MAX_INPUT_BACK || r.back > r.start.get() {
            return Err(WireError::Invalid("an input run's reference out of reach"));
        }
        if r.back == 0 && r.check != 0 {
            return Err(WireError::Invalid(
                "a check on an input run without a reference",
            ));
        }
    }
    Ok(())
}

pub(super) fn put_inputs(out: &mut Vec<u8>, base: Tick, m: &Inputs<'_>) {
    put_varint(out, m.acks.len() as u64);
    for (p, t) in m.acks {
        put_varint(out, u64::from(p.0));
        put_tick_delta(out, base, t);
    }
    put_varint(out, m.runs.len() as u64);
    for run in m.runs {
        put_varint(out, u64::from(run.seat.0));
        put_tick_delta(out, base, run.start);
        put_varint(out, u64::from(run.count));
        put_varint(out, u64::from(run.back));
        if run.back > 0 {
            out.push(run.check);
        }
        put_bytes(out, run.chain);
    }
}

#[inline]
pub(super) fn read_inputs<'a>(r: &mut Reader<'a>, base: Tick) -> Result<Message<'a>, WireError> {
    let n = r.count("ack", MAX_SEATS, 2)?;
    let acks = r.read_with(|bytes| List::read(bytes, n, base))?;
    let n = r.count("input run", MAX_SEATS, 4)?;
    let runs = r.read_with(|bytes| List::read(bytes, n, base))?;
    Ok(Message::Inputs(Inputs { acks, runs }))
}

/// One input run of an `Inputs` message.
#[inline]
fn read_run<'a>(r: &mut Reader<'a>, base: Tick) -> Result<InputRun<'a>, WireError> {
    let seat = read_player(r)?;
    let start = r.tick_delta(base)?;
    let count = r.len("run input", MAX_RUN)?;
    if count == 0 {
        return Err(WireError::Invalid("empty input run"));
    }
    if start.checked_add(count as u32 - 1).is_none() {
        return Err(WireError::Invalid("input run passes the last tick"));
    }
    let back = r.varint_u32()?;
    if back > MAX_INPUT_BACK || back > start.get() {
        return Err(WireError::Invalid("an input run's reference out of reach"));
    }
    let check = if back > 0 { r.u8()? } else { 0 };
    let chain = r.byte_string("chain", MAX_DATAGRAM_LEN)?;
    Ok(InputRun {
        seat,
        start,
        count: count as u32,
        back,
        check,
        chain,
    })
}

// ----- Frames `0x05` --------------------------------------------------------

pub(super) fn check_frames(f: &Frames<'_>) -> Result<(), WireError> {
    within("frame", f.count as usize, MAX_FRAMES)?;
    within("seat", f.seats as usize, MAX_SEATS)?;
    match f
        .reference
        .map(|r| r < f.start && f.start.since(r) <= MAX_REFERENCE_BACK)
    {
        Some(false) => Err(WireError::Invalid(
            "a reference not shortly before the frames",
        )),
        _ => Ok(()),
    }
}

pub(super) fn put_frames(out: &mut Vec<u8>, base: Tick, f: &Frames<'_>) {
    put_tick_delta(out, base, f.start);
    put_varint(out, u64::from(f.count));
    put_varint(out, u64::from(f.seats));
    put_varint(out, f.reference.map_or(0, |r| u64::from(f.start.since(r))));
    put_bytes(out, f.body);
}

pub(super) fn read_frames<'a>(r: &mut Reader<'a>, base: Tick) -> Result<Message<'a>, WireError> {
    let start = r.tick_delta(base)?;
    let count = r.len("frame", MAX_FRAMES)?;
    if count == 0 {
        return Err(WireError::Invalid("empty frame list"));
    }
    if start.checked_add(count as u32 - 1).is_none() {
        return Err(WireError::Invalid("frames pass the last tick"));
    }
    let seats = r.len("seat", MAX_SEATS)?;
    let back = r.varint_u32()?;
    let reference = match back {
        0 => None,
        b if b <= MAX_REFERENCE_BACK && b <= start.get() => Some(Tick::new(start.get() - b)),
        _ => {
            return Err(WireError::Invalid(
                "a reference not shortly before the frames",
            ));
        }
    };
    let body = r.byte_string("frames", MAX_DATAGRAM_LEN)?;
    Ok(Message::Frames(Frames {
        start,
        count: count as u32,
        seats: seats as u32,
        reference,
        body,
    }))
}

// ----- Status `0x0F` --------------------------------------------------------

pub(super) fn put_status(out: &mut Vec<u8>, base: Tick, st: &Status) {
    put_tick_delta(out, base, st.open);
    let z = (i64::from(st.slack) << 1) ^ (i64::from(st.slack) >> 63);
    put_varint(out, z as u64);
    put_varint(out, st.waiting.len() as u64);
    for p in &st.waiting {
        put_varint(out, u64::from(p.0));
    }
}

pub(super) fn read_status<'a>(r: &mut Reader<'a>, base: Tick) -> Result<Message<'a>, WireError> {
    let open = r.tick_delta(base)?;
    let z = r.varint()?;
    let slack = ((z >> 1) as i64) ^ -((z & 1) as i64);
    let slack = i32::try_from(slack).map_err(|_| WireError::Invalid("slack out of range"))?;
    let n = r.count("waiting seat", MAX_SEATS, 1)?;
    let waiting = (0..n).map(|_| read_player(r)).collect::<Result<_, _>>()?;
    Ok(Message::Status(Status {
        open,
        slack,
        waiting,
    }))
}

// ----- DelayWanted `0x1D`, DelayWants `0x1E` --------------------------------

pub(super) fn check_delay_wanted(delay: u32) -> Result<(), WireError> {
    if delay == 0 {
        return Err(WireError::Invalid("a delay of 0 ticks"));
    }
    within("delay", delay as usize, 1024)
}

pub(super) fn read_delay_wanted<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    match r.varint_u32()? {
        delay if (1..=MAX_DELAY).contains(&delay) => Ok(Message::DelayWanted { delay }),
        _ => Err(WireError::Invalid("delay not 1 to 1024 ticks")),
    }
}

pub(super) fn check_delay_wants(seat: PlayerId, changes: &[(Tick, u32)]) -> Result<(), WireError> {
    within("seat", seat.index(), MAX_SEATS - 1)?;
    within("delay change", changes.len(), MAX_DELAY_CHANGES)?;
    if changes.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(WireError::Invalid("delay changes out of order"));
    }
    match changes.iter().find(|(_, d)| !(1..=MAX_DELAY).contains(d)) {
        Some(_) => Err(WireError::Invalid("delay not 1 to 1024 ticks")),
        None => Ok(()),
    }
}

pub(super) fn put_delay_wants(
    out: &mut Vec<u8>,
    base: Tick,
    seat: PlayerId,
    changes: &[(Tick, u32)],
) {
    put_varint(out, u64::from(seat.0));
    put_varint(out, changes.len() as u64);
    for (t, d) in changes {
        put_tick_delta(out, base, *t);
        put_varint(out, u64::from(*d));
    }
}

pub(super) fn read_delay_wants<'a>(
    r: &mut Reader<'a>,
    base: Tick,
) -> Result<Message<'a>, WireError> {
    let seat = read_player(r)?;
    let n = r.count("delay change", MAX_DELAY_CHANGES, 2)?;
    let mut changes: Vec<(Tick, u32)> = Vec::with_capacity(n);
    for _ in 0..n {
        let tick = r.tick_delta(base)?;
        let delay = r.varint_u32()?;
        if !(1..=MAX_DELAY).contains(&delay) {
            return Err(WireError::Invalid("delay not 1 to 1024 ticks"));
        }
        if changes.last().is_some_and(|(t, _)| *t >= tick) {
            return Err(WireError::Invalid("delay changes out of order"));
        }
        changes.push((tick, delay));
    }
    Ok(Message::DelayWants { seat, changes })
}
