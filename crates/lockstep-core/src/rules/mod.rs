//! Rules every topology applies the same way, each in one module the
//! sessions call: the bounds a configuration must keep ([`limits`]), the
//! agreement on where a pause freezes ([`pause`]), how an agreed delay
//! steps ([`delay`]) and when whom a tick waits on is worth naming
//! ([`wait`]). A rule two topologies need lives here, never in both.

pub(crate) mod delay;
pub(crate) mod limits;
pub(crate) mod pause;
pub(crate) mod wait;
