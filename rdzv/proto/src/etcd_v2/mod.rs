//! etcd's v2 keys API, sans-IO: what `dt-rdzv serve --etcd-v2-port` answers for torch's
//! `etcd` and `etcd-v2` rendezvous backends and `EtcdStore` (through `python-etcd`), now that
//! etcd 3.6 removed the API.
//!
//! * [`V2Store`]: the key tree (files, directories, the global index, TTLs) with etcd 3.4's
//!   semantics for set, create, update, compare-and-swap, refresh, in-order keys, delete,
//!   compare-and-delete and expiry;
//! * `watch`: the 1000-event history `waitIndex` reads and the pending `wait=true` watches,
//!   finished by the events they see;
//! * [`request`]: parameters parsed and checked with etcd's error codes and causes;
//! * [`namespace`]: which keys belong to one torchelastic run, so a rerun never reads a dead
//!   run's keys;
//! * [`V2Error`]: etcd's error codes, messages and HTTP statuses.
//!
//! No clocks: every call takes the time as Unix milliseconds.

mod error;
mod event;
pub mod namespace;
mod node;
pub mod request;
mod store;
mod watch;

pub use error::{ErrorCode, V2Error};
pub use event::{Action, Event};
pub use node::NodeView;
pub use store::{Limits, MAX_TTL_SECS, V2Store, WatchStart, clean_key};
pub use watch::{Delivery, HISTORY, HISTORY_BYTES, WatchId};
