//! Measuring one collective at one size: a checked call, warm-up, a barrier, the timed loop
//! (each call also timed alone), and the maximum over ranks, as nccl-tests and the incumbent
//! harness (`benches/incumbents/`) do it.

use std::time::Instant;

use dtcomm::{CommError, Communicator, Element, ReduceOp};
use half::{bf16, f16};

use super::Collective;

/// Element types the benchmark can fill and check.
pub trait BenchElem: Element {
    /// From a small integer.
    fn from_f(v: f64) -> Self;
    /// To f64, for checking.
    fn to_f(self) -> f64;
    /// Whether the type is an integer (Avg truncates).
    const INT: bool;
}

macro_rules! be {
    ($($t:ty => $int:expr),*) => {$(
        impl BenchElem for $t {
            fn from_f(v: f64) -> Self { v as $t }
            fn to_f(self) -> f64 { self as f64 }
            const INT: bool = $int;
        }
    )*};
}
be!(f32 => false, f64 => false, i8 => true, u8 => true, i16 => true, i32 => true, i64 => true);
impl BenchElem for f16 {
    fn from_f(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn to_f(self) -> f64 {
        self.to_f64()
    }
    const INT: bool = false;
}
impl BenchElem for bf16 {
    fn from_f(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn to_f(self) -> f64 {
        self.to_f64()
    }
    const INT: bool = false;
}

/// The value rank `r` contributes at index `i`: small integers, so every dtype and every
/// reduction (products stay powers of two) is exact.
fn val(op: ReduceOp, r: usize, i: usize) -> f64 {
    match op {
        ReduceOp::Prod => {
            if (r + i).is_multiple_of(4) {
                2.0
            } else {
                1.0
            }
        }
        _ => ((r + 1) * (i % 7 + 1) % 13) as f64,
    }
}

fn reduced<T: BenchElem>(op: ReduceOp, world: usize, i: usize) -> f64 {
    let v = (0..world).map(|r| val(op, r, i));
    match op {
        ReduceOp::Sum => v.sum(),
        ReduceOp::Prod => v.product(),
        ReduceOp::Min => v.fold(f64::INFINITY, f64::min),
        ReduceOp::Max => v.fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::Avg => {
            let a = v.sum::<f64>() / world as f64;
            if T::INT { a.trunc() } else { a }
        }
        ReduceOp::Band | ReduceOp::Bor | ReduceOp::Bxor => {
            let f = |a: i64, b: i64| match op {
                ReduceOp::Band => a & b,
                ReduceOp::Bor => a | b,
                _ => a ^ b,
            };
            v.map(|x| x as i64).reduce(f).unwrap_or(0) as f64
        }
    }
}

fn wrong(got: f64, want: f64, op: ReduceOp) -> bool {
    if op == ReduceOp::Avg {
        (got - want).abs() > 1e-2 * want.abs().max(1.0)
    } else {
        got != want
    }
}

/// Result of one measurement on this rank (before the maximum over ranks).
pub struct Measured {
    /// Average seconds per call over the timed loop.
    pub avg_s: f64,
    /// Median seconds of single calls.
    pub p50_s: f64,
    /// Wrong elements in the checked call.
    pub wrong: u64,
}

/// Buffers of one collective at one size (counts follow nccl-tests: `count` is the size of
/// the whole array for allgather, reduce-scatter and all-to-all).
pub(super) struct Case<T> {
    /// Input.
    pub(super) send: Vec<T>,
    /// Output (and input of in-place calls).
    pub(super) recv: Vec<T>,
}

fn call<T: BenchElem>(
    c: &Communicator,
    coll: Collective,
    k: &mut Case<T>,
    op: ReduceOp,
    root: usize,
    in_place: bool,
) -> Result<(), CommError> {
    match coll {
        Collective::AllReduce if in_place => c.all_reduce(&mut k.recv, op),
        Collective::AllReduce => c.all_reduce_into(&k.send, &mut k.recv, op),
        Collective::Broadcast => {
            if !in_place && c.rank() == root {
                k.recv.copy_from_slice(&k.send);
            }
            c.broadcast(&mut k.recv, root)
        }
        Collective::Reduce => {
            if !in_place {
                k.recv.copy_from_slice(&k.send);
            }
            c.reduce(&mut k.recv, op, root)
        }
        Collective::AllGather => c.all_gather(&k.send, &mut k.recv),
        Collective::ReduceScatter => c.reduce_scatter(&k.send, &mut k.recv, op),
        Collective::AllToAll => c.all_to_all(&k.send, &mut k.recv),
        Collective::SendRecv => {
            let partner = c.rank() ^ 1;
            if partner >= c.world() {
                return Ok(());
            }
            if c.rank().is_multiple_of(2) {
                c.send(&k.send, partner)?;
                c.recv(&mut k.recv, partner)
            } else {
                c.recv(&mut k.recv, partner)?;
                c.send(&k.send, partner)
            }
        }
    }
}

pub(super) fn fill<T: BenchElem>(
    c: &Communicator,
    coll: Collective,
    count: usize,
    op: ReduceOp,
) -> Case<T> {
    let (rank, world) = (c.rank(), c.world());
    let (ns, nr) = match coll {
        Collective::AllReduce | Collective::Broadcast | Collective::Reduce => (count, count),
        Collective::AllGather => (count / world, count),
        Collective::ReduceScatter => (count, count / world),
        Collective::AllToAll | Collective::SendRecv => (count, count),
    };
    let send: Vec<T> = (0..ns).map(|i| T::from_f(val(op, rank, i))).collect();
    let recv = match coll {
        Collective::AllReduce | Collective::Reduce | Collective::Broadcast => send.clone(),
        _ => vec![T::from_f(0.0); nr],
    };
    Case { send, recv }
}

pub(super) fn count_wrong<T: BenchElem>(
    c: &Communicator,
    coll: Collective,
    k: &Case<T>,
    op: ReduceOp,
    root: usize,
) -> u64 {
    let (rank, world) = (c.rank(), c.world());
    let n = k.recv.len();
    let bad = |i: usize, want: f64| u64::from(wrong(k.recv[i].to_f(), want, op));
    match coll {
        Collective::AllReduce => (0..n).map(|i| bad(i, reduced::<T>(op, world, i))).sum(),
        Collective::Reduce if rank == root => {
            (0..n).map(|i| bad(i, reduced::<T>(op, world, i))).sum()
        }
        Collective::Reduce => 0,
        Collective::Broadcast => (0..n).map(|i| bad(i, val(op, root, i))).sum(),
        Collective::AllGather => {
            let per = n / world;
            (0..n)
                .map(|i| bad(i, val(op, i / per.max(1), i % per.max(1))))
                .sum()
        }
        Collective::ReduceScatter => (0..n)
            .map(|i| bad(i, reduced::<T>(op, world, rank * n + i)))
            .sum(),
        Collective::SendRecv if rank ^ 1 >= world => 0,
        Collective::SendRecv => (0..n).map(|i| bad(i, val(op, rank ^ 1, i))).sum(),
        Collective::AllToAll => {
            let per = n / world;
            // Block p of recv is block `rank` of rank p's send.
            (0..n)
                .map(|i| bad(i, val(op, i / per.max(1), rank * per + i % per.max(1))))
                .sum()
        }
    }
}

/// What one measurement runs: the collective, its size and settings.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// The collective.
    pub coll: Collective,
    /// Elements (nccl-tests' count: the whole array for all-gather, reduce-scatter, all-to-all).
    pub count: usize,
    /// Reduction.
    pub op: ReduceOp,
    /// Root of rooted collectives.
    pub root: usize,
    /// In place (one buffer) rather than out of place.
    pub in_place: bool,
    /// Warm-up calls.
    pub warm: usize,
    /// Timed calls.
    pub iters: usize,
    /// Whether one call is checked first.
    pub check: bool,
}

/// `warm` calls, a barrier, then `iters` timed calls (each also timed alone), as nccl-tests
/// and the incumbent harness time them; `wrong` is what the checked call found.
pub(super) fn timed<E>(
    c: &Communicator,
    spec: &Spec,
    wrong: u64,
    mut call: impl FnMut() -> Result<(), E>,
) -> Result<Measured, E>
where
    E: From<CommError>,
{
    for _ in 0..spec.warm {
        call()?;
    }
    c.barrier()?;
    let mut times = Vec::with_capacity(spec.iters);
    let t0 = Instant::now();
    for _ in 0..spec.iters {
        let ti = Instant::now();
        call()?;
        times.push(ti.elapsed().as_secs_f64());
    }
    let avg_s = t0.elapsed().as_secs_f64() / spec.iters.max(1) as f64;
    times.sort_by(f64::total_cmp);
    let p50_s = times.get(times.len() / 2).copied().unwrap_or(0.0);
    Ok(Measured {
        avg_s,
        p50_s,
        wrong,
    })
}

/// Checks one call, then times `iters` calls after `warm` warm-up calls.
pub fn measure<T: BenchElem>(c: &Communicator, spec: &Spec) -> Result<Measured, CommError> {
    let Spec {
        coll,
        count,
        op,
        root,
        in_place,
        check,
        ..
    } = *spec;
    let mut k = fill::<T>(c, coll, count, op);
    let mut wrong = 0;
    if check {
        call(c, coll, &mut k, op, root, in_place)?;
        wrong = count_wrong(c, coll, &k, op, root);
    }
    timed(c, spec, wrong, || call(c, coll, &mut k, op, root, in_place))
}
