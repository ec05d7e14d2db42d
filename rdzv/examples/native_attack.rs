//! Native-door attacks in a loop, for `scripts/soak.sh`: unauthenticated partial frames held
//! open with keep-alives, an oversized frame, joins with too many or too long addresses, and a
//! burst of handshakes that pin the wrong certificate.
//!
//! `native_attack HOST:PORT FINGERPRINT TOKEN SECONDS` prints one line per round and a total.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dt_rdzv::native::{ClientConfig, Membership, NativeClient, Trust, client_config};
use dt_rdzv_proto::native::{JobSpec, Role, codec::VERSION};

fn endpoint(fingerprint: &str) -> quinn::Endpoint {
    let mut cfg = client_config(&Trust::Fingerprint(fingerprint.into())).expect("client config");
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(Some(Duration::from_millis(200)));
    cfg.transport_config(Arc::new(transport));
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).expect("endpoint");
    ep.set_default_client_config(cfg);
    ep
}

fn header(len: u32) -> Vec<u8> {
    let mut h = b"DTRZ".to_vec();
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes());
    h.extend_from_slice(&len.to_le_bytes());
    h
}

/// Opens `n` connections, each with most of a big frame, and waits until the server closed
/// them all (or 60 s); returns how many it closed.
async fn partial_frames(ep: &quinn::Endpoint, addr: SocketAddr, n: usize) -> usize {
    let mut held = Vec::new();
    for _ in 0..n {
        let Ok(connecting) = ep.connect(addr, "localhost") else {
            continue;
        };
        let Ok(conn) = connecting.await else { continue };
        let Ok((mut send, recv)) = conn.open_bi().await else {
            continue;
        };
        let _ = send.write_all(&header(1900 * 1024)).await;
        let _ = send.write_all(&vec![7u8; 1800 * 1024]).await;
        held.push((conn, send, recv));
    }
    let mut closed = 0;
    for (conn, _, _) in &held {
        if tokio::time::timeout(Duration::from_secs(60), conn.closed())
            .await
            .is_ok()
        {
            closed += 1;
        }
    }
    closed
}

async fn oversized(ep: &quinn::Endpoint, addr: SocketAddr) -> bool {
    let Ok(connecting) = ep.connect(addr, "localhost") else {
        return false;
    };
    let Ok(conn) = connecting.await else {
        return false;
    };
    let Ok((mut send, _recv)) = conn.open_bi().await else {
        return false;
    };
    let _ = send.write_all(&header(64 << 20)).await;
    tokio::time::timeout(Duration::from_secs(10), conn.closed())
        .await
        .is_ok()
}

async fn big_addrs(cfg: &ClientConfig, round: u64) -> usize {
    let mut refused = 0;
    for addrs in [
        vec!["10.0.0.1:1".to_string(); 1000],
        vec!["a".repeat(64 * 1024)],
    ] {
        let Ok(mut c) = NativeClient::connect(cfg).await else {
            continue;
        };
        let who = Membership {
            job: format!("soak-addrs-{round}"),
            member: "m".into(),
            node: "n".into(),
            addrs,
            host: Vec::new(),
            role: Role::Worker,
            spec: JobSpec::fixed(5),
        };
        if c.join(who).await.is_err() {
            refused += 1;
        }
    }
    refused
}

async fn flood(addr: SocketAddr, wrong: &str, n: usize) -> usize {
    let ep = endpoint(wrong);
    let attempts: Vec<_> = (0..n)
        .filter_map(|_| ep.connect(addr, "localhost").ok())
        .collect();
    let mut failed = 0;
    for a in attempts {
        if a.await.is_err() {
            failed += 1;
        }
    }
    failed
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, fingerprint, token, seconds] = args.as_slice() else {
        eprintln!("usage: native_attack HOST:PORT FINGERPRINT TOKEN SECONDS");
        std::process::exit(2);
    };
    let addr: SocketAddr = addr.parse().expect("HOST:PORT");
    let until = Instant::now() + Duration::from_secs_f64(seconds.parse().expect("SECONDS"));
    let mut wrong = fingerprint.clone();
    let last = wrong.pop().unwrap_or('0');
    wrong.push(if last == '0' { '1' } else { '0' });
    let cfg = ClientConfig::new(
        addr.to_string(),
        token.as_str(),
        Trust::Fingerprint(fingerprint.clone()),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let ep = endpoint(fingerprint);
        let mut round = 0u64;
        let (mut closed, mut refused, mut failed) = (0, 0, 0);
        while Instant::now() < until {
            round += 1;
            let t = Instant::now();
            let c = partial_frames(&ep, addr, 8).await;
            let o = oversized(&ep, addr).await;
            let r = big_addrs(&cfg, round).await;
            let f = flood(addr, &wrong, 200).await;
            (closed, refused, failed) = (closed + c, refused + r, failed + f);
            println!(
                "native round {round}: {c}/8 partial-frame connections closed, oversized frame \
                 closed={o}, {r}/2 oversized joins refused, {f}/200 flood handshakes failed \
                 ({:.1} s)",
                t.elapsed().as_secs_f64()
            );
        }
        println!(
            "native total: {round} rounds, {closed} partial-frame connections closed, \
             {refused} oversized joins refused, {failed} flood handshakes failed"
        );
    });
}
