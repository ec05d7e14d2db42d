//! torchft's Lighthouse, sans-IO: what `dt-rdzv serve --torchft-port` answers for an
//! unmodified torchft `Manager` / `LighthouseClient` (`torchft.LighthouseService`, gRPC).
//!
//! * [`Lighthouse`]: jobs by key, each with torchft's state (heartbeats, joiners, the
//!   previous quorum, its id), the quorum calls waiting for a quorum that contains their
//!   requester; `handle(now, Input)`, then `poll_output()` and `poll_timeout()` (the quorum
//!   tick), as every core of this crate;
//! * [`rule`]: the quorum rule itself, torchft's exactly (healthy joiners sorted by id,
//!   `shrink_only`, fast quorum, `min_replicas`, the split-brain guard, the join timeout, when
//!   the id goes up);
//! * [`Member`], [`Quorum`]: a `QuorumMember` (its encoded bytes kept, sent back verbatim)
//!   and an issued quorum;
//! * [`Input`], [`Output`], [`Refusal`]: what the driver feeds it and carries out;
//! * [`LighthouseConfig`], [`Limits`]: torchft's flags, and bounds on memory;
//! * [`Departure`]: who left a quorum and why; [`JobStatus`]: a job for the status page;
//!   [`Watch`]: whether a member's quorum lost someone (heartbeats stopped) while it runs.
//!
//! Beyond torchft: several jobs on one server, `quorum_id` never reused (a floor to
//! restore after a restart, and kept over a job forgotten), bounded memory (jobs, replica ids
//! per job, waiting calls, sizes; old heartbeats forgotten), and departures recorded.
//!
//! No clocks: every call takes the time.

mod config;
mod departure;
mod error;
mod io;
mod job;
mod lighthouse;
mod member;
pub mod rule;
mod status;
mod watch;

pub use config::{LighthouseConfig, Limits};
pub use departure::{Departure, LeaveReason};
pub use error::Refusal;
pub use io::{CallId, Input, Output};
pub use lighthouse::Lighthouse;
pub use member::{Member, check_job_key, check_replica_id};
pub use rule::{Joined, Quorum, Verdict};
pub use status::{HeartbeatStatus, JobStatus};
pub use watch::Watch;
