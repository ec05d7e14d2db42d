//! Receive from any source: the first sender's message is taken and named, the others wait for
//! the next receive, point-to-point order per pair is kept, and a sender that never comes is
//! named at the deadline. Over the in-memory twin and over TCP.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::on_ranks;
use dt_rdzv::store::MemoryStore;
use dtcomm::{CommError, Communicator, LinkKind, Options};

fn groups(world: usize, timeout: Duration) -> Vec<Vec<Communicator>> {
    let o = Options {
        timeout: Some(timeout),
        spin_us: Some(20),
        ..Options::default()
    };
    let store = Arc::new(MemoryStore::new());
    let tcp = std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|r| {
                let (store, o) = (store.clone(), o.clone());
                s.spawn(move || {
                    let o = Options {
                        socket_ifname: Some("lo".into()),
                        transport: Some(LinkKind::Tcp),
                        ..o
                    };
                    Communicator::new(store, r, world, o).unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    vec![Communicator::in_memory(world, o).unwrap(), tcp]
}

#[test]
fn every_sender_is_received_once_and_named() {
    for comms in groups(4, Duration::from_secs(30)) {
        on_ranks(&comms, |c| {
            let n = 1000;
            if c.rank() == 0 {
                let mut seen = Vec::new();
                for _ in 0..6 {
                    let mut buf = vec![0i64; n];
                    let src = c.recv_any(&mut buf).unwrap();
                    let round = buf[1];
                    assert!(buf.iter().skip(2).all(|&x| x == (src * 100) as i64 + round));
                    assert_eq!(buf[0] as usize, src);
                    seen.push((src, round));
                }
                // Each sender's two messages arrive in the order it sent them.
                for p in 1..4 {
                    let rounds: Vec<i64> =
                        seen.iter().filter(|(s, _)| *s == p).map(|x| x.1).collect();
                    assert_eq!(rounds, vec![0, 1], "{seen:?}");
                }
                // A named receive still matches in order after receives from any source.
                c.barrier().unwrap();
                let mut buf = vec![0i64; 1];
                c.recv(&mut buf, 2).unwrap();
                assert_eq!(buf[0], 77);
            } else {
                for round in 0..2 {
                    let mut buf = vec![(c.rank() * 100) as i64 + round; n];
                    buf[0] = c.rank() as i64;
                    buf[1] = round;
                    c.send(&buf, 0).unwrap();
                }
                c.barrier().unwrap();
                if c.rank() == 2 {
                    c.send(&[77i64], 0).unwrap();
                }
            }
        });
    }
}

#[test]
fn a_sender_that_never_comes_is_named_at_the_deadline() {
    for comms in groups(2, Duration::from_millis(600)) {
        let start = Instant::now();
        let errs = on_ranks(&comms, |c| {
            if c.rank() == 1 {
                std::thread::sleep(Duration::from_millis(900));
                return None;
            }
            let mut buf = [0f32; 4];
            Some(c.recv_any(&mut buf).unwrap_err())
        });
        let e = errs.into_iter().flatten().next().unwrap();
        match &e {
            CommError::Timeout { waiting_for, .. } => assert_eq!(waiting_for, &vec![1], "{e}"),
            other => panic!("{other}"),
        }
        assert!(e.to_string().contains("recv"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(10));
    }
    // Alone, there is nobody to receive from: an argument error, nothing sent.
    let solo = Communicator::in_memory(1, Options::default()).unwrap();
    let e = solo[0].recv_any(&mut [0u8; 1]).unwrap_err();
    assert!(matches!(e, CommError::InvalidArgument { .. }), "{e}");
}
