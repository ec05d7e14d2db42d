//! # dt-rdzv-proto
//!
//! The sans-IO core of `dt-rdzv`: no sockets, no threads, no clocks. Time is passed in.
//!
//! * [`tcpstore`]: the c10d TCPStore wire protocol as torch 2.15 speaks it (codec, limits)
//!   and the store engine that serves it (KV map, waiters, queues, compare-set, counters,
//!   namespace lifecycle).
//!
//! Drivers (the tokio server in `dt-rdzv`, the tests) feed decoded requests into
//! [`tcpstore::Engine`] and carry out the actions it returns.

pub mod tcpstore;
