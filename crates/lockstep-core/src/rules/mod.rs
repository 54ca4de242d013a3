//! Rules every topology applies the same way, each in one module the
//! sessions call: the bounds a configuration must keep ([`limits`]), the
//! agreement on where a pause freezes ([`pause`]) and how an agreed delay
//! steps ([`delay`]). A rule two topologies need lives here, never in both.

pub(crate) mod delay;
pub(crate) mod limits;
pub(crate) mod pause;
