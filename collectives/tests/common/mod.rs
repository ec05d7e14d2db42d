//! Helpers shared by the integration tests: test values per dtype, the sequential reference,
//! and running one closure per rank on its own thread.
#![allow(dead_code)]

use dtcomm::{Communicator, DType, Element, ReduceOp};

pub mod device;
pub mod procs;
use half::{bf16, f16};

/// Element types the tests can build from small integers and compare.
pub trait TestElem: Element {
    fn from_i(v: i64) -> Self;
    fn to_f(self) -> f64;
}

macro_rules! te_int { ($($t:ty),*) => {$(
    impl TestElem for $t {
        fn from_i(v: i64) -> Self { v as $t }
        fn to_f(self) -> f64 { self as f64 }
    }
)*}; }
te_int!(i8, u8, i32, i64);
impl TestElem for f32 {
    fn from_i(v: i64) -> Self {
        v as f32
    }
    fn to_f(self) -> f64 {
        self as f64
    }
}
impl TestElem for f64 {
    fn from_i(v: i64) -> Self {
        v as f64
    }
    fn to_f(self) -> f64 {
        self
    }
}
impl TestElem for f16 {
    fn from_i(v: i64) -> Self {
        f16::from_f32(v as f32)
    }
    fn to_f(self) -> f64 {
        self.to_f64()
    }
}
impl TestElem for bf16 {
    fn from_i(v: i64) -> Self {
        bf16::from_f32(v as f32)
    }
    fn to_f(self) -> f64 {
        self.to_f64()
    }
}

/// A value every dtype represents exactly, and whose sum/product over 9 ranks stays exact.
pub fn val(op: ReduceOp, rank: usize, i: usize) -> i64 {
    match op {
        ReduceOp::Prod => {
            if (rank + i).is_multiple_of(4) {
                2
            } else {
                1
            }
        }
        _ => ((rank * 7 + i * 3) % 11) as i64,
    }
}

/// The sequential reduction over ranks, in f64 (exact for the values above).
pub fn reference(op: ReduceOp, world: usize, i: usize) -> f64 {
    let vals = (0..world).map(|r| val(op, r, i) as f64);
    match op {
        ReduceOp::Sum => vals.sum(),
        ReduceOp::Avg => vals.sum::<f64>() / world as f64,
        ReduceOp::Prod => vals.product(),
        ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
        ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::Band | ReduceOp::Bor | ReduceOp::Bxor => {
            let f = |a: i64, b: i64| match op {
                ReduceOp::Band => a & b,
                ReduceOp::Bor => a | b,
                _ => a ^ b,
            };
            vals.map(|v| v as i64).reduce(f).unwrap_or(0) as f64
        }
    }
}

/// Checks `got[i]` against the reference; `Avg` of integers truncates, of floats is close.
pub fn check<T: TestElem>(what: &str, op: ReduceOp, world: usize, got: &[T], offset: usize) {
    let is_int = matches!(
        T::DTYPE,
        DType::I8 | DType::U8 | DType::I16 | DType::I32 | DType::I64
    );
    for (k, x) in got.iter().enumerate() {
        let i = offset + k;
        let mut want = reference(op, world, i);
        if op == ReduceOp::Avg && is_int {
            want = want.trunc();
        }
        let ok = if op == ReduceOp::Avg {
            (x.to_f() - want).abs() <= 1e-2 * want.abs().max(1.0)
        } else {
            x.to_f() == want
        };
        assert!(
            ok,
            "{what}: {:?} {op} world {world} element {i}: got {} want {want}",
            T::DTYPE,
            x.to_f()
        );
    }
}

pub fn input<T: TestElem>(op: ReduceOp, rank: usize, count: usize) -> Vec<T> {
    (0..count).map(|i| T::from_i(val(op, rank, i))).collect()
}

/// Runs `f` on every communicator, one thread each, and returns the results in rank order.
pub fn on_ranks<R: Send>(comms: &[Communicator], f: impl Fn(&Communicator) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms.iter().map(|c| s.spawn(|| f(c))).collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

pub const COUNTS: [usize; 8] = [0, 1, 2, 3, 7, 13, 97, 70_001];

/// Runs every non-allreduce collective once on communicator `c` with `count` elements.
pub fn other_collectives<T: TestElem>(c: &Communicator, count: usize) {
    let (rank, world) = (c.rank(), c.world());
    let who = |what: &str| format!("{what} rank {rank} count {count}");
    for root in 0..world {
        // broadcast
        let mut b: Vec<T> = if rank == root {
            input(ReduceOp::Sum, root, count)
        } else {
            vec![T::from_i(99); count]
        };
        c.broadcast(&mut b, root).unwrap();
        assert_eq!(
            b,
            input::<T>(ReduceOp::Sum, root, count),
            "{}",
            who("broadcast")
        );
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
        let mine: Vec<T> = (0..count)
            .map(|i| T::from_i(((rank * 31 + i) % 100) as i64))
            .collect();
        let mut all = if rank == root {
            vec![T::from_i(0); count * world]
        } else {
            Vec::new()
        };
        c.gather(&mine, &mut all, root).unwrap();
        let everyone: Vec<T> = (0..world)
            .flat_map(|p| (0..count).map(move |i| T::from_i(((p * 31 + i) % 100) as i64)))
            .collect();
        if rank == root {
            assert_eq!(all, everyone, "{}", who("gather"));
        }
        let src = if rank == root {
            everyone.clone()
        } else {
            Vec::new()
        };
        let mut part = vec![T::from_i(0); count];
        c.scatter(&src, &mut part, root).unwrap();
        assert_eq!(part, mine, "{}", who("scatter"));
    }
    // all_gather and all_gather_v
    let mine: Vec<T> = (0..count)
        .map(|i| T::from_i(((rank * 31 + i) % 100) as i64))
        .collect();
    let everyone: Vec<T> = (0..world)
        .flat_map(|p| (0..count).map(move |i| T::from_i(((p * 31 + i) % 100) as i64)))
        .collect();
    let mut all = vec![T::from_i(0); count * world];
    c.all_gather(&mine, &mut all).unwrap();
    assert_eq!(all, everyone, "{}", who("all_gather"));
    let counts: Vec<usize> = (0..world).map(|p| (count + p * 5) % 11).collect();
    let mine_v: Vec<T> = (0..counts[rank])
        .map(|i| T::from_i((rank + i) as i64 % 50))
        .collect();
    let mut all_v = vec![T::from_i(0); counts.iter().sum()];
    c.all_gather_v(&mine_v, &mut all_v, &counts).unwrap();
    let want_v: Vec<T> = (0..world)
        .flat_map(|p| (0..counts[p]).map(move |i| T::from_i((p + i) as i64 % 50)))
        .collect();
    assert_eq!(all_v, want_v, "{}", who("all_gather_v"));
    // reduce_scatter
    for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Avg] {
        let send: Vec<T> = input(op, rank, count * world);
        let mut recv = vec![T::from_i(0); count];
        c.reduce_scatter(&send, &mut recv, op).unwrap();
        check(&who("reduce_scatter"), op, world, &recv, rank * count);
    }
    // all_to_all and all_to_all_v
    let code =
        |from: usize, to: usize, i: usize| T::from_i(((from * 10 + to * 3 + i) % 120) as i64);
    let send: Vec<T> = (0..world)
        .flat_map(|to| (0..count).map(move |i| code(rank, to, i)))
        .collect();
    let mut recv = vec![T::from_i(0); count * world];
    c.all_to_all(&send, &mut recv).unwrap();
    let want: Vec<T> = (0..world)
        .flat_map(|from| (0..count).map(move |i| code(from, rank, i)))
        .collect();
    assert_eq!(recv, want, "{}", who("all_to_all"));
    let n = |from: usize, to: usize| (from + 2 * to + count) % 5;
    let sc: Vec<usize> = (0..world).map(|to| n(rank, to)).collect();
    let rc: Vec<usize> = (0..world).map(|from| n(from, rank)).collect();
    let send: Vec<T> = (0..world)
        .flat_map(|to| (0..n(rank, to)).map(move |i| code(rank, to, i)))
        .collect();
    let mut recv = vec![T::from_i(0); rc.iter().sum()];
    c.all_to_all_v(&send, &sc, &mut recv, &rc).unwrap();
    let want: Vec<T> = (0..world)
        .flat_map(|from| (0..n(from, rank)).map(move |i| code(from, rank, i)))
        .collect();
    assert_eq!(recv, want, "{}", who("all_to_all_v"));
    // barrier
    c.barrier().unwrap();
    // send / recv: pairs (even -> odd), then back
    let msg: Vec<T> = (0..count)
        .map(|i| T::from_i(((rank + i) % 60) as i64))
        .collect();
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
        let want: Vec<T> = (0..count)
            .map(|i| T::from_i(((partner + i) % 60) as i64))
            .collect();
        assert_eq!(got, want, "{}", who("send/recv"));
    }
}

/// Allreduce of `count` elements with `op`, checked against the sequential reference.
pub fn allreduce_case<T: TestElem>(c: &Communicator, op: ReduceOp, count: usize) {
    let mut v: Vec<T> = input(op, c.rank(), count);
    c.all_reduce(&mut v, op).unwrap();
    check(
        &format!("all_reduce rank {}", c.rank()),
        op,
        c.world(),
        &v,
        0,
    );
}

/// Out-of-place allreduce: `recv` gets the result, `send` is left alone.
pub fn allreduce_into_case<T: TestElem>(c: &Communicator, op: ReduceOp, count: usize) {
    let send: Vec<T> = input(op, c.rank(), count);
    let mut recv = vec![T::from_i(99); count];
    c.all_reduce_into(&send, &mut recv, op).unwrap();
    check(
        &format!("all_reduce_into rank {}", c.rank()),
        op,
        c.world(),
        &recv,
        0,
    );
    assert_eq!(
        send,
        input::<T>(op, c.rank(), count),
        "all_reduce_into must not touch send"
    );
}

/// Every dtype and op of allreduce for a few counts, then every other collective.
pub fn full_suite(c: &Communicator) {
    use half::{bf16, f16};
    for count in [0, 1, 7, 97, 70_001] {
        for op in ReduceOp::ARITHMETIC {
            allreduce_case::<f32>(c, op, count);
            allreduce_case::<f64>(c, op, count);
            allreduce_case::<f16>(c, op, count);
            allreduce_case::<bf16>(c, op, count);
            allreduce_case::<i8>(c, op, count);
            allreduce_case::<u8>(c, op, count);
            allreduce_case::<i32>(c, op, count);
            allreduce_case::<i64>(c, op, count);
            allreduce_into_case::<f32>(c, op, count);
            allreduce_into_case::<bf16>(c, op, count);
        }
    }
    other_collectives::<f32>(c, 70_001);
    other_collectives::<f64>(c, 13);
    other_collectives::<f16>(c, 13);
    other_collectives::<bf16>(c, 13);
    other_collectives::<i8>(c, 13);
    other_collectives::<u8>(c, 13);
    other_collectives::<i32>(c, 0);
    other_collectives::<i64>(c, 13);
}
