//! The torchelastic way to meet: every member compare-and-swaps one shared value (the way
//! `DynamicRendezvousHandler` writes its pickled state) until its write lands, and the member
//! whose write completes the set releases everyone. Run against torch's TCPStore.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dt_rdzv_proto::tcpstore::{Request, VALIDATE_MAGIC};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Timings of one CAS herd.
#[derive(Debug, Clone)]
pub struct CasResult {
    /// First connect -> last member released.
    pub total: Duration,
    /// Compare-set attempts that lost the race.
    pub retries: u64,
}

async fn read_bytes(sock: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 8];
    sock.read_exact(&mut len).await?;
    let mut v = vec![0u8; u64::from_le_bytes(len) as usize];
    sock.read_exact(&mut v).await?;
    Ok(v)
}

async fn member(
    id: usize,
    endpoint: String,
    n: usize,
    key: Vec<u8>,
    go: Vec<u8>,
    retries: Arc<AtomicU64>,
) -> std::io::Result<(TcpStream, Instant)> {
    let mut backoff = Duration::from_millis(5);
    let mut sock = loop {
        match TcpStream::connect(&endpoint).await {
            Ok(s) => break s,
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(250));
            }
        }
    };
    sock.set_nodelay(true)?;
    sock.write_all(
        &Request::Validate {
            magic: VALIDATE_MAGIC,
        }
        .encode(),
    )
    .await?;
    // The state: "count,last writer" as text, so that every write is distinct (the real
    // blob grows with N too).
    let mut expected: Vec<u8> = Vec::new();
    loop {
        let have: usize = std::str::from_utf8(&expected)
            .ok()
            .and_then(|s| s.split(',').next()?.parse().ok())
            .unwrap_or(0);
        let desired = format!("{},{id}", have + 1).into_bytes();
        sock.write_all(
            &Request::CompareSet {
                key: key.clone(),
                expected: expected.clone(),
                desired: desired.clone(),
            }
            .encode(),
        )
        .await?;
        let now = read_bytes(&mut sock).await?;
        if now == desired {
            let mut out = Vec::new();
            if have + 1 == n {
                Request::Set {
                    key: go.clone(),
                    value: b"1".to_vec(),
                }
                .encode_into(&mut out);
            }
            Request::Wait {
                keys: vec![go.clone()],
            }
            .encode_into(&mut out);
            sock.write_all(&out).await?;
            let mut b = [0u8; 1];
            sock.read_exact(&mut b).await?;
            return Ok((sock, Instant::now()));
        }
        retries.fetch_add(1, Ordering::Relaxed);
        expected = now;
    }
}

/// Runs N members against a TCPStore at `endpoint`.
pub async fn run_cas_herd(
    endpoint: &str,
    n: usize,
    tag: &str,
    timeout: Duration,
) -> std::io::Result<CasResult> {
    let key = format!("/torch.rendezvous.{tag}").into_bytes();
    let go = format!("/torch.rendezvous.{tag}/go").into_bytes();
    let retries = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|id| {
            let f = member(
                id,
                endpoint.to_owned(),
                n,
                key.clone(),
                go.clone(),
                retries.clone(),
            );
            tokio::spawn(async move { tokio::time::timeout(timeout, f).await })
        })
        .collect();
    let mut total = Duration::ZERO;
    let mut socks = Vec::with_capacity(n);
    for t in tasks {
        let (sock, released) = t.await.map_err(std::io::Error::other)?.map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "CAS member timed out")
        })??;
        total = total.max(released - start);
        socks.push(sock);
    }
    Ok(CasResult {
        total,
        retries: retries.load(Ordering::Relaxed),
    })
}
