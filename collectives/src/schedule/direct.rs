//! One-step schedules where every rank talks to its peers directly: gather, scatter,
//! all-to-all(v) and point-to-point send/recv.

use super::{LocalOp, RecvOp, Region, Schedule, SendOp, Step, blocks};

/// Gather: Input (`counts[rank]` elements) of every rank into `root`'s Work, in rank order.
///
/// ```text
/// world 4, root 0: root copies its own Input locally
/// 1 --[1]--> 0
/// 2 --[2]--> 0
/// 3 --[3]--> 0
/// ```
pub(crate) fn gather(rank: usize, world: usize, root: usize, counts: &[usize]) -> Schedule {
    let b = blocks(counts);
    let mut step = Step::default();
    if rank == root {
        step.locals.push(LocalOp {
            src: Region::input(0, b[rank].1),
            dst: Region::work(b[rank].0, b[rank].1),
            reduce: false,
        });
        for p in (0..world).filter(|&p| p != root) {
            step.recvs.push(RecvOp {
                peer: p,
                dst: Region::work(b[p].0, b[p].1),
                reduce: false,
                with: None,
            });
        }
    } else {
        step.sends.push(SendOp {
            peer: root,
            src: Region::input(0, b[rank].1),
        });
    }
    Schedule {
        steps: vec![step],
        scratch: 0,
    }
}

/// Scatter: block p of `root`'s Input (blocks of `counts`) into rank p's Work.
///
/// ```text
/// world 4, root 0: root copies block 0 locally
/// 0 --[1]--> 1
/// 0 --[2]--> 2
/// 0 --[3]--> 3
/// ```
pub(crate) fn scatter(rank: usize, world: usize, root: usize, counts: &[usize]) -> Schedule {
    let b = blocks(counts);
    let mut step = Step::default();
    if rank == root {
        step.locals.push(LocalOp {
            src: Region::input(b[rank].0, b[rank].1),
            dst: Region::work(0, b[rank].1),
            reduce: false,
        });
        for p in (0..world).filter(|&p| p != root) {
            step.sends.push(SendOp {
                peer: p,
                src: Region::input(b[p].0, b[p].1),
            });
        }
    } else {
        step.recvs.push(RecvOp {
            peer: root,
            dst: Region::work(0, b[rank].1),
            reduce: false,
            with: None,
        });
    }
    Schedule {
        steps: vec![step],
        scratch: 0,
    }
}

/// All-to-all(v): block p of Input (blocks of `send_counts`) goes to rank p; block p of Work
/// (blocks of `recv_counts`) comes from rank p. Peers are visited starting after this rank, so
/// the ranks do not all start on the same peer.
///
/// ```text
/// world 3, rank 0's view (Input block q out, Work block q in)
/// 0 --in[1]--> 1      0 <--out[2]-- 2      (i = 1)
/// 0 --in[2]--> 2      0 <--out[1]-- 1      (i = 2)
/// local: in[0] -> out[0]
/// ```
pub(crate) fn all_to_all(
    rank: usize,
    world: usize,
    send_counts: &[usize],
    recv_counts: &[usize],
) -> Schedule {
    let sb = blocks(send_counts);
    let rb = blocks(recv_counts);
    let mut step = Step::default();
    step.locals.push(LocalOp {
        src: Region::input(sb[rank].0, sb[rank].1),
        dst: Region::work(rb[rank].0, rb[rank].1),
        reduce: false,
    });
    for i in 1..world {
        let to = (rank + i) % world;
        let from = (rank + world - i) % world;
        step.sends.push(SendOp {
            peer: to,
            src: Region::input(sb[to].0, sb[to].1),
        });
        step.recvs.push(RecvOp {
            peer: from,
            dst: Region::work(rb[from].0, rb[from].1),
            reduce: false,
            with: None,
        });
    }
    Schedule {
        steps: vec![step],
        scratch: 0,
    }
}

/// Point to point: send Input to `peer`.
///
/// ```text
/// this rank --Input--> peer
/// ```
pub(crate) fn send(peer: usize, count: usize) -> Schedule {
    Schedule {
        steps: vec![Step {
            sends: vec![SendOp {
                peer,
                src: Region::input(0, count),
            }],
            ..Step::default()
        }],
        scratch: 0,
    }
}

/// Point to point: receive Work from `peer`.
///
/// ```text
/// peer --> this rank's Work
/// ```
pub(crate) fn recv(peer: usize, count: usize) -> Schedule {
    Schedule {
        steps: vec![Step {
            recvs: vec![RecvOp {
                peer,
                dst: Region::work(0, count),
                reduce: false,
                with: None,
            }],
            ..Step::default()
        }],
        scratch: 0,
    }
}

/// Direct allreduce (reduce-scatter and allgather with every peer at once): in step 1 each
/// rank sends segment p of Work to rank p and receives every peer's copy of its own segment
/// into scratch; step 2 combines them in rank order (deterministic, and equal on every rank
/// since only the owner reduces) and sends the result to every peer. Two steps instead of the
/// ring's 2(n-1), the same bytes per rank.
///
/// ```text
/// world 3, segments a b c, rank r owns segment r
/// step 1:  0: b->1 c->2    1: a->0 c->2    2: a->0 b->1    (into the owner's scratch)
/// step 2:  owner combines its segment, then
///          0: a->1,2       1: b->0,2       2: c->0,1       (receivers copy)
/// ```
pub(crate) fn allreduce(rank: usize, world: usize, count: usize) -> Schedule {
    if world == 1 {
        return Schedule::default();
    }
    let seg = super::partition(count, world);
    let (mo, ml) = seg[rank];
    let slot = |p: usize| {
        // Scratch slot of peer p (ranks other than this one, in order).
        let i = if p < rank { p } else { p - 1 };
        Region::scratch(i * ml, ml)
    };
    let mut s = Schedule {
        steps: Vec::new(),
        scratch: ml * (world - 1),
    };
    let mut step = Step::default();
    for i in 1..world {
        let to = (rank + i) % world;
        let from = (rank + world - i) % world;
        step.sends.push(SendOp {
            peer: to,
            src: Region::work(seg[to].0, seg[to].1),
        });
        step.recvs.push(RecvOp {
            peer: from,
            dst: slot(from),
            reduce: false,
            with: None,
        });
    }
    s.push(step);
    let mut step = Step::default();
    for p in (0..world).filter(|&p| p != rank) {
        step.locals.push(LocalOp {
            src: slot(p),
            dst: Region::work(mo, ml),
            reduce: true,
        });
    }
    for i in 1..world {
        let to = (rank + i) % world;
        let from = (rank + world - i) % world;
        step.sends.push(SendOp {
            peer: to,
            src: Region::work(mo, ml),
        });
        step.recvs.push(RecvOp {
            peer: from,
            dst: Region::work(seg[from].0, seg[from].1),
            reduce: false,
            with: None,
        });
    }
    s.push(step);
    s
}
