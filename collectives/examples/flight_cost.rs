//! What the flight recorder adds to a call: blocking 8 B all_reduces of a world of one (the
//! executor's whole path, no transport), ns per call, the best of `REPEATS` timed loops.
//! Run twice, with the recorder on and off, interleaved:
//!
//! ```sh
//! for r in 1 2 3; do
//!   cargo run --release -p dtcomm --example flight_cost
//!   DTCOMM_FR_BUFFER_SIZE=0 cargo run --release -p dtcomm --example flight_cost
//! done
//! ```

use std::time::Instant;

use dtcomm::{Communicator, Options, ReduceOp};

const ITERS: u32 = 200_000;
const REPEATS: usize = 7;

fn main() {
    let comms = Communicator::in_memory(1, Options::default()).expect("a world of one");
    let c = &comms[0];
    let mut v = [1.0f32; 2];
    for _ in 0..ITERS / 10 {
        c.all_reduce(&mut v, ReduceOp::Sum).expect("all_reduce");
    }
    let mut best = f64::MAX;
    for _ in 0..REPEATS {
        let t = Instant::now();
        for _ in 0..ITERS {
            c.all_reduce(&mut v, ReduceOp::Sum).expect("all_reduce");
        }
        best = best.min(t.elapsed().as_nanos() as f64 / f64::from(ITERS));
    }
    println!(
        "recorder {} (capacity {}): {best:.1} ns per 8 B all_reduce (world 1, best of {REPEATS} x {ITERS})",
        if dtcomm::flight::enabled() {
            "on"
        } else {
            "off"
        },
        dtcomm::flight::capacity()
    );
}
