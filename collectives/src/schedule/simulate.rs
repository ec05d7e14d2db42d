//! A pure, single-threaded simulator of schedules (FIFO channel per ordered pair, i64 data,
//! wrapping sum), and tests that run every schedule against a plain sequential computation for
//! world sizes 1..=9 and awkward counts. It also checks that no step sends from a region that
//! one of its receives writes.

use std::collections::{HashMap, VecDeque};

use super::*;

pub(crate) struct Rank {
    pub work: Vec<i64>,
    pub input: Vec<i64>,
    pub scratch: Vec<i64>,
}

fn slice<'a>(r: &'a Rank, reg: &Region) -> &'a [i64] {
    let b = match reg.buf {
        Buf::Work => &r.work,
        Buf::Input => &r.input,
        Buf::Scratch => &r.scratch,
    };
    &b[reg.off..reg.off + reg.len]
}

fn write(r: &mut Rank, reg: &Region, data: &[i64], reduce: bool) {
    let b = match reg.buf {
        Buf::Work => &mut r.work,
        Buf::Input => panic!("write into Input"),
        Buf::Scratch => &mut r.scratch,
    };
    assert_eq!(data.len(), reg.len, "length mismatch");
    for (d, s) in b[reg.off..reg.off + reg.len].iter_mut().zip(data) {
        *d = if reduce { d.wrapping_add(*s) } else { *s };
    }
}

/// Runs all ranks' schedules to completion; panics on deadlock or mismatch.
pub(crate) fn simulate(scheds: &[Schedule], ranks: &mut [Rank]) {
    let n = scheds.len();
    for (s, r) in scheds.iter().zip(ranks.iter_mut()) {
        r.scratch = vec![0; s.scratch];
        for st in &s.steps {
            for snd in &st.sends {
                for rcv in &st.recvs {
                    assert!(
                        !snd.src.overlaps(&rcv.dst),
                        "step sends from a region it receives into"
                    );
                }
            }
        }
    }
    let mut q: HashMap<(usize, usize), VecDeque<Vec<i64>>> = HashMap::new();
    let mut pos = vec![0usize; n];
    let mut started = vec![false; n];
    let mut got: Vec<Vec<bool>> = vec![Vec::new(); n];
    loop {
        let mut progress = false;
        for r in 0..n {
            while pos[r] < scheds[r].steps.len() {
                let st = &scheds[r].steps[pos[r]];
                if !started[r] {
                    for l in &st.locals {
                        let d = slice(&ranks[r], &l.src).to_vec();
                        write(&mut ranks[r], &l.dst, &d, l.reduce);
                    }
                    for snd in &st.sends {
                        assert_ne!(snd.peer, r);
                        let d = slice(&ranks[r], &snd.src).to_vec();
                        q.entry((r, snd.peer)).or_default().push_back(d);
                    }
                    started[r] = true;
                    got[r] = vec![false; st.recvs.len()];
                    progress = true;
                }
                for (i, rcv) in st.recvs.iter().enumerate() {
                    let earlier_pending = st.recvs[..i]
                        .iter()
                        .zip(&got[r])
                        .any(|(o, g)| o.peer == rcv.peer && !g);
                    if got[r][i] || earlier_pending {
                        continue;
                    }
                    if let Some(d) = q.get_mut(&(rcv.peer, r)).and_then(|v| v.pop_front()) {
                        if let Some(w) = &rcv.with {
                            let base = slice(&ranks[r], w).to_vec();
                            write(&mut ranks[r], &rcv.dst, &base, false);
                        }
                        write(&mut ranks[r], &rcv.dst, &d, rcv.reduce);
                        got[r][i] = true;
                        progress = true;
                    }
                }
                if got[r].iter().all(|g| *g) {
                    pos[r] += 1;
                    started[r] = false;
                } else {
                    break;
                }
            }
        }
        if (0..n).all(|r| pos[r] == scheds[r].steps.len()) {
            assert!(q.values().all(|v| v.is_empty()), "messages left unreceived");
            return;
        }
        assert!(progress, "deadlock at steps {pos:?}");
    }
}

const COUNTS: [usize; 10] = [0, 1, 2, 3, 5, 7, 13, 31, 64, 97];

fn val(rank: usize, i: usize) -> i64 {
    (rank as i64 + 1) * 1000 + i as i64
}

fn ranks_with(
    world: usize,
    work_len: usize,
    input: impl Fn(usize) -> Vec<i64>,
    work: impl Fn(usize) -> Vec<i64>,
) -> Vec<Rank> {
    (0..world)
        .map(|r| {
            let w = work(r);
            assert_eq!(w.len(), work_len);
            Rank {
                work: w,
                input: input(r),
                scratch: Vec::new(),
            }
        })
        .collect()
}

#[test]
fn allreduce_ring_doubling_tree_direct_match_sequential_sum() {
    for world in 1..=9 {
        for count in COUNTS {
            let want: Vec<i64> = (0..count)
                .map(|i| (0..world).map(|r| val(r, i)).sum())
                .collect();
            for (name, f) in [
                (
                    "ring",
                    ring::allreduce as fn(usize, usize, usize) -> Schedule,
                ),
                ("rd", doubling::allreduce),
                ("tree", tree::allreduce),
                ("ring out of place", ring::allreduce_out_of_place),
                ("direct", direct::allreduce),
            ] {
                let scheds: Vec<_> = (0..world).map(|r| f(r, world, count)).collect();
                let oop = name == "ring out of place";
                let data = |r: usize| (0..count).map(|i| val(r, i)).collect::<Vec<i64>>();
                let mut ranks = ranks_with(
                    world,
                    count,
                    |r| if oop { data(r) } else { Vec::new() },
                    |r| if oop { vec![-7; count] } else { data(r) },
                );
                simulate(&scheds, &mut ranks);
                for (r, rk) in ranks.iter().enumerate() {
                    assert_eq!(rk.work, want, "{name} world {world} count {count} rank {r}");
                }
            }
        }
    }
}

#[test]
fn reduce_scatter_allgather_gather_scatter_alltoall() {
    for world in 1..=9 {
        for count in COUNTS {
            let counts: Vec<usize> = (0..world)
                .map(|p| (count + p) % 4 + usize::from(p == 0) * count)
                .collect();
            let total: usize = counts.iter().sum();
            let b = blocks(&counts);
            // reduce_scatter: in place over the whole vector.
            let scheds: Vec<_> = (0..world)
                .map(|r| ring::reduce_scatter(r, world, &counts))
                .collect();
            let mut ranks = ranks_with(
                world,
                total,
                |_| Vec::new(),
                |r| (0..total).map(|i| val(r, i)).collect(),
            );
            simulate(&scheds, &mut ranks);
            for (r, rk) in ranks.iter().enumerate() {
                let (o, l) = b[r];
                let want: Vec<i64> = (o..o + l)
                    .map(|i| (0..world).map(|q| val(q, i)).sum())
                    .collect();
                assert_eq!(
                    &rk.work[o..o + l],
                    &want[..],
                    "reduce_scatter world {world} rank {r}"
                );
            }
            // allgather(v), ring and Bruck, from Input and in place.
            let want: Vec<i64> = (0..world)
                .flat_map(|q| (0..counts[q]).map(move |i| val(q, i)))
                .collect();
            let b = blocks(&counts);
            for bruck in [false, true] {
                for from_input in [true, false] {
                    let scheds: Vec<_> = (0..world)
                        .map(|r| {
                            if bruck {
                                doubling::allgather(r, world, &counts, from_input)
                            } else {
                                ring::allgather(r, world, &counts, from_input)
                            }
                        })
                        .collect();
                    let mut ranks = ranks_with(
                        world,
                        total,
                        |r| (0..counts[r]).map(|i| val(r, i)).collect(),
                        |r| {
                            let mut w = vec![-1; total];
                            if !from_input {
                                w[b[r].0..b[r].0 + b[r].1]
                                    .copy_from_slice(&want[b[r].0..b[r].0 + b[r].1]);
                            }
                            w
                        },
                    );
                    simulate(&scheds, &mut ranks);
                    for rk in &ranks {
                        assert_eq!(
                            rk.work, want,
                            "allgather world {world} bruck {bruck} from_input {from_input}"
                        );
                    }
                    if bruck {
                        let steps = scheds[0].steps.len();
                        let log = (usize::BITS - (world - 1).leading_zeros()) as usize;
                        assert_eq!(
                            steps,
                            log + 1,
                            "ceil(log2 {world}) exchanges and the unrotation"
                        );
                    }
                }
            }
            for root in 0..world {
                // gather
                let scheds: Vec<_> = (0..world)
                    .map(|r| gather_sched(r, world, root, &counts))
                    .collect();
                let mut ranks = ranks_with(
                    world,
                    total,
                    |r| (0..counts[r]).map(|i| val(r, i)).collect(),
                    |_| vec![-1; total],
                );
                simulate(&scheds, &mut ranks);
                assert_eq!(ranks[root].work, want, "gather world {world} root {root}");
                // scatter
                let scheds: Vec<_> = (0..world)
                    .map(|r| direct::scatter(r, world, root, &counts))
                    .collect();
                let mut ranks: Vec<Rank> = (0..world)
                    .map(|r| Rank {
                        work: vec![-1; counts[r]],
                        input: if r == root { want.clone() } else { Vec::new() },
                        scratch: Vec::new(),
                    })
                    .collect();
                simulate(&scheds, &mut ranks);
                for (r, rk) in ranks.iter().enumerate() {
                    assert_eq!(
                        rk.work,
                        &want[b[r].0..b[r].0 + b[r].1],
                        "scatter world {world} root {root}"
                    );
                }
            }
            // all_to_all_v: rank r sends (r + p) % 3 + count % 5 elements to p.
            let sc = |r: usize, p: usize| (r + p) % 3 + count % 5;
            let scheds: Vec<_> = (0..world)
                .map(|r| {
                    let s: Vec<usize> = (0..world).map(|p| sc(r, p)).collect();
                    let rc: Vec<usize> = (0..world).map(|p| sc(p, r)).collect();
                    direct::all_to_all(r, world, &s, &rc)
                })
                .collect();
            let mut ranks: Vec<Rank> = (0..world)
                .map(|r| {
                    let n_in: usize = (0..world).map(|p| sc(r, p)).sum();
                    let n_out: usize = (0..world).map(|p| sc(p, r)).sum();
                    Rank {
                        work: vec![-1; n_out],
                        input: (0..n_in).map(|i| val(r, i)).collect(),
                        scratch: Vec::new(),
                    }
                })
                .collect();
            simulate(&scheds, &mut ranks);
            for (r, rk) in ranks.iter().enumerate() {
                let mut want = Vec::new();
                for p in 0..world {
                    let off: usize = (0..r).map(|q| sc(p, q)).sum();
                    want.extend((off..off + sc(p, r)).map(|i| val(p, i)));
                }
                assert_eq!(rk.work, want, "all_to_all world {world} rank {r}");
            }
        }
    }
}

fn gather_sched(r: usize, world: usize, root: usize, counts: &[usize]) -> Schedule {
    direct::gather(r, world, root, counts)
}

#[test]
fn rooted_broadcast_and_reduce_and_barrier() {
    for world in 1..=9 {
        let scheds: Vec<_> = (0..world).map(|r| doubling::barrier(r, world)).collect();
        let mut ranks = ranks_with(world, 0, |_| Vec::new(), |_| Vec::new());
        simulate(&scheds, &mut ranks);
        for count in COUNTS {
            for root in 0..world {
                let want: Vec<i64> = (0..count).map(|i| val(root, i)).collect();
                for chunks in [0, 1, 3, 8] {
                    let scheds: Vec<_> = (0..world)
                        .map(|r| {
                            if chunks == 0 {
                                tree::broadcast_binomial(r, world, root, count)
                            } else {
                                tree::broadcast_chain(r, world, root, count, chunks)
                            }
                        })
                        .collect();
                    let mut ranks = ranks_with(
                        world,
                        count,
                        |_| Vec::new(),
                        |r| (0..count).map(|i| val(r, i)).collect(),
                    );
                    simulate(&scheds, &mut ranks);
                    for rk in &ranks {
                        assert_eq!(
                            rk.work, want,
                            "broadcast world {world} root {root} chunks {chunks}"
                        );
                    }
                }
                let scheds: Vec<_> = (0..world)
                    .map(|r| tree::reduce_binomial(r, world, root, count))
                    .collect();
                let mut ranks = ranks_with(
                    world,
                    count,
                    |_| Vec::new(),
                    |r| (0..count).map(|i| val(r, i)).collect(),
                );
                simulate(&scheds, &mut ranks);
                let sum: Vec<i64> = (0..count)
                    .map(|i| (0..world).map(|r| val(r, i)).sum())
                    .collect();
                assert_eq!(ranks[root].work, sum, "reduce world {world} root {root}");
            }
        }
    }
}

#[test]
fn point_to_point_and_partition() {
    let scheds = vec![direct::send(1, 5), direct::recv(0, 5)];
    let mut ranks = vec![
        Rank {
            work: vec![],
            input: vec![1, 2, 3, 4, 5],
            scratch: vec![],
        },
        Rank {
            work: vec![0; 5],
            input: vec![],
            scratch: vec![],
        },
    ];
    simulate(&scheds, &mut ranks);
    assert_eq!(ranks[1].work, vec![1, 2, 3, 4, 5]);
    assert_eq!(partition(7, 3), vec![(0, 3), (3, 2), (5, 2)]);
    assert_eq!(partition(1, 4), vec![(0, 1), (1, 0), (1, 0), (1, 0)]);
    assert_eq!(ring::allreduce(0, 4, 10).peers(), vec![1, 3]);
}
