//! The demo game: determinism, healing from a desync, rendering.

mod determinism;
mod heal;
mod render;
