//! Latency-optimal schedules: recursive-doubling allreduce (log2 rounds of whole-buffer
//! exchanges, with the usual fold-in of the ranks beyond the largest power of two) and the
//! dissemination barrier.

use super::{LocalOp, RecvOp, Region, Schedule, SendOp, Step, sub_mod};

/// Recursive-doubling allreduce of `count` elements in place in Work. Every exchange receives
/// into scratch and combines at the start of the next step, so a send never reads a region
/// being reduced. Combining is commutative pairwise, so all ranks end bitwise equal.
///
/// ```text
/// world 6: largest power of two 4, so ranks 0 and 2 fold into 1 and 3
/// fold:     0 --> 1   2 --> 3        (new ranks 1->0, 3->1, 4->2, 5->3)
/// bit 0:    1 <-> 3   4 <-> 5
/// bit 1:    1 <-> 4   3 <-> 5
/// unfold:   1 --> 0   3 --> 2
/// ```
pub(crate) fn allreduce(rank: usize, world: usize, count: usize) -> Schedule {
    let mut s = Schedule {
        steps: Vec::new(),
        scratch: count,
    };
    if world == 1 {
        return Schedule::default();
    }
    let whole = Region::work(0, count);
    let tmp = Region::scratch(0, count);
    let combine = LocalOp {
        src: tmp,
        dst: whole,
        reduce: true,
    };
    let p = 1usize << (usize::BITS - 1 - world.leading_zeros()); // largest power of two <= world
    let rem = world - p;
    // Fold: among the first 2*rem ranks, each even rank hands its data to the odd one above.
    let newrank = if rank < 2 * rem {
        if rank.is_multiple_of(2) {
            s.push(Step {
                sends: vec![SendOp {
                    peer: rank + 1,
                    src: whole,
                }],
                ..Step::default()
            });
            None
        } else {
            s.push(Step {
                recvs: vec![RecvOp {
                    peer: rank - 1,
                    dst: tmp,
                    reduce: false,
                    with: None,
                }],
                ..Step::default()
            });
            Some(rank / 2)
        }
    } else {
        Some(rank - rem)
    };
    let real = |nr: usize| if nr < rem { nr * 2 + 1 } else { nr + rem };
    let mut pending = rank < 2 * rem && rank % 2 == 1;
    if let Some(nr) = newrank {
        let mut mask = 1;
        while mask < p {
            let peer = real(nr ^ mask);
            let mut step = Step {
                sends: vec![SendOp { peer, src: whole }],
                recvs: vec![RecvOp {
                    peer,
                    dst: tmp,
                    reduce: false,
                    with: None,
                }],
                ..Step::default()
            };
            if pending {
                step.locals.push(combine.clone());
            }
            pending = true;
            s.push(step);
            mask <<= 1;
        }
    }
    // Unfold: the odd ranks hand the result back.
    if rank < 2 * rem {
        if rank.is_multiple_of(2) {
            s.push(Step {
                recvs: vec![RecvOp {
                    peer: rank + 1,
                    dst: whole,
                    reduce: false,
                    with: None,
                }],
                ..Step::default()
            });
        } else {
            s.push(Step {
                locals: vec![combine.clone()],
                sends: vec![SendOp {
                    peer: rank - 1,
                    src: whole,
                }],
                ..Step::default()
            });
            pending = false;
        }
    }
    if pending {
        s.push(Step {
            locals: vec![combine],
            ..Step::default()
        });
    }
    s
}

/// Dissemination barrier: in round k, signal rank + 2^k and wait for rank - 2^k.
///
/// ```text
/// world 5 (empty messages)
/// dist 1:  0->1 1->2 2->3 3->4 4->0
/// dist 2:  0->2 1->3 2->4 3->0 4->1
/// dist 4:  0->4 1->0 2->1 3->2 4->3
/// ```
pub(crate) fn barrier(rank: usize, world: usize) -> Schedule {
    let mut s = Schedule::default();
    let mut dist = 1;
    while dist < world {
        s.push(Step {
            sends: vec![SendOp {
                peer: (rank + dist) % world,
                src: Region::work(0, 0),
            }],
            recvs: vec![RecvOp {
                peer: sub_mod(rank, dist, world),
                dst: Region::work(0, 0),
                reduce: false,
                with: None,
            }],
            ..Step::default()
        });
        dist <<= 1;
    }
    s
}
