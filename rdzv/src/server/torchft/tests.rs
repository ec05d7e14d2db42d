//! The door end to end over loopback with a minimal gRPC client (hyper HTTP/2): what torchft's
//! stock client cannot show (job metadata, refusals as gRPC codes, deadlines, unknown
//! methods). The real client's tests are `tests/interop/test_torchft_lighthouse.py`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, header};
use bytes::{BufMut, Bytes, BytesMut};
use dt_rdzv_proto::torchft::LighthouseConfig;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::sync::watch;

use super::wire::{HeartbeatRequest, QuorumMember, QuorumRequest, QuorumResponse};
use super::{LighthouseDoor, run};

struct Door {
    addr: SocketAddr,
    _stop: watch::Sender<bool>,
}

async fn start(config: LighthouseConfig) -> Door {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = watch::channel(false);
    tokio::spawn(run(l, LighthouseDoor::new(config), None, rx));
    Door { addr, _stop: tx }
}

/// One unary call: (grpc-status, message bytes).
async fn call(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    msg: Vec<u8>,
) -> (String, Bytes) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut frame = BytesMut::new();
    frame.put_u8(0);
    frame.put_u32(msg.len() as u32);
    frame.put_slice(&msg);
    let mut req = Request::post(format!("http://{addr}{path}"))
        .header(header::CONTENT_TYPE, "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = send
        .send_request(req.body(Body::from(frame.freeze())).unwrap())
        .await
        .unwrap();
    let head = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap();
    let trailers = body.trailers().cloned().unwrap_or_default();
    let status = trailers
        .get("grpc-status")
        .or_else(|| head.get("grpc-status"))
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let data = body.to_bytes();
    let msg = if data.len() >= 5 {
        data.slice(5..)
    } else {
        Bytes::new()
    };
    (status, msg)
}

fn member(id: &str, world_size: u64) -> Vec<u8> {
    let m = QuorumMember {
        replica_id: id.into(),
        world_size,
        ..Default::default()
    };
    QuorumRequest {
        requester: Some(m.encode_to_vec().into()),
    }
    .encode_to_vec()
}

async fn quorum(
    addr: SocketAddr,
    headers: &[(&str, &str)],
    id: &str,
) -> (String, Option<(i64, usize)>) {
    let (status, msg) = call(addr, super::grpc::QUORUM_PATH, headers, member(id, 1)).await;
    let q = QuorumResponse::decode(msg)
        .ok()
        .and_then(|r| r.quorum)
        .map(|q| (q.quorum_id, q.participants.len()));
    (status, q)
}

#[tokio::test]
async fn jobs_by_metadata() {
    let d = start(LighthouseConfig::default()).await;
    let (s, q) = quorum(d.addr, &[], "r0").await;
    assert_eq!((s.as_str(), q), ("0", Some((1, 1))));
    let (s, q) = quorum(d.addr, &[("x-dtcomm-job", "a")], "r0").await;
    assert_eq!((s.as_str(), q), ("0", Some((1, 1))), "a job of its own");
    let (s, q) = quorum(d.addr, &[("room-id", "b")], "r1").await;
    assert_eq!((s.as_str(), q), ("0", Some((1, 1))));
    // The default job again: r0 (of the default job's last quorum) still beats and has not
    // joined, so the split-brain guard holds r9 back there, and only there.
    let (s, q) = quorum(d.addr, &[("grpc-timeout", "300m")], "r9").await;
    assert_eq!((s.as_str(), q), ("4", None));
    let (s, q) = quorum(
        d.addr,
        &[("x-dtcomm-job", "c"), ("grpc-timeout", "5S")],
        "r9",
    )
    .await;
    assert_eq!((s.as_str(), q), ("0", Some((1, 1))));
}

#[tokio::test]
async fn refusals_are_grpc_codes() {
    let d = start(LighthouseConfig::default()).await;
    let long = "x".repeat(1025);
    let (s, _) = call(d.addr, super::grpc::QUORUM_PATH, &[], member(&long, 1)).await;
    assert_eq!(s, "3", "INVALID_ARGUMENT");
    let (s, _) = call(
        d.addr,
        super::grpc::QUORUM_PATH,
        &[],
        member("w", (1 << 20) + 1),
    )
    .await;
    assert_eq!(s, "3");
    let (s, _) = call(d.addr, super::grpc::QUORUM_PATH, &[], Vec::new()).await;
    assert_eq!(s, "3", "missing requester");
    let hb = HeartbeatRequest { replica_id: long }.encode_to_vec();
    let (s, _) = call(d.addr, super::grpc::HEARTBEAT_PATH, &[], hb).await;
    assert_eq!(s, "3");
    let hb = HeartbeatRequest {
        replica_id: "ok".into(),
    }
    .encode_to_vec();
    let (s, _) = call(d.addr, super::grpc::HEARTBEAT_PATH, &[], hb).await;
    assert_eq!(s, "0");
    let (s, _) = call(d.addr, "/torchft.LighthouseService/Nope", &[], Vec::new()).await;
    assert_eq!(s, "12", "UNIMPLEMENTED");
    let job = "j".repeat(300);
    let (s, _) = quorum(d.addr, &[("x-dtcomm-job", &job)], "r").await;
    assert_eq!(s, "3");
}

#[tokio::test]
async fn deadline_ends_the_call() {
    let d = start(LighthouseConfig {
        min_replicas: 2,
        ..Default::default()
    })
    .await;
    let t = Instant::now();
    let (s, q) = quorum(d.addr, &[("grpc-timeout", "200m")], "alone").await;
    let took = t.elapsed();
    assert_eq!((s.as_str(), q), ("4", None), "DEADLINE_EXCEEDED");
    assert!(
        took >= Duration::from_millis(190) && took < Duration::from_secs(3),
        "{took:?}"
    );
}
