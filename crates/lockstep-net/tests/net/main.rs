//! The transports over real loopback sockets.

mod host_migration;
mod runner;
mod transports;
