//! The TCP transport: thread-per-rank groups over loopback with a shared in-memory store, and
//! separate processes that meet through a real `dt-rdzv` server: every collective and dtype,
//! several sockets per peer, and a rank killed in the middle of an allreduce. Groups here are
//! on one host, so they ask for TCP links (`DTCOMM_TRANSPORT=tcp`) except where a test says
//! it runs the default (shared memory between same-host ranks; `tests/shm*.rs` cover it).

mod common;

use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::procs::*;
use common::*;
use dt_rdzv::server::{BackgroundServer, ServeConfig};
use dt_rdzv::store::MemoryStore;
use dtcomm::{Algo, Communicator, LinkKind, Options, ReduceOp};

fn tcp_group(world: usize, o: Options) -> Vec<Communicator> {
    let store = Arc::new(MemoryStore::new());
    let o = Options {
        socket_ifname: Some("lo".into()),
        timeout: Some(Duration::from_secs(60)),
        transport: o.transport.or(Some(LinkKind::Tcp)),
        ..o
    };
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|r| {
                let (store, o) = (store.clone(), o.clone());
                s.spawn(move || Communicator::new(store, r, world, o).unwrap())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn threads_every_collective_and_dtype() {
    let comms = tcp_group(3, Options::default());
    assert!(
        comms[0]
            .transport_description()
            .starts_with("tcp 127.0.0.1:")
    );
    on_ranks(&comms, full_suite);
}

#[test]
fn two_communicators_on_one_store_do_not_mix() {
    let store = Arc::new(MemoryStore::new());
    let o = Options {
        socket_ifname: Some("lo".into()),
        ..Options::default()
    };
    let build = || {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|r| {
                    let (store, o) = (store.clone(), o.clone());
                    s.spawn(move || Communicator::new(store, r, 3, o).unwrap())
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
    };
    let first = build();
    let second = build();
    assert_ne!(
        first[0].transport_description(),
        second[0].transport_description()
    );
    drop(first);
    on_ranks(&second, |c| allreduce_case::<f32>(c, ReduceOp::Sum, 1000));
}

#[test]
fn threads_several_sockets_per_peer_and_both_algorithms() {
    for (world, algo, nsocks) in [
        (2, Algo::Ring, 4),
        (4, Algo::Tree, 2),
        (5, Algo::Ring, 2),
        (3, Algo::Direct, 1),
    ] {
        let comms = tcp_group(
            world,
            Options {
                algo: Some(algo),
                nsocks_perpeer: Some(nsocks),
                ..Options::default()
            },
        );
        on_ranks(&comms, |c| {
            for count in [0, 5, 1 << 20] {
                for op in [ReduceOp::Sum, ReduceOp::Min] {
                    allreduce_case::<f32>(c, op, count);
                }
            }
            other_collectives::<i32>(c, 3001);
        });
    }
}

#[test]
fn links_open_only_for_the_peers_a_schedule_uses() {
    let world = 8;
    let comms = tcp_group(world, Options::default());
    // Allreduce-only training, small (recursive doubling) and large (ring) messages.
    on_ranks(&comms, |c| {
        for count in [1, 64, 5000, 1 << 18] {
            allreduce_case::<f32>(c, ReduceOp::Sum, count);
        }
    });
    for c in &comms {
        let r = c.rank();
        let mut allowed =
            std::collections::BTreeSet::from([(r + 1) % world, (r + world - 1) % world]);
        let mut k = 1;
        while k < world {
            allowed.insert(r ^ k);
            k <<= 1;
        }
        let linked = c.linked_peers();
        assert!(
            linked.iter().all(|p| allowed.contains(p)),
            "rank {r} linked {linked:?}; ring neighbours and doubling partners are {allowed:?}"
        );
        assert!(
            linked.len() <= 5 && linked.len() < world - 1,
            "rank {r}: {linked:?}"
        );
    }
    // Point to point links just the pair, whichever side needs it first: a higher rank sends
    // to a lower one (it dials), a lower rank sends to a higher one receiving from any source
    // (it asks to be dialed).
    on_ranks(&comms, |c| match c.rank() {
        0 => {
            let mut b = [0f32; 4];
            c.recv(&mut b, 5).unwrap();
            assert_eq!(b, [5.0; 4]);
        }
        5 => c.send(&[5.0f32; 4], 0).unwrap(),
        2 => c.send(&[2.0f32; 3], 6).unwrap(),
        6 => {
            let mut b = [0f32; 3];
            assert_eq!(c.recv_any(&mut b).unwrap(), 2);
            assert_eq!(b, [2.0; 3]);
        }
        _ => {}
    });
    assert!(comms[0].linked_peers().contains(&5) && comms[5].linked_peers().contains(&0));
    assert!(comms[2].linked_peers().contains(&6) && comms[6].linked_peers().contains(&2));
    assert!(
        !comms[3].linked_peers().contains(&5),
        "nobody asked for 3-5"
    );
    // An all-to-all reaches everyone.
    on_ranks(&comms, |c| {
        let send: Vec<i32> = (0..world as i32)
            .map(|p| c.rank() as i32 * 100 + p)
            .collect();
        let mut recv = vec![0i32; world];
        c.all_to_all(&send, &mut recv).unwrap();
        let want: Vec<i32> = (0..world as i32)
            .map(|p| p * 100 + c.rank() as i32)
            .collect();
        assert_eq!(recv, want);
    });
    for c in &comms {
        assert_eq!(c.linked_peers().len(), world - 1, "rank {}", c.rank());
    }
}

#[test]
fn host_peers_in_shared_memory_hold_only_the_set_up_ring() {
    let world = 4;
    let comms = tcp_group(
        world,
        Options {
            transport: Some(LinkKind::Auto),
            ..Options::default()
        },
    );
    on_ranks(&comms, |c| {
        for count in [1, 5000, 1 << 18] {
            allreduce_case::<f32>(c, ReduceOp::Sum, count);
        }
        // Every other collective, send/recv included: the schedules reach host peers
        // through the segment's pipes.
        other_collectives::<i32>(c, 3001);
        // Point to point between ranks that are not ring neighbours, larger than a pipe (it
        // wraps many times), and a receive from any source.
        let big: Vec<i32> = (0..(3 << 20) / 4).map(|i| i ^ 0x5a5a).collect();
        match c.rank() {
            0 => c.send(&big, 2).unwrap(),
            2 => {
                let mut got = vec![0i32; big.len()];
                c.recv(&mut got, 0).unwrap();
                assert!(got == big, "a 3 MiB message through a pipe arrived changed");
                let mut one = [0i32; 2];
                assert_eq!(c.recv_any(&mut one).unwrap(), 3);
                assert_eq!(one, [7, 8]);
            }
            3 => c.send(&[7i32, 8], 2).unwrap(),
            _ => {}
        }
    });
    for c in &comms {
        let r = c.rank();
        let ring = [(r + 1) % world, (r + world - 1) % world];
        let linked = c.linked_peers();
        assert!(
            c.transport_description().contains("shm to ranks"),
            "{}",
            c.transport_description()
        );
        assert!(
            linked.iter().all(|p| ring.contains(p)),
            "rank {r} linked {linked:?} beyond the set-up ring {ring:?}"
        );
    }
}

/// The child side of the multi-process tests: the parents below run this binary again with
/// `--ignored --exact child_rank` and the child's role in the environment. Ignored in a normal
/// run; run by hand without that environment it fails rather than pass vacuously.
#[test]
#[ignore = "the child process of the multi-process tests; started by them"]
fn child_rank() {
    let (role, rank, world, endpoint) =
        child_args().expect("child_rank runs only as a child of the multi-process tests");
    let store = child_store(&endpoint);
    let c = Communicator::new(
        store,
        rank,
        world,
        Options {
            spin_us: Some(50),
            ..Options::default()
        },
    )
    .unwrap();
    match role.as_str() {
        "suite" => {
            full_suite(&c);
            println!("SUITE OK rank {rank}");
        }
        "kill" => allreduce_until_lost(&c, rank, 1 << 18),
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn processes_every_collective_and_dtype_through_dt_rdzv() {
    let server = BackgroundServer::start(ServeConfig::loopback_ephemeral()).unwrap();
    for links in ["tcp", "auto"] {
        let env = [("DTCOMM_TRANSPORT", links)];
        let kids = spawn_ranks("child_rank", "suite", 3, &server.endpoint(), &env);
        for (r, k) in kids.into_iter().enumerate() {
            let (code, out, err) = wait_output(k, Duration::from_secs(120));
            assert_eq!(code, Some(0), "{links}: rank {r} failed:\n{out}\n{err}");
            assert!(out.contains(&format!("SUITE OK rank {r}")), "{out}");
        }
    }
}

#[test]
fn killed_rank_is_named_by_every_survivor() {
    let server = BackgroundServer::start(ServeConfig::loopback_ephemeral()).unwrap();
    let victim = 1;
    let mut kids = spawn_ranks(
        "child_rank",
        "kill",
        4,
        &server.endpoint(),
        &[
            ("DTCOMM_TEST_VICTIM", "1"),
            ("DTCOMM_TIMEOUT", "10"),
            ("DTCOMM_TRANSPORT", "tcp"),
        ],
    );
    // Wait for the victim to be in its allreduce loop, then SIGKILL it (our own child).
    let mut lines = BufReader::new(kids[victim].stdout.take().unwrap()).lines();
    // (The test harness prints its own lines first.)
    let ready = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find(|l| l.ends_with("READY"));
    if ready.is_none() {
        let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
        let others: Vec<_> = kids
            .into_iter()
            .map(|k| wait_output(k, Duration::from_secs(90)))
            .collect();
        panic!("victim never got going: {rest:?}\n{others:#?}");
    }
    let killed_at = Instant::now();
    let mut reported = false;
    kids[victim].kill().unwrap();
    kids[victim].wait().unwrap();
    for (r, k) in kids.into_iter().enumerate() {
        if r == victim {
            continue;
        }
        let (code, out, err) = wait_output(k, Duration::from_secs(90));
        assert_eq!(code, Some(0), "survivor {r}:\n{out}\n{err}");
        assert!(
            out.contains("ERROR lost=Some(1)"),
            "survivor {r} must name rank 1: {out}"
        );
        assert!(
            out.contains("all_reduce(seq "),
            "survivor {r} must name the op and seq: {out}"
        );
        assert!(out.contains("AGAIN true"), "{out}");
        reported |= out.contains("REPORTED peer=1");
        assert!(
            !out.contains("REPORTED peer=") || out.contains("REPORTED peer=1"),
            "survivor {r} reported the wrong rank: {out}"
        );
    }
    assert!(
        reported,
        "a neighbour of the killed rank reports it to its fence"
    );
    assert!(
        killed_at.elapsed() < Duration::from_secs(60),
        "survivors must fail well before the deadline"
    );
}
