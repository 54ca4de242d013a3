//! `lockstep relay` as a child process, for the binary's end-to-end tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

/// Listener flags for a relay on a loopback UDP port of its choosing, with
/// no WebSocket or HTTP listener.
pub(crate) const UDP_ONLY: [&str; 6] = ["--udp", "127.0.0.1:0", "--ws", "off", "--http", "off"];

/// A running `lockstep relay` on ports it picked; killed when dropped.
pub(crate) struct RelayProcess {
    pub(crate) child: Child,
    /// `udp=... ws=... http=...` as the relay printed it.
    line: String,
}

impl RelayProcess {
    /// Starts `lockstep relay` on port 0 with `listeners` (e.g.
    /// `["--udp", "127.0.0.1:0", "--ws", "off", ...]`) at 60 Hz, and waits
    /// for the line naming the ports it bound.
    pub(crate) fn start(listeners: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
            .arg("relay")
            .args(listeners)
            .args(["--tick-rate", "60"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn lockstep relay");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the relay's listening line");
        Self { child, line }
    }

    /// The address the relay bound for `name` (`udp`, `ws` or `http`).
    pub(crate) fn addr(&self, name: &str) -> SocketAddr {
        self.line
            .split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no {name} address in {:?}", self.line))
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RelayProcess {
    /// Sends SIGTERM and waits (10 s at most) for a clean exit.
    pub(crate) fn terminate(&mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(exit) = self.child.try_wait().expect("wait") {
                assert!(exit.success(), "exit status {exit}");
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the relay did not exit"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// A sealed UDP client of a relay, driven by hand, committing input 1
/// every turn.
pub(crate) struct UdpClient {
    pub(crate) session: lockstep_core::sequenced::ClientSession<u8>,
    /// The relay's id on the transport.
    pub(crate) server: lockstep_core::PeerId,
    clock: lockstep_net::Clock,
    transport: lockstep_net::UdpTransport,
    scratch: lockstep_net::Buffers,
    /// Where relays of a fleet sent it, in order.
    pub(crate) redirected: Vec<SocketAddr>,
}

impl UdpClient {
    /// A client of the relay at `udp`, for `room`.
    pub(crate) fn new(udp: SocketAddr, room: &str) -> Self {
        let clock = lockstep_net::Clock::new();
        let mut transport = lockstep_net::UdpTransport::bind("127.0.0.1:0").expect("bind");
        let server = transport.add_peer(udp);
        let session = lockstep_core::sequenced::ClientSession::new(
            lockstep_core::sequenced::ClientConfig {
                room: room.into(),
                secret: Some(lockstep_net::session_secret().expect("randomness")),
                ..lockstep_core::sequenced::ClientConfig::default()
            },
            server,
            clock.now(),
        )
        .expect("config");
        Self {
            session,
            server,
            clock,
            transport,
            scratch: lockstep_net::Buffers::default(),
            redirected: Vec::new(),
        }
    }

    /// Drives the client until `done` holds (10 s at most, then `what`
    /// fails the test).
    pub(crate) fn until(
        &mut self,
        what: &str,
        mut done: impl FnMut(&lockstep_core::sequenced::ClientSession<u8>) -> bool,
    ) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !done(&self.session) {
            assert!(std::time::Instant::now() < deadline, "{what}");
            lockstep_net::drive(
                &mut self.session,
                &mut self.transport,
                self.clock.now(),
                &mut self.scratch,
            )
            .expect("drive");
            if let Some(to) = self.session.redirect() {
                self.server = self.transport.add_peer(to);
                self.session.follow_redirect(self.server, self.clock.now());
                self.redirected.push(to);
            }
            let _ = self.session.commit_local(1);
            while self.session.advance().is_some() {}
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}
