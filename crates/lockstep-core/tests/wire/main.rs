//! The wire format: golden bytes for every message, checked against the
//! protocol document, and round-trip properties of every codec.

mod golden;
mod properties;
