//! Taking our seat back on a new connection, and the handshake each one
//! starts.

use super::*;

impl<I: Input> ClientSession<I> {
    /// Takes our seat back on a new connection, after this one was lost:
    /// the caller opened a new transport (a new socket, so the server sees
    /// a new address) whose id for the sequencer is `server`, and passes a
    /// fresh `secret` if datagrams are sealed. The session repeats the
    /// handshake with proof of its resume token and the first frame it
    /// lacks; what it has run, committed and buffered stays. The sequencer
    /// sends the rest from its history, or a snapshot when the history no
    /// longer reaches back (then [`Event::Reconnected`] says the state was
    /// not kept). Call it when the sequencer has been silent for a while
    /// (after [`Event::Interrupted`], say 3 s), or once the session timed
    /// out; the seat is held for the room's grace (30 s by default).
    ///
    /// ```
    /// use lockstep_core::sequenced::{ClientConfig, ClientSession};
    /// use lockstep_core::{Instant, PeerId, ReconnectError};
    ///
    /// let mut s = ClientSession::<u8>::new(ClientConfig::default(), PeerId(0), Instant::ZERO)?;
    /// // Never welcomed to a seat: there is nothing to take back.
    /// assert_eq!(s.reconnect(PeerId(1), None, Instant::ZERO), Err(ReconnectError::NoSeat));
    /// # Ok::<(), lockstep_core::ConfigError>(())
    /// ```
    pub fn reconnect(
        &mut self,
        server: PeerId,
        secret: Option<[u8; 32]>,
        now: Instant,
    ) -> Result<(), ReconnectError> {
        let token = self.reconnect_check()?;
        self.reconnect_with(token, server, secret, now);
        Ok(())
    }

    /// Takes our seat back on the sequencer at `server`, which took the
    /// match over from the one that left (host migration): as
    /// [`reconnect`](Self::reconnect), whatever the old host said when it
    /// went, unless we left on purpose. A player's sequencer does not seal
    /// its datagrams: from now on neither do we (a client of a relay that
    /// failed over to a player gives its sealing up).
    pub(crate) fn move_to(&mut self, server: PeerId, now: Instant) -> Result<(), ReconnectError> {
        if self.leaving.is_some() {
            return Err(ReconnectError::Ended(CloseReason::Left));
        }
        let token = self.token.ok_or(ReconnectError::NoSeat)?;
        self.reconnect_with(token, server, None, now);
        self.moving = true;
        Ok(())
    }

    pub(super) fn reconnect_with(
        &mut self,
        token: ResumeToken,
        server: PeerId,
        secret: Option<[u8; 32]>,
        now: Instant,
    ) {
        self.now = self.now.max(now);
        self.config.resume = Some(token);
        // The server sends its roster again (to a new host's, whose
        // versions start over, an old entry must not look newer).
        self.roster.clear();
        self.roster_changes += 1;
        self.member_acks.clear();
        self.new_handshake(secret);
        self.server = server;
        self.disconnect(State::Connecting);
        self.reconnecting = true;
        self.moving = false;
        self.started = self.now;
        self.link.restart(self.now);
        self.server_checks = RemoteChecks::default();
        self.waiting.clear();
        // Messages waiting for their reference were coded by the server we
        // leave: the next one may sequence those ticks otherwise.
        self.waiting_frames.clear();
        self.donation = None;
    }

    /// Whether [`reconnect`](Self::reconnect) would take our seat back
    /// (we have a seat, and the session was not ended on purpose).
    pub fn can_reconnect(&self) -> bool {
        self.reconnect_check().is_ok()
    }

    /// The token `reconnect` would present, or why it would not.
    pub(super) fn reconnect_check(&self) -> Result<ResumeToken, ReconnectError> {
        match &self.state {
            State::Closed(CloseReason::TimedOut | CloseReason::Bye(ByeReason::Timeout, _)) => {}
            State::Closed(r) => return Err(ReconnectError::Ended(r.clone())),
            _ if self.leaving.is_some() => return Err(ReconnectError::Ended(CloseReason::Left)),
            _ => {}
        }
        self.token.ok_or(ReconnectError::NoSeat)
    }

    /// Where the relay said our room is, until
    /// [`follow_redirect`](Self::follow_redirect): a relay of a fleet that
    /// does not serve our room names the one that does. The session sends
    /// nothing meanwhile; the caller opens a transport to this address
    /// (the same kind: a UDP client gets a UDP address, a WebSocket one a
    /// WebSocket server's) and follows. Unfollowed for the session's
    /// `timeout`, it closes with [`Rejection::Moved`].
    /// [`RelayClient`](../../lockstep_net/struct.RelayClient.html) does
    /// all this by itself.
    ///
    /// A client with a secret takes a redirect only sealed under its
    /// handshake's keys: nobody else can send it elsewhere.
    pub fn redirect(&self) -> Option<std::net::SocketAddr> {
        self.redirect
    }

    /// Goes on at the relay [`redirect`](Self::redirect) named, whose id in
    /// the caller's transport is `server`: the handshake starts again
    /// there, with a new key. Does nothing without a redirect.
    ///
    /// ```
    /// use lockstep_core::sequenced::{ClientConfig, ClientSession};
    /// use lockstep_core::{Instant, PeerId};
    ///
    /// let mut s = ClientSession::<u8>::new(ClientConfig::default(), PeerId(0), Instant::ZERO)?;
    /// // Each turn, after handing it the datagrams:
    /// if let Some(_address) = s.redirect() {
    ///     // open a transport there; its id for the new relay, say PeerId(1):
    ///     s.follow_redirect(PeerId(1), Instant::ZERO);
    /// }
    /// # Ok::<(), lockstep_core::ConfigError>(())
    /// ```
    pub fn follow_redirect(&mut self, server: PeerId, now: Instant) {
        if self.redirect.take().is_none() {
            return;
        }
        self.now = self.now.max(now);
        self.server = server;
        self.started = self.now;
        self.link.restart(self.now);
        self.link.flush = true;
    }

    /// A redirect to `to` came: the session waits to be moved there, or,
    /// past [`MAX_REDIRECTS`], takes it as a refusal.
    pub(super) fn redirected(&mut self, to: std::net::SocketAddr) {
        if self.redirects >= MAX_REDIRECTS {
            self.close(CloseReason::Rejected(Rejection::Moved(to)));
            return;
        }
        self.redirects += 1;
        self.redirect = Some(to);
        // The next relay knows nothing of this handshake.
        self.start_handshake_over();
        self.link.flush = false;
        self.push_event(Event::Redirected { to });
    }

    /// Forgets the handshake under way (cookie and keys) so the next Hello
    /// starts a new one, with a new key: a server forgets a refused sealed
    /// connection for good.
    pub(super) fn start_handshake_over(&mut self) {
        self.new_handshake(self.config.secret.as_ref().map(secure::next_secret));
    }

    /// Forgets the handshake under way, to start one with `secret`.
    pub(super) fn new_handshake(&mut self, secret: Option<[u8; 32]>) {
        self.config.secret = secret;
        self.public = secret.as_ref().map(secure::client_public);
        self.cookie.clear();
        self.pending = None;
        self.channel = None;
    }
}
