//! A herd of N TCPStore clients released by a store barrier, all started at once.

use std::time::{Duration, Instant};

use dt_rdzv_proto::tcpstore::{Request, VALIDATE_MAGIC};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Timings of one herd.
#[derive(Debug, Clone)]
pub struct HerdResult {
    /// First connect started -> last member connected and validated.
    pub connect_all: Duration,
    /// First connect started -> last member released.
    pub total: Duration,
    /// Members released (must equal N).
    pub released: usize,
}

/// Runs N members against `endpoint` with keys unique to `tag`, keeping every connection open
/// until `hold` returns (so the caller can measure the server with N connected).
pub async fn run_herd<F: FnOnce()>(
    endpoint: &str,
    n: usize,
    tag: &str,
    timeout: Duration,
    hold: F,
) -> std::io::Result<HerdResult> {
    let arrived = format!("/rdzv_perf/{tag}/arrived").into_bytes();
    let go = format!("/rdzv_perf/{tag}/go").into_bytes();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let (endpoint, arrived, go) = (endpoint.to_owned(), arrived.clone(), go.clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::timeout(timeout, member(&endpoint, n, arrived, go)).await
        }));
    }
    let mut connect_all = Duration::ZERO;
    let mut total = Duration::ZERO;
    let mut socks = Vec::with_capacity(n);
    for t in tasks {
        let (sock, connected, released) = t
            .await
            .map_err(std::io::Error::other)?
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "member timed out"))??;
        connect_all = connect_all.max(connected - start);
        total = total.max(released - start);
        socks.push(sock);
    }
    hold();
    let released = socks.len();
    drop(socks);
    Ok(HerdResult {
        connect_all,
        total,
        released,
    })
}

async fn member(
    endpoint: &str,
    n: usize,
    arrived: Vec<u8>,
    go: Vec<u8>,
) -> std::io::Result<(TcpStream, Instant, Instant)> {
    // Like torch's client: retry refused connects with a growing backoff.
    let mut backoff = Duration::from_millis(5);
    let mut sock = loop {
        match TcpStream::connect(endpoint).await {
            Ok(s) => break s,
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(250));
            }
        }
    };
    sock.set_nodelay(true)?;
    let mut out = Request::Validate {
        magic: VALIDATE_MAGIC,
    }
    .encode();
    Request::Ping { nonce: 1 }.encode_into(&mut out);
    sock.write_all(&out).await?;
    let mut pong = [0u8; 4];
    sock.read_exact(&mut pong).await?;
    let connected = Instant::now();
    sock.write_all(
        &Request::Add {
            key: arrived,
            delta: 1,
        }
        .encode(),
    )
    .await?;
    let mut v = [0u8; 8];
    sock.read_exact(&mut v).await?;
    let mut out = Vec::new();
    if i64::from_le_bytes(v) as usize == n {
        Request::Set {
            key: go.clone(),
            value: b"1".to_vec(),
        }
        .encode_into(&mut out);
    }
    Request::Wait { keys: vec![go] }.encode_into(&mut out);
    sock.write_all(&out).await?;
    let mut b = [0u8; 1];
    sock.read_exact(&mut b).await?;
    Ok((sock, connected, Instant::now()))
}
