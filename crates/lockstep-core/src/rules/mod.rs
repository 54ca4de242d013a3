//! Rules every topology applies the same way, each in one module the
//! sessions call: the bounds a configuration must keep ([`limits`]).
//! A rule two topologies need lives here, never in both.

pub(crate) mod limits;
