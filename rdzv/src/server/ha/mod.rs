//! Several servers sharing jobs through etcd (`--backend`): one owner per job by lease,
//! members sent to it, jobs taken over when it dies.
//!
//! * [`storage`]: what the servers share (leases, claims, plain keys): etcd v3, or an
//!   in-memory twin for tests;
//! * `owner`: which server owns which job (and the TCPStore door), and the work of taking a
//!   job over; `owner/sim.rs` simulates an owner vanishing at every step;
//! * `relay`: the TCPStore door of a server that does not hold it: connections relayed, byte
//!   for byte, to the one that does;
//! * `lighthouse`: the torchft Lighthouse door the same way, and the quorum ids that never go
//!   back over a fail-over.

pub(super) mod lighthouse;
pub(super) mod owner;
pub(super) mod relay;
pub mod storage;
