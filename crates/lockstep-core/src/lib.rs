//! Deterministic lockstep networking, without I/O.
//!
//! Games that simulate deterministically send only inputs and run every tick
//! on every machine. This crate assembles, on every machine, the same stream
//! of confirmed [`Frame`]s: each tick's input from every seat, plus the
//! [`SystemEvent`]s (who joined, who was abandoned) that take effect at it.
//! Equal frames fed to equal worlds keep every machine equal.
//!
//! **The core never reads a clock, a socket or an OS random number
//! generator.** Time is an [`Instant`] the caller passes in; datagrams go in
//! through `handle_datagram` and come out of `poll_transmit`; randomness is a
//! seed. The same calls with the same arguments give the same results, which
//! is what makes every session reproducible under the simulated network in
//! [`sim`].
//!
//! ```text
//!   game loop ──commit_local──▶ ┌──────────┐ ──advance()──▶ Frame ──▶ game.step()
//!                               │ session  │
//!   transport ─handle_datagram▶ │ (sans-IO)│ ─poll_transmit▶ transport
//!   clock ─────handle_timeout─▶ └──────────┘ ─poll_event───▶ HUD / logs
//! ```
//!
//! # Quickstart
//!
//! Two peers of a mesh session, with datagrams passed by hand where a game
//! would use a socket:
//!
//! ```
//! use lockstep_core::{Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster};
//!
//! let roster = Roster::new().player(PeerId(0), PlayerId(0)).player(PeerId(1), PlayerId(1));
//! let mut peers = [
//!     MeshSession::<u16>::new(MeshConfig::default(), roster.clone(), PeerId(0), Instant::ZERO)?,
//!     MeshSession::<u16>::new(MeshConfig::default(), roster, PeerId(1), Instant::ZERO)?,
//! ];
//! let mut buf = Vec::new();
//! let mut ran = [0u32; 2];
//! for step in 0..10u64 {
//!     let now = Instant::from_millis(step * 33);
//!     for (i, s) in peers.iter_mut().enumerate() {
//!         s.handle_timeout(now);
//!         let _ = s.commit_local(step as u16 * 10 + i as u16); // refused = retry later
//!         while let Some(frame) = s.advance() {
//!             ran[i] += 1;
//!             s.report_checksum(frame.tick, u64::from(frame.tick.get()))?;
//!         }
//!     }
//!     // The "network": deliver everything at once.
//!     for from in 0..2 {
//!         let to = 1 - from;
//!         while let Some(t) = peers[from].poll_transmit(&mut buf) {
//!             let bytes = buf[..t.len].to_vec();
//!             peers[to].handle_datagram(PeerId(from as u32), &bytes, now)?;
//!         }
//!     }
//! }
//! assert!(ran[0] >= 9 && ran[0] == ran[1]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The crate's `docs/` directory in the repository covers the game loop, the
//! protocol and determinism at length.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod admission;
mod catch_up;
mod checks;
mod delay;
pub mod desync;
mod endpoint;
mod error;
mod event;
mod frame;
mod game;
mod id;
mod input;
mod link;
pub mod mesh;
mod pacer;
mod player_inputs;
mod rate;
pub mod replay;
mod rules;
pub mod runner;
pub mod secure;
pub mod sequenced;
mod shared;
pub mod sim;
pub mod snapshot;
mod tick;
mod time;
pub mod wire;

pub use catch_up::CatchUp;
pub use delay::{AdaptiveDelay, DelayTracker};
pub use endpoint::{Endpoint, Transmit};
pub use error::{
    AbandonError, ChecksumError, CommitError, ConfigError, DatagramError, Incompatibility,
    PauseError, ReconnectError,
};
pub use event::Event;
pub use frame::{Frame, StreamHash, SystemEvent};
pub use game::Game;
pub use id::{PeerId, PlayerId};
pub use input::{Input, InputDecodeError};
pub use link::Traffic;
pub use mesh::{MeshConfig, MeshSession, MeshStats, PeerStats, Roster};
pub use pacer::{Pacer, PacerConfig};
pub use player_inputs::{InputDelta, MAX_EXTRA, PlayerInputs};
pub use rate::TokenBucket;
pub use tick::Tick;
pub use time::Instant;
