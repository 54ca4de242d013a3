//! The lockstep relay: a server that sequences rooms of lockstep clients.
//!
//! Each room is a [`Sequencer`](lockstep_core::sequenced::Sequencer): it
//! seats players, decides which tick each input runs on and sends every tick
//! to everyone in the room. The relay adds what a deployment needs around
//! it:
//!
//! - UDP and WebSocket (`ws://`, or `wss://` with a certificate) listeners,
//!   whose clients play in the same rooms;
//! - rooms by name, created by their first client (or declared in the
//!   configuration with their own tick rate, delay, policy and seats) and
//!   removed when idle;
//! - spectators, up to a per-room limit;
//! - limits on message size, inputs and datagrams per second, rooms and
//!   connections: a client breaking one gets an `Error` naming it and is
//!   closed, and nobody else notices;
//! - join tickets signed by a matchmaker ([`ticket`]);
//! - `tracing` logs, Prometheus `/metrics` and `/healthz` over HTTP;
//! - graceful shutdown: every client is told goodbye with the reason;
//! - every match recorded as a replay file, if asked ([`RecordSettings`]).
//!
//! The relay never decodes a game's inputs beyond re-coding them, so one
//! binary serves any game speaking the lockstep protocol. [`run`] takes
//! sockets the caller bound and a shutdown future; [`BackgroundRelay`] runs
//! one on a thread of its own for programs (and tests) that are not async.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod background;
mod config;
pub mod directory;
pub mod fleet;
pub mod metrics;
mod record;
mod room;
mod server;
pub mod ticket;
mod tls;

pub use background::{BackgroundRelay, Bind};
pub use config::{
    DeclaredRoom, GameFactory, Limits, MissingName, PolicyName, RelayConfig, RelayConfigError,
    RoomOverrides, RoomSettings, StartName, TicketKeyConfig, Tickets,
};
pub use metrics::Metrics;
pub use record::{RecordSettings, RecordSink};
pub use server::{
    Listeners, RelayError, RelayReport, SOCKET_BUFFER, bind_udp, run, run_in_fleet,
    run_with_metrics,
};
pub use tls::{TlsError, TlsFiles, acceptor as tls_acceptor};

/// The README's examples, compiled as doctests so they cannot drift (here,
/// where every crate they use is at hand: this one, and the core and
/// `lockstep-net` as dependencies).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
