use lockstep_bench::{Codec, LockstepCodec, Trace, measure_codec};
fn main() {
    let trace = Trace::generate(8, 1800, 0x5EED);
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let mut c = LockstepCodec::default();
    let r = measure_codec(&mut c as &mut dyn Codec, &trace, rounds);
    println!(
        "{:.1} ns/tick {:.2} B",
        r.nanos_per_tick, r.bytes_per_player_tick
    );
}
