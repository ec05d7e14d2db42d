//! `all_reduce_perf`: the nccl-tests benchmark of dtcomm's all reduce, over TCP. See [`dt_bench::perf`].

#![warn(clippy::undocumented_unsafe_blocks)]

fn main() {
    std::process::exit(dt_bench::perf::main(dt_bench::perf::Collective::AllReduce));
}
