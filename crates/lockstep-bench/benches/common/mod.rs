//! What the benchmarks that run GGRS share.

use lockstep_bench::PadInput;
use std::net::SocketAddr;

/// GGRS's session type for the pad input the benchmarks send.
pub(crate) struct GgrsConfig;

impl ggrs::Config for GgrsConfig {
    type Input = PadInput;
    type InputPredictor = ggrs::PredictRepeatLast;
    type State = u64;
    type Address = SocketAddr;
}
