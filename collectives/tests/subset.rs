//! `Communicator::subset` (process sets): the ranks named build a communicator of their own
//! through the parent (rank `i` of it is `ranks[i]`), the others get none, the parent keeps
//! working; lists that differ between ranks, repeat a rank or leave the parent fail on every
//! rank, naming the rank that differs.

use dtcomm::{Communicator, Options, ReduceOp};

fn group(world: usize, body: impl Fn(usize, &Communicator) + Sync) {
    let comms = Communicator::in_memory(world, Options::default()).unwrap();
    std::thread::scope(|s| {
        for (rank, comm) in comms.into_iter().enumerate() {
            let body = &body;
            s.spawn(move || body(rank, &comm));
        }
    });
}

#[test]
fn the_ranks_named_get_a_communicator_of_their_own_in_the_order_given() {
    group(3, |rank, parent| {
        let set = parent.subset(&[2, 0], "evens").unwrap();
        assert_eq!(set.is_some(), rank != 1, "rank {rank}");
        if let Some(c) = set {
            assert_eq!((c.rank(), c.world()), (if rank == 2 { 0 } else { 1 }, 2));
            let mut v = [rank as f32 + 1.0];
            c.all_reduce(&mut v, ReduceOp::Sum).unwrap();
            assert_eq!(v, [4.0], "ranks 0 and 2: 1 + 3");
            c.shutdown();
        }
        let mut v = [1.0f32];
        parent.all_reduce(&mut v, ReduceOp::Sum).unwrap();
        assert_eq!(v, [3.0], "the parent still works");
    });
}

#[test]
fn bad_lists_fail_on_every_rank_naming_the_rank_that_differs() {
    group(2, |rank, parent| {
        let e = parent.subset(&[rank], "mine").unwrap_err().to_string();
        let other = 1 - rank;
        assert!(
            e.contains(&format!("rank {other} gave ranks [{other}]")),
            "{e}"
        );
        for bad in [&[0, 0][..], &[5], &[]] {
            let e = parent.subset(bad, "bad").unwrap_err().to_string();
            assert!(e.contains("process set"), "{e}");
        }
    });
}
