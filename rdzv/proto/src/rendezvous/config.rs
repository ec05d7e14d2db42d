//! Settings of the rendezvous machine (server-wide; per-job settings are in
//! [`JobSpec`](crate::native::JobSpec)).

use std::time::Duration;

/// Most distinct ranks one `Lookup` may ask for on a server with the default settings: what
/// [`MachineConfig::max_lookup_ranks`] defaults to, and the size of the batches a client's
/// lookup of more ranks is sent in.
pub const MAX_LOOKUP_RANKS: usize = 2048;

/// Most ranks one node agent may speak for by default ([`MachineConfig::max_node_ranks`]).
pub const MAX_NODE_RANKS: usize = 256;

/// Server-wide rendezvous settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineConfig {
    /// The token every join and every status or stop request must carry (`None`: no
    /// authentication, for trusted networks only).
    pub token: Option<String>,
    /// Members are told to send a heartbeat this often.
    pub heartbeat_interval: Duration,
    /// A member silent for this long is lost.
    pub heartbeat_timeout: Duration,
    /// A member reported gone by a peer (see `probes`) is lost unless it answers the server's
    /// probe within this long.
    pub probe_timeout: Duration,
    /// Members not yet welcomed into a round (waiting for one to form, or spares) are told to
    /// send a heartbeat this often. Slower than `heartbeat_interval`: while thousands of members
    /// gather, their heartbeats (and the ACKs they draw) were a fifth of the server's packets,
    /// and a member that dies while waiting costs at most one extra round.
    pub waiting_heartbeat_interval: Duration,
    /// A member not yet welcomed into a round is lost after this long without a message.
    /// Generous, so that a member starved of CPU while a large job gathers is not dropped.
    pub waiting_heartbeat_timeout: Duration,
    /// After a restart, how long a job rebuilt from its members' resumes waits for every rank
    /// of its round to come back before it forms the next round without the missing ones.
    pub resume_window: Duration,
    /// An ended job is remembered (refusing joins, naming how it ended) this long.
    pub ended_retention: Duration,
    /// A job with no members is forgotten after this long.
    pub idle_ttl: Duration,
    /// Most jobs at once.
    pub max_jobs: usize,
    /// Largest published configuration value, in bytes.
    pub max_config_value: usize,
    /// Most published configuration entries per job.
    pub max_config_entries: usize,
    /// Most bytes of published configuration (keys and values) per job: every welcome
    /// carries all of it.
    pub max_config_bytes: usize,
    /// Most bytes of configuration one round's welcomes may carry together (a job's
    /// configuration times its members): a publish past it is refused, naming it.
    pub max_welcome_config_bytes: usize,
    /// Most distinct ranks one `Lookup` may ask for (repeated ranks count once).
    pub max_lookup_ranks: usize,
    /// Most addresses one member may advertise (a join with more is refused).
    pub max_addrs: usize,
    /// Longest address a member may advertise, in bytes.
    pub max_addr_bytes: usize,
    /// Most ranks one node agent may speak for (a join past it is refused, naming it).
    pub max_node_ranks: usize,
}

impl Default for MachineConfig {
    /// Heartbeats every 0.5 s, lost after 2 s of silence (or 0.3 s after a peer's report without an
    /// answer to the probe) (every 2 s and 10 s before a member's
    /// first round), ended jobs kept 60 s, empty jobs forgotten after 300 s, 4096 jobs, 1 MiB
    /// config values, 256 entries, 4 MiB of configuration per job and 256 MiB in one round's
    /// welcomes together, lookups of 2048 distinct ranks, 16 addresses of at most 256 bytes per
    /// member, 256 ranks per node agent.
    fn default() -> Self {
        Self {
            token: None,
            heartbeat_interval: Duration::from_millis(500),
            heartbeat_timeout: Duration::from_secs(2),
            probe_timeout: Duration::from_millis(300),
            waiting_heartbeat_interval: Duration::from_secs(2),
            waiting_heartbeat_timeout: Duration::from_secs(10),
            resume_window: Duration::from_secs(10),
            ended_retention: Duration::from_secs(60),
            idle_ttl: Duration::from_secs(300),
            max_jobs: 4096,
            max_config_value: 1 << 20,
            max_config_entries: 256,
            max_config_bytes: 4 << 20,
            max_welcome_config_bytes: 256 << 20,
            max_lookup_ranks: MAX_LOOKUP_RANKS,
            max_addrs: 16,
            max_addr_bytes: 256,
            max_node_ranks: MAX_NODE_RANKS,
        }
    }
}

impl MachineConfig {
    /// How long a member may stay silent: `heartbeat_timeout` once it has been welcomed into a
    /// round (it holds a rank, now or from the last round), `waiting_heartbeat_timeout` before.
    pub fn liveness_timeout(&self, welcomed: bool) -> Duration {
        if welcomed {
            self.heartbeat_timeout
        } else {
            self.waiting_heartbeat_timeout
        }
    }
}
