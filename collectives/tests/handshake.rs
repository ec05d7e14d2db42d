//! The data-plane handshake: strangers on a rank's data port during set-up (idle, garbage, a
//! wrong proof, a replayed proof) are dropped and the group forms anyway, promptly; ranks
//! that disagree on the world size fail in under a second naming both ranks and sizes, on the
//! store path and on the native (`Welcome`) path; a native round builds with no store.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use dt_rdzv::store::{MemoryStore, Store};
use dtcomm::{CommError, Communicator, DataListener, Options, ReduceOp, RoundPeers, round_secret};
use ring::{digest, hmac};

fn opts() -> Options {
    Options {
        socket_ifname: Some("lo".into()),
        timeout: Some(Duration::from_secs(30)),
        nsocks_perpeer: Some(1),
        ..Options::default()
    }
}

/// A hello as rank `rank` of `world` would send it for `label` (the handshake's layout).
fn hello(label: &str, rank: u32, world: u32) -> Vec<u8> {
    let mut b = b"DTH2".to_vec();
    b.extend_from_slice(&2u32.to_le_bytes());
    b.extend_from_slice(digest::digest(&digest::SHA256, label.as_bytes()).as_ref());
    for v in [rank, world, 0, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&[7u8; 16]);
    b
}

fn closed_by_peer(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(0) | Err(_))
}

/// Rank 0 of 2 building its communicator on `store` (on a thread), and its published entry
/// (address, ..., link secret), once it is there.
fn start_rank0(
    store: &Arc<MemoryStore>,
) -> (
    std::thread::JoinHandle<Result<Communicator, CommError>>,
    String,
) {
    let s0 = store.clone();
    let r0 = std::thread::spawn(move || Communicator::new(s0, 0, 2, opts()));
    let entry = store
        .get("dtcomm/1/addr/0", Duration::from_secs(20))
        .unwrap();
    (r0, String::from_utf8(entry).unwrap())
}

#[test]
fn strangers_on_the_data_port_are_dropped_and_the_group_forms() {
    let store = Arc::new(MemoryStore::new());
    let (r0, entry) = start_rank0(&store);
    let lines: Vec<&str> = entry.lines().collect();
    let addr: SocketAddr = lines[0].parse().unwrap();
    let secret: Vec<u8> = (0..lines[4].len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&lines[4][i..i + 2], 16).unwrap())
        .collect();
    let label = "store dtcomm/1";

    // Rank 0 accepts once it has read every address: these wait in its backlog meanwhile.
    // Idle: connects and says nothing (held open until the group formed).
    let _idle = TcpStream::connect(addr).unwrap();
    // Garbage.
    let mut garbage = TcpStream::connect(addr).unwrap();
    garbage.write_all(&[0xAB; 200]).unwrap();
    // A hello for this very generation, then a made-up proof.
    let mut wrong = TcpStream::connect(addr).unwrap();
    wrong.write_all(&hello(label, 1, 2)).unwrap();
    // A replay: a valid proof for one challenge, sent on another connection.
    let h = hello(label, 1, 2);
    let mut first = TcpStream::connect(addr).unwrap();
    first.write_all(&h).unwrap();
    let mut replay = TcpStream::connect(addr).unwrap();
    replay.write_all(&h).unwrap();

    // The real rank 1 arrives: the group forms promptly however the strangers behave.
    let t = Instant::now();
    let s1 = store.clone();
    let r1 = std::thread::spawn(move || Communicator::new(s1, 1, 2, opts()));
    for s in [&wrong, &first, &replay] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    let mut challenge = [0u8; 60];
    wrong.read_exact(&mut challenge).unwrap();
    wrong.write_all(&[0x55; 32]).unwrap();
    let mut c1 = [0u8; 60];
    first.read_exact(&mut c1).unwrap();
    let key = hmac::Key::new(hmac::HMAC_SHA256, &secret);
    let proof1 = hmac::sign(
        &key,
        &[&b"dtcomm hello v2 connector\0"[..], &h, &c1[..28]].concat(),
    );
    let mut c2 = [0u8; 60];
    replay.read_exact(&mut c2).unwrap();
    assert_ne!(c1[12..28], c2[12..28], "every challenge has a fresh nonce");
    replay.write_all(proof1.as_ref()).unwrap();

    let c1 = r1.join().unwrap().expect("rank 1");
    let c0 = r0.join().unwrap().expect("rank 0 survives the strangers");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    assert!(closed_by_peer(&mut garbage), "garbage was not dropped");
    assert!(closed_by_peer(&mut wrong), "a wrong proof was not dropped");
    assert!(
        closed_by_peer(&mut replay),
        "a replayed proof was not dropped"
    );
    drop(first);
    on_ranks(&[c0, c1], |c| allreduce_case::<f32>(c, ReduceOp::Sum, 1000));
}

#[test]
fn silent_strangers_past_the_handshake_slots_do_not_hold_the_group_up() {
    let store = Arc::new(MemoryStore::new());
    let (r0, entry) = start_rank0(&store);
    let addr: SocketAddr = entry.lines().next().unwrap().parse().unwrap();
    // More silent connections than rank 0 has handshake slots (2 x 3 + 64 at world 2), held
    // open: before, every slot waited out its 5 s and the members' connections were dropped.
    let silent: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let s1 = store.clone();
    let r1 = std::thread::spawn(move || Communicator::new(s1, 1, 2, opts()));
    let c1 = r1.join().unwrap().expect("rank 1");
    let c0 = r0.join().unwrap().expect("rank 0 survives the strangers");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?} (the strangers' wait is 5 s)",
        t.elapsed()
    );
    drop(silent);
    on_ranks(&[c0, c1], |c| allreduce_case::<f32>(c, ReduceOp::Sum, 1000));
}

#[test]
fn a_timeout_names_the_strangers_the_data_port_dropped_meanwhile() {
    let short = || Options {
        timeout: Some(Duration::from_secs(2)),
        ..opts()
    };
    let store = Arc::new(MemoryStore::new());
    let (c0, c1) = std::thread::scope(|s| {
        let (s0, s1) = (store.clone(), store.clone());
        let a = s.spawn(move || Communicator::new(s0, 0, 2, short()).unwrap());
        let b = s.spawn(move || Communicator::new(s1, 1, 2, short()).unwrap());
        (a.join().unwrap(), b.join().unwrap())
    });
    let entry = String::from_utf8(
        store
            .get("dtcomm/1/addr/0", Duration::from_secs(1))
            .unwrap(),
    )
    .unwrap();
    let addr: SocketAddr = entry.lines().next().unwrap().parse().unwrap();
    for _ in 0..3 {
        let mut g = TcpStream::connect(addr).unwrap();
        g.write_all(&[0xAB; 200]).unwrap();
        assert!(closed_by_peer(&mut g));
    }
    // Rank 1 never enters the call: rank 0's timeout says who it waited for and who knocked.
    let mut x = vec![1.0f32; 4];
    let e = c0
        .all_reduce(&mut x, ReduceOp::Sum)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("timed out") && e.contains("not heard from ranks [1]"),
        "{e}"
    );
    assert!(
        e.contains("data port dropped 3 unproven connection(s)") && e.contains("from 127.0.0.1"),
        "{e}"
    );
    drop(c1);
}

fn with_secret(secret: &dtcomm::LinkSecret) -> Options {
    Options {
        link_secret: Some(secret.clone()),
        ..opts()
    }
}

#[test]
fn with_the_launchers_secret_a_reader_of_the_store_cannot_join() {
    let secret: dtcomm::LinkSecret = dtcomm::store_link_secret("server-token", "j", 2).into();
    let store = Arc::new(MemoryStore::new());
    let (s0, o0) = (store.clone(), with_secret(&secret));
    let r0 = std::thread::spawn(move || Communicator::new(s0, 0, 2, o0));
    let entry = String::from_utf8(
        store
            .get("dtcomm/1/addr/0", Duration::from_secs(20))
            .unwrap(),
    )
    .unwrap();
    let secret_hex: String = secret.bytes().iter().map(|b| format!("{b:02x}")).collect();
    assert!(!entry.contains(&secret_hex[..16]), "{entry}");
    let lines: Vec<&str> = entry.lines().collect();
    assert!(lines[4].starts_with('L'), "only a fingerprint: {entry}");
    let addr: SocketAddr = lines[0].parse().unwrap();

    // A stranger that read the store proves with the best it has: refused.
    let h = hello("store dtcomm/1", 1, 2);
    let mut fake = TcpStream::connect(addr).unwrap();
    fake.write_all(&h).unwrap();
    let (s1, o1) = (store.clone(), with_secret(&secret));
    let r1 = std::thread::spawn(move || Communicator::new(s1, 1, 2, o1));
    fake.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut c = [0u8; 60];
    fake.read_exact(&mut c).unwrap();
    let key = hmac::Key::new(hmac::HMAC_SHA256, lines[4].as_bytes());
    let proof = hmac::sign(
        &key,
        &[&b"dtcomm hello v2 connector\0"[..], &h, &c[..28]].concat(),
    );
    fake.write_all(proof.as_ref()).unwrap();
    assert!(
        closed_by_peer(&mut fake),
        "a proof without the secret was taken"
    );

    let c1 = r1.join().unwrap().expect("rank 1");
    let c0 = r0.join().unwrap().expect("rank 0");
    on_ranks(&[c0, c1], |c| allreduce_case::<f32>(c, ReduceOp::Sum, 1000));
}

#[test]
fn ranks_that_disagree_on_the_launchers_secret_fail_at_once_naming_it() {
    let a: dtcomm::LinkSecret = dtcomm::store_link_secret("t", "j", 1).into();
    let b: dtcomm::LinkSecret = dtcomm::store_link_secret("t", "j", 2).into();
    for (o0, o1) in [
        (with_secret(&a), with_secret(&b)),
        (with_secret(&a), opts()),
        (opts(), with_secret(&b)),
    ] {
        let store = Arc::new(MemoryStore::new());
        let t = Instant::now();
        let (s0, s1) = (store.clone(), store.clone());
        let (r0, r1) = std::thread::scope(|s| {
            let r0 = s.spawn(move || Communicator::new(s0, 0, 2, o0).map(|_| ()));
            let r1 = s.spawn(move || Communicator::new(s1, 1, 2, o1).map(|_| ()));
            (r0.join().unwrap(), r1.join().unwrap())
        });
        let e = r1.unwrap_err().to_string();
        assert!(
            e.contains("DTCOMM_LINK_SECRET") && e.contains("rank 1"),
            "{e}"
        );
        assert!(r0.is_err(), "rank 0 cannot form without rank 1");
        assert!(t.elapsed() < Duration::from_secs(40), "{:?}", t.elapsed());
    }
}

fn assert_mismatch(e: &CommError, me: usize, my_world: usize, peer: usize, their_world: usize) {
    let s = e.to_string();
    assert!(
        s.contains(&format!("rank {peer} has world size {their_world}"))
            && s.contains(&format!("rank {me} has world size {my_world}")),
        "{s}"
    );
}

#[test]
fn a_wrong_world_size_fails_both_ranks_at_once_on_the_store_path() {
    let store = Arc::new(MemoryStore::new());
    let t = Instant::now();
    let (a, b) = std::thread::scope(|s| {
        let (s0, s1) = (store.clone(), store.clone());
        let a = s.spawn(move || Communicator::new(s0, 0, 2, opts()).map(|_| ()));
        let b = s.spawn(move || Communicator::new(s1, 1, 3, opts()).map(|_| ()));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_mismatch(&a.unwrap_err(), 0, 2, 1, 3);
    assert_mismatch(&b.unwrap_err(), 1, 3, 0, 2);
}

fn round(rank: usize, world: usize, round: u64, addrs: Vec<Option<SocketAddr>>) -> RoundPeers {
    RoundPeers {
        job: "j".into(),
        round,
        rank,
        world,
        addrs,
        hosts: Vec::new(),
    }
}

#[test]
fn a_native_round_builds_from_its_welcome_and_a_wrong_world_fails_at_once() {
    let secret = round_secret("server-token", "j", 3);
    // Members may hold the server token or the job's: one secret.
    let job_token = dt_rdzv_proto::rendezvous::job_token("server-token", "j");
    assert_eq!(round_secret(&job_token, "j", 3), secret);
    assert_ne!(round_secret("server-token", "j", 4), secret);

    let l0 = DataListener::bind(&opts()).unwrap();
    let l1 = DataListener::bind(&opts()).unwrap();
    let addrs = vec![Some(l0.addr()), Some(l1.addr())];
    let comms: Vec<Communicator> = std::thread::scope(|s| {
        let hs: Vec<_> = [(0, &l0), (1, &l1)]
            .into_iter()
            .map(|(r, l)| {
                let (l, peers) = (l.try_clone().unwrap(), round(r, 2, 3, addrs.clone()));
                s.spawn(move || Communicator::from_welcome(l, &peers, &secret).unwrap())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(comms[0].transport_description().contains("round 3"));
    on_ranks(&comms, |c| allreduce_case::<f32>(c, ReduceOp::Sum, 100));
    drop(comms);

    // Same listeners, next round, rank 1 told world 3: both fail in under a second.
    let t = Instant::now();
    let secret = round_secret("server-token", "j", 4);
    let (a, b) = std::thread::scope(|s| {
        let (la, lb) = (l0.try_clone().unwrap(), l1.try_clone().unwrap());
        let (pa, pb) = (
            round(0, 2, 4, addrs.clone()),
            round(1, 3, 4, vec![addrs[0], addrs[1], None]),
        );
        let a = s.spawn(move || Communicator::from_welcome(la, &pa, &secret).map(|_| ()));
        let b = s.spawn(move || Communicator::from_welcome(lb, &pb, &secret).map(|_| ()));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_mismatch(&a.unwrap_err(), 0, 2, 1, 3);
    assert_mismatch(&b.unwrap_err(), 1, 3, 0, 2);
}

#[test]
fn a_rank_ahead_by_a_round_waits_for_the_listener_to_catch_up() {
    // Rank 0 is still in round 4 (which never forms: its deadline is 2 s) when rank 1 starts
    // round 5: rank 0 drops round 5's hellos, rank 1 keeps trying, and round 5 forms once
    // rank 0 gets there.
    let l0 = DataListener::bind(&Options {
        timeout: Some(Duration::from_secs(2)),
        ..opts()
    })
    .unwrap();
    let l1 = DataListener::bind(&opts()).unwrap();
    let addrs = vec![Some(l0.addr()), Some(l1.addr())];
    let (s4, s5) = (round_secret("t", "j", 4), round_secret("t", "j", 5));
    let t = Instant::now();
    let (r0, r1) = std::thread::scope(|s| {
        let (l0, l1, a0, a1) = (&l0, l1.try_clone().unwrap(), addrs.clone(), addrs.clone());
        let r1 = s.spawn(move || Communicator::from_welcome(l1, &round(1, 2, 5, a1), &s5));
        let r0 = s.spawn(move || {
            let stale =
                Communicator::from_welcome(l0.try_clone()?, &round(0, 3, 4, a0.clone()), &s4);
            assert!(stale.is_err(), "round 4 cannot form");
            Communicator::from_welcome(l0.try_clone()?, &round(0, 2, 5, a0), &s5)
        });
        (r0.join().unwrap(), r1.join().unwrap())
    });
    let comms = vec![r0.expect("rank 0, round 5"), r1.expect("rank 1, round 5")];
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    on_ranks(&comms, |c| allreduce_case::<f32>(c, ReduceOp::Sum, 100));
}
