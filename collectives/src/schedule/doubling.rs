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

/// Bruck's allgather into Work (blocks of `counts`, which may differ per rank): ceil(log2
/// world) steps instead of the ring's world - 1, for messages small enough that latency is
/// the cost. Scratch holds the blocks rotated so that this rank's own comes first (block `j`
/// is rank `rank + j`'s); at distance `d` each rank sends its first `min(d, world - d)`
/// blocks to `rank - d` and receives as many after its first `d` from `rank + d`, all
/// contiguous; a last step copies the rotation into place. This rank's block comes from Input
/// at 0 when `from_input`, else from its place in Work.
///
/// ```text
/// world 5, scratch of rank 0 (blocks by owner)
/// start:   [0]
/// dist 1:  [0 1]          (1 sent [1] to 0)
/// dist 2:  [0 1 2 3]      (2 sent [2 3] to 0)
/// dist 4:  [0 1 2 3 4]    (4 sent [4] to 0)
/// ```
pub(crate) fn allgather(rank: usize, world: usize, counts: &[usize], from_input: bool) -> Schedule {
    let b = super::blocks(counts);
    let total: usize = counts.iter().sum();
    // offsets of the rotated blocks in scratch; rot[world] = total
    let mut rot = vec![0usize; world + 1];
    for j in 0..world {
        rot[j + 1] = rot[j] + counts[(rank + j) % world];
    }
    let mut s = Schedule {
        steps: Vec::new(),
        scratch: total,
    };
    let own = if from_input {
        Region::input(0, counts[rank])
    } else {
        Region::work(b[rank].0, counts[rank])
    };
    let mut first = vec![LocalOp {
        src: own,
        dst: Region::scratch(0, counts[rank]),
        reduce: false,
    }];
    let mut dist = 1;
    while dist < world {
        let m = dist.min(world - dist);
        s.push(Step {
            locals: std::mem::take(&mut first),
            sends: vec![SendOp {
                peer: sub_mod(rank, dist, world),
                src: Region::scratch(0, rot[m]),
            }],
            recvs: vec![RecvOp {
                peer: (rank + dist) % world,
                dst: Region::scratch(rot[dist], rot[dist + m] - rot[dist]),
                reduce: false,
                with: None,
            }],
        });
        dist <<= 1;
    }
    // Unrotate: blocks 0..world-rank are ranks rank..world, the rest ranks 0..rank.
    let head = total - b[rank].0;
    let mut last = first; // (still holds the first copy when world == 1)
    last.push(LocalOp {
        src: Region::scratch(0, head),
        dst: Region::work(b[rank].0, head),
        reduce: false,
    });
    last.push(LocalOp {
        src: Region::scratch(head, b[rank].0),
        dst: Region::work(0, b[rank].0),
        reduce: false,
    });
    s.push(Step {
        locals: last,
        ..Step::default()
    });
    s
}
