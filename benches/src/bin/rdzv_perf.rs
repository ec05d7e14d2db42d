//! rdzv_perf (work in progress).
fn main() {}
