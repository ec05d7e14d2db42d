//! The native protocol over real QUIC on loopback: forming, losses (silent and closed),
//! wrong token, wrong certificate, stop, garbage on the port, HTTP status and metrics.

mod common;
use common::{http_get, rt};

use std::io::{Read, Write};
use std::time::Duration;

use dt_rdzv::native::{
    BlockingNativeClient, ClientConfig, Connector, Membership, NativeClient, NativeError, Trust,
};
use dt_rdzv::server::{BackgroundServer, ServeConfig};
use dt_rdzv_proto::native::member::{Rounds, Stop};
use dt_rdzv_proto::native::{JobEnd, JobSpec, RefusalCode, Role, RoundCause, ServerMsg};

const TOKEN: &str = "test-token";
/// Generous: the machine is shared and slow.
const WAIT: Duration = Duration::from_secs(60);

fn server() -> BackgroundServer {
    common::server_with_token(TOKEN)
}

fn cfg(s: &BackgroundServer, token: &str) -> ClientConfig {
    common::client_cfg(s, token)
}

fn who(job: &str, i: usize, spec: &JobSpec) -> Membership {
    Membership {
        job: job.into(),
        member: format!("m{i}"),
        node: format!("host{}", i / 2),
        addrs: vec![format!("127.0.0.1:{}", 40000 + i)],
        host: Vec::new(),
        role: Role::Worker,
        spec: spec.clone(),
    }
}

async fn members(s: &BackgroundServer, job: &str, n: usize, spec: &JobSpec) -> Vec<NativeClient> {
    let c = cfg(s, TOKEN);
    let connector = Connector::new(&c.trust).unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let mut m = connector.connect(&c).await.expect("connect");
        m.join(who(job, i, spec)).await.expect("join");
        out.push(m);
    }
    out
}

#[test]
fn members_form_a_round_and_survivors_carry_on_after_losses() {
    let s = server();
    rt().block_on(async {
        let spec = JobSpec::elastic(1, 4);
        let mut ms = members(&s, "train", 4, &spec).await;
        let mut ranks = Vec::new();
        for m in ms.iter_mut() {
            let w = m.wait_welcome(WAIT).await.expect("welcome");
            assert_eq!((w.round, w.world, w.nodes), (1, 4, 2));
            assert!(w.all_peers && w.peers.len() == 4);
            assert_eq!(w.peers[w.rank as usize].observed_ip, "127.0.0.1");
            ranks.push(w.rank);
        }
        let mut sorted = ranks.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1, 2, 3]);

        // A member goes silent (a hung or SIGKILLed process whose socket stays open).
        ms[3].go_silent();
        for (i, m) in ms.iter_mut().enumerate().take(3) {
            let w = m.wait_welcome(WAIT).await.expect("new round");
            assert_eq!((w.round, w.world), (2, 3));
            assert!(
                matches!(&w.cause, RoundCause::MemberLost { member, .. } if member == "m3"),
                "{:?}",
                w.cause
            );
            if ranks[i] < 3 {
                assert_eq!(w.rank, ranks[i], "survivor keeps its rank");
            }
        }
        // A member's connection closes: noticed at once.
        let gone = ms.remove(2);
        drop(gone);
        for m in ms.iter_mut().take(2) {
            let w = m.wait_welcome(WAIT).await.expect("third round");
            assert_eq!((w.round, w.world), (3, 2));
            assert!(matches!(&w.cause, RoundCause::MemberLost { member, .. } if member == "m2"));
        }
        // Status over the native port names members and ranks.
        let mut op = NativeClient::connect(&cfg(&s, TOKEN)).await.unwrap();
        let st = op.status(Some("train")).await.unwrap();
        assert_eq!((st[0].round, st[0].world, st[0].members.len()), (3, 2, 2));
        assert_eq!(st[0].restarts, 2);
    });
}

/// A lookup of more ranks than one request may ask for (2,048) is sent in batches: a member
/// of a big round with a partial peer table asks for every lower rank.
#[test]
fn a_lookup_of_any_size_is_answered_in_batches() {
    let s = server();
    rt().block_on(async {
        let spec = JobSpec::fixed(1);
        let mut m = members(&s, "lookups", 1, &spec).await.pop().unwrap();
        m.wait_welcome(WAIT).await.expect("welcomed");
        let many: Vec<u32> = (0..5000).chain(0..5000).collect();
        match m.lookup(many.clone()).await {
            Err(NativeError::Refused { message, .. }) => {
                assert!(message.contains("max_lookup_ranks"), "{message}")
            }
            other => panic!("one lookup of 5,000 ranks was not refused: {other:?}"),
        }
        let peers = m.lookup_all(&many).await.expect("batched lookups");
        assert_eq!(peers.iter().map(|p| p.rank).collect::<Vec<_>>(), vec![0]);
    });
}

#[test]
fn wrong_token_is_refused_and_nothing_else_is_disturbed() {
    let s = server();
    rt().block_on(async {
        let spec = JobSpec::fixed(2);
        let mut good = members(&s, "j", 1, &spec).await;
        let mut bad = NativeClient::connect(&cfg(&s, "guess")).await.unwrap();
        match bad.join(who("j", 5, &spec)).await {
            Err(NativeError::Refused {
                code: RefusalCode::BadToken,
                message,
            }) => {
                assert!(message.contains("\"j\""), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let mut snoop = NativeClient::connect(&cfg(&s, "guess")).await.unwrap();
        assert!(matches!(
            snoop.status(None).await,
            Err(NativeError::Refused {
                code: RefusalCode::BadToken,
                ..
            })
        ));
        // The good member is untouched and completes with the next good joiner.
        let mut second = members(&s, "j", 0, &spec).await;
        let mut m = NativeClient::connect(&cfg(&s, TOKEN)).await.unwrap();
        m.join(who("j", 1, &spec)).await.unwrap();
        second.push(m);
        assert_eq!(good[0].wait_welcome(WAIT).await.unwrap().world, 2);
        assert_eq!(second[0].wait_welcome(WAIT).await.unwrap().world, 2);
        // Joining twice on one connection is refused; the member stays.
        second[0]
            .join(who("j", 1, &spec))
            .await
            .map(|_| ())
            .expect_err("second join refused");
        let st = NativeClient::connect(&cfg(&s, TOKEN))
            .await
            .unwrap()
            .status(Some("j"))
            .await
            .unwrap();
        assert_eq!(st[0].members.len(), 2);
    });
}

#[test]
fn a_client_pinning_another_certificate_does_not_connect() {
    let s = server();
    rt().block_on(async {
        let mut c = cfg(&s, TOKEN);
        c.trust = Trust::Fingerprint(format!("sha256:{}", "ab".repeat(32)));
        c.timeout = Duration::from_secs(10);
        let e = NativeClient::connect(&c)
            .await
            .expect_err("pinned mismatch");
        assert!(matches!(e, NativeError::Connect { .. }), "{e}");
    });
}

#[test]
fn stop_ends_the_job_for_every_member_and_later_joins_are_told() {
    let s = server();
    rt().block_on(async {
        let spec = JobSpec::fixed(2);
        let mut ms = members(&s, "doomed", 2, &spec).await;
        for m in ms.iter_mut() {
            m.wait_welcome(WAIT).await.unwrap();
        }
        let mut op = NativeClient::connect(&cfg(&s, TOKEN)).await.unwrap();
        op.stop("doomed", "operator said so").await.unwrap();
        for m in ms.iter_mut() {
            match m.wait_welcome(WAIT).await {
                Err(NativeError::JobEnded {
                    end: JobEnd::Stopped { reason },
                    ..
                }) => {
                    assert_eq!(reason, "operator said so")
                }
                other => panic!("{other:?}"),
            }
        }
        let mut late = NativeClient::connect(&cfg(&s, TOKEN)).await.unwrap();
        match late.join(who("doomed", 7, &spec)).await {
            Err(NativeError::Refused {
                code: RefusalCode::JobEnded,
                message,
            }) => {
                assert!(message.contains("stopped"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    });
}

/// Until `f` holds for every member's rounds (read by its session, its messages unread).
async fn until_rounds(ms: &[NativeClient], f: impl Fn(&mut Rounds) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !ms.iter().all(|m| m.rounds(&f)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "rounds never got there"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn the_session_keeps_each_members_rounds_whether_or_not_it_reads_its_messages() {
    let s = server();
    rt().block_on(async {
        let ms = members(&s, "kept", 2, &JobSpec::fixed(2)).await;
        until_rounds(&ms, |r| r.changed()).await;
        for m in &ms {
            let w = m.rounds(|r| r.advance().cloned()).expect("round 1");
            assert_eq!((w.round, w.world), (1, 2));
            assert!(m.rounds(|r| !r.changed() && r.stop().is_none()));
        }
        let mut op = NativeClient::connect(&cfg(&s, TOKEN)).await.unwrap();
        op.stop("kept", "operator said so").await.unwrap();
        until_rounds(&ms, |r| r.stop().is_some()).await;
        for m in &ms {
            let stop = m.rounds(|r| r.stop().cloned());
            assert!(
                matches!(&stop, Some(Stop::JobEnded { job, how, .. }) if job == "kept" && how == "stopped"),
                "{stop:?}"
            );
        }
    });
}

#[test]
fn garbage_on_the_quic_port_disturbs_nobody() {
    let s = server();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..50u8 {
        let junk: Vec<u8> = (0..1200)
            .map(|j| (j as u8).wrapping_mul(31).wrapping_add(i))
            .collect();
        udp.send_to(&junk, s.native_endpoint().unwrap()).unwrap();
    }
    rt().block_on(async {
        let mut ms = members(&s, "after-junk", 1, &JobSpec::fixed(1)).await;
        assert_eq!(ms[0].wait_welcome(WAIT).await.unwrap().world, 1);
    });
}

#[test]
fn the_blocking_client_joins_publishes_and_finishes() {
    let s = server();
    let spec = JobSpec::fixed(2);
    let c = cfg(&s, TOKEN);
    let c2 = c.clone();
    let spec2 = spec.clone();
    let worker = std::thread::spawn(move || {
        let mut w = BlockingNativeClient::connect(&c2).unwrap();
        let welcome = w.join_and_wait(who("blk", 1, &spec2), WAIT).unwrap();
        // wait for the main member's config
        let deadline = std::time::Instant::now() + WAIT;
        while w.config().unwrap().get("MAIN_config").is_none() {
            assert!(std::time::Instant::now() < deadline);
            match w.next_message(WAIT) {
                Ok(ServerMsg::JobEnded { .. }) | Err(_) => break,
                Ok(_) => {}
            }
        }
        (
            welcome,
            w.config().unwrap().get("MAIN_config").cloned(),
            w.next_message(WAIT),
        )
    });
    let mut main = BlockingNativeClient::connect(&c).unwrap();
    let mut m = who("blk", 0, &spec);
    m.role = Role::Main;
    let w = main.join_and_wait(m, WAIT).unwrap();
    assert_eq!(w.rank, 0, "the main member is rank 0");
    main.publish("MAIN_config", b"{\"ip\":\"127.0.0.1\"}".to_vec())
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    main.finish().unwrap();
    let (welcome, config, end) = worker.join().unwrap();
    assert_eq!((welcome.rank, welcome.world), (1, 2));
    assert_eq!(config.as_deref(), Some(&b"{\"ip\":\"127.0.0.1\"}"[..]));
    assert!(
        matches!(
            end,
            Ok(ServerMsg::JobEnded {
                end: JobEnd::Finished { .. },
                ..
            })
        ),
        "{end:?}"
    );
}

#[test]
fn http_serves_health_metrics_and_jobs_behind_the_token() {
    let s = server();
    rt().block_on(async {
        let mut ms = members(&s, "visible", 1, &JobSpec::fixed(1)).await;
        ms[0].wait_welcome(WAIT).await.unwrap();
        let h = s.http_endpoint().unwrap();
        let store =
            dt_rdzv::client::TcpStoreClient::connect(&s.endpoint(), Duration::from_secs(10))
                .unwrap();
        dt_rdzv::store::Store::set(&store, "k", b"value").unwrap();
        // TCPStore's SET has no reply: a GET on the same connection orders it before the
        // metrics are read.
        let got = dt_rdzv::store::Store::get(&store, "k", Duration::from_secs(10)).unwrap();
        assert_eq!(got, b"value");
        assert_eq!(http_get(&h, "/healthz", None), (200, "ok\n".into()));
        let (code, body) = http_get(&h, "/metrics", None);
        assert_eq!(code, 200);
        assert!(body.contains("dtrdzv_rounds_total 1"), "{body}");
        assert!(body.contains("dtrdzv_members 1"), "{body}");
        let stored: u64 = body
            .lines()
            .find_map(|l| l.strip_prefix("dtrdzv_store_bytes "))
            .and_then(|v| v.parse().ok())
            .expect("dtrdzv_store_bytes");
        assert!(stored >= 6, "{body}");
        assert!(
            body.contains("# TYPE dtrdzv_store_ops_total counter"),
            "{body}"
        );
        let (code, body) = http_get(&h, "/v1/jobs", None);
        assert_eq!(code, 401);
        assert!(!body.contains("visible"));
        let (code, body) = http_get(&h, "/v1/jobs", Some(TOKEN));
        assert_eq!(code, 200);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["jobs"][0]["job"], "visible");
        assert_eq!(v["jobs"][0]["members"][0]["rank"], 0);
        let (code, _) = http_get(&h, "/v1/jobs/nope", Some(TOKEN));
        assert_eq!(code, 404);
        // A job's own token reads that job, not the list nor another job.
        let jt = dt_rdzv_proto::rendezvous::job_token(TOKEN, "visible");
        assert_eq!(http_get(&h, "/v1/jobs/visible", Some(&jt)).0, 200);
        assert_eq!(http_get(&h, "/v1/jobs", Some(&jt)).0, 401);
        assert_eq!(http_get(&h, "/v1/jobs/other", Some(&jt)).0, 401);
        assert_eq!(http_get(&h, "/nothing", None).0, 404);
        // The recent events: behind the token too; a job token sees its own job's only.
        let (code, body) = http_get(&h, "/v1/events", None);
        assert_eq!(code, 401);
        assert!(!body.contains("visible"));
        let (code, body) = http_get(&h, "/v1/events?since=0", Some(TOKEN));
        assert_eq!(code, 200);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let kinds: Vec<&str> = v["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["job_created", "joined", "round"], "{body}");
        let next = v["next"].as_u64().unwrap();
        let (_, body) = http_get(&h, &format!("/v1/events?since={next}"), Some(TOKEN));
        assert!(body.contains("\"events\": []"), "{body}");
        assert_eq!(http_get(&h, "/v1/events?job=visible", Some(&jt)).0, 200);
        assert_eq!(http_get(&h, "/v1/events", Some(&jt)).0, 401);
        // The page: self-contained (no external asset), no data in it.
        let (code, page) = http_get(&h, "/", None);
        assert_eq!(code, 200);
        assert!(page.contains("<title>dt-rdzv status</title>"));
        assert!(
            !page.contains("http://") && !page.contains("https://") && !page.contains("visible")
        );
    });
}

#[test]
fn http_bounds_heads_and_methods_and_keeps_serving() {
    let s = server();
    let h = s.http_endpoint().unwrap();
    // A huge header: 431, nothing else happens.
    let mut c = std::net::TcpStream::connect(&h).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    let big = "x".repeat(64 * 1024);
    let _ = write!(
        c,
        "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n"
    );
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 431"), "{out:.200}");
    // A head that never ends is cut off at the deadline, not held.
    let mut slow = std::net::TcpStream::connect(&h).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(slow, "GET /healthz HTTP/1.1\r\nHost: x\r\n").unwrap();
    let t = std::time::Instant::now();
    let mut out = Vec::new();
    let _ = slow.read_to_end(&mut out);
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    // Not GET: 405.
    let mut c = std::net::TcpStream::connect(&h).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        c,
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 405"), "{out}");
    assert_eq!(http_get(&h, "/healthz", None), (200, "ok\n".into()));
}

#[test]
fn clients_switch_from_the_waiting_heartbeat_rate_to_the_rounds_when_welcomed() {
    // The waiting rate is slower than the round's timeout: a client that kept it after its
    // welcome would be declared lost within a few seconds.
    let s = BackgroundServer::start(ServeConfig {
        token: Some(TOKEN.into()),
        heartbeat_interval: Duration::from_millis(100),
        heartbeat_timeout: Duration::from_millis(1500),
        waiting_heartbeat_interval: Duration::from_secs(3),
        waiting_heartbeat_timeout: Duration::from_secs(30),
        ..ServeConfig::loopback_ephemeral()
    })
    .expect("server starts");
    rt().block_on(async {
        let spec = JobSpec::fixed(2);
        let mut ms = members(&s, "rates", 2, &spec).await;
        for m in ms.iter_mut() {
            let w = m.wait_welcome(WAIT).await.expect("welcome");
            assert_eq!((w.world, w.heartbeat_interval_ms), (2, 100));
        }
        // Several round timeouts pass: nobody is lost, no round ends.
        tokio::time::sleep(Duration::from_secs(5)).await;
        for m in ms.iter_mut() {
            while let Some(msg) = m.try_message() {
                assert!(
                    !matches!(msg, Ok(ServerMsg::RoundEnded { .. }) | Err(_)),
                    "{msg:?}"
                );
            }
        }
        let status = ms[0].status(Some("rates")).await.expect("status");
        assert_eq!((status[0].round, status[0].members.len()), (1, 2));
    });
}

#[test]
fn members_resume_their_round_when_the_server_restarts() {
    let dir = std::env::temp_dir().join(format!("dt-rdzv-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Certificate and key files that do not exist yet: the first server generates them, the
    // restarted one reads them (the fingerprint members pinned stays valid).
    let config = ServeConfig {
        token: Some(TOKEN.into()),
        tls_cert: Some(dir.join("cert.pem")),
        tls_key: Some(dir.join("key.pem")),
        ..ServeConfig::loopback_ephemeral()
    };
    let first = BackgroundServer::start(config.clone()).expect("server starts");
    let c = cfg(&first, TOKEN);
    let port: u16 = c.endpoint.rsplit_once(':').unwrap().1.parse().unwrap();
    rt().block_on(async {
        let spec = JobSpec::fixed(3);
        let mut ms = members(&first, "durable", 3, &spec).await;
        let mut ranks = Vec::new();
        for m in ms.iter_mut() {
            let w = m.wait_welcome(WAIT).await.expect("welcome");
            assert_eq!((w.round, w.world), (1, 3));
            ranks.push(w.rank);
        }
        // The server restarts on the same port with the same identity and token.
        drop(first);
        let again = ServeConfig {
            native_port: port,
            ..config.clone()
        };
        // (A server runs its own runtime: start it off this one.)
        let second = std::thread::spawn(move || BackgroundServer::start(again))
            .join()
            .unwrap()
            .expect("server restarts");
        assert_eq!(
            c.trust,
            Trust::Fingerprint(second.fingerprint().unwrap().into()),
            "same identity"
        );
        // Each member reconnects on its own and is welcomed into round 1 again, same rank.
        for (m, rank) in ms.iter_mut().zip(&ranks) {
            let w = m
                .wait_welcome(WAIT)
                .await
                .expect("welcome after the restart");
            assert_eq!((w.round, w.world, w.rank), (1, 3, *rank));
            assert!(
                matches!(w.cause, RoundCause::Resumed { members: 3 }),
                "{:?}",
                w.cause
            );
        }
        let status = ms[0].status(Some("durable")).await.expect("status");
        assert_eq!((status[0].round, status[0].members.len()), (1, 3));
        assert_eq!(status[0].state, "running");
        let (_, metrics) = http_get(&second.http_endpoint().unwrap(), "/metrics", None);
        assert!(
            metrics.contains("dtrdzv_rounds_resumed_total 1"),
            "{metrics}"
        );
        // The job goes on: it can finish as usual.
        let first = ms.remove(0);
        first.finish().await.unwrap();
        for m in ms.iter_mut() {
            let e = m.wait_welcome(WAIT).await.unwrap_err();
            assert!(matches!(e, NativeError::JobEnded { .. }), "{e}");
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}
