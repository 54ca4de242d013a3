//! Rules every topology applies the same way, each in one module the
//! sessions call: the bounds a configuration must keep ([`limits`]) and
//! the agreement on where a pause freezes ([`pause`]). A rule two
//! topologies need lives here, never in both.

pub(crate) mod limits;
pub(crate) mod pause;
