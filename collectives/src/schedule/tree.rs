//! Tree schedules: binomial-tree broadcast and reduce (latency-optimal), the tree allreduce
//! built from them, and the pipelined chain broadcast (bandwidth-optimal: every link carries
//! the buffer once).

use super::{LocalOp, RecvOp, Region, Schedule, SendOp, Step, partition, sub_mod};

/// Binomial-tree broadcast of Work (`count` elements) from `root`.
///
/// ```text
/// world 8, root 0 (ranks relative to the root)
/// hop 1:  0 -> 4
/// hop 2:  0 -> 2   4 -> 6
/// hop 3:  0 -> 1   2 -> 3   4 -> 5   6 -> 7
/// (a rank posts all its sends in one step, after its one receive)
/// ```
pub(crate) fn broadcast_binomial(rank: usize, world: usize, root: usize, count: usize) -> Schedule {
    let mut s = Schedule::default();
    let vr = sub_mod(rank, root, world);
    let real = |v: usize| (v + root) % world;
    let whole = Region::work(0, count);
    let mut mask = 1;
    while mask < world {
        if vr & mask != 0 {
            s.push(Step {
                recvs: vec![RecvOp {
                    peer: real(vr - mask),
                    dst: whole,
                    reduce: false,
                    with: None,
                }],
                ..Step::default()
            });
            break;
        }
        mask <<= 1;
    }
    let mut sends = Vec::new();
    mask >>= 1;
    while mask > 0 {
        if vr + mask < world {
            sends.push(SendOp {
                peer: real(vr + mask),
                src: whole,
            });
        }
        mask >>= 1;
    }
    if !sends.is_empty() {
        s.push(Step {
            sends,
            ..Step::default()
        });
    }
    s
}

/// Pipelined chain broadcast: the buffer is cut into `chunks` pieces that flow
/// root -> root+1 -> ... so that every rank forwards piece j while it receives piece j+1.
///
/// ```text
/// world 4, root 0, 3 pieces
/// slot 0:  0 -p0-> 1
/// slot 1:  0 -p1-> 1   1 -p0-> 2
/// slot 2:  0 -p2-> 1   1 -p1-> 2   2 -p0-> 3
/// slot 3:              1 -p2-> 2   2 -p1-> 3
/// slot 4:                          2 -p2-> 3
/// ```
pub(crate) fn broadcast_chain(
    rank: usize,
    world: usize,
    root: usize,
    count: usize,
    chunks: usize,
) -> Schedule {
    let mut s = Schedule::default();
    if world == 1 {
        return s;
    }
    let vr = sub_mod(rank, root, world);
    let pieces = partition(count, chunks.max(1));
    let c = pieces.len();
    let next = (rank + 1) % world;
    let prev = sub_mod(rank, 1, world);
    for t in 0..c + world - 2 {
        let mut step = Step::default();
        // Send piece t - vr; receive piece t - vr + 1.
        if vr < world - 1 && t >= vr && t - vr < c {
            let (o, l) = pieces[t - vr];
            step.sends.push(SendOp {
                peer: next,
                src: Region::work(o, l),
            });
        }
        if vr >= 1 && t + 1 >= vr && t + 1 - vr < c {
            let (o, l) = pieces[t + 1 - vr];
            step.recvs.push(RecvOp {
                peer: prev,
                dst: Region::work(o, l),
                reduce: false,
                with: None,
            });
        }
        if !step.sends.is_empty() || !step.recvs.is_empty() {
            s.push(step);
        }
    }
    s
}

/// Binomial-tree reduce of Work (`count` elements) into `root`'s Work. Non-root Work is
/// overwritten with partial results.
///
/// ```text
/// world 8, root 0 (receiver combines via scratch)
/// hop 1:  1 -> 0   3 -> 2   5 -> 4   7 -> 6
/// hop 2:  2 -> 0   6 -> 4
/// hop 3:  4 -> 0
/// ```
pub(crate) fn reduce_binomial(rank: usize, world: usize, root: usize, count: usize) -> Schedule {
    let mut s = Schedule {
        steps: Vec::new(),
        scratch: count,
    };
    let vr = sub_mod(rank, root, world);
    let real = |v: usize| (v + root) % world;
    let whole = Region::work(0, count);
    let tmp = Region::scratch(0, count);
    let mut pending = false;
    let mut mask = 1;
    while mask < world {
        let mut step = Step::default();
        if pending {
            step.locals.push(LocalOp {
                src: tmp,
                dst: whole,
                reduce: true,
            });
            pending = false;
        }
        if vr & mask != 0 {
            step.sends.push(SendOp {
                peer: real(vr - mask),
                src: whole,
            });
            s.push(step);
            return s;
        }
        if vr + mask < world {
            step.recvs.push(RecvOp {
                peer: real(vr + mask),
                dst: tmp,
                reduce: false,
                with: None,
            });
            pending = true;
        }
        if step != Step::default() {
            s.push(step);
        }
        mask <<= 1;
    }
    if pending {
        s.push(Step {
            locals: vec![LocalOp {
                src: tmp,
                dst: whole,
                reduce: true,
            }],
            ..Step::default()
        });
    }
    if world == 1 {
        s.scratch = 0;
    }
    s
}

/// Tree allreduce: binomial reduce into rank 0, then binomial broadcast from it. The critical
/// path is `2 * ceil(log2 world)` message hops, each carrying the whole buffer (a rank's own
/// step count depends on its place in the tree); every rank ends with rank 0's bits, whatever
/// the world size.
///
/// ```text
///  reduce (world 4)        broadcast
///  1 -> 0   3 -> 2         0 -> 2
///  2 -> 0                  0 -> 1   2 -> 3
/// ```
pub(crate) fn allreduce(rank: usize, world: usize, count: usize) -> Schedule {
    let mut s = reduce_binomial(rank, world, 0, count);
    s.steps
        .extend(broadcast_binomial(rank, world, 0, count).steps);
    s
}
