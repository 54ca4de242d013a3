//! Round-trip properties of every message and codec of protocol v8:
//! encode then decode gives back exactly what went in.

use lockstep_core::wire::{
    self, Abandon, ByeReason, ChainWriter, Checkpoint, Datagram, DatagramWriter, Endorsement,
    ErrorCode, Frames, Hello, Holder, InputCodec, InputRun, Inputs, List, Member, Message,
    RejectReason, ResumeToken, SnapshotAck, SnapshotChunk, Start, Status, Welcome,
};
use lockstep_core::{Frame, Input, PlayerId, PlayerInputs, SystemEvent, Tick};
use proptest::prelude::*;

fn cases() -> ProptestConfig {
    ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

prop_compose! {
    fn player_inputs()(
        movement in any::<[i8; 2]>(),
        aim in any::<[i8; 2]>(),
        pointer in any::<[u16; 2]>(),
        buttons in any::<u32>(),
        extra in proptest::collection::vec(any::<u8>(), 0..=lockstep_core::MAX_EXTRA),
    ) -> PlayerInputs {
        // -128 is outside the 255 steps.
        let fix = |v: [i8; 2]| v.map(|a| a.max(-127));
        PlayerInputs { movement: fix(movement), aim: fix(aim), pointer, buttons, extra }
    }
}

/// A sequence like a real player's: mostly held, sometimes a field changes.
fn held_sequence() -> impl Strategy<Value = Vec<PlayerInputs>> {
    (
        player_inputs(),
        proptest::collection::vec((0u8..8, player_inputs()), 1..60),
    )
        .prop_map(|(first, steps)| {
            let mut cur = first;
            steps
                .into_iter()
                .map(|(what, other)| {
                    match what {
                        0 => cur.movement = other.movement,
                        1 => cur.aim = other.aim,
                        2 => cur.buttons = other.buttons,
                        3 => cur = other,
                        _ => {}
                    }
                    cur.clone()
                })
                .collect()
        })
}

fn chain_round_trip<I: Input>(inputs: &[I]) -> Result<usize, TestCaseError> {
    let mut w = ChainWriter::new();
    for i in inputs {
        prop_assert!(w.push(i, usize::MAX));
    }
    let mut bytes = Vec::new();
    w.write(&mut bytes);
    prop_assert_eq!(&wire::decode_chain::<I>(&bytes, inputs.len())?, inputs);
    Ok(bytes.len())
}

fn seat() -> impl Strategy<Value = PlayerId> {
    (0u16..256).prop_map(PlayerId)
}

/// Up to 32 bytes of mixed-width UTF-8 (the tightest text bound).
fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 éß✓]{0,40}".prop_map(|mut s| {
        while s.len() > 32 {
            s.pop();
        }
        s
    })
}

proptest! {
    #![proptest_config(cases())]

    /// A run coded against a reference reads back against the same
    /// reference, and not without one.
    #[test]
    fn a_run_coded_against_a_reference_reads_back_against_it(
        reference in player_inputs(),
        inputs in proptest::collection::vec(player_inputs(), 1..12),
        back in 1u32..=wire::MAX_INPUT_BACK,
    ) {
        let mut c = ChainWriter::after(reference.clone());
        for i in &inputs {
            prop_assert!(c.push(i, usize::MAX));
        }
        let mut chain = Vec::new();
        c.write(&mut chain);
        let run = InputRun {
            seat: PlayerId(2),
            start: Tick::new(1_000),
            count: inputs.len() as u32,
            back,
            check: wire::reference_check(&reference, &mut Vec::new()),
            chain: &chain,
        };
        let mut buf = Vec::new();
        let mut w = DatagramWriter::new(&mut buf, Tick::new(1_000), 1200);
        w.push(&Message::Inputs(Inputs { acks: List::EMPTY, runs: (&[run]).into() }))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        w.finish();
        let d = Datagram::decode(&buf, Tick::new(1_000))?;
        let Message::Inputs(i) = &d.messages[0] else {
            return Err(TestCaseError::fail("an Inputs message"));
        };
        prop_assert_eq!(i.runs.first().expect("a run").reference(), Some(Tick::new(1_000 - back)));
        prop_assert_eq!(i.runs.first().expect("a run").decode(Some(&reference))?, inputs);
        prop_assert!(i.runs.first().expect("a run").decode::<PlayerInputs>(None).is_err());
        // Against another input for that tick, it is refused, never misread.
        let other = PlayerInputs { buttons: reference.buttons ^ 1, ..reference.clone() };
        let mut scratch = Vec::new();
        prop_assert!(!i.runs.first().expect("a run").reads_against(&other, &mut scratch)
            || wire::reference_check(&other, &mut scratch) == i.runs.first().expect("a run").check);
        prop_assert!(i.runs.first().expect("a run").reads_against(&reference, &mut scratch));
    }

    #[test]
    fn changed_since_then_apply_gives_the_new_input(prev in player_inputs(), next in player_inputs()) {
        match next.changed_since(&prev) {
            None => prop_assert_eq!(&prev, &next),
            Some(delta) => prop_assert_eq!(prev.apply(&delta), next),
        }
    }

    #[test]
    fn player_inputs_round_trip_whole_and_as_deltas(prev in player_inputs(), next in player_inputs()) {
        let mut buf = Vec::new();
        next.encode(&mut buf);
        prop_assert_eq!(PlayerInputs::decode(&buf)?, next.clone());
        if prev != next {
            let mut d = Vec::new();
            next.encode_delta(&prev, &mut d);
            let mut cursor = &d[..];
            prop_assert_eq!(PlayerInputs::decode_delta(&prev, &mut cursor)?, next);
            prop_assert!(cursor.is_empty());
        }
    }

    #[test]
    fn chains_round_trip_for_every_kind_of_input(
        held in held_sequence(),
        words in proptest::collection::vec(any::<u16>(), 0..100),
        blobs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..20),
    ) {
        chain_round_trip(&held)?;
        chain_round_trip(&words)?;
        chain_round_trip(&blobs)?;
    }

    /// Unchanged input costs one bit per tick, whatever the type.
    #[test]
    fn unchanged_input_costs_one_bit(first in player_inputs(), n in 1usize..200, word in any::<u64>()) {
        let same = vec![first.clone(); n];
        let one = chain_round_trip(&same[..1])?;
        prop_assert_eq!(chain_round_trip(&same)?, one - 1 + n.div_ceil(8));
        let words = vec![word; n];
        let one = chain_round_trip(&words[..1])?;
        prop_assert_eq!(chain_round_trip(&words)?, one - 1 + n.div_ceil(8));
    }

    #[test]
    fn frame_lists_round_trip(
        start in any::<u32>(),
        seats in 1usize..8,
        rows in proptest::collection::vec(proptest::collection::vec(proptest::option::of(any::<u16>()), 8), 1..40),
        events in proptest::collection::vec((0usize..40, 0u16..8, 0u8..6), 0..5),
        reference in proptest::option::of(proptest::collection::vec(proptest::option::of(0u16..4), 0..9)),
    ) {
        let start = start.min(u32::MAX - rows.len() as u32);
        let mut frames: Vec<Frame<u16>> = rows.iter().enumerate().map(|(i, r)| Frame {
            tick: Tick::new(start + i as u32),
            inputs: r[..seats].to_vec(),
            events: vec![],
        }).collect();
        for (at, p, kind) in events {
            if let Some(f) = frames.get_mut(at) {
                let player = PlayerId(p);
                f.events.push(match kind {
                    0 => SystemEvent::Joined { player },
                    1 => SystemEvent::Abandoned { player },
                    2 => SystemEvent::Left { player },
                    3 => SystemEvent::CaughtUp { player },
                    4 => SystemEvent::DelayChanged { delay: u32::from(p) * 4 + 1 },
                    _ => SystemEvent::HostChanged { player },
                });
            }
        }
        // Against no reference, and against one that may hold fewer or
        // more seats than the frames.
        let mut body = Vec::new();
        wire::encode_frames_body(&frames, seats, None, &mut body);
        prop_assert_eq!(wire::decode_frames_body::<u16>(Tick::new(start), frames.len(), seats, None, &body)?, frames.clone());
        let mut body = Vec::new();
        wire::encode_frames_body(&frames, seats, reference.as_deref(), &mut body);
        prop_assert_eq!(wire::decode_frames_body::<u16>(Tick::new(start), frames.len(), seats, reference.as_deref(), &body)?, frames);
    }

    /// Every message survives a trip through a datagram, with its ticks
    /// coded against any base and expanded from any nearby reference.
    #[test]
    fn every_message_round_trips(
        base in any::<u32>(),
        drift in -30_000i64..30_000,
        fingerprint in any::<u64>(),
        name in text(),
        room in text(),
        ticket in proptest::collection::vec(any::<u8>(), 0..100),
        resume in proptest::option::of(any::<[u8; 16]>()),
        cookie in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..=64)),
        padding in 0usize..300,
        welcome_seat in proptest::option::of(seat()),
        nums in any::<(u32, u16, u16, u8, u64)>(),
        stamps in any::<(u32, u32)>(),
        seats_ticks in proptest::collection::vec(seat(), 0..6),
        checks in proptest::collection::vec(any::<u64>(), 0..10),
        chunk in proptest::collection::vec(any::<u8>(), 0..300),
        inputs in proptest::collection::vec(any::<u16>(), 1..30),
        codes in (0usize..6, 0usize..4, 0usize..11),
    ) {
        let base_t = Tick::new(base);
        let reference = Tick::new((i64::from(base) + drift).clamp(0, i64::from(u32::MAX)) as u32);
        let near = |k: usize| Tick::new(if k.is_multiple_of(2) { base.saturating_sub(k as u32 * 7) } else { base.saturating_add(k as u32 * 13) });
        let mut chain = ChainWriter::new();
        for i in &inputs { chain.push(i, usize::MAX); }
        let mut chain_bytes = Vec::new();
        chain.write(&mut chain_bytes);
        let run_start = near(3).min(Tick::new(u32::MAX - inputs.len() as u32));
        let frames = vec![Frame { tick: near(1), inputs: vec![Some(3u16), None], events: vec![] }];
        let mut body = Vec::new();
        let held = [Some(3u16), Some(1)];
        wire::encode_frames_body(&frames, 2, Some(&held), &mut body);
        let reasons = [
            RejectReason::ProtocolMismatch { server: nums.3, client: nums.3.wrapping_add(1) },
            RejectReason::GameMismatch { server: nums.4, client: fingerprint },
            RejectReason::RoomFull, RejectReason::ServerFull, RejectReason::BadTicket,
            RejectReason::NoSuchRoom, RejectReason::BadToken, RejectReason::SeatBusy, RejectReason::Other(&name),
            RejectReason::Moved(std::net::SocketAddr::from((nums.4.to_le_bytes()[..4].try_into().unwrap_or([0; 4]), nums.1))),
            RejectReason::Moved(std::net::SocketAddr::from((u128::from(nums.4).to_le_bytes(), nums.1))),
        ];
        let errors = [ErrorCode::Malformed, ErrorCode::Violation, ErrorCode::RateLimited,
            ErrorCode::TooLarge, ErrorCode::Unauthorized, ErrorCode::Internal];
        let byes = [ByeReason::Leaving, ByeReason::Shutdown, ByeReason::Kicked, ByeReason::Timeout];
        let acks: Vec<(PlayerId, Tick)> = seats_ticks.iter().enumerate().map(|(k, s)| (*s, near(k))).collect();
        let runs = [InputRun { seat: PlayerId(1), start: run_start, count: inputs.len() as u32, back: 0, check: 0, chain: &chain_bytes }];
        let messages = vec![
            Message::Hello(Hello { fingerprint, spectator: nums.3.is_multiple_of(2), room: &room, name: &name, ticket: &ticket, resume: resume.map(ResumeToken), codec: if nums.1.is_multiple_of(2) { InputCodec::Opaque } else { InputCodec::PlayerInputs }, cookie: cookie.as_deref(), key: resume.map(|r| [r[0]; 32]), resume_from: resume.map(|r| Tick::new(u32::from_le_bytes([r[0], r[1], r[2], r[3]]))) }),
            Message::Welcome(Welcome { seat: welcome_seat, start: Tick::new(nums.0 / 2), tick: Tick::new(nums.0), deadline: nums.3 > 100, tick_rate: u32::from(nums.1 % 1001), delay: u32::from(nums.2 % 1025), seats: u32::from(nums.2) % 257, token: ResumeToken(resume.unwrap_or([7; 16])), snapshot: nums.3 % 3 == 0, lobby: nums.3 % 5 == 0, match_id: nums.4 }),
            Message::Reject(reasons[codes.2]),
            Message::Inputs(Inputs {
                acks: (&acks).into(),
                runs: (&runs).into(),
            }),
            Message::Frames(Frames { start: near(1), count: 1, seats: 2, reference: near(1).get().checked_sub((1 + nums.1 as u32).min(wire::MAX_REFERENCE_BACK)).map(Tick::new), body: &body }),
            Message::Checkpoint(Checkpoint { tick: near(2), full: true, value: nums.4, ack: resume.map(|_| near(1)) }),
            Message::CheckpointAck { tick: near(4) },
            Message::Resync { id: stamps.0, verdict: Checkpoint { tick: near(5), full: nums.3 % 2 == 0, value: if nums.3 % 2 == 0 { nums.4 } else { nums.4 & 0xFFFF }, ack: None } },
            Message::Checkpoint(Checkpoint { tick: near(3), full: false, value: nums.4 & 0xFFFF, ack: None }),
            Message::ChainQuery { id: stamps.0, ticks: checks.iter().take(8).enumerate().map(|(k, _)| near(k)).collect() },
            Message::ChainAnswer { id: stamps.1, entries: checks.iter().take(8).enumerate().map(|(k, h)| (near(k), *h, h.rotate_left(7))).collect() },
            Message::Pause { frame: near(5) },
            Message::Resume { lifted: near(6) },
            Message::Abandon(Abandon { votes: seats_ticks.clone(), frozen: seats_ticks.iter().rev().enumerate().map(|(k, s)| (*s, near(k))).collect(), endorsements: seats_ticks.iter().enumerate().map(|(k, s)| Endorsement { seat: *s, from: near(k), digest: stamps.0.into(), left: k & 1 == 1 }).collect() }),
            Message::Ping { stamp: stamps.0 },
            Message::Pong { stamp: stamps.0, held_ms: stamps.1, received: nums.0, sent: stamps.1 },
            Message::SnapshotChunk(SnapshotChunk { id: nums.0, tick: Tick::new(stamps.1), raw_len: 100_000, packed_len: 90_000, hash: nums.4, index: 2, count: 3, checksum: stamps.0, data: &chunk }),
            Message::SnapshotRequest { id: nums.0, tick: Tick::new(stamps.1) },
            Message::SnapshotAck(SnapshotAck { id: nums.0, next: stamps.0, bits: nums.4 }),
            Message::Error { code: errors[codes.0], text: &name },
            Message::Bye { reason: byes[codes.1], text: &room },
            Message::Status(Status { open: near(4), slack: stamps.0 as i32, waiting: seats_ticks.clone() }),
            Message::Challenge { cookie: cookie.as_deref().unwrap_or(&chunk[..chunk.len().min(64)]), key: resume.map(|r| [r[1]; 32]) },
            Message::Padding { len: padding },
            Message::Member(Member { seat: welcome_seat.unwrap_or(PlayerId(0)), version: stamps.0, holder: None }),
            Message::Member(Member { seat: seats_ticks.first().copied().unwrap_or(PlayerId(255)), version: stamps.1, holder: Some(Holder { playing: nums.3 % 2 == 0, hosts: nums.3 % 3 == 0, commitment: resume.unwrap_or([9; 16]), contact: &chunk[..chunk.len().min(64)], name: &name, ready: nums.3 % 7 == 0 }) }),
            Message::Lobby([Start::AtOnce, Start::Seated(nums.2 % 256 + 1), Start::Ready { min: nums.1 % 256 + 1 }, Start::Manual][codes.0 % 4]),
            Message::Ready { ready: nums.3 % 2 == 1 },
            Message::MemberAck { seat: welcome_seat.unwrap_or(PlayerId(3)), version: stamps.0 },
            Message::Takeover { epoch: stamps.1, seat: welcome_seat.unwrap_or(PlayerId(1)), token: ResumeToken(resume.unwrap_or([4; 16])), lacks: Tick::new(stamps.0) },
            Message::TakeoverAck { epoch: stamps.0, ready: nums.3 % 2 == 0, want: resume.map(|_| Tick::new(stamps.1)), late: nums.3 % 3 == 0, alive: nums.3 % 5 == 0, host: welcome_seat },
            Message::DelayWanted { delay: stamps.0 % 1024 + 1 },
            Message::DelayWants { seat: welcome_seat.unwrap_or(PlayerId(2)), changes: vec![(near(1), stamps.1 % 1024 + 1), (near(9), 1024)] },
        ];
        let mut datagrams: Vec<Vec<u8>> = Vec::new();
        let mut pending = messages.as_slice();
        while let Some((m, rest)) = pending.split_first() {
            let mut buf = Vec::new();
            let mut w = DatagramWriter::new(&mut buf, base_t, 1200);
            w.push(m).map_err(|e| TestCaseError::fail(e.to_string()))?;
            pending = rest;
            while let Some((m, rest)) = pending.split_first() {
                if w.push(m).is_err() { break; }
                pending = rest;
            }
            let len = w.finish();
            prop_assert!(len <= 1200);
            datagrams.push(buf);
        }
        let mut back = Vec::new();
        for d in &datagrams {
            let decoded = Datagram::decode(d, reference)?;
            prop_assert_eq!(decoded.base, base_t);
            back.extend(decoded.messages);
        }
        prop_assert_eq!(back, messages);
        let decoded_inputs = match &Datagram::decode(&datagrams[0], reference)?.messages[3] {
            Message::Inputs(i) => i.runs.first().expect("a run").decode::<u16>(None)?,
            _ => vec![],
        };
        if datagrams.len() == 1 { prop_assert_eq!(decoded_inputs, inputs); }
    }

    /// A field over its bound is refused when writing, not sent to be
    /// refused on arrival.
    #[test]
    fn writers_refuse_what_readers_would(extra in 1usize..100) {
        let name = "n".repeat(wire::MAX_NAME + extra);
        let mut buf = Vec::new();
        let mut w = DatagramWriter::new(&mut buf, Tick::ZERO, 1200);
        let hello = Message::Hello(Hello { name: &name, ..Hello::default() });
        let refused = matches!(w.push(&hello), Err(wire::WireError::TooLong { what: "name", .. }));
        prop_assert!(refused);
        prop_assert!(w.is_empty());
    }

    /// The 16-bit base tick expands correctly from any reference within
    /// ±32 767 ticks, across every wrap of the low bits.
    #[test]
    fn base_ticks_expand_across_wraps(tick in any::<u32>(), drift in -32_767i64..=32_767) {
        let reference = i64::from(tick) + drift;
        prop_assume!((0..=i64::from(u32::MAX)).contains(&reference));
        prop_assert_eq!(wire::expand_tick(tick as u16, Tick::new(reference as u32)), Tick::new(tick));
    }
}

/// A delay past the protocol's limit, or of 0, is refused in `DelayWanted`
/// with a typed error (a frame's `DelayChanged` is read by the same rule).
#[test]
fn delays_over_the_limit_are_refused() {
    use lockstep_core::wire::{Datagram, WireError};
    let mut ok = Vec::new();
    let mut w = DatagramWriter::new(&mut ok, Tick::new(5), 1200);
    w.push(&Message::DelayWanted { delay: 1024 }).expect("fits");
    w.finish();
    // The message's body is its last byte or two: 1024 is 0x80 0x08.
    let mut bad = ok.clone();
    let n = bad.len();
    bad[n - 1] = 0x09; // 1152
    assert!(Datagram::decode(&ok, Tick::new(5)).is_ok());
    assert!(matches!(
        Datagram::decode(&bad, Tick::new(5)),
        Err(WireError::Invalid(_))
    ));
    // Nor 0: a client told to stamp 0 ticks ahead would never commit.
    let mut one = Vec::new();
    let mut w = DatagramWriter::new(&mut one, Tick::new(5), 1200);
    w.push(&Message::DelayWanted { delay: 1 }).expect("fits");
    w.finish();
    let n = one.len();
    one[n - 1] = 0;
    assert!(matches!(
        Datagram::decode(&one, Tick::new(5)),
        Err(WireError::Invalid(_))
    ));
    assert!(Message::DelayWanted { delay: 0 }.check_bounds().is_err());
    // A mesh's wants: the same range, at most 16 a message, in tick order.
    let wants = |changes: Vec<(Tick, u32)>| Message::DelayWants {
        seat: PlayerId(1),
        changes,
    };
    let t = Tick::new;
    assert!(wants(vec![(t(6), 1024)]).check_bounds().is_ok());
    assert!(wants(vec![(t(6), 0)]).check_bounds().is_err());
    assert!(wants(vec![(t(6), 1025)]).check_bounds().is_err());
    assert!(wants(vec![(t(7), 3), (t(6), 4)]).check_bounds().is_err());
    assert!(
        wants((0..17).map(|k| (t(k), 2)).collect())
            .check_bounds()
            .is_err()
    );
    let mut ok = Vec::new();
    let mut w = DatagramWriter::new(&mut ok, Tick::new(5), 1200);
    w.push(&wants(vec![(t(6), 2), (t(8), 3)])).expect("fits");
    w.finish();
    assert!(Datagram::decode(&ok, Tick::new(5)).is_ok());
    // The second change's tick, 3 past the base, becomes 1 before the
    // base: out of order.
    let mut bad = ok.clone();
    let n = bad.len();
    bad[n - 2] = 1;
    assert!(matches!(
        Datagram::decode(&bad, Tick::new(5)),
        Err(WireError::Invalid(_))
    ));
    // A delay of 0.
    let mut zero = ok.clone();
    zero[n - 1] = 0;
    assert!(matches!(
        Datagram::decode(&zero, Tick::new(5)),
        Err(WireError::Invalid(_))
    ));
}
