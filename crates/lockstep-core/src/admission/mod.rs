//! Admission for servers facing the open internet: address validation
//! without state, and tokens nobody can guess.
//!
//! A UDP source address costs an attacker nothing to forge. A server that
//! answered every `Hello` with a `Welcome` (and kept resending it) would be
//! an amplifier aimed at whoever owns the forged address, and would hand
//! out seats to addresses that never asked. So a server answers a `Hello`
//! from an address it has not validated with one [`Challenge`] no larger
//! than the `Hello` (which clients pad to
//! [`MIN_HELLO_DATAGRAM`](crate::wire::MIN_HELLO_DATAGRAM) bytes), keeps no
//! state for it, and admits only a `Hello` that echoes a cookie minted for
//! that very address moments ago: the sender has proven it receives there.
//!
//! [`Challenge`]: crate::wire::Message::Challenge
//!
//! ```
//! use lockstep_core::admission::AddressValidator;
//! use lockstep_core::Instant;
//! use std::time::Duration;
//!
//! let v = AddressValidator::new([7; 32]);
//! let alice = b"198.51.100.7:4000";
//! let cookie = v.cookie(alice, Instant::from_millis(1_000));
//! assert!(v.check(alice, &cookie, Instant::from_millis(1_300)));
//! // Another address, a stale cookie or a forged one: refused.
//! assert!(!v.check(b"203.0.113.9:4000", &cookie, Instant::from_millis(1_300)));
//! assert!(!v.check(alice, &cookie, Instant::from_millis(1_000) + Duration::from_secs(12)));
//! assert!(!v.check(alice, &[0; 20], Instant::from_millis(1_300)));
//! ```
//!
//! The keys here are the caller's: the core never reads an OS random number
//! generator. A server fills them from one (`getrandom`) at start.

mod stranger;

pub use stranger::{Unwelcome, is_answer, screen_stranger, write_answer};

use crate::Instant;
use core::time::Duration;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Bytes in a cookie: when it was minted (seconds, `u32` little-endian)
/// and 16 bytes of HMAC-SHA256 over that and the address.
pub const COOKIE_LEN: usize = 20;

/// How long a cookie stays valid by default: long enough for a round trip
/// across the world and a lost datagram or two, short enough that a cookie
/// seen on the path is soon useless.
pub const COOKIE_LIFETIME: Duration = Duration::from_secs(10);

fn keyed(key: &[u8; 32], label: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length, so this cannot fail; the fallback keeps
    // the path free of panics all the same.
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| <Hmac<Sha256> as KeyInit>::new(&Default::default()));
    m.update(label);
    m
}

/// Mints and checks stateless address-validation cookies.
#[derive(Clone)]
pub struct AddressValidator {
    key: [u8; 32],
    lifetime: Duration,
}

impl core::fmt::Debug for AddressValidator {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AddressValidator")
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl AddressValidator {
    /// A validator keyed with `key` (32 bytes from a CSPRNG; a restart with a
    /// new key only makes clients answer one more challenge).
    pub fn new(key: [u8; 32]) -> Self {
        Self {
            key,
            lifetime: COOKIE_LIFETIME,
        }
    }

    /// The same, with cookies valid for `lifetime` instead of
    /// [`COOKIE_LIFETIME`].
    pub fn with_lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// The server's side of a sealed handshake for a `cookie` this
    /// validator minted (see [`secure`](crate::secure)) and the `hello` it
    /// answers ([`hello_binding`](crate::secure::hello_binding)): its
    /// public key for the Challenge, and the channel.
    pub fn handshake(
        &self,
        cookie: &[u8],
        client_pub: &[u8; 32],
        hello: &[u8; 32],
    ) -> Result<([u8; 32], crate::secure::SecureChannel), crate::secure::SealError> {
        crate::secure::server_handshake(&self.key, cookie, client_pub, hello)
    }

    fn mac(&self, addr: &[u8], issued: u32) -> [u8; 16] {
        let mut m = keyed(&self.key, b"lockstep address cookie");
        m.update(&issued.to_le_bytes());
        m.update(addr);
        let full = m.finalize().into_bytes();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        out
    }

    /// A cookie for whoever receives at `addr` (any stable encoding of the
    /// address: the same bytes must come back to [`check`](Self::check)).
    pub fn cookie(&self, addr: &[u8], now: Instant) -> [u8; COOKIE_LEN] {
        let issued = u32::try_from(now.as_micros() / 1_000_000).unwrap_or(u32::MAX);
        let mut out = [0u8; COOKIE_LEN];
        out[..4].copy_from_slice(&issued.to_le_bytes());
        out[4..].copy_from_slice(&self.mac(addr, issued));
        out
    }

    /// Whether `cookie` was minted by this validator for `addr` within its
    /// lifetime before `now`.
    pub fn check(&self, addr: &[u8], cookie: &[u8], now: Instant) -> bool {
        let Ok(cookie) = <&[u8; COOKIE_LEN]>::try_from(cookie) else {
            return false;
        };
        let issued = u32::from_le_bytes([cookie[0], cookie[1], cookie[2], cookie[3]]);
        let now_secs = now.as_micros() / 1_000_000;
        let age = now_secs.checked_sub(u64::from(issued));
        // Seconds are whole, so a cookie minted late in a second may look up
        // to a second older than it is: allow for that.
        if age.is_none_or(|a| a > self.lifetime.as_secs() + 1) {
            return false;
        }
        let expected = self.mac(addr, issued);
        ct_eq(&expected, &cookie[4..])
    }
}

/// A stream of 128-bit secrets (resume tokens, nonces) from a 32-byte key:
/// HMAC-SHA256 of a counter, so knowing any number of them tells nothing of
/// the next without the key.
///
/// ```
/// use lockstep_core::admission::SecretStream;
/// let mut s = SecretStream::new([1; 32]);
/// let (a, b) = (s.next_secret(), s.next_secret());
/// assert_ne!(a, b);
/// assert_eq!(SecretStream::new([1; 32]).next_secret(), a); // the key decides
/// ```
#[derive(Clone)]
pub struct SecretStream {
    key: [u8; 32],
    counter: u64,
}

impl core::fmt::Debug for SecretStream {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SecretStream")
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

impl SecretStream {
    /// A stream keyed with `key` (32 bytes from a CSPRNG).
    pub fn new(key: [u8; 32]) -> Self {
        Self { key, counter: 0 }
    }

    /// Another stream under the same key, for `context`: its secrets never
    /// repeat this stream's nor another context's. A player taking a match
    /// over mints tokens this way, so that they cannot collide with the
    /// ones an earlier host minted under the same key.
    ///
    /// ```
    /// use lockstep_core::admission::SecretStream;
    /// let s = SecretStream::new([1; 32]);
    /// let a = s.branch(b"one").next_secret();
    /// assert_ne!(a, s.branch(b"two").next_secret());
    /// assert_ne!(a, s.clone().next_secret());
    /// ```
    pub fn branch(&self, context: &[u8]) -> Self {
        let mut m = keyed(&self.key, b"lockstep secret branch");
        m.update(context);
        Self::new(m.finalize().into_bytes().into())
    }

    /// The next secret.
    pub fn next_secret(&mut self) -> [u8; 16] {
        let mut m = keyed(&self.key, b"lockstep secret stream");
        m.update(&self.counter.to_le_bytes());
        self.counter = self.counter.wrapping_add(1);
        let full = m.finalize().into_bytes();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        out
    }
}

/// What a Hello carries to take a seat back: proof of holding `token`,
/// bound to this handshake's `cookie` and `key` (empty and none over a
/// transport without them), so someone who sees the Hello cannot replay it
/// from anywhere else.
///
/// ```
/// use lockstep_core::admission::resume_proof;
/// use lockstep_core::wire::ResumeToken;
/// let t = ResumeToken([7; 16]);
/// let mine = resume_proof(&t, b"cookie-a", Some(&[1; 32]));
/// assert_eq!(mine, resume_proof(&t, b"cookie-a", Some(&[1; 32])));
/// assert_ne!(mine, resume_proof(&t, b"cookie-b", Some(&[1; 32])));
/// assert_ne!(mine, resume_proof(&t, b"cookie-a", Some(&[2; 32])));
/// ```
pub fn resume_proof(
    token: &crate::wire::ResumeToken,
    cookie: &[u8],
    key: Option<&[u8; 32]>,
) -> crate::wire::ResumeToken {
    let mut k = [0u8; 32];
    k[..16].copy_from_slice(&token.0);
    let mut m = keyed(&k, b"lockstep resume proof");
    m.update(&(cookie.len() as u64).to_le_bytes());
    m.update(cookie);
    if let Some(key) = key {
        m.update(key);
    }
    let full = m.finalize().into_bytes();
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    crate::wire::ResumeToken(out)
}

/// A commitment to a seat's resume token, as a roster shares it
/// ([`Holder::commitment`](crate::wire::Holder::commitment)): the first 16
/// bytes of SHA-256 over `lockstep seat token` and the token. Anyone can
/// check a token against it; nobody can find a token from it.
///
/// ```
/// use lockstep_core::admission::token_commitment;
/// use lockstep_core::wire::ResumeToken;
/// let c = token_commitment(&ResumeToken([5; 16]));
/// assert_eq!(c, token_commitment(&ResumeToken([5; 16])));
/// assert_ne!(c, token_commitment(&ResumeToken([6; 16])));
/// ```
pub fn token_commitment(token: &crate::wire::ResumeToken) -> [u8; 16] {
    use sha2::Digest;
    let mut h = Sha256::new();
    h.update(b"lockstep seat token");
    h.update(token.0);
    let full = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

/// A player's name as a server shares it: every control character (a
/// terminal's escape sequences, newlines, NUL) and every bidirectional
/// override or isolate (which reorder the text around it) replaced with
/// `?`. Names stay display text only: anyone may give any name.
///
/// ```
/// use lockstep_core::admission::display_name;
/// assert_eq!(display_name("ann\u{1b}[2J\u{202e}"), "ann?[2J?");
/// assert_eq!(display_name("Zoë"), "Zoë");
/// ```
pub fn display_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            if c.is_control() || bidi { '?' } else { c }
        })
        .collect()
}

/// The id of the match a room's `secret` keys: the first 8 bytes of
/// SHA-256 over `lockstep match id` and the secret, little-endian. A room
/// with a fresh secret from a CSPRNG has a fresh id, and the id tells
/// nothing of the secret.
pub fn match_id(secret: &[u8; 32]) -> u64 {
    use sha2::Digest;
    let mut h = Sha256::new();
    h.update(b"lockstep match id");
    h.update(secret);
    let full = h.finalize();
    let mut out = [0u8; 8];
    out.copy_from_slice(&full[..8]);
    u64::from_le_bytes(out)
}

/// Whether `a` and `b` are equal, in time that depends only on their
/// lengths.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cookie_is_bound_to_its_address_and_its_key() {
        let v = AddressValidator::new([3; 32]);
        let now = Instant::from_millis(50_000);
        let c = v.cookie(b"a", now);
        assert!(v.check(b"a", &c, now));
        assert!(!v.check(b"b", &c, now));
        assert!(!AddressValidator::new([4; 32]).check(b"a", &c, now));
        let mut tampered = c;
        tampered[0] ^= 1; // claims another mint time
        assert!(!v.check(b"a", &tampered, now));
    }

    #[test]
    fn a_cookie_expires_and_cannot_come_from_the_future() {
        let v = AddressValidator::new([3; 32]).with_lifetime(Duration::from_secs(2));
        let minted = Instant::from_millis(10_000);
        let c = v.cookie(b"a", minted);
        assert!(v.check(b"a", &c, minted + Duration::from_millis(2_900)));
        assert!(!v.check(b"a", &c, minted + Duration::from_secs(4)));
        assert!(!v.check(b"a", &c, Instant::from_millis(8_000)));
    }

    #[test]
    fn malformed_cookies_are_refused() {
        let v = AddressValidator::new([3; 32]);
        let now = Instant::from_millis(1);
        assert!(!v.check(b"a", &[], now));
        assert!(!v.check(b"a", &[0; 64], now));
    }

    #[test]
    fn constant_time_equality_is_equality() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }
}
