//! Every collective for world sizes 1..=9 and awkward counts, over the in-memory transport,
//! one thread per rank, against a plain sequential computation.

mod common;

use std::time::Duration;

use common::*;
use dtcomm::{Algo, Communicator, Options, ReduceOp};
use half::{bf16, f16};

fn opts(algo: Algo, nsocks: usize) -> Options {
    Options {
        algo: Some(algo),
        nsocks_perpeer: Some(nsocks),
        timeout: Some(Duration::from_secs(60)),
        spin_us: Some(20),
        ..Options::default()
    }
}

fn allreduce_case<T: TestElem>(c: &Communicator, op: ReduceOp, count: usize) {
    let mut v: Vec<T> = input(op, c.rank(), count);
    c.all_reduce(&mut v, op).unwrap();
    check(&format!("all_reduce rank {}", c.rank()), op, c.world(), &v, 0);
}

#[test]
fn all_reduce_every_world_algo_op_and_count() {
    for world in 1..=9 {
        for (algo, nsocks) in [(Algo::Ring, 1), (Algo::Tree, 1), (Algo::Ring, 3), (Algo::Auto, 2)] {
            let comms = Communicator::in_memory(world, opts(algo, nsocks)).unwrap();
            on_ranks(&comms, |c| {
                for count in COUNTS {
                    if count > 1000 && world > 5 && algo == Algo::Tree {
                        continue; // whole-buffer exchanges of big buffers: slow in debug builds, covered at world <= 5
                    }
                    for op in ReduceOp::ALL {
                        allreduce_case::<f32>(c, op, count);
                    }
                    allreduce_case::<i32>(c, ReduceOp::Sum, count);
                }
            });
        }
    }
}

#[test]
fn all_reduce_every_dtype() {
    for world in [1, 2, 3, 5, 8] {
        let comms = Communicator::in_memory(world, opts(Algo::Auto, 1)).unwrap();
        on_ranks(&comms, |c| {
            for count in [0, 5, 97, 20_000] {
                for op in ReduceOp::ALL {
                    allreduce_case::<f32>(c, op, count);
                    allreduce_case::<f64>(c, op, count);
                    allreduce_case::<f16>(c, op, count);
                    allreduce_case::<bf16>(c, op, count);
                    allreduce_case::<i8>(c, op, count);
                    allreduce_case::<u8>(c, op, count);
                    allreduce_case::<i32>(c, op, count);
                    allreduce_case::<i64>(c, op, count);
                }
            }
        });
    }
}

/// Runs every non-allreduce collective once on communicator `c` with `count` elements.
pub fn other_collectives<T: TestElem>(c: &Communicator, count: usize) {
    let (rank, world) = (c.rank(), c.world());
    let who = |what: &str| format!("{what} rank {rank} count {count}");
    for root in 0..world {
        // broadcast
        let mut b: Vec<T> = if rank == root { input(ReduceOp::Sum, root, count) } else { vec![T::from_i(99); count] };
        c.broadcast(&mut b, root).unwrap();
        assert_eq!(b, input::<T>(ReduceOp::Sum, root, count), "{}", who("broadcast"));
        // reduce
        for op in [ReduceOp::Sum, ReduceOp::Max] {
            let mine: Vec<T> = input(op, rank, count);
            let mut r = mine.clone();
            c.reduce(&mut r, op, root).unwrap();
            if rank == root {
                check(&who("reduce"), op, world, &r, 0);
            } else {
                assert_eq!(r, mine, "{}", who("reduce leaves non-root buffers alone"));
            }
        }
        // gather / scatter
        let mine: Vec<T> = (0..count).map(|i| T::from_i(((rank * 31 + i) % 100) as i64)).collect();
        let mut all = if rank == root { vec![T::from_i(0); count * world] } else { Vec::new() };
        c.gather(&mine, &mut all, root).unwrap();
        let everyone: Vec<T> = (0..world).flat_map(|p| (0..count).map(move |i| T::from_i(((p * 31 + i) % 100) as i64))).collect();
        if rank == root {
            assert_eq!(all, everyone, "{}", who("gather"));
        }
        let src = if rank == root { everyone.clone() } else { Vec::new() };
        let mut part = vec![T::from_i(0); count];
        c.scatter(&src, &mut part, root).unwrap();
        assert_eq!(part, mine, "{}", who("scatter"));
    }
    // all_gather and all_gather_v
    let mine: Vec<T> = (0..count).map(|i| T::from_i(((rank * 31 + i) % 100) as i64)).collect();
    let everyone: Vec<T> = (0..world).flat_map(|p| (0..count).map(move |i| T::from_i(((p * 31 + i) % 100) as i64))).collect();
    let mut all = vec![T::from_i(0); count * world];
    c.all_gather(&mine, &mut all).unwrap();
    assert_eq!(all, everyone, "{}", who("all_gather"));
    let counts: Vec<usize> = (0..world).map(|p| (count + p * 5) % 11).collect();
    let mine_v: Vec<T> = (0..counts[rank]).map(|i| T::from_i((rank + i) as i64 % 50)).collect();
    let mut all_v = vec![T::from_i(0); counts.iter().sum()];
    c.all_gather_v(&mine_v, &mut all_v, &counts).unwrap();
    let want_v: Vec<T> = (0..world).flat_map(|p| (0..counts[p]).map(move |i| T::from_i((p + i) as i64 % 50))).collect();
    assert_eq!(all_v, want_v, "{}", who("all_gather_v"));
    // reduce_scatter
    for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Avg] {
        let send: Vec<T> = input(op, rank, count * world);
        let mut recv = vec![T::from_i(0); count];
        c.reduce_scatter(&send, &mut recv, op).unwrap();
        check(&who("reduce_scatter"), op, world, &recv, rank * count);
    }
    // all_to_all and all_to_all_v
    let code = |from: usize, to: usize, i: usize| T::from_i(((from * 10 + to * 3 + i) % 120) as i64);
    let send: Vec<T> = (0..world).flat_map(|to| (0..count).map(move |i| code(rank, to, i))).collect();
    let mut recv = vec![T::from_i(0); count * world];
    c.all_to_all(&send, &mut recv).unwrap();
    let want: Vec<T> = (0..world).flat_map(|from| (0..count).map(move |i| code(from, rank, i))).collect();
    assert_eq!(recv, want, "{}", who("all_to_all"));
    let n = |from: usize, to: usize| (from + 2 * to + count) % 5;
    let sc: Vec<usize> = (0..world).map(|to| n(rank, to)).collect();
    let rc: Vec<usize> = (0..world).map(|from| n(from, rank)).collect();
    let send: Vec<T> = (0..world).flat_map(|to| (0..n(rank, to)).map(move |i| code(rank, to, i))).collect();
    let mut recv = vec![T::from_i(0); rc.iter().sum()];
    c.all_to_all_v(&send, &sc, &mut recv, &rc).unwrap();
    let want: Vec<T> = (0..world).flat_map(|from| (0..n(from, rank)).map(move |i| code(from, rank, i))).collect();
    assert_eq!(recv, want, "{}", who("all_to_all_v"));
    // barrier
    c.barrier().unwrap();
    // send / recv: pairs (even -> odd), then back
    let msg: Vec<T> = (0..count).map(|i| T::from_i(((rank + i) % 60) as i64)).collect();
    let mut got = vec![T::from_i(0); count];
    let partner = rank ^ 1;
    if partner < world {
        if rank % 2 == 0 {
            c.send(&msg, partner).unwrap();
            c.recv(&mut got, partner).unwrap();
        } else {
            c.recv(&mut got, partner).unwrap();
            c.send(&msg, partner).unwrap();
        }
        let want: Vec<T> = (0..count).map(|i| T::from_i(((partner + i) % 60) as i64)).collect();
        assert_eq!(got, want, "{}", who("send/recv"));
    }
}

#[test]
fn other_collectives_every_world_and_count() {
    for world in 1..=9 {
        for algo in [Algo::Ring, Algo::Tree] {
            let comms = Communicator::in_memory(world, opts(algo, if algo == Algo::Ring { 2 } else { 1 })).unwrap();
            on_ranks(&comms, |c| {
                for count in [0, 1, 3, 13, 97] {
                    other_collectives::<i32>(c, count);
                }
                other_collectives::<f32>(c, 70_001 / world.max(3));
            });
        }
    }
}

#[test]
fn other_collectives_every_dtype() {
    let comms = Communicator::in_memory(3, opts(Algo::Auto, 1)).unwrap();
    on_ranks(&comms, |c| {
        other_collectives::<f64>(c, 11);
        other_collectives::<f16>(c, 11);
        other_collectives::<bf16>(c, 11);
        other_collectives::<i8>(c, 11);
        other_collectives::<u8>(c, 11);
        other_collectives::<i64>(c, 11);
    });
}

#[test]
fn async_calls_run_in_order_with_blocking_ones() {
    let comms = Communicator::in_memory(4, opts(Algo::Auto, 1)).unwrap();
    on_ranks(&comms, |c| {
        let works: Vec<_> = (0..5)
            .map(|k| c.all_reduce_async(vec![(c.rank() + k) as f32; 1000 * (k + 1)], ReduceOp::Sum))
            .collect();
        let mut b = vec![c.rank() as i64; 10];
        c.all_reduce(&mut b, ReduceOp::Max).unwrap();
        assert_eq!(b, vec![3; 10]);
        for (k, mut w) in works.into_iter().enumerate() {
            let _ = w.test();
            let v = w.wait().unwrap();
            assert!(v.iter().all(|x| *x == (6 + 4 * k) as f32), "async {k}");
        }
        let w = c.broadcast_async(vec![c.rank() as u8; 5], 2);
        assert_eq!(w.wait().unwrap(), vec![2; 5]);
    });
}

#[test]
fn invalid_arguments_do_not_fail_the_communicator() {
    let comms = Communicator::in_memory(2, Options::default()).unwrap();
    on_ranks(&comms, |c| {
        let mut small = vec![0f32; 3];
        assert!(matches!(c.all_gather(&[1f32; 2], &mut small), Err(dtcomm::CommError::InvalidArgument { .. })));
        assert!(c.broadcast(&mut small, 5).is_err());
        assert!(c.send(&small, c.rank()).is_err());
        c.all_reduce(&mut small, ReduceOp::Sum).unwrap();
    });
}
