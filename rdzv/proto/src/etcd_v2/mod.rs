//! etcd's v2 keys API, sans-IO: what `dt-rdzv serve --etcd-v2-port` answers for torch's
//! `etcd` and `etcd-v2` rendezvous backends and `EtcdStore` (through `python-etcd`), now that
//! etcd 3.6 removed the API.
//!
//! * [`V2Store`]: the key tree (files, directories, the global index, TTLs) with etcd 3.4's
//!   semantics for set, create, update, compare-and-swap, refresh, in-order keys, delete,
//!   compare-and-delete and expiry, and the run namespaces; `handle(now, Input)`, then
//!   `poll_output()` and `poll_timeout()`, as every core of this crate;
//! * [`Input`], [`Output`], [`Answer`]: what the driver feeds it and carries out;
//! * [`StoreConfig`], [`Limits`]: its settings and bounds; [`WallClock`]: how it dates the
//!   monotonic time it is given, for etcd's `expiration` dates;
//! * `watch`: the 1000-event history `waitIndex` reads and the pending `wait=true` watches,
//!   finished by the events they see;
//! * [`request`]: parameters parsed and checked with etcd's error codes and causes;
//! * [`namespace`]: which keys belong to one torchelastic run, so a rerun never reads a dead
//!   run's keys;
//! * [`V2Error`]: etcd's error codes, messages and HTTP statuses.
//!
//! No clocks: every call takes the time.

mod clock;
mod config;
mod error;
mod event;
mod input;
mod key;
pub mod namespace;
mod node;
mod output;
pub mod request;
mod store;
mod watch;

pub use clock::WallClock;
pub use config::{Limits, MAX_TTL_SECS, StoreConfig};
pub use error::{ErrorCode, V2Error};
pub use event::{Action, Event};
pub use input::{ConnId, Input};
pub use key::clean_key;
pub use node::NodeView;
pub use output::{Answer, Output, PurgeReason};
pub use store::V2Store;
pub use watch::{Delivery, HISTORY, HISTORY_BYTES, WatchId};
