//! Several servers sharing jobs through one storage (`--backend`), here the in-memory twin of
//! etcd, over real QUIC on loopback: one owner per job, members sent to it, the job handed on
//! when the owner stops, and never two owners when a server is cut off from the storage.

mod common;
use common::rt;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dt_rdzv::native::{ClientConfig, Connector, Membership, NativeClient, Trust};
use dt_rdzv::server::storage::{MemoryStorage, Storage};
use dt_rdzv::server::{BackgroundServer, ServeConfig};
use dt_rdzv_proto::native::{JobSpec, Role, RoundCause};

const TOKEN: &str = "test-token";
/// Generous: the machine is shared and slow.
const WAIT: Duration = Duration::from_secs(60);

/// A directory for the group's shared certificate and key (the first server generates them).
fn identity_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dt-rdzv-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn config(dir: &std::path::Path, owner_ttl: Duration) -> ServeConfig {
    ServeConfig {
        token: Some(TOKEN.into()),
        tls_cert: Some(dir.join("cert.pem")),
        tls_key: Some(dir.join("key.pem")),
        owner_ttl,
        ..ServeConfig::loopback_ephemeral()
    }
}

/// A server of the group on `storage` (started off any runtime: it runs its own).
fn start(cfg: ServeConfig, storage: Arc<dyn Storage>) -> BackgroundServer {
    std::thread::spawn(move || BackgroundServer::start_with(cfg, Some(storage)))
        .join()
        .unwrap()
        .expect("server starts")
}

/// Two servers A and B on one in-memory storage (2 s leases), and the storage.
fn pair(dir: &std::path::Path) -> (MemoryStorage, BackgroundServer, BackgroundServer) {
    let storage = MemoryStorage::new();
    let a = start(
        config(dir, Duration::from_secs(2)),
        Arc::new(storage.handle()),
    );
    let b = start(
        config(dir, Duration::from_secs(2)),
        Arc::new(storage.handle()),
    );
    (storage, a, b)
}

fn client(endpoints: &[&BackgroundServer]) -> ClientConfig {
    let list: Vec<String> = endpoints
        .iter()
        .map(|s| s.native_endpoint().unwrap())
        .collect();
    ClientConfig::new(
        list.join(","),
        TOKEN,
        Trust::Fingerprint(endpoints[0].fingerprint().unwrap().into()),
    )
}

async fn member(c: &ClientConfig, job: &str, i: usize, spec: &JobSpec) -> NativeClient {
    let connector = Connector::new(&c.trust).unwrap();
    let mut m = connector.connect(c).await.expect("connect");
    m.join(Membership {
        job: job.into(),
        member: format!("m{i}"),
        node: format!("host{i}"),
        addrs: vec![format!("127.0.0.1:{}", 40000 + i)],
        host: Vec::new(),
        role: Role::Worker,
        spec: spec.clone(),
    })
    .await
    .expect("join");
    m
}

/// Who owns `job` in `storage`: the owner's advertised endpoint.
fn owner(storage: &MemoryStorage, job: &str) -> Option<String> {
    let v = storage.peek(&format!("/dt-rdzv/owner/{job}"))?;
    let v: serde_json::Value = serde_json::from_slice(&v).unwrap();
    Some(v["endpoint"].as_str().unwrap().to_string())
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n")
        .map_or(out.clone(), |(_, b)| b.to_string())
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn members_are_sent_to_the_owner_and_the_job_moves_on_when_it_stops() {
    let dir = identity_dir("shared");
    let (storage, a, b) = pair(&dir);
    let a_ep = a.native_endpoint().unwrap();
    let b_ep = b.native_endpoint().unwrap();
    rt().block_on(async {
        let spec = JobSpec::fixed(3);
        // Two members reach A first, the third reaches B first: B sends it to A.
        let mut ms = vec![
            member(&client(&[&a, &b]), "ha", 0, &spec).await,
            member(&client(&[&a, &b]), "ha", 1, &spec).await,
            member(&client(&[&b, &a]), "ha", 2, &spec).await,
        ];
        let mut ranks = Vec::new();
        for m in ms.iter_mut() {
            let w = m.wait_welcome(WAIT).await.expect("welcome");
            assert_eq!((w.round, w.world), (1, 3));
            ranks.push(w.rank);
        }
        assert_eq!(owner(&storage, "ha"), Some(a_ep.clone()));
        let on_b = json(&http_get(&b.http_endpoint().unwrap(), "/v1/jobs"));
        assert_eq!(on_b["jobs"], serde_json::json!([]), "B holds no copy");
        // The owner writes the round's record after the round completes, beside the welcomes:
        // a member may hold its welcome a moment before the record is in the storage.
        let deadline = Instant::now() + Duration::from_secs(10);
        let record = loop {
            match storage.peek("/dt-rdzv/round/ha") {
                Some(r) => break r,
                None if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                None => panic!("no round record 10 s after every member's welcome"),
            }
        };
        let record: serde_json::Value = serde_json::from_slice(&record).unwrap();
        assert_eq!(
            (record["round"].as_u64(), record["world"].as_u64()),
            (Some(1), Some(3))
        );

        // A stops (cleanly: its lease is revoked at once). Every member reconnects through
        // its list, B takes the job over, and the round resumes: same number, same ranks.
        let stopped = Instant::now();
        drop(a);
        for (m, rank) in ms.iter_mut().zip(&ranks) {
            let w = m.wait_welcome(WAIT).await.expect("welcome from B");
            assert_eq!((w.round, w.world, w.rank), (1, 3, *rank));
            assert!(
                matches!(w.cause, RoundCause::Resumed { members: 3 }),
                "{:?}",
                w.cause
            );
        }
        eprintln!("job resumed on B {:?} after A stopped", stopped.elapsed());
        assert_eq!(owner(&storage, "ha"), Some(b_ep.clone()));
        let backend = json(&http_get(&b.http_endpoint().unwrap(), "/v1/backend"));
        assert_eq!(
            backend["owned_jobs"],
            serde_json::json!(["ha"]),
            "{backend}"
        );
        assert_eq!(backend["degraded"], serde_json::Value::Null);
        let first = ms.remove(0);
        first.finish().await.unwrap();
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_cut_off_from_the_storage_keeps_its_round_then_hands_the_job_to_the_new_owner() {
    let dir = identity_dir("partition");
    let storage = MemoryStorage::new();
    let ttl = Duration::from_millis(600);
    let a_view = Arc::new(storage.handle());
    let a = start(config(&dir, ttl), a_view.clone());
    let b = start(config(&dir, ttl), Arc::new(storage.handle()));
    let b_ep = b.native_endpoint().unwrap();
    rt().block_on(async {
        let spec = JobSpec {
            last_call_ms: 300,
            ..JobSpec::elastic(2, 3)
        };
        let mut ms = [
            member(&client(&[&a]), "p", 0, &spec).await,
            member(&client(&[&a]), "p", 1, &spec).await,
        ];
        for m in ms.iter_mut() {
            let w = m.wait_welcome(WAIT).await.expect("welcome on A");
            assert_eq!((w.round, w.world), (1, 2));
        }
        // A loses the storage: its round goes on (degraded), its lease runs out.
        a_view.set_reachable(false);
        tokio::time::sleep(ttl * 3).await;
        let health = http_get(&a.http_endpoint().unwrap(), "/healthz");
        assert!(health.starts_with("degraded"), "{health}");
        assert_eq!(
            owner(&storage, "p"),
            None,
            "A's claim expired with its lease"
        );
        // Meanwhile a member reaches B: B claims the job.
        let mut late = member(&client(&[&b]), "p", 2, &spec).await;
        assert_eq!(owner(&storage, "p"), Some(b_ep.clone()));
        // A reaches the storage again, finds its lease gone and the job taken: it hands its
        // members to B at once (never two owners acting), and B forms one round of all three.
        a_view.set_reachable(true);
        let w = late.wait_welcome(WAIT).await.expect("welcome on B");
        assert_eq!(w.world, 3);
        for m in ms.iter_mut() {
            // Round 1 ended (handed off), then the round B forms.
            let next = loop {
                let w2 = m
                    .wait_welcome(WAIT)
                    .await
                    .expect("welcome after the hand-off");
                if w2.round == w.round {
                    break w2;
                }
            };
            assert_eq!(next.world, 3);
        }
        let on_a = json(&http_get(&a.http_endpoint().unwrap(), "/v1/jobs"));
        assert_eq!(on_a["jobs"], serde_json::json!([]), "A let go of the job");
        let health = http_get(&a.http_endpoint().unwrap(), "/healthz");
        assert_eq!(health, "ok\n");
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_storage_that_does_not_answer_stops_the_server_from_starting() {
    let storage = MemoryStorage::new();
    storage.set_reachable(false);
    let err = std::thread::spawn(move || {
        BackgroundServer::start_with(ServeConfig::loopback_ephemeral(), Some(Arc::new(storage)))
    })
    .join()
    .unwrap()
    .err()
    .expect("no server without its storage");
    assert!(
        err.to_string().contains("storage unreachable (memory)"),
        "{err}"
    );
}

#[test]
fn tcpstore_keys_written_through_one_server_are_read_through_another() {
    use dt_rdzv::client::TcpStoreClient;
    use dt_rdzv::store::Store;
    let dir = identity_dir("store");
    let (_storage, a, b) = pair(&dir);
    let t = Duration::from_secs(30);
    let via_a = TcpStoreClient::connect(&a.endpoint(), t).expect("connect A");
    let via_b = TcpStoreClient::connect(&b.endpoint(), t).expect("connect B");
    via_a.set("/job/x", b"1").unwrap();
    assert_eq!(via_b.get("/job/x", t).unwrap(), b"1");
    // One engine behind both doors: counters stay atomic, and a wait through one server is
    // woken by a set through the other.
    for _ in 0..10 {
        via_a.add("/job/n", 1).unwrap();
        via_b.add("/job/n", 1).unwrap();
    }
    assert_eq!(via_a.add("/job/n", 0).unwrap(), 20);
    let waiter = std::thread::spawn(move || via_b.get("/job/late", t));
    std::thread::sleep(Duration::from_millis(200));
    via_a.set("/job/late", b"here").unwrap();
    assert_eq!(waiter.join().unwrap().unwrap(), b"here");
    let holder = |s: &BackgroundServer| {
        json(&http_get(&s.http_endpoint().unwrap(), "/v1/backend"))["tcpstore_owner"] == true
    };
    assert!(
        holder(&a) != holder(&b),
        "exactly one server holds the door"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Where in a job's life the owner vanishes (as after a SIGKILL: no goodbye, no revoked lease).
#[derive(Debug, Clone, Copy)]
enum Step {
    /// One of three members waits for the first round.
    Forming,
    /// The round runs.
    Running,
    /// A member left: the round ended and the next one waits for a replacement.
    Changing,
}

fn owner_vanishes_at(step: Step) {
    let dir = identity_dir(&format!("vanish-{step:?}"));
    let storage = MemoryStorage::new();
    let cfg = ServeConfig {
        resume_window: Duration::from_secs(3),
        ..config(&dir, Duration::from_secs(2))
    };
    let a = start(cfg.clone(), Arc::new(storage.handle()));
    let b = start(cfg, Arc::new(storage.handle()));
    let b_ep = b.native_endpoint().unwrap();
    let list = client(&[&a, &b]);
    rt().block_on(async {
        // After a leave the two survivors are below the minimum: the next round waits for a
        // third member, who comes only after A vanished.
        let spec = match step {
            Step::Changing => JobSpec::fixed(3),
            _ => JobSpec {
                last_call_ms: 300,
                ..JobSpec::elastic(2, 3)
            },
        };
        let mut ms = vec![member(&list, "v", 0, &spec).await];
        if !matches!(step, Step::Forming) {
            ms.push(member(&list, "v", 1, &spec).await);
            ms.push(member(&list, "v", 2, &spec).await);
            for m in ms.iter_mut() {
                let w = m.wait_welcome(WAIT).await.expect("welcome on A");
                assert_eq!((w.round, w.world), (1, 3));
            }
        }
        if matches!(step, Step::Changing) {
            let gone = ms.pop().unwrap();
            gone.leave().await.unwrap();
        }
        let vanished = Instant::now();
        a.vanish();
        match step {
            // The others arrive after the owner is gone: at B, through their lists.
            Step::Forming => {
                ms.push(member(&list, "v", 1, &spec).await);
                ms.push(member(&list, "v", 2, &spec).await);
            }
            // A replacement for the member that left.
            Step::Changing => ms.push(member(&list, "v", 3, &spec).await),
            Step::Running => {}
        }
        let want = 3;
        let mut rounds = Vec::new();
        for m in ms.iter_mut() {
            let w = loop {
                let w = m.wait_welcome(WAIT).await.expect("welcome from B");
                if w.world == want {
                    break w;
                }
            };
            rounds.push(w.round);
            if matches!(step, Step::Running) {
                assert_eq!(w.round, 1, "the running round resumes as it was");
                assert!(
                    matches!(w.cause, RoundCause::Resumed { members: 3 }),
                    "{:?}",
                    w.cause
                );
            }
        }
        assert!(rounds.iter().all(|r| *r == rounds[0]), "{rounds:?}");
        eprintln!(
            "{step:?}: the job went on at B {:?} after A vanished (round {})",
            vanished.elapsed(),
            rounds[0]
        );
        assert_eq!(owner(&storage, "v"), Some(b_ep.clone()));
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_owner_vanishing_while_the_first_round_forms() {
    owner_vanishes_at(Step::Forming);
}

#[test]
fn the_owner_vanishing_while_the_round_runs() {
    owner_vanishes_at(Step::Running);
}

#[test]
fn the_owner_vanishing_while_the_round_changes() {
    owner_vanishes_at(Step::Changing);
}
