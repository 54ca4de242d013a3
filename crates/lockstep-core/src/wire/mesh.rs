//! The mesh peer packet.

use super::codec::{Reader, put_tick, put_u64_le, put_varint, varint_len};
use super::frame::{FrameRef, put_body, read_player};
use super::{MAX_INPUT_LEN, MAX_SEATS, WireError, message_type, put_header, split_header};
use crate::{PlayerId, Tick};

const ECHO: u8 = 1 << 0;
const ACKS: u8 = 1 << 1;
const ABANDON: u8 = 1 << 2;
const PAUSE: u8 = 1 << 3;
const LIFTED: u8 = 1 << 4;
const CHECKSUM_ACK: u8 = 1 << 5;
const CHECKSUMS: u8 = 1 << 6;
const FRAMES: u8 = 1 << 7;

/// Most inputs one run may carry.
pub(crate) const MAX_RUN: usize = 1024;
/// Most checksums one packet may carry.
pub(crate) const MAX_CHECKSUMS: usize = 64;
/// Most frames one packet may carry.
pub(crate) const MAX_FRAMES: usize = 1024;

/// The sender's clock, echoed back so the sender can measure round trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo {
    /// The `stamp` of the packet being echoed.
    pub stamp: u32,
    /// How long the echoing peer held that stamp before this packet left, in
    /// milliseconds; subtracted from the measured round trip.
    pub held_ms: u32,
}

/// Consecutive inputs of one seat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRun<'a> {
    /// Whose inputs.
    pub seat: PlayerId,
    /// The tick of the first input.
    pub start: Tick,
    /// Encoded inputs for `start`, `start + 1`, ...
    pub inputs: Vec<&'a [u8]>,
}

/// A mesh peer's packet.
///
/// Mesh peers exchange one kind of message, sent to every other peer at
/// least once per committed tick and on a resend timer. It carries the
/// sender's position and acknowledgements, the control state that must reach
/// everyone (pause, abandonment, checksums), and as many unacknowledged
/// inputs as fit the datagram budget.
///
/// ```text
/// mesh      := flags:u8 next_tick:varint stamp:varint
///              [echo_stamp:varint held_ms:varint]          flags & ECHO
///              [n:varint (seat:varint tick:varint)*n]       flags & ACKS
///              [n:varint seat:varint*n                      flags & ABANDON
///               m:varint (seat:varint from:varint)*m]
///              [pause_frame:varint]                         flags & PAUSE
///              [lifted_frame:varint]                        flags & LIFTED
///              [checksum_ack:varint]                        flags & CHECKSUM_ACK
///              [n:varint (tick:varint hash:u64le)*n]        flags & CHECKSUMS
///              runs:varint run*runs
///              [n:varint first:varint body                  flags & FRAMES
///               (gap:varint body)*(n-1)]
/// run       := seat:varint start:varint count:varint (len:varint bytes)*count
/// ```
///
/// `body` is a frame body as in [`encode_frame`](super::encode_frame); the
/// ticks of a frame list strictly increase (`gap >= 1`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MeshPacket<'a> {
    /// The sender's next tick to run: it holds every frame before this one.
    pub next_tick: Tick,
    /// The sender's clock in milliseconds (wrapping), for round-trip time.
    pub stamp: u32,
    /// The latest stamp the sender received from the recipient.
    pub echo: Option<Echo>,
    /// For each listed seat, the lowest tick of that seat's input the sender
    /// still lacks: where the recipient should resend from.
    pub acks: Vec<(PlayerId, Tick)>,
    /// Seats the sender wants abandoned and has stopped taking input from.
    pub wanted: Vec<PlayerId>,
    /// Abandonment decisions: the seat is empty from the tick on.
    pub decisions: Vec<(PlayerId, Tick)>,
    /// The frame the sender's pause freezes on, while paused.
    pub pause: Option<Tick>,
    /// The frame of the latest pause the sender lifted.
    pub lifted: Option<Tick>,
    /// The latest checksum tick the sender received from the recipient.
    pub checksum_ack: Option<Tick>,
    /// State checksums the sender reported, ascending by tick.
    pub checksums: Vec<(Tick, u64)>,
    /// Inputs.
    pub inputs: Vec<InputRun<'a>>,
    /// Confirmed frames, ascending by tick (sent to observers).
    pub frames: Vec<FrameRef<'a>>,
}

impl<'a> MeshPacket<'a> {
    /// Appends the datagram (header included).
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_header(out, message_type::MESH);
        self.encode_head(out);
        put_varint(out, self.inputs.len() as u64);
        for run in &self.inputs {
            put_varint(out, u64::from(run.seat.0));
            put_tick(out, run.start);
            put_varint(out, run.inputs.len() as u64);
            for input in &run.inputs {
                put_varint(out, input.len() as u64);
                out.extend_from_slice(input);
            }
        }
        if let Some((first, rest)) = self.frames.split_first() {
            put_varint(out, self.frames.len() as u64);
            put_tick(out, first.tick);
            put_frame_ref(out, first);
            let mut prev = first.tick;
            for f in rest {
                put_varint(out, u64::from(f.tick.since(prev)));
                put_frame_ref(out, f);
                prev = f.tick;
            }
        }
    }

    /// Everything before the inputs: the part whose size does not depend on
    /// how many inputs fit.
    fn encode_head(&self, out: &mut Vec<u8>) {
        let mut flags = 0;
        let mut set = |cond: bool, bit: u8| {
            if cond {
                flags |= bit;
            }
        };
        set(self.echo.is_some(), ECHO);
        set(!self.acks.is_empty(), ACKS);
        set(
            !self.wanted.is_empty() || !self.decisions.is_empty(),
            ABANDON,
        );
        set(self.pause.is_some(), PAUSE);
        set(self.lifted.is_some(), LIFTED);
        set(self.checksum_ack.is_some(), CHECKSUM_ACK);
        set(!self.checksums.is_empty(), CHECKSUMS);
        set(!self.frames.is_empty(), FRAMES);
        out.push(flags);
        put_tick(out, self.next_tick);
        put_varint(out, u64::from(self.stamp));
        if let Some(e) = self.echo {
            put_varint(out, u64::from(e.stamp));
            put_varint(out, u64::from(e.held_ms));
        }
        if !self.acks.is_empty() {
            put_seat_ticks(out, &self.acks);
        }
        if flags & ABANDON != 0 {
            put_varint(out, self.wanted.len() as u64);
            for p in &self.wanted {
                put_varint(out, u64::from(p.0));
            }
            put_seat_ticks(out, &self.decisions);
        }
        if let Some(t) = self.pause {
            put_tick(out, t);
        }
        if let Some(t) = self.lifted {
            put_tick(out, t);
        }
        if let Some(t) = self.checksum_ack {
            put_tick(out, t);
        }
        if !self.checksums.is_empty() {
            put_varint(out, self.checksums.len() as u64);
            for (t, h) in &self.checksums {
                put_tick(out, *t);
                put_u64_le(out, *h);
            }
        }
    }

    /// The size of the datagram without inputs and frames.
    pub fn head_len(&self) -> usize {
        let mut v = Vec::with_capacity(64);
        put_header(&mut v, message_type::MESH);
        self.encode_head(&mut v);
        v.len() + 1 // the run count when there are few runs
    }

    /// The bytes one more input of `len` bytes adds to a run.
    pub const fn input_cost(len: usize) -> usize {
        varint_len(len as u64) + len
    }

    /// The bytes a run header adds (seat, start tick, and a count of up to
    /// 1024 inputs).
    pub const fn run_header_cost(seat: PlayerId, start: Tick) -> usize {
        varint_len(seat.0 as u64) + varint_len(start.get() as u64) + 2
    }

    /// Decodes a whole datagram, header included.
    pub fn decode_datagram(datagram: &'a [u8]) -> Result<Self, WireError> {
        let (ty, body) = split_header(datagram)?;
        match ty {
            message_type::MESH => Self::decode(body),
            other => Err(WireError::UnknownMessage(other)),
        }
    }

    /// Decodes a message body (the bytes after the header).
    pub fn decode(body: &'a [u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(body);
        let flags = r.u8()?;
        let mut p = MeshPacket {
            next_tick: r.tick()?,
            stamp: r.varint_u32()?,
            ..Self::default()
        };
        if flags & ECHO != 0 {
            p.echo = Some(Echo {
                stamp: r.varint_u32()?,
                held_ms: r.varint_u32()?,
            });
        }
        if flags & ACKS != 0 {
            p.acks = read_seat_ticks(&mut r, "ack")?;
        }
        if flags & ABANDON != 0 {
            let n = r.count("wanted seat", MAX_SEATS, 1)?;
            p.wanted = (0..n)
                .map(|_| read_player(&mut r))
                .collect::<Result<_, _>>()?;
            p.decisions = read_seat_ticks(&mut r, "decision")?;
        }
        if flags & PAUSE != 0 {
            p.pause = Some(r.tick()?);
        }
        if flags & LIFTED != 0 {
            p.lifted = Some(r.tick()?);
        }
        if flags & CHECKSUM_ACK != 0 {
            p.checksum_ack = Some(r.tick()?);
        }
        if flags & CHECKSUMS != 0 {
            let n = r.count("checksum", MAX_CHECKSUMS, 9)?;
            p.checksums = (0..n)
                .map(|_| Ok((r.tick()?, r.u64_le()?)))
                .collect::<Result<_, WireError>>()?;
        }
        let runs = r.count("input run", MAX_SEATS, 3)?;
        p.inputs.reserve(runs);
        for _ in 0..runs {
            let seat = read_player(&mut r)?;
            let start = r.tick()?;
            let n = r.count("run input", MAX_RUN, 1)?;
            if n > 0 && start.checked_add(n as u32 - 1).is_none() {
                return Err(WireError::Invalid("input run passes the last tick"));
            }
            let mut inputs = Vec::with_capacity(n);
            for _ in 0..n {
                let len = r.len("input length", MAX_INPUT_LEN)?;
                inputs.push(r.bytes(len)?);
            }
            p.inputs.push(InputRun {
                seat,
                start,
                inputs,
            });
        }
        if flags & FRAMES != 0 {
            let n = r.count("frame", MAX_FRAMES, 2)?;
            if n == 0 {
                return Err(WireError::Invalid("empty frame list"));
            }
            let mut tick = r.tick()?;
            p.frames.reserve(n);
            for i in 0..n {
                if i > 0 {
                    let gap = r.varint_u32()?;
                    if gap == 0 {
                        return Err(WireError::Invalid("frame ticks must increase"));
                    }
                    tick = tick
                        .checked_add(gap)
                        .ok_or(WireError::Invalid("frame tick passes the last tick"))?;
                }
                p.frames.push(FrameRef::read_body(&mut r, tick)?);
            }
        }
        r.finish()?;
        Ok(p)
    }
}

fn put_frame_ref(out: &mut Vec<u8>, f: &FrameRef<'_>) {
    put_body(out, f.inputs.iter().copied(), &f.events);
}

fn put_seat_ticks(out: &mut Vec<u8>, list: &[(PlayerId, Tick)]) {
    put_varint(out, list.len() as u64);
    for (p, t) in list {
        put_varint(out, u64::from(p.0));
        put_tick(out, *t);
    }
}

fn read_seat_ticks(
    r: &mut Reader<'_>,
    what: &'static str,
) -> Result<Vec<(PlayerId, Tick)>, WireError> {
    let n = r.count(what, MAX_SEATS, 2)?;
    (0..n).map(|_| Ok((read_player(r)?, r.tick()?))).collect()
}
