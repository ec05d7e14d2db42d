//! # dt-rdzv-proto
//!
//! The sans-IO core of `dt-rdzv`: no sockets, no threads, no clocks. Time is passed in.
//!
//! * [`tcpstore`]: the c10d TCPStore wire protocol as torch 2.15 speaks it (codec, limits)
//!   and the store engine that serves it (KV map, waiters, queues, compare-set, counters,
//!   namespace lifecycle).
//! * [`etcd_v2`]: etcd's v2 keys API (key tree, TTLs, watches, run namespaces) for torch's
//!   etcd rendezvous backends.
//! * [`native`]: the native rendezvous protocol: its messages and their codec (rkyv archives
//!   behind magic, version and length), and a member's session rules
//!   ([`native::member::Member`]: heartbeats, reconnect, resume, redirects).
//! * [`rendezvous`]: the rendezvous state machine (jobs, rounds, ranks, liveness, lifecycle)
//!   that serves the native protocol.
//! * [`torchft`]: torchft's Lighthouse (quorums of replica groups, heartbeats), for many
//!   jobs, with bounded memory.
//! * [`ports`]: the doors' default ports; [`endpoint`]: `host[:port]`, read one way everywhere.
//! * [`wire_enum!`]: an enum with its wire numbers, names and parsing from one table (the
//!   TCPStore opcodes here; `dtcomm`'s dtypes, reduce ops, call kinds and error codes).
//!
//! The cores, [`tcpstore::Engine`], [`etcd_v2::V2Store`], [`rendezvous::RendezvousMachine`]
//! and the client side's [`native::member::Member`], have one shape ([`sans_io::Core`]): drivers (the tokio
//! server in `dt-rdzv`, the tests) feed them inputs with the time, `handle(now, input)`, and
//! carry out the outputs they then poll, in order.

#![forbid(unsafe_code)]

pub mod endpoint;
pub mod etcd_v2;
pub mod native;
pub mod ports;
pub mod rendezvous;
pub mod sans_io;
pub mod tcpstore;
pub mod torchft;
mod wire_enum;
