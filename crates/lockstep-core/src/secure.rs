//! Authenticated, encrypted datagrams between a client and its server.
//!
//! After the address check (see [`admission`](crate::admission)), a UDP
//! source address is still forgeable: anyone could inject a `Bye` or inputs
//! "from" a player. So the handshake also agrees on keys, and every later
//! datagram is sealed with ChaCha20-Poly1305 under a key for its direction,
//! numbered, and refused if forged, altered or replayed:
//!
//! ```text
//!   client                                       server (stateless so far)
//!   Hello { key: client_pub }            ──▶
//!                                        ◀──   Challenge { cookie, key: server_pub }
//!   Hello { cookie, key: client_pub }    ──▶   recomputes server_pub's secret from
//!                                              (cookie, client_pub): keys, connection
//!   ◀═════════ sealed datagrams both ways, from the Welcome on ═════════▶
//! ```
//!
//! The server's key for a handshake is derived from its address-validation
//! key, the cookie and the client's key, so it keeps no state before the
//! cookie comes back. Both sides derive, with HKDF-SHA256 over the X25519
//! shared secret (salted with the cookie), a key per direction and a
//! connection id. The id travels in clear in every sealed datagram, so a
//! connection is found by it, not by its address: a sealed datagram that
//! opens from a new address moves the connection there (NAT rebinding).
//!
//! ```text
//! sealed := "LS" version:u8 conn_id:u64le seq:u64le ciphertext tag:16
//!   nonce = seq:u64le || 0u32;  aad = the 19 header bytes;
//!   plaintext = an ordinary datagram ("LK" ...)
//! ```
//!
//! What this does not do: authenticate the server. Without a key the client
//! already trusts (a matchmaker's, or a certificate), an attacker on the
//! path during the handshake could stand in the middle. It does stop every
//! off-path attacker, and anyone who only watches the traffic, from forging
//! or replaying a single datagram.
//!
//! ```
//! use lockstep_core::secure::{SecureChannel, client_public, hello_binding, server_handshake};
//! use lockstep_core::wire::Hello;
//!
//! let client_secret = [1; 32];
//! let cookie = [9; 20];
//! // What the Hello asks for: keys for another Hello do not fit this one.
//! let hello = hello_binding(&Hello { room: "arena", ..Hello::default() });
//! let (server_pub, mut server) =
//!     server_handshake(&[2; 32], &cookie, &client_public(&client_secret), &hello)
//!         .expect("a real key");
//! let mut client = SecureChannel::client(&client_secret, &server_pub, &cookie, &hello)
//!     .expect("a real key");
//! assert_eq!(client.id(), server.id());
//! let mut sealed = Vec::new();
//! client.seal(b"LK hello", &mut sealed);
//! assert_eq!(server.open(&mut sealed.clone()), Ok(&b"LK hello"[..]));
//! // The same datagram again is a replay.
//! assert!(server.open(&mut sealed.clone()).is_err());
//! ```

use crate::wire::VERSION;
use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce, Tag};
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use x25519_dalek::{PublicKey, StaticSecret};

/// The first two bytes of a sealed datagram.
pub const SEALED_MAGIC: [u8; 2] = *b"LS";
/// Bytes before the ciphertext: magic, version, connection id, sequence.
pub const SEALED_HEADER_LEN: usize = 2 + 1 + 8 + 8;
/// Bytes a sealed datagram adds to the datagram inside it.
pub const SEALED_OVERHEAD: usize = SEALED_HEADER_LEN + 16;
/// The lowest sequence number of a one-off reply (see
/// [`SecureChannel::seal_reply`]): the top bit set.
const REPLY_SEQ: u64 = 1 << 63;

/// How far behind the newest sequence number a datagram may arrive and
/// still be taken (once).
pub const REPLAY_WINDOW: u64 = 256;

/// Why a sealed datagram was refused. Each means "not from our peer, or not
/// now": drop it and change nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// Not a sealed datagram of this version.
    #[error("not a sealed datagram")]
    NotSealed,
    /// Sealed for another connection.
    #[error("sealed for another connection")]
    WrongConnection,
    /// The tag does not match: forged, altered, or another key.
    #[error("authentication failed")]
    Forged,
    /// Its sequence number was seen already, or is too old to tell.
    #[error("replayed or too old")]
    Replayed,
    /// The peer's key is a low-order point: no secret would be shared.
    #[error("the peer's key shares no secret")]
    WeakKey,
}

/// Whether `datagram` is sealed (starts with [`SEALED_MAGIC`]).
pub fn is_sealed(datagram: &[u8]) -> bool {
    datagram.starts_with(&SEALED_MAGIC)
}

/// The connection id of a sealed datagram, if it is one of this version.
pub fn connection_id(datagram: &[u8]) -> Option<u64> {
    if datagram.len() < SEALED_OVERHEAD || !is_sealed(datagram) || datagram[2] != VERSION {
        return None;
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&datagram[3..11]);
    Some(u64::from_le_bytes(id))
}

/// Another secret from `secret`, as unpredictable as it (HMAC-SHA256
/// under it): a client that must start a handshake over without a new
/// random key (a refused Hello names a connection the server retired).
///
/// ```
/// let a = [7u8; 32];
/// let b = lockstep_core::secure::next_secret(&a);
/// assert_ne!(a, b);
/// assert_ne!(b, lockstep_core::secure::next_secret(&b));
/// ```
pub fn next_secret(secret: &[u8; 32]) -> [u8; 32] {
    let mut m = Hmac::<Sha256>::new_from_slice(secret)
        .unwrap_or_else(|_| Hmac::<Sha256>::new(&Default::default()));
    m.update(b"lockstep next client secret");
    m.finalize().into_bytes().into()
}

/// The public key that goes in a client's Hello, for its `secret` (32
/// bytes from a CSPRNG, new for every connection).
pub fn client_public(secret: &[u8; 32]) -> [u8; 32] {
    PublicKey::from(&StaticSecret::from(*secret)).to_bytes()
}

/// What a Hello asks for, as its handshake's keys are bound to it: SHA-256
/// over `"lockstep hello"`, the fingerprint (`u64le`), the spectator flag
/// (0 or 1) and the codec (0 opaque, 1 `PlayerInputs`), then the room, the
/// name (each a length byte and its bytes) and the ticket (a `u16le`
/// length and its bytes).
/// Keys derived for one Hello do not open what is sealed for another, so
/// whoever copies a client's cookie and key into a Hello of their own
/// (another room, another name) gets a connection the client has no keys
/// for: nothing the server says to it reaches the client.
///
/// ```
/// use lockstep_core::secure::hello_binding;
/// use lockstep_core::wire::Hello;
/// let mine = Hello { room: "arena", name: "ann", ..Hello::default() };
/// let copied = Hello { room: "lagoon", ..mine.clone() };
/// assert_ne!(hello_binding(&mine), hello_binding(&copied));
/// ```
pub fn hello_binding(hello: &crate::wire::Hello<'_>) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"lockstep hello");
    h.update(hello.fingerprint.to_le_bytes());
    let codec = match hello.codec {
        crate::wire::InputCodec::Opaque => 0,
        crate::wire::InputCodec::PlayerInputs => 1,
    };
    h.update([u8::from(hello.spectator), codec]);
    for field in [hello.room, hello.name] {
        let b = &field.as_bytes()[..field.len().min(255)];
        h.update([b.len() as u8]);
        h.update(b);
    }
    let ticket = &hello.ticket[..hello.ticket.len().min(usize::from(u16::MAX))];
    h.update((ticket.len() as u16).to_le_bytes());
    h.update(ticket);
    h.finalize().into()
}

/// The server's side of a handshake: its public key for the Challenge and
/// the channel, from its `key` (the address-validation key), the `cookie`
/// it minted, the client's public key and the [`hello_binding`] of the
/// Hello it answers. The same inputs give the same result, which is what
/// lets the server keep no state until the cookie comes back. (The public
/// key does not depend on the Hello; the channel's keys do.)
pub fn server_handshake(
    key: &[u8; 32],
    cookie: &[u8],
    client_pub: &[u8; 32],
    hello: &[u8; 32],
) -> Result<([u8; 32], SecureChannel), SealError> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| <Hmac<Sha256> as KeyInit>::new(&Default::default()));
    m.update(b"lockstep handshake key");
    m.update(cookie);
    m.update(client_pub);
    let secret: [u8; 32] = m.finalize().into_bytes().into();
    let secret = StaticSecret::from(secret);
    let public = PublicKey::from(&secret).to_bytes();
    let shared = secret.diffie_hellman(&PublicKey::from(*client_pub));
    if !shared.was_contributory() {
        return Err(SealError::WeakKey);
    }
    Ok((
        public,
        SecureChannel::derive(shared.as_bytes(), cookie, hello, false),
    ))
}

/// A sealed channel: one key per direction, a send counter and a replay
/// window. Sans-IO like everything in the core.
#[derive(Clone)]
pub struct SecureChannel {
    id: u64,
    send: ChaCha20Poly1305,
    recv: ChaCha20Poly1305,
    next_send: u64,
    /// The highest sequence number opened, and which of the
    /// [`REPLAY_WINDOW`] below it were.
    newest: Option<u64>,
    seen: [u64; (REPLAY_WINDOW / 64) as usize],
}

impl core::fmt::Debug for SecureChannel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SecureChannel")
            .field("id", &format_args!("{:016x}", self.id))
            .field("next_send", &self.next_send)
            .field("newest", &self.newest)
            .finish_non_exhaustive()
    }
}

impl SecureChannel {
    /// The client's side, once the Challenge brought the server's key:
    /// `hello` is the [`hello_binding`] of the Hello it answered.
    pub fn client(
        secret: &[u8; 32],
        server_pub: &[u8; 32],
        cookie: &[u8],
        hello: &[u8; 32],
    ) -> Result<Self, SealError> {
        let shared = StaticSecret::from(*secret).diffie_hellman(&PublicKey::from(*server_pub));
        if !shared.was_contributory() {
            return Err(SealError::WeakKey);
        }
        Ok(Self::derive(shared.as_bytes(), cookie, hello, true))
    }

    fn derive(shared: &[u8; 32], cookie: &[u8], hello: &[u8; 32], client: bool) -> Self {
        // The salt: the cookie, then what the Hello asked for.
        let mut salt = Vec::with_capacity(cookie.len() + hello.len());
        salt.extend_from_slice(cookie);
        salt.extend_from_slice(hello);
        let hk = Hkdf::<Sha256>::new(Some(&salt), shared);
        let mut c2s = [0u8; 32];
        let mut s2c = [0u8; 32];
        let mut id = [0u8; 8];
        // Output lengths far below HKDF's limit cannot fail.
        let _ = hk.expand(b"lockstep v2 client to server", &mut c2s);
        let _ = hk.expand(b"lockstep v2 server to client", &mut s2c);
        let _ = hk.expand(b"lockstep v2 connection id", &mut id);
        let (send, recv) = if client { (c2s, s2c) } else { (s2c, c2s) };
        Self {
            id: u64::from_le_bytes(id),
            send: ChaCha20Poly1305::new(&Key::from(send)),
            recv: ChaCha20Poly1305::new(&Key::from(recv)),
            next_send: 0,
            newest: None,
            seen: [0; (REPLAY_WINDOW / 64) as usize],
        }
    }

    /// The connection id both sides derived.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Appends `plaintext`, sealed, to `out`.
    pub fn seal(&mut self, plaintext: &[u8], out: &mut Vec<u8>) {
        let seq = self.next_send;
        self.next_send = self.next_send.wrapping_add(1);
        self.seal_at(seq, plaintext, out);
    }

    /// Appends `plaintext`, sealed as a one-off reply, to `out`: for a
    /// server that answers a handshake it keeps no state for (a redirect),
    /// so its counter starts at 0 at every Hello. The sequence number is
    /// derived from the plaintext instead (SHA-256, top bit set): the same
    /// keys never seal two different replies under one nonce, nor one the
    /// connection's own counter could reach.
    ///
    /// ```
    /// use lockstep_core::secure::{SecureChannel, client_public, server_handshake};
    ///
    /// let (server_pub, server) =
    ///     server_handshake(&[2; 32], &[9; 20], &client_public(&[1; 32]), &[3; 32])
    ///         .expect("a real key");
    /// let mut client =
    ///     SecureChannel::client(&[1; 32], &server_pub, &[9; 20], &[3; 32]).expect("a real key");
    /// let (mut a, mut b) = (Vec::new(), Vec::new());
    /// server.seal_reply(b"LK moved", &mut a);
    /// server.seal_reply(b"LK moved", &mut b);
    /// assert_eq!(a, b, "the same reply, the same bytes");
    /// assert_eq!(client.open(&mut a), Ok(&b"LK moved"[..]));
    /// ```
    pub fn seal_reply(&self, plaintext: &[u8], out: &mut Vec<u8>) {
        let digest = Sha256::digest(plaintext);
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&digest[..8]);
        self.seal_at(u64::from_le_bytes(seq) | REPLY_SEQ, plaintext, out);
    }

    fn seal_at(&self, seq: u64, plaintext: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&SEALED_MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(plaintext);
        let (head, body) = out[start..].split_at_mut(SEALED_HEADER_LEN);
        // ChaCha20-Poly1305 refuses only messages over 256 GiB.
        if let Ok(tag) = self
            .send
            .encrypt_inout_detached(&nonce(seq), head, body.into())
        {
            out.extend_from_slice(&tag);
        }
    }

    /// Opens a sealed datagram in place; returns the datagram inside it.
    /// Nothing changes unless it opens: a forgery costs the receiver one
    /// tag check and nothing else.
    pub fn open<'a>(&mut self, datagram: &'a mut [u8]) -> Result<&'a [u8], SealError> {
        let id = connection_id(datagram).ok_or(SealError::NotSealed)?;
        if id != self.id {
            return Err(SealError::WrongConnection);
        }
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&datagram[11..19]);
        let seq = u64::from_le_bytes(seq);
        if self.was_seen(seq) {
            return Err(SealError::Replayed);
        }
        let (head, rest) = datagram.split_at_mut(SEALED_HEADER_LEN);
        let (body, tag) = rest.split_at_mut(rest.len() - 16);
        let tag = Tag::try_from(&*tag).map_err(|_| SealError::Forged)?;
        self.recv
            .decrypt_inout_detached(&nonce(seq), head, (&mut *body).into(), &tag)
            .map_err(|_| SealError::Forged)?;
        // A one-off reply (see `seal_reply`) stays out of the window: its
        // number, 2^63 or more, would slide it past every number the
        // connection's own counter will use.
        if seq < REPLY_SEQ {
            self.mark_seen(seq);
        }
        Ok(body)
    }

    fn was_seen(&self, seq: u64) -> bool {
        let Some(newest) = self.newest else {
            return false;
        };
        if seq > newest {
            return false;
        }
        let back = newest - seq;
        back >= REPLAY_WINDOW
            || self.seen[(seq % REPLAY_WINDOW / 64) as usize] >> (seq % 64) & 1 == 1
    }

    fn mark_seen(&mut self, seq: u64) {
        let newest = self.newest.unwrap_or(0);
        if self.newest.is_none() || seq > newest {
            // Clear the slots the window slides past.
            let from = self.newest.map_or(0, |n| n + 1);
            let slide = seq.saturating_sub(from).saturating_add(1);
            if slide >= REPLAY_WINDOW {
                self.seen = [0; (REPLAY_WINDOW / 64) as usize];
            } else {
                for s in from..=seq {
                    self.seen[(s % REPLAY_WINDOW / 64) as usize] &= !(1 << (s % 64));
                }
            }
            self.newest = Some(seq);
        }
        self.seen[(seq % REPLAY_WINDOW / 64) as usize] |= 1 << (seq % 64);
    }
}

fn nonce(seq: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&seq.to_le_bytes());
    Nonce::from(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of a client's cookie and key in a Hello asking for something
    /// else gets keys the client does not have: what the server seals for
    /// the copy does not open at the client.
    #[test]
    fn keys_are_bound_to_the_hello() {
        let secret = [5; 32];
        let cookie = [1; 20];
        let mine = hello_binding(&crate::wire::Hello {
            room: "arena",
            ..crate::wire::Hello::default()
        });
        let copied = hello_binding(&crate::wire::Hello {
            room: "lagoon",
            ..crate::wire::Hello::default()
        });
        let (server_pub, mut for_copy) =
            server_handshake(&[6; 32], &cookie, &client_public(&secret), &copied).unwrap();
        let mut client = SecureChannel::client(&secret, &server_pub, &cookie, &mine).unwrap();
        assert_ne!(client.id(), for_copy.id());
        let mut sealed = Vec::new();
        for_copy.seal(b"LK welcome", &mut sealed);
        assert!(client.open(&mut sealed).is_err());
    }

    fn pair() -> (SecureChannel, SecureChannel) {
        let secret = [5; 32];
        let cookie = [1; 20];
        let (server_pub, server) =
            server_handshake(&[6; 32], &cookie, &client_public(&secret), &[3; 32]).unwrap();
        let client = SecureChannel::client(&secret, &server_pub, &cookie, &[3; 32]).unwrap();
        (client, server)
    }

    #[test]
    fn both_directions_open_and_nothing_else_does() {
        let (mut c, mut s) = pair();
        let mut a = Vec::new();
        c.seal(b"to server", &mut a);
        assert_eq!(a.len(), 9 + SEALED_OVERHEAD);
        let mut b = Vec::new();
        s.seal(b"to client", &mut b);
        // Reflected back at its sender: another key.
        assert_eq!(c.open(&mut a.clone()), Err(SealError::Forged));
        assert_eq!(s.open(&mut a.clone()), Ok(&b"to server"[..]));
        assert_eq!(c.open(&mut b.clone()), Ok(&b"to client"[..]));
        // Every byte is covered.
        for i in 0..a.len() {
            let mut bad = a.clone();
            bad[i] ^= 1;
            assert!(pair().1.open(&mut bad).is_err(), "byte {i}");
        }
    }

    #[test]
    fn another_handshake_is_another_channel() {
        let (mut c, _) = pair();
        let (_, mut other) =
            server_handshake(&[6; 32], &[2; 20], &client_public(&[5; 32]), &[3; 32]).unwrap();
        let mut a = Vec::new();
        c.seal(b"x", &mut a);
        assert_eq!(other.open(&mut a), Err(SealError::WrongConnection));
    }

    #[test]
    fn the_replay_window_takes_each_number_once_in_any_order() {
        let (mut c, mut s) = pair();
        let sealed: Vec<Vec<u8>> = (0..600)
            .map(|i| {
                let mut v = Vec::new();
                c.seal(&[i as u8], &mut v);
                v
            })
            .collect();
        // Out of order within the window: each opens once.
        for i in [5usize, 3, 4, 0, 1, 2, 300, 299, 100, 298] {
            let r = s.open(&mut sealed[i].clone()).map(<[u8]>::to_vec);
            if i == 100 {
                // 200 behind the newest (300): still inside the window.
                assert_eq!(r, Ok(vec![100]));
            } else {
                assert_eq!(r, Ok(vec![i as u8]), "{i}");
            }
            assert_eq!(s.open(&mut sealed[i].clone()), Err(SealError::Replayed));
        }
        // Past the window: refused even though never seen.
        assert_eq!(s.open(&mut sealed[6].clone()), Err(SealError::Replayed));
        assert!(s.open(&mut sealed[599].clone()).is_ok());
        assert!(s.open(&mut sealed[598].clone()).is_ok());
        assert_eq!(s.open(&mut sealed[343].clone()), Err(SealError::Replayed));
        assert_eq!(s.open(&mut sealed[344].clone()), Ok(&[344u16 as u8][..]));
    }

    #[test]
    fn a_low_order_key_is_refused() {
        assert_eq!(
            server_handshake(&[6; 32], &[1; 20], &[0; 32], &[3; 32]).err(),
            Some(SealError::WeakKey)
        );
        assert_eq!(
            SecureChannel::client(&[5; 32], &[0; 32], &[1; 20], &[3; 32]).err(),
            Some(SealError::WeakKey)
        );
    }

    #[test]
    fn short_and_foreign_datagrams_are_not_sealed() {
        let (_, mut s) = pair();
        assert_eq!(s.open(&mut [0x4C; 40]), Err(SealError::NotSealed));
        assert_eq!(s.open(&mut b"LS".to_vec()), Err(SealError::NotSealed));
        assert_eq!(connection_id(b"LK\x02\x00\x00"), None);
    }
}
