//! Recordings the tests read while a runner writes them.

use lockstep_core::replay::{Header, Replay, Topology, Verification, verify};
use lockstep_core::{Game, Input};

/// A writer whose bytes the test can read while the runner holds it.
#[derive(Clone, Default)]
pub struct Shared(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    /// The bytes written so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().expect("not poisoned").clone()
    }
}

/// A header for a test's recording.
pub fn header(seats: u16, topology: Topology) -> Header {
    Header::new(0, "a test game", 30, seats, topology)
}

/// Reads a finished recording, which must be whole, and verifies it with
/// `start`: the replay and what verifying found.
pub fn verified<G: Game>(bytes: &[u8], start: G, what: &str) -> (Replay<G::Input>, Verification)
where
    G::Input: Input,
{
    let replay = Replay::<G::Input>::read(bytes);
    assert!(replay.stopped.is_none(), "{what}: {:?}", replay.stopped);
    assert!(replay.end.is_some(), "{what}: no end");
    let found = verify(&replay, start).unwrap_or_else(|e| panic!("{what}: {e}"));
    (replay, found)
}
