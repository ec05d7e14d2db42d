//! Settings of the rendezvous machine (server-wide; per-job settings are in
//! [`JobSpec`](crate::native::JobSpec)).

use std::time::Duration;

/// Most distinct ranks one `Lookup` may ask for on a server with the default settings: what
/// [`MachineConfig::max_lookup_ranks`] defaults to, and the size of the batches a client's
/// lookup of more ranks is sent in.
pub const MAX_LOOKUP_RANKS: usize = 2048;

/// Most ranks one node agent may speak for by default ([`MachineConfig::max_node_ranks`]).
pub const MAX_NODE_RANKS: usize = 256;

/// The default of every [`MachineConfig`] setting, in one place: `MachineConfig::default`,
/// `dt-rdzv serve`'s `ServeConfig::default` and its flags' defaults all take these (the server
/// checks that its flags' written defaults parse to them).
pub mod defaults {
    use std::time::Duration;

    /// [`MachineConfig::heartbeat_interval`](super::MachineConfig::heartbeat_interval).
    pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);
    /// [`MachineConfig::heartbeat_timeout`](super::MachineConfig::heartbeat_timeout).
    pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(2);
    /// [`MachineConfig::probe_timeout`](super::MachineConfig::probe_timeout).
    pub const PROBE_TIMEOUT: Duration = Duration::from_millis(300);
    /// [`MachineConfig::waiting_heartbeat_interval`](super::MachineConfig::waiting_heartbeat_interval).
    pub const WAITING_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);
    /// [`MachineConfig::waiting_heartbeat_timeout`](super::MachineConfig::waiting_heartbeat_timeout).
    pub const WAITING_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);
    /// [`MachineConfig::resume_window`](super::MachineConfig::resume_window).
    pub const RESUME_WINDOW: Duration = Duration::from_secs(10);
    /// [`MachineConfig::ended_retention`](super::MachineConfig::ended_retention).
    pub const ENDED_RETENTION: Duration = Duration::from_secs(60);
    /// [`MachineConfig::idle_ttl`](super::MachineConfig::idle_ttl).
    pub const IDLE_TTL: Duration = Duration::from_secs(300);
    /// [`MachineConfig::max_jobs`](super::MachineConfig::max_jobs).
    pub const MAX_JOBS: usize = 4096;
    /// [`MachineConfig::max_config_value`](super::MachineConfig::max_config_value).
    pub const MAX_CONFIG_VALUE: usize = 1 << 20;
    /// [`MachineConfig::max_config_entries`](super::MachineConfig::max_config_entries).
    pub const MAX_CONFIG_ENTRIES: usize = 256;
    /// [`MachineConfig::max_config_bytes`](super::MachineConfig::max_config_bytes).
    pub const MAX_CONFIG_BYTES: usize = 4 << 20;
    /// [`MachineConfig::max_welcome_config_bytes`](super::MachineConfig::max_welcome_config_bytes).
    pub const MAX_WELCOME_CONFIG_BYTES: usize = 256 << 20;
    /// Largest round whose welcomes carry the whole peer table, whatever a job's
    /// [`JobSpec::full_peer_table_max`](crate::native::JobSpec::full_peer_table_max) asks: each
    /// member's welcome is encoded with the table, so a round of `n` puts `n` squared peers on
    /// the wire (256: about 10 MB); bigger rounds get their neighbours and `Lookup`.
    pub const MAX_FULL_PEER_TABLE: u32 = 256;
    /// [`MachineConfig::max_operator_connections`](super::MachineConfig::max_operator_connections).
    pub const MAX_OPERATOR_CONNECTIONS: usize = 256;
    /// [`MachineConfig::max_addrs`](super::MachineConfig::max_addrs).
    pub const MAX_ADDRS: usize = 16;
    /// [`MachineConfig::max_addr_bytes`](super::MachineConfig::max_addr_bytes).
    pub const MAX_ADDR_BYTES: usize = 256;
}

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
    /// Most connections one token (the server's, or one job's) may hold open that are not
    /// members: status and stop requests (`dt-rdzv status --watch`, dashboards). One past it
    /// is refused and closed, naming the bound; members are not counted (a job of 65,536
    /// members is one token's too).
    pub max_operator_connections: usize,
}

impl Default for MachineConfig {
    /// Heartbeats every 0.5 s, lost after 2 s of silence (or 0.3 s after a peer's report without an
    /// answer to the probe) (every 2 s and 10 s before a member's
    /// first round), ended jobs kept 60 s, empty jobs forgotten after 300 s, 4096 jobs, 1 MiB
    /// config values, 256 entries, 4 MiB of configuration per job and 256 MiB in one round's
    /// welcomes together, lookups of 2048 distinct ranks, 16 addresses of at most 256 bytes per
    /// member, 256 ranks per node agent, 256 operator connections per token.
    fn default() -> Self {
        Self {
            token: None,
            heartbeat_interval: defaults::HEARTBEAT_INTERVAL,
            heartbeat_timeout: defaults::HEARTBEAT_TIMEOUT,
            probe_timeout: defaults::PROBE_TIMEOUT,
            waiting_heartbeat_interval: defaults::WAITING_HEARTBEAT_INTERVAL,
            waiting_heartbeat_timeout: defaults::WAITING_HEARTBEAT_TIMEOUT,
            resume_window: defaults::RESUME_WINDOW,
            ended_retention: defaults::ENDED_RETENTION,
            idle_ttl: defaults::IDLE_TTL,
            max_jobs: defaults::MAX_JOBS,
            max_config_value: defaults::MAX_CONFIG_VALUE,
            max_config_entries: defaults::MAX_CONFIG_ENTRIES,
            max_config_bytes: defaults::MAX_CONFIG_BYTES,
            max_welcome_config_bytes: defaults::MAX_WELCOME_CONFIG_BYTES,
            max_lookup_ranks: MAX_LOOKUP_RANKS,
            max_addrs: defaults::MAX_ADDRS,
            max_addr_bytes: defaults::MAX_ADDR_BYTES,
            max_node_ranks: MAX_NODE_RANKS,
            max_operator_connections: defaults::MAX_OPERATOR_CONNECTIONS,
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
