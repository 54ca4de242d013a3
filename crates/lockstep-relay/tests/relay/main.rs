//! The relay as a server on real loopback sockets: admission, play, limits,
//! sealing, failover, WebSocket and TLS, and the attacks on each.

#[path = "../common/mod.rs"]
mod common;

mod admission;
mod failover;
mod fleet;
mod griefing_attacks;
mod http_attacks;
mod limits;
mod lobby;
mod opaque;
mod play;
mod record;
mod rule_attacks;
mod runner;
mod sealed;
mod spectators;
mod wss;
