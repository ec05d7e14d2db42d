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

/// One unary call on a connection of its own: (grpc-status, message bytes).
async fn call(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    msg: Vec<u8>,
) -> (String, Bytes) {
    calls(addr, path, headers, vec![msg])
        .await
        .pop()
        .expect("one answer")
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

/// Sends `msgs` to `path` one after another on one HTTP/2 connection: each one's
/// (grpc-status, message bytes).
async fn calls(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    msgs: Vec<Vec<u8>>,
) -> Vec<(String, Bytes)> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    // Without it each call waits out a delayed ACK (40 ms), and 5000 calls outlast the
    // time after which the Lighthouse forgets an id.
    tcp.set_nodelay(true).unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut out = Vec::with_capacity(msgs.len());
    for msg in msgs {
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
        send.ready().await.unwrap();
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
        out.push((status, msg));
    }
    out
}

fn heartbeat(id: &str) -> Vec<u8> {
    HeartbeatRequest {
        replica_id: id.into(),
    }
    .encode_to_vec()
}

/// The issue's bad input, each refused in bounds or taken as it should be, with nothing lost
/// for another job: a world size of 2^31, a newer torchft's unknown fields, a flood of fake
/// replicas heartbeating, a call whose body never ends, a kill for another job's replica.
#[tokio::test]
async fn bad_input_is_refused_in_bounds_and_spares_other_jobs() {
    let d = start(LighthouseConfig::default()).await;
    let flood = [("x-dtcomm-job", "flood")];

    // A world size of 2^31.
    let (s, _) = call(d.addr, super::grpc::QUORUM_PATH, &[], member("w", 1 << 31)).await;
    assert_eq!(s, "3", "INVALID_ARGUMENT");

    // A newer torchft's messages: unknown fields (number 99, varint and bytes) are skipped.
    let mut m = QuorumMember {
        replica_id: "newer".into(),
        world_size: 1,
        ..Default::default()
    }
    .encode_to_vec();
    m.extend_from_slice(&[0x98, 0x06, 0x01, 0x9a, 0x06, 0x02, b'h', b'i']);
    let mut req = QuorumRequest {
        requester: Some(m.into()),
    }
    .encode_to_vec();
    req.extend_from_slice(&[0x98, 0x06, 0x07]);
    let (s, msg) = call(
        d.addr,
        super::grpc::QUORUM_PATH,
        &[("x-dtcomm-job", "newer")],
        req,
    )
    .await;
    assert_eq!(s, "0");
    let q = QuorumResponse::decode(msg).unwrap().quorum.unwrap();
    assert_eq!(q.participants.len(), 1);

    // 5000 fake replicas heartbeating into one job: the job's bound (4096 ids) refuses the
    // rest with RESOURCE_EXHAUSTED; the server still answers everyone else.
    let beats: Vec<Vec<u8>> = (0..5000).map(|i| heartbeat(&format!("fake-{i}"))).collect();
    let got = calls(d.addr, super::grpc::HEARTBEAT_PATH, &flood, beats).await;
    let ok = got.iter().filter(|(s, _)| s == "0").count();
    let refused = got.iter().filter(|(s, _)| s == "8").count();
    assert_eq!((ok, refused), (4096, 904), "{:?}", &got[4090..4100]);
    let (s, q) = quorum(d.addr, &[("x-dtcomm-job", "other")], "r0").await;
    assert_eq!(
        (s.as_str(), q.map(|q| q.1)),
        ("0", Some(1)),
        "another job unharmed"
    );

    // A call whose body never ends is bounded by its deadline; others go on meanwhile.
    let tcp = tokio::net::TcpStream::connect(d.addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let (mut tx, rx) = futures_channel_body();
    tx.push(Bytes::from_static(&[0, 0, 0, 0, 100]));
    let req = Request::post(format!("http://{}{}", d.addr, super::grpc::QUORUM_PATH))
        .header(header::CONTENT_TYPE, "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "300m")
        .body(rx)
        .unwrap();
    let t = Instant::now();
    let pending = tokio::spawn(async move {
        let resp = send.send_request(req).await.unwrap();
        let head = resp.headers().clone();
        let body = resp.into_body().collect().await.ok();
        let trailer = body.and_then(|b| b.trailers().cloned());
        trailer
            .as_ref()
            .and_then(|t| t.get("grpc-status"))
            .or_else(|| head.get("grpc-status"))
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    });
    let (s, _) = quorum(d.addr, &[("x-dtcomm-job", "meanwhile")], "r0").await;
    assert_eq!(s, "0");
    let s = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("the endless call ended")
        .unwrap();
    assert_eq!(s, "4", "DEADLINE_EXCEEDED");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    drop(tx);

    // A kill for a replica of another job: not found there.
    let resp = reqwest_free_post(d.addr, "/replica/r0/kill?job=newer").await;
    assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
}

/// A request body fed by the test (never finished while `tx` lives).
fn futures_channel_body() -> (BodySender, Body) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let stream = tokio_stream_from(rx);
    (BodySender(tx), Body::from_stream(stream))
}

struct BodySender(tokio::sync::mpsc::UnboundedSender<Bytes>);

impl BodySender {
    fn push(&mut self, b: Bytes) {
        let _ = self.0.send(b);
    }
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Bytes>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|o| o.map(Ok)))
}

/// One HTTP/1 POST with no body; the raw answer.
async fn reqwest_free_post(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}
