//! The native door (mirrors `dt_rdzv_proto::native` and `dt_rdzv_proto::rendezvous`): the QUIC
//! port (29401) and the rendezvous machine behind it.
//!
//! * `conn`: the QUIC endpoint, its accept loop and one task per member connection, `reader`
//!   reading it, `writer` a task writing to it from its `outbox` (bytes queued bounded), `partial` the
//!   server-wide budget for partly received frames, `memory` what the door holds against the
//!   server's one memory budget, `sources` the connections each source
//!   address holds (its share of the door), `streams` the ranks' streams on a node agent's
//!   connection, `claims` who owns a job (asked of a group's owners before a join is let in);
//! * `rendezvous`: the rendezvous machine and the native connections' outboxes, behind the
//!   server's one `Driver`;
//! * `journal`: the rendezvous' recent events, kept by its core for the status page and
//!   `/v1/events`;
//! * `timeline`: each job's ranks' progress over the last minutes, sampled every second,
//!   for the status page's picture and `/v1/jobs/{job}/timeline`;
//! * [`Identity`](identity::Identity): the port's TLS certificate, from files or generated
//!   (fingerprint printed).

pub(super) mod claims;
pub(super) mod conn;
pub(super) mod identity;
pub(super) mod journal;
pub(super) mod memory;
mod outbox;
mod pace;
mod partial;
mod reader;
pub(super) mod rendezvous;
mod sources;
mod streams;
mod timeline;
mod writer;
