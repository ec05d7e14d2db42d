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

#[test]
fn all_reduce_every_world_algo_op_and_count() {
    for world in 1..=9 {
        for (algo, nsocks) in [
            (Algo::Ring, 1),
            (Algo::Tree, 1),
            (Algo::Ring, 3),
            (Algo::Auto, 2),
            (Algo::Direct, 2),
        ] {
            let comms = Communicator::in_memory(world, opts(algo, nsocks)).unwrap();
            on_ranks(&comms, |c| {
                for count in COUNTS {
                    if count > 1000 && world > 5 && algo == Algo::Tree {
                        continue; // whole-buffer exchanges of big buffers: slow in debug builds, covered at world <= 5
                    }
                    // Every op on the small counts; the big count (many frames) with two.
                    let ops: &[ReduceOp] = if count > 1000 {
                        &[ReduceOp::Sum, ReduceOp::Min]
                    } else {
                        &ReduceOp::ARITHMETIC
                    };
                    for &op in ops {
                        allreduce_case::<f32>(c, op, count);
                    }
                    allreduce_into_case::<f32>(c, ReduceOp::Sum, count);
                    allreduce_into_case::<i64>(c, ReduceOp::Max, count);
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
                for op in ReduceOp::ARITHMETIC {
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

#[test]
fn other_collectives_every_world_and_count() {
    for world in 1..=9 {
        for algo in [Algo::Ring, Algo::Tree] {
            let comms =
                Communicator::in_memory(world, opts(algo, if algo == Algo::Ring { 2 } else { 1 }))
                    .unwrap();
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
        for (k, w) in works.into_iter().enumerate() {
            // The blocking call ran after every asynchronous one submitted before it.
            assert!(
                w.test(),
                "async {k} not complete after a later blocking call"
            );
            w.wait().unwrap();
            let v: Vec<f32> = w.take().unwrap();
            assert!(v.iter().all(|x| *x == (6 + 4 * k) as f32), "async {k}");
        }
        let w = c.broadcast_async(vec![c.rank() as u8; 5], 2);
        w.wait().unwrap();
        assert!(w.take::<Vec<f32>>().is_none(), "take of the wrong type");
        assert_eq!(w.take::<Vec<u8>>().unwrap(), vec![2; 5]);
    });
}

#[test]
fn invalid_arguments_do_not_fail_the_communicator() {
    let comms = Communicator::in_memory(2, Options::default()).unwrap();
    on_ranks(&comms, |c| {
        let mut small = vec![0f32; 3];
        assert!(matches!(
            c.all_gather(&[1f32; 2], &mut small),
            Err(dtcomm::CommError::InvalidArgument { .. })
        ));
        assert!(c.broadcast(&mut small, 5).is_err());
        assert!(c.send(&small, c.rank()).is_err());
        c.all_reduce(&mut small, ReduceOp::Sum).unwrap();
    });
}
