//! Ring schedules: reduce-scatter, allgather and their composition, allreduce. Each step
//! sends one block to the next rank and receives one from the previous; the engine streams
//! each block as frames, so sending, receiving and reducing overlap.

use super::{RecvOp, Region, Schedule, SendOp, Step, blocks, partition, sub_mod};

fn ring_step(
    rank: usize,
    world: usize,
    send: (usize, usize),
    recv: (usize, usize),
    reduce: bool,
) -> Step {
    Step {
        locals: Vec::new(),
        sends: vec![SendOp {
            peer: (rank + 1) % world,
            src: Region::work(send.0, send.1),
        }],
        recvs: vec![RecvOp {
            peer: sub_mod(rank, 1, world),
            dst: Region::work(recv.0, recv.1),
            reduce,
            with: None,
        }],
    }
}

/// Ring allreduce of `count` elements in place in Work: reduce-scatter, then allgather.
///
/// ```text
/// world 3, segments a b c; the receiver combines (RS) or copies (AG)
/// RS 0:  0 -a-> 1   1 -b-> 2   2 -c-> 0
/// RS 1:  0 -c-> 1   1 -a-> 2   2 -b-> 0     rank r now holds segment r+1 reduced
/// AG 0:  0 -b-> 1   1 -c-> 2   2 -a-> 0
/// AG 1:  0 -a-> 1   1 -b-> 2   2 -c-> 0     every rank holds a b c reduced
/// ```
pub(crate) fn allreduce(rank: usize, world: usize, count: usize) -> Schedule {
    let mut s = Schedule::default();
    if world == 1 {
        return s;
    }
    let seg = partition(count, world);
    for k in 0..world - 1 {
        s.push(ring_step(
            rank,
            world,
            seg[sub_mod(rank, k, world)],
            seg[sub_mod(rank, k + 1, world)],
            true,
        ));
    }
    // Rank r now holds the reduced segment r + 1.
    for k in 0..world - 1 {
        s.push(ring_step(
            rank,
            world,
            seg[(rank + 1 + world - k) % world],
            seg[sub_mod(rank, k, world)],
            false,
        ));
    }
    s
}

/// Out-of-place ring allreduce: reads Input, writes Work, and never copies Input to Work
/// whole. The first reduce-scatter step sends from Input; every receive combines the incoming
/// partial with this rank's Input segment straight into Work; the allgather overwrites the rest.
///
/// ```text
/// the steps of `allreduce`; only the sources and destinations differ
/// RS 0:        send Input seg    recv: Work seg = received op Input seg
/// RS 1..p-2:   send Work seg     recv: Work seg = received op Input seg
/// AG:          send Work seg     recv: Work seg = received
/// ```
pub(crate) fn allreduce_out_of_place(rank: usize, world: usize, count: usize) -> Schedule {
    let mut s = Schedule::default();
    if world == 1 {
        s.push(Step {
            locals: vec![super::LocalOp {
                src: Region::input(0, count),
                dst: Region::work(0, count),
                reduce: false,
            }],
            ..Step::default()
        });
        return s;
    }
    let seg = partition(count, world);
    for k in 0..world - 1 {
        let (so, sl) = seg[sub_mod(rank, k, world)];
        let (ro, rl) = seg[sub_mod(rank, k + 1, world)];
        let src = if k == 0 {
            Region::input(so, sl)
        } else {
            Region::work(so, sl)
        };
        s.push(Step {
            locals: Vec::new(),
            sends: vec![SendOp {
                peer: (rank + 1) % world,
                src,
            }],
            recvs: vec![RecvOp {
                peer: sub_mod(rank, 1, world),
                dst: Region::work(ro, rl),
                reduce: true,
                with: Some(Region::input(ro, rl)),
            }],
        });
    }
    for k in 0..world - 1 {
        s.push(ring_step(
            rank,
            world,
            seg[(rank + 1 + world - k) % world],
            seg[sub_mod(rank, k, world)],
            false,
        ));
    }
    s
}

/// Ring reduce-scatter in place over Work holding `counts.len()` blocks: afterwards block
/// `rank` of Work holds the reduction of every rank's block `rank`.
///
/// ```text
/// world 3: block r ends reduced on rank r (receiver combines)
/// step 0:  0 -[2]-> 1   1 -[0]-> 2   2 -[1]-> 0
/// step 1:  0 -[1]-> 1   1 -[2]-> 2   2 -[0]-> 0
/// ```
pub(crate) fn reduce_scatter(rank: usize, world: usize, counts: &[usize]) -> Schedule {
    let mut s = Schedule::default();
    let b = blocks(counts);
    for k in 0..world.saturating_sub(1) {
        s.push(ring_step(
            rank,
            world,
            b[sub_mod(rank, k + 1, world)],
            b[sub_mod(rank, k + 2, world)],
            true,
        ));
    }
    s
}

/// Ring allgather into Work (blocks of `counts`); this rank's block comes from Input at 0 when
/// `from_input`, else it is already in place.
///
/// ```text
/// world 3: rank r starts with block r (receiver copies)
/// step 0:  0 -[0]-> 1   1 -[1]-> 2   2 -[2]-> 0
/// step 1:  0 -[2]-> 1   1 -[0]-> 2   2 -[1]-> 0
/// ```
pub(crate) fn allgather(rank: usize, world: usize, counts: &[usize], from_input: bool) -> Schedule {
    let mut s = Schedule::default();
    let b = blocks(counts);
    let mut first = true;
    for k in 0..world.saturating_sub(1) {
        let mut step = ring_step(
            rank,
            world,
            b[sub_mod(rank, k, world)],
            b[sub_mod(rank, k + 1, world)],
            false,
        );
        if first && from_input {
            step.locals.push(super::LocalOp {
                src: Region::input(0, b[rank].1),
                dst: Region::work(b[rank].0, b[rank].1),
                reduce: false,
            });
        }
        first = false;
        s.push(step);
    }
    if world == 1 && from_input {
        s.push(Step {
            locals: vec![super::LocalOp {
                src: Region::input(0, b[0].1),
                dst: Region::work(0, b[0].1),
                reduce: false,
            }],
            ..Step::default()
        });
    }
    s
}
