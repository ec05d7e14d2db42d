//! The adversarial native tests' harness: a real `dt-rdzv serve` process, a TCPStore
//! bystander, a welcomed member bystander, and raw QUIC helpers.
#![allow(dead_code, unused_imports)]

pub use std::io::{BufRead, BufReader};
pub use std::net::SocketAddr;
pub use std::path::PathBuf;
pub use std::process::{Child, Command, Stdio};
pub use std::sync::Arc;
pub use std::sync::atomic::{AtomicBool, Ordering};
pub use std::time::{Duration, Instant};

pub use dt_rdzv::client::TcpStoreClient;
pub use dt_rdzv::native::{
    ClientConfig, Membership, NativeClient, NativeError, Trust, client_config,
};
pub use dt_rdzv::store::Store;
pub use dt_rdzv_proto::native::{
    ClientMsg, JobSpec, Join, RefusalCode, Role, ServerMsg, encode_client,
};

pub const BIN: &str = env!("CARGO_BIN_EXE_dt-rdzv");
pub const TOKEN: &str = "adversarial-token";
pub const MIB: u64 = 1024 * 1024;
/// What the debug server may hold before any attack, generously (as in tests/adversarial).
pub const BASELINE_RSS: u64 = 96 * MIB;

/// `dt-rdzv serve` on ephemeral loopback ports, its log in a file, killed by PID on drop.
pub struct Served {
    pub child: Child,
    pub store: String,
    pub native: SocketAddr,
    pub fingerprint: String,
    /// The HTTP port (`/metrics`, `/healthz`).
    pub http: String,
    /// The etcd v2 port, when `--etcd-v2-port` was given.
    pub etcd: Option<String>,
    pub log: PathBuf,
}

impl Served {
    pub fn start(name: &str, flags: &[&str]) -> Self {
        let log =
            std::env::temp_dir().join(format!("dt-rdzv-adv-{name}-{}.log", std::process::id()));
        let mut child = Command::new(BIN)
            .args([
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--native-port",
                "0",
                "--http-port",
                "0",
            ])
            .args(flags)
            .env("DTRDZV_TOKEN", TOKEN)
            .env("DTRDZV_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn dt-rdzv");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut next = || lines.next().expect("a ready line").unwrap();
        let store = next()
            .strip_prefix("dt-rdzv listening tcpstore=")
            .expect("tcpstore line")
            .to_string();
        let native = next();
        let rest = native.strip_prefix("dt-rdzv listening native=").unwrap();
        let (endpoint, fp) = rest.split_once(" fingerprint=").unwrap();
        let http = next()
            .strip_prefix("dt-rdzv listening http=")
            .expect("http line")
            .to_string();
        let etcd = flags.contains(&"--etcd-v2-port").then(|| {
            next()
                .strip_prefix("dt-rdzv listening etcd_v2=")
                .expect("etcd v2 line")
                .to_string()
        });
        // Keep its stdout open and drained (a closed pipe would fail its next line).
        std::thread::spawn(move || lines.for_each(drop));
        Self {
            store,
            native: endpoint.parse().unwrap(),
            fingerprint: fp.trim().to_string(),
            http,
            etcd,
            log,
            child,
        }
    }

    pub fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("VmRSS");
        kib * 1024
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn client(&self) -> ClientConfig {
        ClientConfig::new(
            self.native.to_string(),
            TOKEN,
            Trust::Fingerprint(self.fingerprint.clone()),
        )
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A TCPStore client doing set/get in a loop on its own thread; `finish` returns the worst
/// single operation's time, failing on any error.
pub struct StoreBystander {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<Duration, String>>,
}

impl StoreBystander {
    pub fn start(endpoint: &str) -> Self {
        let client = TcpStoreClient::connect(endpoint, Duration::from_secs(10)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut worst = Duration::ZERO;
            let mut i = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let (key, value) = (format!("by/k{}", i % 16), format!("v{i}"));
                let t = Instant::now();
                client
                    .set(&key, value.as_bytes())
                    .map_err(|e| e.to_string())?;
                let got = client
                    .get(&key, Duration::from_secs(10))
                    .map_err(|e| e.to_string())?;
                if got != value.as_bytes() {
                    return Err(format!("get {key}: {got:?}"));
                }
                worst = worst.max(t.elapsed() / 2);
                i += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(worst)
        });
        Self { stop, thread }
    }

    pub fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let worst = self.thread.join().unwrap().expect("store bystander failed");
        assert!(
            worst < Duration::from_secs(1),
            "store bystander stalled {worst:?}"
        );
    }
}

pub fn member(job: &str, name: &str, addrs: Vec<String>) -> Membership {
    Membership {
        job: job.into(),
        member: name.into(),
        node: name.into(),
        addrs,
        host: Vec::new(),
        role: Role::Worker,
        spec: JobSpec::fixed(1),
    }
}

/// A raw QUIC client endpoint trusting `fingerprint`, with keep-alives every 200 ms (what an
/// attacker uses to hold connections open).
pub fn raw_endpoint(fingerprint: &str) -> quinn::Endpoint {
    raw_endpoint_from(fingerprint, "127.0.0.1")
}

/// [`raw_endpoint`] from the loopback address `ip` (127.0.0.2: another host to the server).
pub fn raw_endpoint_from(fingerprint: &str, ip: &str) -> quinn::Endpoint {
    let mut cfg = client_config(&Trust::Fingerprint(fingerprint.into())).unwrap();
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(Some(Duration::from_millis(200)));
    cfg.transport_config(Arc::new(transport));
    let mut ep = quinn::Endpoint::client(format!("{ip}:0").parse().unwrap()).unwrap();
    ep.set_default_client_config(cfg);
    ep
}

/// A frame header announcing `len` payload bytes.
pub fn header(len: u32) -> Vec<u8> {
    let mut h = b"DTRZ".to_vec();
    h.extend_from_slice(&dt_rdzv_proto::native::codec::VERSION.to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes());
    h.extend_from_slice(&len.to_le_bytes());
    h
}

/// A welcomed member answering lookups; `check` fails if one took a second or more.
pub async fn member_bystander(s: &Served) -> NativeClient {
    let mut m = NativeClient::connect(&s.client()).await.unwrap();
    m.join(member("bystander", "b0", vec!["127.0.0.1:1".into()]))
        .await
        .unwrap();
    m.wait_welcome(Duration::from_secs(30)).await.unwrap();
    m
}

pub async fn check_member(m: &mut NativeClient) {
    let t = Instant::now();
    let peers = m
        .lookup(vec![0])
        .await
        .expect("bystander member still served");
    assert_eq!(peers.len(), 1);
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "lookup took {:?}",
        t.elapsed()
    );
}

/// A raw member: a good Join for `job` (its own one-member job), answered; its stream.
pub async fn raw_member(
    ep: &quinn::Endpoint,
    s: &Served,
    job: &str,
) -> (quinn::Connection, quinn::SendStream, quinn::RecvStream) {
    let conn = ep.connect(s.native, "localhost").unwrap().await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let who = member(job, "m0", vec!["127.0.0.1:1".into()]);
    let join = Join {
        job: who.job,
        token: TOKEN.into(),
        member: who.member,
        node: who.node,
        addrs: who.addrs,
        host: Vec::new(),
        role: who.role,
        spec: who.spec,
        resume: None,
    };
    send.write_all(&encode_client(&ClientMsg::Join(join)))
        .await
        .unwrap();
    let mut first = [0u8; 12];
    recv.read_exact(&mut first)
        .await
        .expect("an answer to the join");
    (conn, send, recv)
}

/// `n` raw members (jobs `{prefix}0..`), each starting a 1.9 MiB frame (within the 2 MiB
/// client limit) and sending 1.8 MiB of it; after half a second, how many of them the server
/// still holds (the others it closed, naming the budget that had no room), and the members.
pub async fn partial_frames(
    ep: &quinn::Endpoint,
    s: &Served,
    prefix: &str,
    n: usize,
) -> (
    usize,
    Vec<(quinn::Connection, quinn::SendStream, quinn::RecvStream)>,
) {
    let mut members = Vec::new();
    for i in 0..n {
        let (conn, mut send, recv) = raw_member(ep, s, &format!("{prefix}{i}")).await;
        send.write_all(&header(1900 * 1024)).await.unwrap();
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            send.write_all(&vec![7u8; 1800 * 1024]),
        )
        .await;
        members.push((conn, send, recv));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let open = members
        .iter()
        .filter(|(c, _, _)| c.close_reason().is_none())
        .count();
    (open, members)
}
