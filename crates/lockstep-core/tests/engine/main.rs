//! Behaviour across topologies: the trace guard.

mod trace;
