//! A small game, a client playing it, and a writer the replay, spectator
//! and fleet tests share.

use super::TestRelay;
use lockstep_core::runner::RunnerConfig;
use lockstep_core::sequenced::ClientConfig;
use lockstep_core::{Frame, Game};
use lockstep_net::RelayClient;

/// A fold of every input, and the next tick it runs.
#[derive(Debug, Default)]
pub struct Fold {
    pub next: u32,
    pub acc: u64,
}

impl Game for Fold {
    type Input = u16;
    fn step(&mut self, frame: &Frame<u16>) {
        for i in &frame.inputs {
            self.acc = (self.acc ^ u64::from(i.unwrap_or(0))).wrapping_mul(0x100_0000_01B3);
        }
        self.next = frame.tick.get() + 1;
    }
    fn hash(&self) -> u64 {
        self.acc
    }
    fn save(&self) -> Vec<u8> {
        [self.next.to_le_bytes().as_slice(), &self.acc.to_le_bytes()].concat()
    }
    fn restore(b: &[u8]) -> Result<Self, String> {
        let (n, a) = b.split_at_checked(4).ok_or("short")?;
        Ok(Self {
            next: u32::from_le_bytes(n.try_into().map_err(|_| "next")?),
            acc: u64::from_le_bytes(a.try_into().map_err(|_| "acc")?),
        })
    }
}

/// A `RelayClient` of `relay` playing the fold, as `name`, in `room`.
pub fn client(relay: &TestRelay, room: &str, name: &str) -> RelayClient<Fold> {
    let config = ClientConfig {
        room: room.into(),
        name: name.into(),
        ..ClientConfig::default()
    };
    RelayClient::connect(relay.udp, config, Fold::default(), RunnerConfig::default())
        .expect("a client")
}

/// A writer whose bytes the test reads while a runner holds it.
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
