//! [`LighthouseConfig`]: the quorum rule's settings (torchft's Lighthouse flags, with
//! dt-rdzv's defaults), and the [`Limits`] on what clients can make the Lighthouse hold.

use std::time::Duration;

/// The Lighthouse's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LighthouseConfig {
    /// Fewest healthy joiners a new (not fast) quorum needs (torchft's `--min_replicas`).
    pub min_replicas: u64,
    /// How long a valid quorum waits for heartbeating replicas that have not joined, counted
    /// from the first join (torchft's `--join_timeout_ms`, 60 s).
    pub join_timeout: Duration,
    /// How often the rule is run while replicas wait (torchft's `--quorum_tick_ms`, 100 ms).
    pub quorum_tick: Duration,
    /// A replica whose last heartbeat (or quorum request) is this old is not healthy
    /// (torchft's `--heartbeat_timeout_ms`: 5 s there, 2 s here as for dt-rdzv's members).
    pub heartbeat_timeout: Duration,
    /// Every job's `quorum_id` starts above this (0: the first quorum is 1, as in torchft).
    /// A restarted server given the highest id it issued before never issues it again.
    pub min_quorum_id: i64,
    /// Bounds on memory.
    pub limits: Limits,
}

impl Default for LighthouseConfig {
    fn default() -> Self {
        Self {
            min_replicas: 1,
            join_timeout: Duration::from_millis(60_000),
            quorum_tick: Duration::from_millis(100),
            heartbeat_timeout: Duration::from_millis(2_000),
            min_quorum_id: 0,
            limits: Limits::default(),
        }
    }
}

/// Bounds on what clients can make the Lighthouse hold. torchft's keeps every replica id it
/// ever heard from; each restart of a replica mints a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Jobs at once; past it an idle job (no heartbeats, joiners or waiting calls) is
    /// forgotten to make room, else the new job is refused (`RESOURCE_EXHAUSTED`).
    pub max_jobs: usize,
    /// Replica ids one job tracks at once (heartbeats); a new id past it is refused
    /// (`RESOURCE_EXHAUSTED`).
    pub max_replicas_per_job: usize,
    /// Quorum calls one job keeps waiting at once; past it a new call is refused.
    pub max_waiting_per_job: usize,
    /// Longest replica id, bytes (`INVALID_ARGUMENT` past it).
    pub max_replica_id_bytes: usize,
    /// Longest job key, bytes (`INVALID_ARGUMENT` past it).
    pub max_job_key_bytes: usize,
    /// Largest encoded `QuorumMember` (its `data` JSON included), bytes.
    pub max_member_bytes: usize,
    /// Largest `world_size` a member may report (`INVALID_ARGUMENT` past it).
    pub max_world_size: u64,
    /// A heartbeat this many heartbeat timeouts old is forgotten (with the replica's joined
    /// request, which cannot count any more).
    pub forget_after_timeouts: u32,
    /// Departures remembered per job, for the status page.
    pub max_departures: usize,
    /// An idle job (nothing heartbeating, joined or waiting) is forgotten after this long.
    /// Its `quorum_id` is not lost: jobs created after it start above it.
    pub idle_job_ttl: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_jobs: 1024,
            max_replicas_per_job: 4096,
            max_waiting_per_job: 8192,
            max_replica_id_bytes: 1024,
            max_job_key_bytes: 256,
            max_member_bytes: 64 << 10,
            max_world_size: 1 << 20,
            forget_after_timeouts: 10,
            max_departures: 64,
            idle_job_ttl: Duration::from_secs(3600),
        }
    }
}

impl LighthouseConfig {
    /// How old a heartbeat gets before it is forgotten.
    pub fn forget_after(&self) -> Duration {
        self.heartbeat_timeout
            .saturating_mul(self.limits.forget_after_timeouts.max(1))
    }
}
