//! `dt-rdzv serve` over real loopback sockets: the Store API through the blocking client, bad
//! input closing only the offending connection, and 1000 concurrent clients.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use dt_rdzv::client::TcpStoreClient;
use dt_rdzv::server::{BackgroundServer, ServeConfig};
use dt_rdzv::store::{Store, StoreError};
use dt_rdzv_proto::tcpstore::{QueryType, Request, VALIDATE_MAGIC};

fn server() -> BackgroundServer {
    BackgroundServer::start(ServeConfig {
        handshake_timeout: Duration::from_millis(300),
        frame_timeout: Duration::from_millis(300),
        ..ServeConfig::loopback_ephemeral()
    })
    .expect("server starts")
}

fn client(s: &BackgroundServer) -> TcpStoreClient {
    TcpStoreClient::connect(&s.endpoint(), Duration::from_secs(10)).expect("connects")
}

/// A validated raw socket, for sending what no well-behaved client would.
fn raw(s: &BackgroundServer) -> TcpStream {
    let mut t = TcpStream::connect(s.addr()).unwrap();
    t.write_all(
        &Request::Validate {
            magic: VALIDATE_MAGIC,
        }
        .encode(),
    )
    .unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    t
}

/// Reads until EOF; returns what arrived before it. Fails if the server never closes.
fn read_to_close(t: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    match t.read_to_end(&mut got) {
        Ok(_) => got,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => got,
        Err(e) => panic!("server did not close the connection: {e}"),
    }
}

#[test]
fn store_api_round_trip() {
    let s = server();
    let c = client(&s);
    let t = Duration::from_secs(5);
    c.set("k", b"v").unwrap();
    assert_eq!(c.get("k", t).unwrap(), b"v");
    assert_eq!(c.add("n", 5).unwrap(), 5);
    assert_eq!(c.add("n", -7).unwrap(), -2);
    assert_eq!(c.compare_set("cas", b"", b"a").unwrap(), b"a");
    assert_eq!(c.compare_set("cas", b"zz", b"b").unwrap(), b"a");
    assert!(c.check(&["k", "n"]).unwrap());
    assert!(!c.check(&["k", "nope"]).unwrap());
    c.append("ap", b"x").unwrap();
    c.append("ap", b"y").unwrap();
    c.multi_set(&["m1", "m2"], &[b"1", b"2"]).unwrap();
    assert_eq!(
        c.multi_get(&["m1", "m2", "ap"], t).unwrap(),
        vec![b"1".to_vec(), b"2".to_vec(), b"xy".to_vec()]
    );
    assert_eq!(c.num_keys().unwrap(), 6);
    assert!(c.delete_key("k").unwrap());
    assert!(!c.delete_key("k").unwrap());
    c.barrier("b", 1, t).unwrap();
}

#[test]
fn wait_timeout_names_missing_keys_and_connection_stays_usable() {
    let s = server();
    let c = client(&s);
    c.set("here", b"").unwrap();
    let start = Instant::now();
    let err = c
        .wait(&["here", "absent"], Duration::from_millis(200))
        .unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(200));
    match err {
        StoreError::Timeout { missing, .. } => assert_eq!(missing, vec!["absent".to_string()]),
        e => panic!("{e}"),
    }
    c.set("absent", b"1").unwrap();
    assert_eq!(c.get("absent", Duration::from_secs(1)).unwrap(), b"1");
}

#[test]
fn wait_released_by_another_client() {
    let s = server();
    let waiter = client(&s);
    let setter = client(&s);
    let t = std::thread::spawn(move || waiter.get("go", Duration::from_secs(20)));
    std::thread::sleep(Duration::from_millis(50));
    setter.set("go", b"1").unwrap();
    assert_eq!(t.join().unwrap().unwrap(), b"1");
}

#[test]
fn two_client_barrier() {
    let s = server();
    let a = client(&s);
    let b = client(&s);
    let t = std::thread::spawn(move || a.barrier("bar", 2, Duration::from_secs(20)));
    std::thread::sleep(Duration::from_millis(50));
    b.barrier("bar", 2, Duration::from_secs(20)).unwrap();
    t.join().unwrap().unwrap();
    assert_eq!(client(&s).get("bar", Duration::ZERO).unwrap(), b"2");
}

/// Each kind of bad input closes only its own connection; a bystander with a parked WAIT and
/// the stored data are untouched.
#[test]
fn bad_input_closes_only_that_connection() {
    let s = server();
    let good = client(&s);
    good.set("keep", b"safe").unwrap();
    let waiter = client(&s);
    let parked = std::thread::spawn(move || waiter.get("release", Duration::from_secs(30)));

    let mut oversize_key = vec![QueryType::Set as u8];
    oversize_key.extend_from_slice(&9000u64.to_le_bytes());
    let mut oversize_value = vec![QueryType::Set as u8];
    oversize_value.extend_from_slice(&1u64.to_le_bytes());
    oversize_value.push(b'k');
    oversize_value.extend_from_slice(&(9u64 << 20).to_le_bytes());
    let mut oversize_count = vec![QueryType::MultiGet as u8];
    oversize_count.extend_from_slice(&200_000u64.to_le_bytes());
    let bad_add = [
        Request::Set {
            key: b"/word".to_vec(),
            value: b"xyz".to_vec(),
        }
        .encode(),
        Request::Add {
            key: b"/word".to_vec(),
            delta: 1,
        }
        .encode(),
    ]
    .concat();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("unknown opcode", vec![0x63]),
        ("oversize key", oversize_key),
        ("oversize value", oversize_value),
        ("oversize count", oversize_count),
        ("non-integer ADD", bad_add),
        (
            "second VALIDATE",
            Request::Validate {
                magic: VALIDATE_MAGIC,
            }
            .encode(),
        ),
    ];
    for (name, bytes) in cases {
        let mut t = raw(&s);
        t.write_all(&bytes).unwrap();
        let got = read_to_close(&mut t);
        assert!(got.is_empty(), "{name}: unexpected reply {got:?}");
    }
    // bad magic and no VALIDATE at all
    for bytes in [
        Request::Validate { magic: 1 }.encode(),
        Request::Ping { nonce: 1 }.encode(),
    ] {
        let mut t = TcpStream::connect(s.addr()).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        t.write_all(&bytes).unwrap();
        assert!(read_to_close(&mut t).is_empty());
    }
    // half a frame, then silence: closed after the frame timeout
    let mut t = raw(&s);
    t.write_all(&[QueryType::Set as u8, 2, 0, 0]).unwrap();
    read_to_close(&mut t);
    // connects and never speaks: closed after the handshake timeout
    let mut t = TcpStream::connect(s.addr()).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    read_to_close(&mut t);

    assert_eq!(good.get("keep", Duration::ZERO).unwrap(), b"safe");
    assert_eq!(
        good.get("word", Duration::ZERO).unwrap(),
        b"xyz",
        "the bad ADD changed nothing"
    );
    good.set("release", b"ok").unwrap();
    assert_eq!(parked.join().unwrap().unwrap(), b"ok");
}

/// Requests that arrive split byte by byte and pipelined in one segment are both served.
#[test]
fn split_and_pipelined_frames() {
    let s = server();
    let mut t = TcpStream::connect(s.addr()).unwrap();
    t.set_nodelay(true).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut bytes = Request::Validate {
        magic: VALIDATE_MAGIC,
    }
    .encode();
    Request::Ping { nonce: 42 }.encode_into(&mut bytes);
    for b in &bytes {
        t.write_all(std::slice::from_ref(b)).unwrap();
    }
    let mut pong = [0u8; 4];
    t.read_exact(&mut pong).unwrap();
    assert_eq!(u32::from_le_bytes(pong), 42);
    let mut pipelined = Vec::new();
    Request::Set {
        key: b"/p".to_vec(),
        value: b"1".to_vec(),
    }
    .encode_into(&mut pipelined);
    Request::Ping { nonce: 1 }.encode_into(&mut pipelined);
    Request::Ping { nonce: 2 }.encode_into(&mut pipelined);
    Request::GetNumKeys.encode_into(&mut pipelined);
    t.write_all(&pipelined).unwrap();
    let mut reply = [0u8; 16];
    t.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[..4], &1u32.to_le_bytes());
    assert_eq!(&reply[4..8], &2u32.to_le_bytes());
    assert_eq!(&reply[8..], &1i64.to_le_bytes());
}

/// 1000 concurrent clients each add to a counter and wait on a release key; the last one
/// releases everyone. Nothing is lost: the counter ends at 1000 and every client is released.
#[test]
fn thousand_concurrent_clients_add_and_wait() {
    const N: usize = 1000;
    // The default deadlines: 1000 connections arriving at once on a loaded machine can take
    // longer than `server()`'s 300 ms to be read for the first time.
    let s = BackgroundServer::start(ServeConfig::loopback_ephemeral()).expect("server starts");
    let endpoint = s.endpoint();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let released = rt.block_on(async move {
        let mut tasks = Vec::new();
        for _ in 0..N {
            let endpoint = endpoint.clone();
            tasks.push(tokio::spawn(async move { member(&endpoint, N).await }));
        }
        let mut released = 0;
        for t in tasks {
            t.await.unwrap();
            released += 1;
        }
        released
    });
    assert_eq!(released, N);
    assert_eq!(
        client(&s).get("arrived", Duration::ZERO).unwrap(),
        N.to_string().as_bytes()
    );
}

async fn member(endpoint: &str, n: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut backoff = Duration::from_millis(10);
    let mut sock = loop {
        match tokio::net::TcpStream::connect(endpoint).await {
            Ok(s) => break s,
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    };
    sock.set_nodelay(true).unwrap();
    let mut out = Request::Validate {
        magic: VALIDATE_MAGIC,
    }
    .encode();
    Request::Add {
        key: b"/arrived".to_vec(),
        delta: 1,
    }
    .encode_into(&mut out);
    sock.write_all(&out).await.unwrap();
    let mut v = [0u8; 8];
    tokio::time::timeout(Duration::from_secs(60), sock.read_exact(&mut v))
        .await
        .expect("ADD reply within 60 s")
        .unwrap_or_else(|e| panic!("ADD reply on {:?}: {e}", sock.local_addr()));
    let arrived = i64::from_le_bytes(v) as usize;
    if arrived == n {
        let set = Request::Set {
            key: b"/go".to_vec(),
            value: b"1".to_vec(),
        }
        .encode();
        sock.write_all(&set).await.unwrap();
    }
    sock.write_all(
        &Request::Wait {
            keys: vec![b"/go".to_vec()],
        }
        .encode(),
    )
    .await
    .unwrap();
    let mut b = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(60), sock.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b[0], 0);
}

#[test]
fn purge_rules_through_the_wire() {
    let s = server();
    let a = client(&s);
    a.compare_set("torch.rendezvous.r1", b"", b"Y2FuaW1hZGFt")
        .unwrap();
    a.compare_set("torch.rendezvous.r1", b"Y2FuaW1hZGFt", b"closed")
        .unwrap();
    a.set("torch.rendezvous.r1.0/MASTER_ADDR", b"h").unwrap();
    drop(a);
    // the server sees the close asynchronously; the next run's first CAS must see a clean slate
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let b = client(&s);
        let got = b
            .compare_set("torch.rendezvous.r1", b"", b"Y2FuaW1hZGFt")
            .unwrap();
        if got == b"Y2FuaW1hZGFt" {
            assert!(!b.check(&["torch.rendezvous.r1.0/MASTER_ADDR"]).unwrap());
            break;
        }
        assert!(Instant::now() < deadline, "old run never purged: {got:?}");
        drop(b);
        std::thread::sleep(Duration::from_millis(20));
    }
}
