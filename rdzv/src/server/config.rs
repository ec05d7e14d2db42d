//! `dt-rdzv serve` settings. Every flag has a `DTRDZV_*` environment twin.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use dt_rdzv_proto::rendezvous::{MachineConfig, defaults};

use dt_rdzv_proto::tcpstore::{
    DEFAULT_MAX_NAMESPACE_BYTES, DEFAULT_MAX_STORE_BYTES, EngineConfig, Limits,
};

/// How `dt-rdzv serve` runs.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeConfig {
    /// Address to listen on. `::` listens on every IPv6 and IPv4 address (dual-stack).
    #[arg(long, env = "DTRDZV_HOST", default_value = "::")]
    pub host: IpAddr,

    /// TCPStore-compatible port (torchrun's default rendezvous port). 0 picks a free one.
    #[arg(long, env = "DTRDZV_PORT", default_value_t = dt_rdzv_proto::ports::STORE)]
    pub port: u16,

    /// Listen backlog (the kernel caps it at net.core.somaxconn).
    #[arg(long, env = "DTRDZV_BACKLOG", default_value_t = 16384)]
    pub backlog: i32,

    /// Forget a key namespace this long after its last client disconnected
    /// (`300s`, `5m`, `0` for at once, `never`).
    #[arg(long, env = "DTRDZV_NAMESPACE_TTL", default_value = "300s", value_parser = parse_ttl)]
    pub namespace_ttl: Ttl,

    /// Close a connection that has not sent a complete first request within this time.
    #[arg(long, env = "DTRDZV_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,

    /// Close a connection whose request stops half way for this long.
    #[arg(long, env = "DTRDZV_FRAME_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub frame_timeout: Duration,

    /// Largest request accepted, in bytes (keys stay <= 8 KiB and values <= 8 MiB as in torch).
    #[arg(long, env = "DTRDZV_MAX_FRAME_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_frame_bytes: u64,

    /// Per TCPStore connection: stop handling (and reading) its requests while the replies
    /// queued for it and not yet read by the client exceed this many bytes; resume as it reads.
    #[arg(long, env = "DTRDZV_MAX_QUEUED_REPLY_BYTES", default_value_t = DEFAULT_MAX_QUEUED_REPLY_BYTES)]
    pub max_queued_reply_bytes: u64,

    /// Most TCPStore connections at once; past it a new connection is closed at once. Default:
    /// the open-file limit (raised from soft to hard at start) less headroom for the HTTP
    /// port, the QUIC socket and files.
    #[arg(long, env = "DTRDZV_MAX_TCPSTORE_CONNECTIONS")]
    pub max_tcpstore_connections: Option<usize>,

    /// Most bytes (keys and values) one key namespace (one job) may hold in the store; a write
    /// past it closes its connection and stores nothing. 0: no limit.
    #[arg(long, env = "DTRDZV_MAX_NAMESPACE_BYTES", default_value_t = DEFAULT_MAX_NAMESPACE_BYTES)]
    pub max_namespace_bytes: u64,

    /// Each door's memory budget (TCPStore, etcd v2), over all its connections: keys and
    /// values, per-key bookkeeping, waiting keys, queued answers and partial frames; a
    /// request that would pass it is refused. 0: no limit.
    #[arg(long, env = "DTRDZV_MAX_STORE_BYTES", default_value_t = DEFAULT_MAX_STORE_BYTES)]
    pub max_store_bytes: u64,

    /// The server's one memory budget, over every door (TCPStore, etcd v2, native): what
    /// their clients make it hold together; a request that would pass it is refused, naming
    /// it. Default: three quarters of the cgroup's memory limit (a container's), none without
    /// one. 0: none.
    #[arg(long, env = "DTRDZV_MAX_MEMORY_BYTES")]
    pub max_memory_bytes: Option<u64>,

    /// TCP keepalive idle time before probing a silent peer (0 disables).
    #[arg(long, env = "DTRDZV_TCP_KEEPALIVE", default_value = "30s", value_parser = parse_duration)]
    pub tcp_keepalive: Duration,

    /// Runtime worker threads (default: one per core).
    #[arg(long, env = "DTRDZV_WORKER_THREADS")]
    pub worker_threads: Option<usize>,

    /// Turn the TCPStore port off (the native and HTTP ports stay).
    #[arg(long, env = "DTRDZV_NO_TCPSTORE")]
    pub no_tcpstore: bool,

    /// Bind the TCPStore port to this address only (default: --host).
    #[arg(long, env = "DTRDZV_TCPSTORE_HOST")]
    pub tcpstore_host: Option<IpAddr>,

    /// Native rendezvous port (QUIC, UDP). 0 picks a free one.
    #[arg(long, env = "DTRDZV_NATIVE_PORT", default_value_t = dt_rdzv_proto::ports::NATIVE)]
    pub native_port: u16,

    /// Turn the native port off.
    #[arg(long, env = "DTRDZV_NO_NATIVE")]
    pub no_native: bool,

    /// HTTP port for /healthz, /metrics and /v1/jobs. 0 picks a free one.
    #[arg(long, env = "DTRDZV_HTTP_PORT", default_value_t = dt_rdzv_proto::ports::HTTP)]
    pub http_port: u16,

    /// Turn the HTTP port off.
    #[arg(long, env = "DTRDZV_NO_HTTP")]
    pub no_http: bool,

    /// Serve etcd's v2 keys API on this port (torch's `etcd` and `etcd-v2` rendezvous
    /// backends, `python-etcd`); off unless given (etcd's own port is 2379; 0 picks one).
    #[arg(long, env = "DTRDZV_ETCD_V2_PORT")]
    pub etcd_v2_port: Option<u16>,

    /// Serve torchft's Lighthouse (`torchft.LighthouseService`, gRPC over plaintext HTTP/2,
    /// and `/status` on the same port) for torchft's `Manager` (`TORCHFT_LIGHTHOUSE=
    /// http://host:PORT`); off unless given (torchft's own port is 29510; 0 picks one).
    #[arg(long, env = "DTRDZV_TORCHFT_PORT")]
    pub torchft_port: Option<u16>,

    /// torchft Lighthouse: fewest replica groups a new quorum needs (torchft's
    /// `--min_replicas`).
    #[arg(long, env = "DTRDZV_TORCHFT_MIN_REPLICAS", default_value_t = 1)]
    pub torchft_min_replicas: u64,

    /// torchft Lighthouse: how long a valid quorum waits for heartbeating replica groups
    /// that have not joined, from the first join (torchft's `--join_timeout_ms`).
    #[arg(long, env = "DTRDZV_TORCHFT_JOIN_TIMEOUT_MS", default_value_t = 60_000)]
    pub torchft_join_timeout_ms: u64,

    /// torchft Lighthouse: how often the quorum rule runs while replica groups wait
    /// (torchft's `--quorum_tick_ms`).
    #[arg(long, env = "DTRDZV_TORCHFT_QUORUM_TICK_MS", default_value_t = 100)]
    pub torchft_quorum_tick_ms: u64,

    /// torchft Lighthouse: a replica group silent this long is not healthy (torchft's
    /// `--heartbeat_timeout_ms`, whose default is 5000; its Managers beat every 100 ms).
    #[arg(
        long,
        env = "DTRDZV_TORCHFT_HEARTBEAT_TIMEOUT_MS",
        default_value_t = 2_000
    )]
    pub torchft_heartbeat_timeout_ms: u64,

    /// The join token (prefer DTRDZV_TOKEN or --token-file: a command line is visible to
    /// every user of the host).
    #[arg(long, env = "DTRDZV_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Read the join token from this file (first line, trimmed). If the file does not exist,
    /// a random token is generated and written to it (mode 0600), not printed.
    #[arg(long, env = "DTRDZV_TOKEN_FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,

    /// Accept joins and status requests without a token (trusted networks only). Without a
    /// token and without this flag, a random token is generated and printed.
    #[arg(long, env = "DTRDZV_NO_AUTH", conflicts_with_all = ["token", "token_file"])]
    pub no_auth: bool,

    /// TLS certificate chain (PEM) of the native port; without it a self-signed certificate
    /// is generated at start-up and its fingerprint printed for clients to pin. If neither
    /// this file nor the key exists yet, one is generated and written to both (key 0600), so
    /// that a restarted server keeps its fingerprint and members can resume their rounds.
    #[arg(long, env = "DTRDZV_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// TLS private key (PEM) for --tls-cert.
    #[arg(long, env = "DTRDZV_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Names in the generated certificate (comma separated).
    #[arg(
        long,
        env = "DTRDZV_TLS_NAMES",
        value_delimiter = ',',
        default_value = "localhost"
    )]
    pub tls_names: Vec<String>,

    /// Members are asked to send a heartbeat this often.
    #[arg(long, env = "DTRDZV_HEARTBEAT_INTERVAL", default_value = "500ms", value_parser = parse_duration)]
    pub heartbeat_interval: Duration,

    /// A member silent this long is lost, and its round ends for everyone.
    #[arg(long, env = "DTRDZV_HEARTBEAT_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub heartbeat_timeout: Duration,

    /// A member reported gone by a peer's data plane is lost unless it answers the server's
    /// probe within this long (a healthy member's client answers in microseconds).
    #[arg(long, env = "DTRDZV_PROBE_TIMEOUT", default_value = "300ms", value_parser = parse_duration)]
    pub probe_timeout: Duration,

    /// Heartbeat interval asked of members not yet in a round (gathering for the first one).
    #[arg(long, env = "DTRDZV_WAITING_HEARTBEAT_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub waiting_heartbeat_interval: Duration,

    /// A member not yet in a round is lost after this long without a message.
    #[arg(long, env = "DTRDZV_WAITING_HEARTBEAT_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub waiting_heartbeat_timeout: Duration,

    /// After a restart, how long a job rebuilt from its members' resumes waits for every rank
    /// of its round before forming the next round without the missing ones.
    #[arg(long, env = "DTRDZV_RESUME_WINDOW", default_value = "10s", value_parser = parse_duration)]
    pub resume_window: Duration,

    /// An ended job is remembered this long (later joins are told how it ended).
    #[arg(long, env = "DTRDZV_JOB_RETENTION", default_value = "60s", value_parser = parse_duration)]
    pub job_retention: Duration,

    /// A job with no members is forgotten after this long.
    #[arg(long, env = "DTRDZV_JOB_IDLE_TTL", default_value = "300s", value_parser = parse_duration)]
    pub job_idle_ttl: Duration,

    /// Most rendezvous jobs at once.
    #[arg(long, env = "DTRDZV_MAX_JOBS", default_value_t = defaults::MAX_JOBS)]
    pub max_jobs: usize,

    /// Most native connections one token (the server's, or one job's) may hold open that are
    /// not members (status and stop requests); one past it is refused and closed, naming
    /// this bound. Members are not counted.
    #[arg(long, env = "DTRDZV_MAX_OPERATOR_CONNECTIONS", default_value_t = defaults::MAX_OPERATOR_CONNECTIONS)]
    pub max_operator_connections: usize,

    /// Most native connections at once (more are refused at the handshake).
    #[arg(long, env = "DTRDZV_MAX_NATIVE_CONNECTIONS", default_value_t = 65536)]
    pub max_native_connections: usize,

    /// Most native connections one source address may hold (connections in their handshake
    /// included); its newcomers past it are refused while other addresses still get in.
    /// Default: half of `--max-native-connections`.
    #[arg(long, env = "DTRDZV_MAX_NATIVE_CONNECTIONS_PER_SOURCE")]
    pub max_native_connections_per_source: Option<usize>,

    /// Most bytes of partly received frames held for all native connections together (each
    /// connection's frame in progress is charged to it; one that does not fit is closed,
    /// naming this budget). A connection not yet accepted may send frames of 64 KiB at most.
    #[arg(long, env = "DTRDZV_MAX_PARTIAL_FRAME_BYTES", default_value_t = 256 << 20)]
    pub max_partial_frame_bytes: usize,

    /// Share the rendezvous with other `dt-rdzv serve` processes through this storage:
    /// `etcd://h1:2379,h2:2379,h3:2379`. Each job is owned by one server at a time (an etcd
    /// lease, `--owner-ttl`); the others send its members there, and take it over when the
    /// owner dies. Unset: this server owns every job it hears of (the default, no storage).
    #[arg(long, env = "DTRDZV_BACKEND")]
    pub backend: Option<String>,

    /// With `--backend`: the native endpoint (`host:port`) the other servers send this
    /// server's members to. Default: this host's name and the native port.
    #[arg(long, env = "DTRDZV_ADVERTISE")]
    pub advertise: Option<String>,

    /// With `--backend`: the time to live of this server's ownership lease; a dead server's
    /// jobs are taken over this long after its last keep-alive (etcd's floor is about 2 s).
    #[arg(long, env = "DTRDZV_OWNER_TTL", default_value = "2s", value_parser = parse_duration)]
    pub owner_ttl: Duration,

    /// With `--backend`: the key prefix of this group of servers in the storage (several
    /// groups may share one etcd).
    #[arg(long, env = "DTRDZV_BACKEND_PREFIX", default_value = "/dt-rdzv/")]
    pub backend_prefix: String,

    /// With `--backend`: the deadline of every storage call (connecting included).
    #[arg(long, env = "DTRDZV_BACKEND_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub backend_timeout: Duration,

    /// With `--backend`: verify the storage's TLS certificate against this CA file (PEM);
    /// endpoints written without a scheme are then `https://`.
    #[arg(long, env = "DTRDZV_BACKEND_CACERT")]
    pub backend_cacert: Option<PathBuf>,

    /// With `--backend`: this server's client certificate (PEM), for an etcd started with
    /// `--client-cert-auth` (with `--backend-key`).
    #[arg(long, env = "DTRDZV_BACKEND_CERT", requires = "backend_key")]
    pub backend_cert: Option<PathBuf>,

    /// With `--backend-cert`: its private key (PEM).
    #[arg(long, env = "DTRDZV_BACKEND_KEY", requires = "backend_cert")]
    pub backend_key: Option<PathBuf>,

    /// With `--backend`: the storage's user (etcd's `auth enable`), with
    /// `--backend-password-file` or DTRDZV_BACKEND_PASSWORD.
    #[arg(long, env = "DTRDZV_BACKEND_USER")]
    pub backend_user: Option<String>,

    /// The storage user's password (prefer DTRDZV_BACKEND_PASSWORD or
    /// --backend-password-file: a command line is visible to every user of the host).
    #[arg(
        long,
        env = "DTRDZV_BACKEND_PASSWORD",
        hide_env_values = true,
        requires = "backend_user"
    )]
    pub backend_password: Option<String>,

    /// Read the storage user's password from this file (first line, trimmed).
    #[arg(
        long,
        env = "DTRDZV_BACKEND_PASSWORD_FILE",
        conflicts_with = "backend_password",
        requires = "backend_user"
    )]
    pub backend_password_file: Option<PathBuf>,
}

/// Twice the value limit: one whole 8 MiB reply can always be queued behind another.
pub const DEFAULT_MAX_QUEUED_REPLY_BYTES: u64 = 2 * 8 * 1024 * 1024;

/// A namespace time-to-live: `None` keeps namespaces forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(pub Option<Duration>);

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            host: IpAddr::from([0u16; 8]),
            port: dt_rdzv_proto::ports::STORE,
            backlog: 16384,
            namespace_ttl: Ttl(Some(Duration::from_secs(300))),
            handshake_timeout: Duration::from_secs(10),
            frame_timeout: Duration::from_secs(30),
            max_frame_bytes: 64 * 1024 * 1024,
            max_queued_reply_bytes: DEFAULT_MAX_QUEUED_REPLY_BYTES,
            max_tcpstore_connections: None,
            max_namespace_bytes: DEFAULT_MAX_NAMESPACE_BYTES,
            max_store_bytes: DEFAULT_MAX_STORE_BYTES,
            max_memory_bytes: None,
            tcp_keepalive: Duration::from_secs(30),
            worker_threads: None,
            no_tcpstore: false,
            tcpstore_host: None,
            native_port: dt_rdzv_proto::ports::NATIVE,
            no_native: false,
            http_port: dt_rdzv_proto::ports::HTTP,
            no_http: false,
            etcd_v2_port: None,
            torchft_port: None,
            torchft_min_replicas: 1,
            torchft_join_timeout_ms: 60_000,
            torchft_quorum_tick_ms: 100,
            torchft_heartbeat_timeout_ms: 2_000,
            token: None,
            token_file: None,
            no_auth: false,
            tls_cert: None,
            tls_key: None,
            tls_names: vec!["localhost".into()],
            heartbeat_interval: defaults::HEARTBEAT_INTERVAL,
            heartbeat_timeout: defaults::HEARTBEAT_TIMEOUT,
            probe_timeout: defaults::PROBE_TIMEOUT,
            waiting_heartbeat_interval: defaults::WAITING_HEARTBEAT_INTERVAL,
            waiting_heartbeat_timeout: defaults::WAITING_HEARTBEAT_TIMEOUT,
            resume_window: defaults::RESUME_WINDOW,
            job_retention: defaults::ENDED_RETENTION,
            job_idle_ttl: defaults::IDLE_TTL,
            max_jobs: defaults::MAX_JOBS,
            max_operator_connections: defaults::MAX_OPERATOR_CONNECTIONS,
            max_native_connections: 65536,
            max_native_connections_per_source: None,
            max_partial_frame_bytes: 256 << 20,
            backend: None,
            advertise: None,
            owner_ttl: Duration::from_secs(2),
            backend_prefix: "/dt-rdzv/".into(),
            backend_timeout: Duration::from_secs(2),
            backend_cacert: None,
            backend_cert: None,
            backend_key: None,
            backend_user: None,
            backend_password: None,
            backend_password_file: None,
        }
    }
}

impl ServeConfig {
    /// A loopback server on an ephemeral port, for tests and benchmarks.
    pub fn loopback_ephemeral() -> Self {
        Self {
            host: IpAddr::from([127, 0, 0, 1]),
            port: 0,
            native_port: 0,
            http_port: 0,
            ..Self::default()
        }
    }

    /// The store one job embeds (rank 0 of env://, dtrun's agents): the TCPStore door on
    /// `host:port` only, one worker thread. Fixed native/HTTP ports would collide between jobs
    /// (and tests) on one host.
    pub fn embedded_store(host: IpAddr, port: u16) -> Self {
        Self {
            host,
            port,
            worker_threads: Some(1),
            no_native: true,
            no_http: true,
            ..Self::default()
        }
    }

    /// The server's memory budget and where it came from (`None`: none).
    pub(crate) fn memory_budget(&self) -> Option<(u64, String)> {
        match self.max_memory_bytes {
            Some(0) => None,
            Some(n) => Some((n, super::memory::FLAG.to_owned())),
            None => super::memory::default_budget(),
        }
    }

    /// The engine's part of the settings.
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            namespace_ttl: self.namespace_ttl.0,
            max_value_bytes: self.limits().max_value_bytes,
            max_namespace_bytes: (self.max_namespace_bytes > 0).then_some(self.max_namespace_bytes),
            max_store_bytes: (self.max_store_bytes > 0).then_some(self.max_store_bytes),
        }
    }

    /// The join token: given, read from the file, none (`--no-auth`), or generated (the
    /// second value says so: true when it must be shown, as it went to no file).
    pub fn resolve_token(&self) -> std::io::Result<(Option<String>, bool)> {
        if self.no_auth {
            return Ok((None, false));
        }
        if let Some(t) = &self.token {
            return Ok((Some(t.clone()), false));
        }
        if let Some(path) = &self.token_file {
            if !path.exists() {
                let t = random_token()?;
                write_private(path, &t).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("token file {}: {e}", path.display()))
                })?;
                tracing::info!(file = %path.display(), "generated a token into the token file");
                return Ok((Some(t), false));
            }
            let s = std::fs::read_to_string(path).map_err(|e| {
                std::io::Error::new(e.kind(), format!("token file {}: {e}", path.display()))
            })?;
            let t = s.lines().next().unwrap_or("").trim().to_string();
            if t.is_empty() {
                return Err(std::io::Error::other(format!(
                    "token file {} is empty",
                    path.display()
                )));
            }
            return Ok((Some(t), false));
        }
        Ok((Some(random_token()?), true))
    }

    /// How `--backend` is reached: its CA, this server's client certificate, its user and
    /// password (read from `--backend-password-file` now). A user without a password is
    /// refused, naming the ways to give one.
    pub fn backend_access(&self) -> std::io::Result<Access> {
        let password = match (&self.backend_password, &self.backend_password_file) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(path)) => {
                let s = std::fs::read_to_string(path).map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("--backend-password-file {}: {e}", path.display()),
                    )
                })?;
                Some(s.lines().next().unwrap_or("").trim().to_string())
            }
            (None, None) => None,
        };
        let user = match (&self.backend_user, password) {
            (Some(u), Some(p)) => Some((u.clone(), p)),
            (Some(u), None) => {
                return Err(std::io::Error::other(format!(
                    "--backend-user {u} needs a password: DTRDZV_BACKEND_PASSWORD or \
                     --backend-password-file"
                )));
            }
            (None, _) => None,
        };
        Ok(Access {
            cacert: self.backend_cacert.clone(),
            cert: self.backend_cert.clone().zip(self.backend_key.clone()),
            user,
        })
    }

    /// Native connections one source address may hold: `--max-native-connections-per-source`,
    /// else half of the door (at least one).
    pub fn native_connections_per_source(&self) -> usize {
        self.max_native_connections_per_source
            .unwrap_or(self.max_native_connections / 2)
            .max(1)
    }

    /// The rendezvous machine's part of the settings, with the resolved token.
    pub fn machine_config(&self, token: Option<String>) -> MachineConfig {
        MachineConfig {
            token,
            heartbeat_interval: self.heartbeat_interval,
            heartbeat_timeout: self.heartbeat_timeout,
            probe_timeout: self.probe_timeout,
            waiting_heartbeat_interval: self.waiting_heartbeat_interval,
            waiting_heartbeat_timeout: self.waiting_heartbeat_timeout,
            resume_window: self.resume_window,
            ended_retention: self.job_retention,
            idle_ttl: self.job_idle_ttl,
            max_jobs: self.max_jobs,
            max_operator_connections: self.max_operator_connections,
            ..MachineConfig::default()
        }
    }

    /// The torchft Lighthouse's settings (`--torchft-*`).
    pub fn lighthouse_config(&self) -> dt_rdzv_proto::torchft::LighthouseConfig {
        dt_rdzv_proto::torchft::LighthouseConfig {
            min_replicas: self.torchft_min_replicas,
            join_timeout: Duration::from_millis(self.torchft_join_timeout_ms),
            quorum_tick: Duration::from_millis(self.torchft_quorum_tick_ms.max(1)),
            heartbeat_timeout: Duration::from_millis(self.torchft_heartbeat_timeout_ms),
            ..Default::default()
        }
    }

    /// The decoder's limits.
    pub fn limits(&self) -> Limits {
        Limits {
            max_frame_bytes: self.max_frame_bytes,
            ..Limits::default()
        }
    }
}

/// Parses `250ms`, `30s`, `5m`, `1h` or a bare number of seconds (fractions allowed).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("not a duration: {s:?} (try 30s, 500ms, 5m)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("unknown unit {unit:?} in {s:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("bad duration {s:?}: {e}"))
}

fn parse_ttl(s: &str) -> Result<Ttl, String> {
    match s.trim() {
        "never" | "none" | "off" => Ok(Ttl(None)),
        other => parse_duration(other).map(|d| Ttl(Some(d))),
    }
}

/// 24 random bytes in hex.
fn random_token() -> std::io::Result<String> {
    random_hex::<24>("a token")
}

/// How the storage is reached beyond its addresses: TLS and the storage's own user (etcd's
/// `--client-cert-auth` and `auth enable`). The default is plaintext and no user.
#[derive(Clone, Default)]
pub struct Access {
    /// Verify the storage's certificate against this CA file (PEM); the endpoints are then
    /// `https://` (`--backend-cacert`).
    pub cacert: Option<PathBuf>,
    /// This server's client certificate and its key (PEM), for a storage that asks for one
    /// (`--backend-cert`, `--backend-key`).
    pub cert: Option<(PathBuf, PathBuf)>,
    /// The storage's user and password (`--backend-user`, `--backend-password-file`).
    pub user: Option<(String, String)>,
}

impl std::fmt::Debug for Access {
    /// Never prints the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("cacert", &self.cacert)
            .field("cert", &self.cert)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

/// `N` random bytes in hex (`what` names the use in the error).
pub(crate) fn random_hex<const N: usize>(what: &str) -> std::io::Result<String> {
    let mut b = [0u8; N];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b)
        .map_err(|_| std::io::Error::other(format!("no system randomness for {what}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Creates `path` (which must not exist) readable by its owner only, holding `token`.
fn write_private(path: &std::path::Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{token}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5d").is_err());
        assert_eq!(parse_ttl("never"), Ok(Ttl(None)));
        assert_eq!(parse_ttl("0"), Ok(Ttl(Some(Duration::ZERO))));
    }

    /// The flags' written defaults, `ServeConfig::default` and the machine's defaults
    /// (`dt_rdzv_proto::rendezvous::defaults`) are one set of values.
    #[test]
    fn the_flags_defaults_are_the_configs_defaults() {
        #[derive(clap::Parser)]
        struct Serve {
            #[command(flatten)]
            cfg: ServeConfig,
        }
        if let Some((k, _)) = std::env::vars().find(|(k, _)| k.starts_with("DTRDZV_")) {
            eprintln!("skipped: {k} is set, and clap reads it as the flag's value");
            return;
        }
        let parsed = <Serve as clap::Parser>::try_parse_from(["dt-rdzv"]).expect("no flags");
        assert_eq!(
            format!("{:?}", parsed.cfg),
            format!("{:?}", ServeConfig::default())
        );
        let machine = ServeConfig::default().machine_config(None);
        assert_eq!(machine, MachineConfig::default());
    }
}
