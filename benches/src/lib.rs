//! Shared helpers of the dtcomm benchmarks.
