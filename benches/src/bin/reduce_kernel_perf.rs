//! `reduce_kernel_perf`: throughput of dtcomm's local reduction kernels (the ones the
//! collectives run on every received frame), per dtype and op, on a cache-resident frame
//! (256 KiB, the engine's frame size) and on a 64 MiB buffer (memory-bound).
//!
//! GB/s counts the bytes of `dst` produced per second (each element reads dst and src).

#![warn(clippy::undocumented_unsafe_blocks)]

use std::hint::black_box;
use std::time::Instant;

use dtcomm::{Element, ReduceOp, reduce_local};
use half::{bf16, f16};

fn run<T: Element>(name: &str, one: T, bytes: usize) {
    let n = bytes / std::mem::size_of::<T>();
    let mut dst = vec![one; n];
    let src = vec![one; n];
    let reps = ((1usize << 30) / bytes).clamp(3, 4000);
    let mut line = format!(
        "{name:>9} {:>9}",
        if bytes >= 1 << 20 {
            format!("{}MiB", bytes >> 20)
        } else {
            format!("{}KiB", bytes >> 10)
        }
    );
    for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
        reduce_local(op, &mut dst, &src);
        let t = Instant::now();
        for _ in 0..reps {
            reduce_local(op, black_box(&mut dst), black_box(&src));
        }
        let gbs = (bytes * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
        line += &format!(" {:>5} {gbs:7.2}", op.name());
    }
    println!("{line}  GB/s");
}

fn main() {
    for bytes in [256 << 10, 64 << 20] {
        run::<f32>("float", 1.0, bytes);
        run::<f64>("double", 1.0, bytes);
        run::<f16>("half", f16::ONE, bytes);
        run::<bf16>("bfloat16", bf16::ONE, bytes);
        run::<i8>("int8", 1, bytes);
        run::<u8>("uint8", 1, bytes);
        run::<i32>("int32", 1, bytes);
        run::<i64>("int64", 1, bytes);
    }
}
