//! The native rendezvous herd: N members connect over QUIC, join one job and wait until each
//! holds its rank and peers; and the kill-one recovery measurement.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dt_rdzv::native::{ClientConfig, Connector, Membership, NativeClient, Trust};
use dt_rdzv_proto::native::{JobSpec, Role};
use tokio::sync::Semaphore;

/// Timings of one native herd.
#[derive(Debug, Clone)]
pub struct NativeResult {
    /// First connect -> last member holding its welcome.
    pub total: Duration,
    /// First connect -> last member connected.
    pub connect_all: Duration,
    /// Last member connected -> last welcome (the round completes when the last joins).
    pub join_to_welcome: Duration,
    /// The herd's QUIC counters, summed over its members, taken when the last welcome is in.
    pub quic: QuicTotals,
}

/// QUIC counters summed over a herd's connections (the client side of each).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct QuicTotals {
    /// UDP datagrams the members sent.
    pub datagrams_sent: u64,
    /// UDP datagrams the members received.
    pub datagrams_received: u64,
    /// ACK frames the members sent.
    pub acks_sent: u64,
    /// ACK frames the members received.
    pub acks_received: u64,
    /// PING and IMMEDIATE_ACK frames received: the server's probes (loss or ACK-delay timeouts).
    pub probes_received: u64,
    /// Of those, IMMEDIATE_ACK frames (probes of application data, after the handshake).
    pub immediate_acks_received: u64,
    /// PING and IMMEDIATE_ACK frames the members sent.
    pub probes_sent: u64,
    /// Packets the members declared lost.
    pub lost_packets: u64,
    /// STREAM frames the members sent.
    pub stream_frames_sent: u64,
}

impl QuicTotals {
    pub(super) fn add(&mut self, s: &quinn::ConnectionStats) {
        self.datagrams_sent += s.udp_tx.datagrams;
        self.datagrams_received += s.udp_rx.datagrams;
        self.acks_sent += s.frame_tx.acks;
        self.acks_received += s.frame_rx.acks;
        self.probes_received += s.frame_rx.ping + s.frame_rx.immediate_ack;
        self.immediate_acks_received += s.frame_rx.immediate_ack;
        self.probes_sent += s.frame_tx.ping + s.frame_tx.immediate_ack;
        self.lost_packets += s.path.lost_packets;
        self.stream_frames_sent += s.frame_tx.stream;
    }
}

/// Client settings for a server that printed `endpoint` and `fingerprint`.
pub fn client_config(endpoint: &str, fingerprint: &str, token: &str) -> ClientConfig {
    let mut c = ClientConfig::new(endpoint, token, Trust::Fingerprint(fingerprint.into()));
    c.timeout = Duration::from_secs(120);
    c
}

/// What a herd of `n` shares: 32 client endpoints, a gate of `in_flight` handshakes under way
/// at once (as a launcher starting hosts would spread them; the herd shares two cores with
/// the server it measures), and the job's spec (min = max = `n`).
pub(super) fn herd(
    trust: &Trust,
    n: usize,
    in_flight: usize,
    timeout: Duration,
) -> std::io::Result<(Vec<Connector>, Arc<Semaphore>, JobSpec)> {
    let connectors: Vec<Connector> = (0..32)
        .map(|_| Connector::new(trust))
        .collect::<Result<_, _>>()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let gate = Arc::new(Semaphore::new(in_flight.max(1)));
    let spec = JobSpec {
        join_timeout_ms: timeout.as_millis() as u64,
        ..JobSpec::fixed(n as u32)
    };
    Ok((connectors, gate, spec))
}

/// Member `i` of `job` on `node`, advertising an address of its own.
pub(super) fn who(job: &str, i: usize, node: String, spec: &JobSpec) -> Membership {
    Membership {
        job: job.into(),
        member: format!("m{i:05}"),
        node,
        addrs: vec![format!(
            "10.{}.{}.{}:29500",
            i / 65536,
            (i / 256) % 256,
            i % 256
        )],
        host: Vec::new(),
        role: Role::Worker,
        spec: spec.clone(),
    }
}

/// N members join job `job` (min = max = N), with at most `in_flight` QUIC handshakes under way
/// at once. Each joins as soon as it is connected; with `preconnect`, all connect first and
/// then join together, and the result's `join_to_welcome` is from the first join sent to the
/// last welcome (the server's part alone, without the handshakes). Member `i` connects with
/// `cfgs[i % cfgs.len()]` (several endpoint lists: a group of servers sharing jobs).
pub async fn run_native_herd(
    cfgs: &[ClientConfig],
    n: usize,
    job: &str,
    timeout: Duration,
    in_flight: usize,
    preconnect: bool,
) -> std::io::Result<NativeResult> {
    let err = |e: dt_rdzv::native::NativeError| std::io::Error::other(e.to_string());
    // Client endpoints (UDP sockets) share the herd, as hosts would. 32 rather than a few:
    // the herd, not the server, is what falls behind on a shared machine, and a client
    // socket's receive buffer (capped by net.core.rmem_max) overflowed with 8 at 4096 members,
    // which measured the herd's packet losses instead of the server.
    let (connectors, gate, spec) = herd(&cfgs[0].trust, n, in_flight, timeout)?;
    let start = Instant::now();
    // Without `preconnect`, each member joins as soon as it is connected; with it, each sends
    // one status query once connected (the server closes a connection whose stream carries
    // nothing within its handshake timeout), then waits for the others.
    let all_connected = std::sync::Arc::new(tokio::sync::Barrier::new(if preconnect {
        n + 1
    } else {
        1
    }));
    let go = std::sync::Arc::new(tokio::sync::Notify::new());
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (c, cfg) = (
                connectors[i % connectors.len()].clone(),
                cfgs[i % cfgs.len()].clone(),
            );
            let (gate, who) = (
                gate.clone(),
                who(job, i, format!("node{:04}", i / 8), &spec),
            );
            let (all_connected, go) = (all_connected.clone(), go.clone());
            tokio::spawn(async move {
                let permit = gate.acquire().await;
                let mut connecting = c.connect(&cfg).await;
                if preconnect && let Ok(conn) = connecting.as_mut() {
                    // The server closes a connection that made no accepted request within its
                    // handshake timeout (10 s), and a herd of 16,384 takes longer than that
                    // to connect: one status query opens the stream at once.
                    // (Every job's, under the server's token: a refusal, such as the job being
                    // unknown before the first join, would not count as admitting it.)
                    if let Err(e) = conn.status(None).await {
                        connecting = Err(e);
                    }
                }
                drop(permit);
                let mut c = if preconnect {
                    // Wait for everyone even after a failure, or the barrier never opens.
                    let released = go.notified();
                    tokio::pin!(released);
                    released.as_mut().enable();
                    all_connected.wait().await;
                    released.await;
                    connecting?
                } else {
                    connecting?
                };
                let connected = Instant::now();
                c.join(who).await?;
                let w = c.wait_welcome(timeout).await?;
                Ok::<_, dt_rdzv::native::NativeError>((c, w, connected, Instant::now()))
            })
        })
        .collect();
    let mut joins_sent = None;
    if preconnect {
        all_connected.wait().await;
        // Every member waits on `go` (registered before the barrier): release them at once.
        joins_sent = Some(Instant::now());
        go.notify_waiters();
    }
    let (mut connect_all, mut last) = (Duration::ZERO, start);
    let mut keep = Vec::with_capacity(n);
    for t in tasks {
        let (c, w, connected, at) = t.await.map_err(std::io::Error::other)?.map_err(err)?;
        assert_eq!(w.world as usize, n);
        connect_all = connect_all.max(connected - start);
        last = last.max(at);
        keep.push(c);
    }
    let joined = match joins_sent {
        Some(t) => {
            connect_all = t - start;
            t
        }
        None => start + connect_all,
    };
    let mut quic = QuicTotals::default();
    for c in &keep {
        quic.add(&c.quic_stats());
    }
    let result = NativeResult {
        total: last - start,
        connect_all,
        join_to_welcome: last - joined,
        quic,
    };
    for c in keep {
        c.close("benchmark done").await;
    }
    Ok(result)
}

/// One member as a child process (`dt-rdzv member`), so that it can be SIGKILLed.
pub fn spawn_member(
    bin: &std::path::Path,
    endpoint: &str,
    fingerprint: &str,
    token: &str,
    job: &str,
    n: usize,
) -> std::io::Result<Child> {
    Command::new(bin)
        .args([
            "member",
            "--job",
            job,
            "--member",
            "victim",
            "--node",
            "victim-host",
            "--min",
            "1",
        ])
        .args(["--max", &n.to_string()])
        .env("DTRDZV_NATIVE_ENDPOINT", endpoint)
        .env("DTRDZV_FINGERPRINT", fingerprint)
        .env("DTRDZV_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// How the benchmark's victim member fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL: the process dies (its QUIC connection goes silent; no data plane here to
    /// report it, so the server's heartbeat timeout finds it).
    Kill,
    /// SIGSTOP: a frozen host (nothing is closed; only the heartbeat timeout can tell).
    Freeze,
}

/// N members (N-1 here, one a child process) form a round with default server settings; the
/// child is SIGKILLed (or SIGSTOPped, then killed once measured); returns the time from the
/// fault to every survivor holding its new rank.
#[allow(clippy::too_many_arguments)]
pub async fn run_kill_one(
    cfg: &ClientConfig,
    bin: &std::path::Path,
    fingerprint: &str,
    token: &str,
    n: usize,
    job: &str,
    timeout: Duration,
    fault: Fault,
) -> std::io::Result<Duration> {
    let err = |e: dt_rdzv::native::NativeError| std::io::Error::other(e.to_string());
    let spec = JobSpec::elastic(1, n as u32);
    let connector = Connector::new(&cfg.trust).map_err(err)?;
    let mut survivors: Vec<NativeClient> = Vec::new();
    for i in 0..n - 1 {
        let mut c = connector.connect(cfg).await.map_err(err)?;
        c.join(who(job, i, format!("node{:04}", i / 8), &spec))
            .await
            .map_err(err)?;
        survivors.push(c);
    }
    let mut child = spawn_member(bin, &cfg.endpoint, fingerprint, token, job, n)?;
    for c in survivors.iter_mut() {
        let w = c.wait_welcome(timeout).await.map_err(err)?;
        assert_eq!(
            w.world as usize, n,
            "the round holds every member before the kill"
        );
    }
    let sig = match fault {
        Fault::Kill => libc::SIGKILL,
        Fault::Freeze => libc::SIGSTOP,
    };
    // SAFETY: `kill` takes plain integers. `child` is our own child process, not yet reaped (`wait`
    // comes after), so its pid still names it and cannot have been reused by another process.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
    let killed = Instant::now();
    if fault == Fault::Kill {
        let _ = child.wait();
    }
    for c in survivors.iter_mut() {
        let w = c.wait_welcome(timeout).await.map_err(err)?;
        assert_eq!(w.world as usize, n - 1);
    }
    let recovery = killed.elapsed();
    if fault == Fault::Freeze {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut rest = survivors.into_iter();
    if let Some(first) = rest.next() {
        first.finish().await.map_err(err)?;
    }
    drop(rest);
    Ok(recovery)
}
