//! The wire format: golden bytes for every message, checked against the
//! protocol document.

mod golden;
