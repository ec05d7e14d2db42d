//! The rendezvous state machine: server-side membership, rounds, ranks, liveness and the job
//! lifecycle. Sans IO: time is passed in, so tests drive thousands of members with a virtual
//! clock in one thread.
//!
//! * [`RendezvousMachine`]: every job on a server; `handle(now, input)`, then
//!   `poll_action()` and `poll_timeout()`;
//! * [`MachineConfig`]: server-wide settings (token, heartbeats, retention, limits); per-job
//!   settings are a [`JobSpec`](crate::native::JobSpec) sent with each join;
//! * [`Action`], [`Event`], [`RendezvousStats`]: what the driver does, logs and counts;
//! * [`Refusal`]: why a request was refused, naming job and member;
//! * [`job_token`], [`authorized`]: the server token opens everything, a job token one job.
//!
//! ## Rules
//!
//! * A job is created by its first join. A round forms from the members present: it completes
//!   at once with `max_members`, or `last_call` after `min_members` were present. A round that
//!   cannot complete within `join_timeout` ends the job, naming the members that did not come
//!   back.
//! * Ranks are deterministic (main member first, then by node and member id) and stable for
//!   members that survive a round (see `ranks`). Local ranks count members of the same node.
//! * Members beyond `max_members` are spares: they take a freed slot at the next round.
//!   Members that arrive while a round runs are late joiners: by `LateJoin` policy the round
//!   ends `last_call` after the first of them, or when a member asks for it.
//! * A member silent for the heartbeat timeout, or whose connection closes, is lost: the round
//!   ends for everyone at once with the reason, and the next one forms from the survivors at
//!   once if they are at least `min_members`.
//! * A node agent may speak for its node's ranks ([`ClientMsg::Node`](crate::native::ClientMsg)):
//!   they join on streams of its connection, its heartbeats keep them all alive, its loss
//!   loses them all at once (one round end), and it may report one of them gone.
//! * A member may report a peer of its round gone (its link broke): the server probes that
//!   peer and declares it lost if it does not answer within `probe_timeout` (see `probes`).
//! * After a server restart, members join again with the place they held (`Join::resume`):
//!   a job the server does not know is rebuilt from them, the same round with the same ranks,
//!   within `resume_window` (see `resume`).
//! * Leaving, finishing the job and stopping it are different things: a member that leaves
//!   ends the round (not the job, unless it is the main member of an ephemeral job); `Finish`
//!   and an operator's stop end the job, and later joins are refused saying how it ended.

mod admission;
mod auth;
mod config;
mod deadlines;
mod departures;
mod effects;
mod error;
mod input;
mod job;
mod machine;
mod peers;
mod probes;
mod progress_view;
mod published;
mod ranks;
mod requests;
mod resume;

pub use admission::MAX_NAME_BYTES;
pub use auth::{JOB_TOKEN_PREFIX, Scope, authorized, job_token};
pub use config::{MAX_LOOKUP_RANKS, MAX_NODE_RANKS, MachineConfig, defaults};
pub use effects::{Action, Event, RendezvousStats};

/// A driver's name for one client connection.
pub type ConnId = u64;
pub use error::Refusal;
pub use input::Input;
pub use machine::RendezvousMachine;
pub use probes::{MAX_EVIDENCE_BYTES, ReportVerdict};
pub use progress_view::JobProgress;
