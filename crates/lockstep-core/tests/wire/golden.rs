//! Golden bytes: one datagram for every message type, the sealed envelope,
//! the canonical frame encoding and the small cryptographic derivations,
//! each checked against `golden.txt`, and every example in
//! `docs/protocol.md` checked against the same bytes. An encoding that
//! changes by one byte fails here, and the protocol document cannot drift
//! from the code.
//!
//! `LOCKSTEP_BLESS=1 cargo test -p lockstep-core --test wire golden`
//! rewrites `golden.txt` after a deliberate change (a new protocol
//! version): the diff is the change.

use lockstep_core::admission::{resume_proof, token_commitment};
use lockstep_core::secure::{SecureChannel, client_public, hello_binding, server_handshake};
use lockstep_core::wire::{
    self, Abandon, ByeReason, ChainWriter, Checkpoint, DatagramWriter, Endorsement, ErrorCode,
    Frames, Hello, Holder, InputCodec, InputRun, Inputs, List, Member, Message, RejectReason,
    ResumeToken, SnapshotAck, SnapshotChunk, Start, Status, Welcome, encode_frame,
    encode_frames_body,
};
use lockstep_core::{Frame, Input, PlayerId, PlayerInputs, StreamHash, SystemEvent, Tick};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Every datagram's base tick.
const BASE: Tick = Tick::new(1000);

fn tick(t: u32) -> Tick {
    Tick::new(t)
}

/// `messages` in one datagram at [`BASE`].
fn datagram(messages: &[Message<'_>]) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = DatagramWriter::new(&mut buf, BASE, 1200);
    for m in messages {
        w.push(m).unwrap_or_else(|e| panic!("{m:?}: {e}"));
    }
    w.finish();
    buf
}

/// A delta chain of `inputs`.
fn chain<I: Input>(inputs: &[I]) -> Vec<u8> {
    let mut c = ChainWriter::new();
    for i in inputs {
        assert!(c.push(i, usize::MAX));
    }
    let mut out = Vec::new();
    c.write(&mut out);
    out
}

/// The frames of the `frames` and `frame` examples: three seats, the
/// second absent from the second frame, the third empty throughout.
fn frames() -> Vec<Frame<u16>> {
    vec![
        Frame {
            tick: tick(1000),
            inputs: vec![Some(5), Some(0x0102), None],
            events: vec![
                SystemEvent::Joined {
                    player: PlayerId(1),
                },
                SystemEvent::DelayChanged { delay: 4 },
            ],
        },
        Frame {
            tick: tick(1001),
            inputs: vec![Some(5), None, None],
            events: vec![],
        },
    ]
}

/// Every case, by name, in the order `golden.txt` lists them.
fn cases() -> Vec<(&'static str, Vec<u8>)> {
    let mut v: Vec<(&'static str, Vec<u8>)> = Vec::new();
    v.push(("keepalive", datagram(&[])));

    // Hello, as a client sends it: padded to 128 bytes.
    let hello = |h: Hello<'_>| {
        let mut buf = Vec::new();
        let mut w = DatagramWriter::new(&mut buf, BASE, 1200);
        w.push(&Message::Hello(h)).expect("hello fits");
        w.pad_to(wire::MIN_HELLO_DATAGRAM);
        w.finish();
        buf
    };
    v.push((
        "hello",
        hello(Hello {
            fingerprint: 0x0123_4567_89AB_CDEF,
            name: "ada",
            key: Some([0x22; 32]),
            ..Hello::default()
        }),
    ));
    v.push((
        "hello_resume",
        hello(Hello {
            fingerprint: 0x0123_4567_89AB_CDEF,
            spectator: false,
            room: "arena",
            name: "ada",
            ticket: b"tkt",
            resume: Some(ResumeToken([0x11; 16])),
            codec: InputCodec::PlayerInputs,
            cookie: Some(&[0xC0; 8]),
            key: Some([0x22; 32]),
            resume_from: Some(tick(998)),
        }),
    ));
    v.push((
        "welcome",
        datagram(&[Message::Welcome(Welcome {
            seat: Some(PlayerId(2)),
            start: tick(0),
            tick: tick(997),
            deadline: false,
            tick_rate: 30,
            delay: 3,
            seats: 4,
            token: ResumeToken([0x33; 16]),
            snapshot: true,
            lobby: true,
            match_id: 0x0123_4567_89AB_CDEF,
        })]),
    ));
    v.push((
        "reject_protocol",
        datagram(&[Message::Reject(RejectReason::ProtocolMismatch {
            server: 5,
            client: 4,
        })]),
    ));
    v.push((
        "reject_game",
        datagram(&[Message::Reject(RejectReason::GameMismatch {
            server: 1,
            client: 2,
        })]),
    ));
    v.push((
        "reject_full",
        datagram(&[Message::Reject(RejectReason::RoomFull)]),
    ));
    v.push((
        "reject_other",
        datagram(&[Message::Reject(RejectReason::Other("closed"))]),
    ));
    v.push((
        "reject_moved",
        datagram(&[Message::Reject(RejectReason::Moved(
            "203.0.113.5:7777".parse().expect("an address"),
        ))]),
    ));
    v.push((
        "reject_moved_v6",
        datagram(&[Message::Reject(RejectReason::Moved(
            "[2001:db8::5]:7777".parse().expect("an address"),
        ))]),
    ));

    let opaque = chain::<u16>(&[5, 5, 7]);
    v.push((
        "inputs",
        datagram(&[Message::Inputs(Inputs {
            acks: (&[(PlayerId(1), tick(1002))]).into(),
            runs: (&[InputRun {
                seat: PlayerId(0),
                start: tick(1003),
                count: 3,
                back: 0,
                check: 0,
                chain: &opaque,
            }])
                .into(),
        })]),
    ));
    // The same seat's next inputs, unchanged from its 7 at tick 1002,
    // which the recipient acknowledged: one bit each.
    let referenced = {
        let mut c = ChainWriter::after(7u16);
        for i in [7u16, 7, 7] {
            assert!(c.push(&i, usize::MAX));
        }
        let mut out = Vec::new();
        c.write(&mut out);
        out
    };
    v.push((
        "inputs_reference",
        datagram(&[Message::Inputs(Inputs {
            acks: List::EMPTY,
            runs: (&[InputRun {
                seat: PlayerId(0),
                start: tick(1003),
                count: 3,
                back: 1,
                // xxh3-64 of 7's encoding with its trailing zero dropped
                // (`07`), low 8 bits.
                check: wire::reference_check(&7u16, &mut Vec::new()),
                chain: &referenced,
            }])
                .into(),
        })]),
    ));
    let pad = chain(&[
        PlayerInputs::default()
            .with_movement(1.0, -0.5)
            .with_button(0, true),
        PlayerInputs::default()
            .with_movement(1.0, -0.5)
            .with_button(0, true),
        PlayerInputs::default().with_button(0, true),
    ]);
    v.push((
        "inputs_player",
        datagram(&[Message::Inputs(Inputs {
            acks: List::EMPTY,
            runs: (&[InputRun {
                seat: PlayerId(3),
                start: tick(1001),
                count: 3,
                back: 0,
                check: 0,
                chain: &pad,
            }])
                .into(),
        })]),
    ));
    let mut body = Vec::new();
    encode_frames_body(&frames(), 3, None, &mut body);
    v.push((
        "frames",
        datagram(&[Message::Frames(Frames {
            start: tick(1000),
            count: 2,
            seats: 3,
            reference: None,
            body: &body,
        })]),
    ));
    // The same frames against tick 999, at which seat 0 played 5 and seat
    // 2 played 9: seat 0 is unchanged, seat 2 went empty.
    let mut body = Vec::new();
    encode_frames_body(&frames(), 3, Some(&[Some(5), None, Some(9)]), &mut body);
    v.push((
        "frames_reference",
        datagram(&[Message::Frames(Frames {
            start: tick(1000),
            count: 2,
            seats: 3,
            reference: Some(tick(999)),
            body: &body,
        })]),
    ));
    v.push((
        "checkpoint",
        datagram(&[
            Message::Checkpoint(Checkpoint {
                tick: tick(990),
                full: true,
                value: 0x1122_3344_5566_7788,
                ack: Some(tick(980)),
            }),
            Message::Checkpoint(Checkpoint {
                tick: tick(995),
                full: false,
                value: 0xBEEF,
                ack: None,
            }),
        ]),
    ));
    v.push((
        "checkpoint_ack",
        datagram(&[Message::CheckpointAck { tick: tick(970) }]),
    ));
    v.push((
        "chain_query",
        datagram(&[Message::ChainQuery {
            id: 7,
            ticks: vec![tick(900), tick(950)],
        }]),
    ));
    v.push((
        "chain_answer",
        datagram(&[Message::ChainAnswer {
            id: 7,
            entries: vec![(tick(950), 0x0102_0304_0506_0708, 0x1112_1314_1516_1718)],
        }]),
    ));
    v.push((
        "resync",
        datagram(&[Message::Resync {
            id: 2,
            verdict: Checkpoint {
                tick: tick(990),
                full: true,
                value: 0x1122_3344_5566_7788,
                ack: None,
            },
        }]),
    ));
    v.push(("pause", datagram(&[Message::Pause { frame: tick(1004) }])));
    v.push((
        "resume",
        datagram(&[Message::Resume { lifted: tick(1004) }]),
    ));
    v.push((
        "abandon",
        datagram(&[Message::Abandon(Abandon {
            votes: vec![PlayerId(2)],
            frozen: vec![(PlayerId(2), tick(1001))],
            endorsements: vec![Endorsement {
                seat: PlayerId(2),
                from: tick(1003),
                digest: 0x0A0B_0C0D_0E0F_1011,
                left: false,
            }],
        })]),
    ));
    v.push(("ping", datagram(&[Message::Ping { stamp: 1234 }])));
    v.push((
        "pong",
        datagram(&[Message::Pong {
            stamp: 1234,
            held_ms: 3,
            received: 200,
            sent: 201,
        }]),
    ));
    v.push((
        "snapshot_chunk",
        datagram(&[Message::SnapshotChunk(SnapshotChunk {
            id: 1,
            tick: tick(990),
            raw_len: 4096,
            packed_len: 3,
            hash: 0x0102_0304_0506_0708,
            index: 0,
            count: 1,
            checksum: 0xA1B2_C3D4,
            data: b"abc",
        })]),
    ));
    v.push((
        "snapshot_request",
        datagram(&[Message::SnapshotRequest {
            id: 1,
            tick: tick(990),
        }]),
    ));
    v.push((
        "snapshot_ack",
        datagram(&[Message::SnapshotAck(SnapshotAck {
            id: 1,
            next: 3,
            bits: 0b101,
        })]),
    ));
    v.push((
        "caught_up",
        datagram(&[Message::CaughtUp { tick: tick(1001) }]),
    ));
    v.push((
        "error",
        datagram(&[Message::Error {
            code: ErrorCode::Malformed,
            text: "bad",
        }]),
    ));
    v.push((
        "bye",
        datagram(&[Message::Bye {
            reason: ByeReason::Leaving,
            text: "",
        }]),
    ));
    v.push((
        "status",
        datagram(&[Message::Status(Status {
            open: tick(1001),
            slack: -2,
            waiting: vec![PlayerId(1), PlayerId(3)],
        })]),
    ));
    v.push((
        "challenge",
        datagram(&[Message::Challenge {
            cookie: &[0xC0; 8],
            key: Some([0x44; 32]),
        }]),
    ));
    v.push(("padding", datagram(&[Message::Padding { len: 3 }])));
    v.push((
        "member",
        datagram(&[
            Message::Member(Member {
                seat: PlayerId(1),
                version: 9,
                holder: Some(Holder {
                    playing: true,
                    hosts: false,
                    commitment: [0x55; 16],
                    contact: b"10.0.0.2:4000",
                    name: "ann",
                    ready: true,
                }),
            }),
            Message::Member(Member {
                seat: PlayerId(2),
                version: 10,
                holder: None,
            }),
        ]),
    ));
    v.push((
        "lobby",
        datagram(&[
            Message::Lobby(Start::Ready { min: 2 }),
            Message::Lobby(Start::Seated(4)),
            Message::Lobby(Start::Manual),
        ]),
    ));
    v.push(("ready", datagram(&[Message::Ready { ready: true }])));
    v.push((
        "member_ack",
        datagram(&[Message::MemberAck {
            seat: PlayerId(1),
            version: 9,
        }]),
    ));
    v.push((
        "takeover",
        datagram(&[Message::Takeover {
            epoch: 1,
            seat: PlayerId(2),
            token: ResumeToken([0x66; 16]),
            lacks: tick(1001),
        }]),
    ));
    v.push((
        "takeover_ack",
        datagram(&[Message::TakeoverAck {
            epoch: 1,
            ready: false,
            want: Some(tick(999)),
            late: false,
            alive: true,
            host: Some(PlayerId(0)),
        }]),
    ));
    v.push((
        "delay_wanted",
        datagram(&[Message::DelayWanted { delay: 5 }]),
    ));
    v.push((
        "delay_wants",
        datagram(&[Message::DelayWants {
            seat: PlayerId(1),
            changes: vec![(tick(1003), 4), (tick(1010), 3)],
        }]),
    ));

    // The sealed envelope: a client's first sealed datagram (sequence 0)
    // carrying the `ping` datagram, with the keys of a fixed handshake.
    let (server_pub, _) = server_handshake(
        &SERVER_KEY,
        &COOKIE,
        &client_public(&CLIENT_SECRET),
        &hello_binding(&binding_hello()),
    )
    .expect("a real key");
    let mut client = SecureChannel::client(
        &CLIENT_SECRET,
        &server_pub,
        &COOKIE,
        &hello_binding(&binding_hello()),
    )
    .expect("a real key");
    v.push(("hello_binding", hello_binding(&binding_hello()).to_vec()));
    let mut sealed = Vec::new();
    client.seal(&datagram(&[Message::Ping { stamp: 1234 }]), &mut sealed);
    v.push((
        "handshake_client_key",
        client_public(&CLIENT_SECRET).to_vec(),
    ));
    v.push(("handshake_server_key", server_pub.to_vec()));
    v.push(("sealed", sealed));

    // What the stream hash and checkpoints fold in.
    let mut canonical = Vec::new();
    encode_frame(&frames()[0], &mut canonical);
    v.push(("frame", canonical));
    let mut h = StreamHash::new();
    for f in &frames() {
        h.push(f);
    }
    v.push(("stream_hash", h.value().to_le_bytes().to_vec()));

    let token = ResumeToken([0x77; 16]);
    v.push((
        "resume_proof",
        resume_proof(&token, &[0xC0; 8], Some(&[0x22; 32]))
            .0
            .to_vec(),
    ));
    v.push(("token_commitment", token_commitment(&token).to_vec()));
    v
}

/// The fixed handshake of the `sealed` example.
/// The Hello the sealed example's handshake answers.
fn binding_hello() -> Hello<'static> {
    Hello {
        fingerprint: 0x0102_0304_0506_0708,
        room: "arena",
        name: "ann",
        codec: InputCodec::PlayerInputs,
        ..Hello::default()
    }
}

const CLIENT_SECRET: [u8; 32] = [1; 32];
const SERVER_KEY: [u8; 32] = [2; 32];
const COOKIE: [u8; 20] = [9; 20];

fn hex(bytes: &[u8]) -> String {
    let mut s = String::new();
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn here(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(file)
}

/// `golden.txt`: `name hex` per line; `#` starts a comment.
fn read_golden() -> BTreeMap<String, String> {
    let path = here("tests/wire/golden.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, bytes) = l
                .split_once(' ')
                .unwrap_or_else(|| panic!("golden.txt: `{l}` is not `name hex`"));
            (name.to_owned(), bytes.trim().to_owned())
        })
        .collect()
}

#[test]
fn every_encoding_matches_its_golden_bytes() {
    let cases = cases();
    let mut names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "a case name is used twice");
    if std::env::var_os("LOCKSTEP_BLESS").is_some() {
        let mut out = String::from(
            "# Golden bytes of protocol v8 (see golden.rs). Regenerate only for a new\n\
             # protocol version: LOCKSTEP_BLESS=1 cargo test -p lockstep-core --test wire golden\n",
        );
        for (name, bytes) in &cases {
            let _ = writeln!(out, "{name} {}", hex(bytes));
        }
        std::fs::write(here("tests/wire/golden.txt"), out).expect("write golden.txt");
        return;
    }
    let golden = read_golden();
    let mut wrong = Vec::new();
    for (name, bytes) in &cases {
        match golden.get(*name) {
            Some(g) if *g == hex(bytes) => {}
            Some(g) => wrong.push(format!("{name}:\n  golden {g}\n  now    {}", hex(bytes))),
            None => wrong.push(format!("{name}: not in golden.txt")),
        }
    }
    for name in golden.keys() {
        if !cases.iter().any(|(n, _)| n == name) {
            wrong.push(format!("{name}: in golden.txt, but no case makes it"));
        }
    }
    assert!(wrong.is_empty(), "encodings changed:\n{}", wrong.join("\n"));
}

/// Every golden datagram decodes, and encodes back to the same bytes.
#[test]
fn every_golden_datagram_round_trips() {
    use lockstep_core::wire::Datagram;
    for (name, bytes) in cases() {
        if !bytes.starts_with(b"LK") {
            continue;
        }
        let d = Datagram::decode(&bytes, BASE).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(d.base, BASE, "{name}");
        let mut again = Vec::new();
        let mut w = DatagramWriter::new(&mut again, d.base, usize::MAX);
        for m in &d.messages {
            w.push(m).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        w.finish();
        assert_eq!(hex(&again), hex(&bytes), "{name}");
    }
}

/// The examples in `docs/protocol.md`: fenced blocks tagged `hex NAME`,
/// each line the bytes (two hex digits a byte, spaces between), then
/// optionally `#` and words about them. Every one must be the golden
/// bytes of `NAME`, and every golden case must have one.
#[test]
fn the_protocol_document_shows_the_golden_bytes() {
    let path = here("../../docs/protocol.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut examples: BTreeMap<String, String> = BTreeMap::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.trim().strip_prefix("```hex ") else {
            continue;
        };
        let mut bytes = String::new();
        for l in lines.by_ref() {
            if l.trim_start().starts_with("```") {
                break;
            }
            let shown = l.split('#').next().unwrap_or_default();
            for token in shown.split_whitespace() {
                let is_byte = token.len() == 2 && token.chars().all(|c| c.is_ascii_hexdigit());
                assert!(
                    is_byte,
                    "protocol.md, example `{name}`: `{token}` is not a byte"
                );
                bytes.push_str(&token.to_ascii_lowercase());
            }
        }
        let dup = examples.insert(name.trim().to_owned(), bytes);
        assert!(dup.is_none(), "protocol.md: example `{name}` given twice");
    }
    let cases: BTreeMap<&str, Vec<u8>> = cases().into_iter().collect();
    let mut wrong = Vec::new();
    for (name, shown) in &examples {
        match cases.get(name.as_str()) {
            Some(b) if hex(b) == *shown => {}
            Some(b) => wrong.push(format!(
                "{name}:\n  document {shown}\n  code     {}",
                hex(b)
            )),
            None => wrong.push(format!("{name}: no such golden case")),
        }
    }
    for name in cases.keys() {
        if !examples.contains_key(*name) {
            wrong.push(format!("{name}: no example in protocol.md"));
        }
    }
    assert!(
        wrong.is_empty(),
        "protocol.md disagrees with the code:\n{}",
        wrong.join("\n")
    );
}

/// The key derivation as `docs/protocol.md` spells it, step by step with
/// the primitives themselves, gives the channel the library derives: a
/// client in another language that follows the document seals the same
/// bytes.
#[test]
fn the_documented_key_derivation_gives_the_same_channel() {
    use chacha20poly1305::aead::{AeadInOut, KeyInit};
    use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
    use hkdf::Hkdf;
    use hmac::{Hmac, Mac};
    use sha2::Sha256;
    use x25519_dalek::{PublicKey, StaticSecret};

    // The server's handshake secret: HMAC-SHA256(server key,
    // "lockstep handshake key" || cookie || client public key).
    let client_pub = PublicKey::from(&StaticSecret::from(CLIENT_SECRET)).to_bytes();
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&SERVER_KEY).expect("any key length");
    m.update(b"lockstep handshake key");
    m.update(&COOKIE);
    m.update(&client_pub);
    let server_secret: [u8; 32] = m.finalize().into_bytes().into();
    let server_pub = PublicKey::from(&StaticSecret::from(server_secret)).to_bytes();
    let shared = StaticSecret::from(CLIENT_SECRET).diffie_hellman(&PublicKey::from(server_pub));
    // The Hello's binding: SHA-256("lockstep hello" || fingerprint:u64le
    // || spectator:u8 || codec:u8 || room_len:u8 room || name_len:u8 name
    // || ticket_len:u16le ticket).
    let mut h = <Sha256 as sha2::Digest>::new();
    sha2::Digest::update(&mut h, b"lockstep hello");
    sha2::Digest::update(&mut h, 0x0102_0304_0506_0708u64.to_le_bytes());
    sha2::Digest::update(&mut h, [0u8, 1]);
    sha2::Digest::update(&mut h, b"\x05arena\x03ann\x00\x00");
    let binding: [u8; 32] = sha2::Digest::finalize(h).into();
    // One HKDF-Extract (salt: the cookie, then the binding; input: the
    // shared secret), then three HKDF-Expands of its output.
    let salt = [COOKIE.as_slice(), &binding].concat();
    let hk = Hkdf::<Sha256>::new(Some(&salt), shared.as_bytes());
    let mut c2s = [0u8; 32];
    let mut id = [0u8; 8];
    hk.expand(b"lockstep v2 client to server", &mut c2s)
        .expect("32 bytes");
    hk.expand(b"lockstep v2 connection id", &mut id)
        .expect("8 bytes");
    // Sealing: header "LS" version id:u64le seq:u64le, nonce seq:u64le ||
    // 0u32, the header as associated data, the tag after the ciphertext.
    let plain = datagram(&[Message::Ping { stamp: 1234 }]);
    let mut out = b"LS".to_vec();
    out.push(wire::VERSION);
    out.extend_from_slice(&id);
    out.extend_from_slice(&0u64.to_le_bytes());
    let mut body = plain.clone();
    let mut nonce = [0u8; 12];
    nonce[..8].copy_from_slice(&0u64.to_le_bytes());
    let tag = ChaCha20Poly1305::new(&Key::from(c2s))
        .encrypt_inout_detached(&Nonce::from(nonce), &out, body.as_mut_slice().into())
        .expect("small message");
    out.extend_from_slice(&body);
    out.extend_from_slice(&tag);
    let cases: BTreeMap<&str, Vec<u8>> = cases().into_iter().collect();
    assert_eq!(hex(&out), hex(&cases["sealed"]));
    assert_eq!(hex(&server_pub), hex(&cases["handshake_server_key"]));
    // The channel's id is the same eight bytes.
    assert_eq!(hex(&binding), hex(&cases["hello_binding"]));
    let channel =
        SecureChannel::client(&CLIENT_SECRET, &server_pub, &COOKIE, &binding).expect("real key");
    assert_eq!(channel.id(), u64::from_le_bytes(id));
}
