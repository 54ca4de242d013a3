//! The first look at a datagram from an address with no connection: one
//! rule for every server (a relay, a host's sequencer), so they refuse the
//! same datagrams the same way.

use crate::Tick;
use crate::wire::{
    self, Datagram, DatagramWriter, ErrorCode, Hello, Message, RejectReason, WireError,
};

/// Why a stranger's datagram opens no connection, and what (if anything)
/// it is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unwelcome {
    /// Not a datagram of this protocol at all: never answered (whatever
    /// sent it would not understand an answer either).
    #[error("not a lockstep datagram")]
    NotOurs,
    /// Another protocol version: told so (`Reject ProtocolMismatch`).
    #[error("protocol version {0}, not {ours}", ours = wire::VERSION)]
    Version(u8),
    /// Over the size limit: told so (`Error TooLarge`).
    #[error("datagram of {len} bytes over the {max}-byte limit")]
    TooLarge {
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// It does not decode: told why (`Error Malformed`).
    #[error("malformed datagram: {0}")]
    Malformed(WireError),
    /// It carries an answer (a Welcome, a Reject, ...): never answered, so
    /// two servers cannot be set bouncing replies off each other.
    #[error("an answer from a stranger")]
    AnAnswer,
    /// No Hello: never answered. It is most likely a player the server
    /// dropped (or one whose address changed), still sending: silence lets
    /// it time out and take its held seat back, where an `Error` would end
    /// it for good.
    #[error("not connected: say hello first")]
    NoHello,
}

/// Whether `m` answers something: a stranger's datagram carrying one is
/// never answered.
pub fn is_answer(m: &Message<'_>) -> bool {
    matches!(
        m,
        Message::Welcome(_)
            | Message::Reject(_)
            | Message::Error { .. }
            | Message::Bye { .. }
            | Message::Challenge { .. }
            | Message::Pong { .. }
            | Message::Status(_)
    )
}

/// Screens a datagram from an address with no connection, under a size
/// limit of `max_len`: the decoded datagram when it carries a Hello, else
/// why not. Checked in this order: ours at all, the version, the size,
/// the decoding, answers, the Hello.
///
/// ```
/// use lockstep_core::admission::{Unwelcome, screen_stranger};
/// assert_eq!(screen_stranger(b"GET / HTTP/1.1", 1200).err(), Some(Unwelcome::NotOurs));
/// assert_eq!(screen_stranger(b"LK\x04\0\0", 1200).err(), Some(Unwelcome::Version(4)));
/// ```
pub fn screen_stranger(
    bytes: &[u8],
    max_len: usize,
) -> Result<(Datagram<'_>, Hello<'_>), Unwelcome> {
    match wire::peek_version(bytes) {
        None => return Err(Unwelcome::NotOurs),
        Some(v) if v != wire::VERSION => return Err(Unwelcome::Version(v)),
        Some(_) => {}
    }
    if bytes.len() > max_len {
        return Err(Unwelcome::TooLarge {
            len: bytes.len(),
            max: max_len,
        });
    }
    let d = Datagram::decode(bytes, Tick::ZERO).map_err(Unwelcome::Malformed)?;
    if d.messages.iter().any(is_answer) {
        return Err(Unwelcome::AnAnswer);
    }
    let hello = d
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Hello(h) => Some(h.clone()),
            _ => None,
        })
        .ok_or(Unwelcome::NoHello)?;
    Ok((d, hello))
}

impl Unwelcome {
    /// Writes the answer it gets, if any, into `out` (cleared first): a
    /// datagram with base tick `base` of at most `budget` bytes (the size
    /// of the datagram that came, where the source may be forged), an
    /// error's text cut to fit. Returns its length, or `None` when nothing
    /// is sent.
    pub fn answer(&self, base: Tick, budget: usize, out: &mut Vec<u8>) -> Option<usize> {
        let text = self.to_string();
        let m = match self {
            Self::NotOurs | Self::AnAnswer | Self::NoHello => return None,
            Self::Version(v) => Message::Reject(RejectReason::ProtocolMismatch {
                server: wire::VERSION,
                client: *v,
            }),
            Self::TooLarge { .. } => Message::Error {
                code: ErrorCode::TooLarge,
                text: &text,
            },
            Self::Malformed(_) => Message::Error {
                code: ErrorCode::Malformed,
                text: &text,
            },
        };
        write_answer(&m, base, budget, out)
    }
}

/// Writes `m` alone in a datagram with base tick `base` of at most
/// `budget` bytes into `out` (cleared first); an `Error`, or a `Reject` in
/// words of its own (`Other`), that does not fit goes with its text cut
/// to fit (at a character boundary, down to none). Returns the length, or
/// `None` when even that does not fit.
pub fn write_answer(
    m: &Message<'_>,
    base: Tick,
    budget: usize,
    out: &mut Vec<u8>,
) -> Option<usize> {
    let text = match m {
        Message::Error { text, .. } | Message::Reject(RejectReason::Other(text)) => *text,
        _ => "",
    };
    let mut keep = text.len();
    loop {
        let cut = &text[..keep];
        let m = match m {
            Message::Error { code, .. } => Message::Error {
                code: *code,
                text: cut,
            },
            Message::Reject(RejectReason::Other(_)) => Message::Reject(RejectReason::Other(cut)),
            m => m.clone(),
        };
        out.clear();
        let mut w = DatagramWriter::new(out, base, budget);
        if w.push(&m).is_ok() {
            return Some(w.finish());
        }
        if keep == 0 {
            return None;
        }
        // What it needs without a limit says how much text to drop (a
        // shorter length prefix can only make it fit sooner).
        let mut whole = Vec::new();
        let mut unbounded = DatagramWriter::new(&mut whole, base, usize::MAX);
        let need = match unbounded.push(&m) {
            Ok(()) => unbounded.finish(),
            Err(_) => return None,
        };
        keep = keep.saturating_sub(need.saturating_sub(budget).max(1));
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(messages: &[Message<'_>]) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut w = DatagramWriter::new(&mut buf, Tick::ZERO, usize::MAX);
        for m in messages {
            w.push(m).expect("fits");
        }
        w.finish();
        buf
    }

    #[test]
    fn strangers_are_screened_in_order_and_never_answered_larger() {
        let mut out = Vec::new();
        // Not ours, however large: never answered.
        let junk = vec![0xAB; 1300];
        assert_eq!(screen_stranger(&junk, 1200).err(), Some(Unwelcome::NotOurs));
        assert_eq!(Unwelcome::NotOurs.answer(Tick::ZERO, 1300, &mut out), None);
        // Ours but too large: told, within its own size.
        let mut big = datagram(&[Message::Padding { len: 1290 }]);
        assert!(big.len() > 1200);
        let e = screen_stranger(&big, 1200).expect_err("refused");
        assert!(matches!(e, Unwelcome::TooLarge { .. }), "{e:?}");
        assert!(
            e.answer(Tick::ZERO, big.len(), &mut out)
                .is_some_and(|n| n <= big.len())
        );
        // Another version, whatever its size: told so, if it fits.
        big[2] = 4;
        assert_eq!(
            screen_stranger(&big, 1200).err(),
            Some(Unwelcome::Version(4))
        );
        assert_eq!(Unwelcome::Version(4).answer(Tick::ZERO, 3, &mut out), None);
        // An answer: ignored. No Hello: told, the text cut to fit.
        let pong = datagram(&[Message::Pong {
            stamp: 1,
            held_ms: 0,
            received: 0,
            sent: 0,
        }]);
        assert_eq!(
            screen_stranger(&pong, 1200).err(),
            Some(Unwelcome::AnAnswer)
        );
        let ping = datagram(&[Message::Ping { stamp: 1 }]);
        assert_eq!(screen_stranger(&ping, 1200).err(), Some(Unwelcome::NoHello));
        // Not answered, however large.
        let padded = datagram(&[Message::Ping { stamp: 1 }, Message::Padding { len: 30 }]);
        assert_eq!(
            Unwelcome::NoHello.answer(Tick::ZERO, padded.len(), &mut out),
            None
        );
        // Seven bytes: too few for even a bare Error.
        let malformed = Unwelcome::Malformed(WireError::Truncated);
        assert_eq!(malformed.answer(Tick::ZERO, ping.len(), &mut out), None);
        let n = malformed
            .answer(Tick::ZERO, padded.len(), &mut out)
            .expect("an answer");
        assert!(n <= padded.len() && n > 8, "{n}: the text, cut to fit");
        // A Hello opens.
        let hello = datagram(&[Message::Hello(Hello {
            name: "ada",
            ..Hello::default()
        })]);
        assert_eq!(
            screen_stranger(&hello, 1200).map(|(_, h)| h.name),
            Ok("ada")
        );
    }

    #[test]
    fn an_answer_in_words_is_cut_to_the_budget_at_a_character() {
        let mut out = Vec::new();
        let words = "é".repeat(100);
        let m = Message::Reject(RejectReason::Other(&words));
        let n = write_answer(&m, Tick::ZERO, 40, &mut out).expect("fits cut");
        assert!(n <= 40, "{n}");
        let d = Datagram::decode(&out[..n], Tick::ZERO).expect("decodes");
        let Message::Reject(RejectReason::Other(kept)) = &d.messages[0] else {
            panic!("{:?}", d.messages);
        };
        assert!(!kept.is_empty() && words.starts_with(kept), "{kept}");
        // Whole when it fits; nothing when not even the bare refusal does.
        let n = write_answer(&m, Tick::ZERO, 1200, &mut out).expect("fits");
        assert!(n > words.len());
        assert_eq!(write_answer(&m, Tick::ZERO, 5, &mut out), None);
        let full = Message::Reject(RejectReason::RoomFull);
        assert_eq!(write_answer(&full, Tick::ZERO, 5, &mut out), None);
    }
}
