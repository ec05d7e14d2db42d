//! `dt-rdzv serve` settings. Every flag has a `DTRDZV_*` environment twin.

use std::net::IpAddr;
use std::time::Duration;

use dt_rdzv_proto::tcpstore::{EngineConfig, Limits};

/// How `dt-rdzv serve` runs.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeConfig {
    /// Address to listen on. `::` listens on every IPv6 and IPv4 address (dual-stack).
    #[arg(long, env = "DTRDZV_HOST", default_value = "::")]
    pub host: IpAddr,

    /// TCPStore-compatible port (torchrun's default rendezvous port). 0 picks a free one.
    #[arg(long, env = "DTRDZV_PORT", default_value_t = 29400)]
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

    /// TCP keepalive idle time before probing a silent peer (0 disables).
    #[arg(long, env = "DTRDZV_TCP_KEEPALIVE", default_value = "30s", value_parser = parse_duration)]
    pub tcp_keepalive: Duration,

    /// Runtime worker threads (default: one per core).
    #[arg(long, env = "DTRDZV_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
}

/// A namespace time-to-live: `None` keeps namespaces forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(pub Option<Duration>);

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            host: IpAddr::from([0u16; 8]),
            port: 29400,
            backlog: 16384,
            namespace_ttl: Ttl(Some(Duration::from_secs(300))),
            handshake_timeout: Duration::from_secs(10),
            frame_timeout: Duration::from_secs(30),
            max_frame_bytes: 64 * 1024 * 1024,
            tcp_keepalive: Duration::from_secs(30),
            worker_threads: None,
        }
    }
}

impl ServeConfig {
    /// A loopback server on an ephemeral port, for tests and benchmarks.
    pub fn loopback_ephemeral() -> Self {
        Self {
            host: IpAddr::from([127, 0, 0, 1]),
            port: 0,
            ..Self::default()
        }
    }

    /// The engine's part of the settings.
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            namespace_ttl: self.namespace_ttl.0,
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
}
