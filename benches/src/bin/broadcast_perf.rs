//! `broadcast_perf`: the nccl-tests benchmark of dtcomm's broadcast, over TCP. See [`dt_bench::perf`].

#![warn(clippy::undocumented_unsafe_blocks)]

fn main() {
    std::process::exit(dt_bench::perf::main(dt_bench::perf::Collective::Broadcast));
}
