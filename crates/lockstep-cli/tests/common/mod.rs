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
