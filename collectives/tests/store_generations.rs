//! Ranks of a rerun meet even when an earlier set-up on the same store and prefix was
//! interrupted part-way (Ctrl-C during set-up): the ranks' generation counters are then out of
//! step, and the ranks behind move up to the highest one instead of each waiting out the
//! deadline for an address published under another generation.

use std::sync::Arc;
use std::time::Duration;

use dt_rdzv::store::{MemoryStore, Store};
use dtcomm::{Communicator, LinkKind, Options, ReduceOp};

fn group(store: &Arc<MemoryStore>, world: usize) -> Vec<Communicator> {
    let o = Options {
        socket_ifname: Some("lo".into()),
        timeout: Some(Duration::from_secs(30)),
        transport: Some(LinkKind::Tcp),
        store_prefix: Some("run".into()),
        ..Options::default()
    };
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|r| {
                let (store, o) = (store.clone(), o.clone());
                s.spawn(move || Communicator::new(store, r, world, o).expect("the rerun meets"))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn sums(comms: &[Communicator]) {
    std::thread::scope(|s| {
        for c in comms {
            s.spawn(move || {
                let mut v = vec![c.rank() as f32 + 1.0; 4];
                c.all_reduce(&mut v, ReduceOp::Sum).unwrap();
                let n = comms.len() as f32;
                assert_eq!(v, vec![n * (n + 1.0) / 2.0; 4]);
            });
        }
    });
}

#[test]
fn a_failed_set_up_takes_its_generation_back() {
    // Ranks 0 and 1 start, rank 2 never does: they fail after their deadline (as a Ctrl-C
    // during set-up fails them), and the rerun of all three meets.
    let store = Arc::new(MemoryStore::new());
    std::thread::scope(|s| {
        for r in 0..2 {
            let store = store.clone();
            s.spawn(move || {
                let o = Options {
                    socket_ifname: Some("lo".into()),
                    timeout: Some(Duration::from_secs(2)),
                    transport: Some(LinkKind::Tcp),
                    store_prefix: Some("run".into()),
                    ..Options::default()
                };
                let e = Communicator::new(store, r, 3, o).expect_err("rank 2 never comes");
                assert!(e.to_string().contains("never published"), "{e}");
            });
        }
    });
    for r in 0..3 {
        assert_eq!(store.add(&format!("run/generation/{r}"), 0).unwrap(), 0);
    }
    assert!(
        !store.check(&["run/1/addr/0"]).unwrap(),
        "the address is taken back too"
    );
    sums(&group(&store, 3));
}

#[test]
fn ranks_behind_a_killed_set_up_move_up_to_the_highest_generation() {
    // A set-up killed after counting and before publishing (nothing rolled back): the killed
    // ranks' counters are ahead and their addresses missing.
    for ahead in [vec![0usize], vec![1, 2], vec![2]] {
        let store = Arc::new(MemoryStore::new());
        for r in &ahead {
            store.add(&format!("run/generation/{r}"), 1).unwrap();
        }
        let comms = group(&store, 3);
        sums(&comms);
        for r in 0..3 {
            assert_eq!(
                store.add(&format!("run/generation/{r}"), 0).unwrap(),
                2,
                "rank {r} moved up to the highest generation (ahead: {ahead:?})"
            );
        }
        drop(comms);
        // And the next communicator on the store meets at the next generation.
        sums(&group(&store, 3));
    }
}
