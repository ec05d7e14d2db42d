//! `reduce_scatter_perf`: the nccl-tests benchmark of dtcomm's reduce scatter, over TCP. See [`dt_bench::perf`].

#![warn(clippy::undocumented_unsafe_blocks)]

fn main() {
    std::process::exit(dt_bench::perf::main(
        dt_bench::perf::Collective::ReduceScatter,
    ));
}
