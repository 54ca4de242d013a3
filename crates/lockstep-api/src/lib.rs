//! The public API of the lockstep library crates, kept deliberate.
//!
//! The test in `tests/public_api.rs` builds each library crate's rustdoc
//! JSON (on the stable toolchain, with `RUSTC_BOOTSTRAP=1` for the one
//! unstable flag it needs), lists every public item with
//! [`public-api`](https://crates.io/crates/public-api), and compares the
//! list with the one checked in beside this file (`<crate>.txt`). A change
//! to any crate's public API fails it until the list is written again:
//!
//! ```text
//! LOCKSTEP_BLESS=1 cargo test -p lockstep-api
//! ```
//!
//! and the list's diff, in the same commit, shows the change for review.
#![forbid(unsafe_code)]
