//! Helpers shared by the integration tests: test values per dtype, the sequential reference,
//! and running one closure per rank on its own thread.
#![allow(dead_code)]

use dtcomm::{Communicator, DType, Element, ReduceOp};
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
    fn from_i(v: i64) -> Self { v as f32 }
    fn to_f(self) -> f64 { self as f64 }
}
impl TestElem for f64 {
    fn from_i(v: i64) -> Self { v as f64 }
    fn to_f(self) -> f64 { self }
}
impl TestElem for f16 {
    fn from_i(v: i64) -> Self { f16::from_f32(v as f32) }
    fn to_f(self) -> f64 { self.to_f64() }
}
impl TestElem for bf16 {
    fn from_i(v: i64) -> Self { bf16::from_f32(v as f32) }
    fn to_f(self) -> f64 { self.to_f64() }
}

/// A value every dtype represents exactly, and whose sum/product over 9 ranks stays exact.
pub fn val(op: ReduceOp, rank: usize, i: usize) -> i64 {
    match op {
        ReduceOp::Prod => if (rank + i) % 4 == 0 { 2 } else { 1 },
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
    }
}

/// Checks `got[i]` against the reference; `Avg` of integers truncates, of floats is close.
pub fn check<T: TestElem>(what: &str, op: ReduceOp, world: usize, got: &[T], offset: usize) {
    let is_int = matches!(T::DTYPE, DType::I8 | DType::U8 | DType::I32 | DType::I64);
    for (k, x) in got.iter().enumerate() {
        let i = offset + k;
        let mut want = reference(op, world, i);
        if op == ReduceOp::Avg && is_int {
            want = want.trunc();
        }
        let ok = if op == ReduceOp::Avg { (x.to_f() - want).abs() <= 1e-2 * want.abs().max(1.0) } else { x.to_f() == want };
        assert!(ok, "{what}: {:?} {op} world {world} element {i}: got {} want {want}", T::DTYPE, x.to_f());
    }
}

pub fn input<T: TestElem>(op: ReduceOp, rank: usize, count: usize) -> Vec<T> {
    (0..count).map(|i| T::from_i(val(op, rank, i))).collect()
}

/// Runs `f` on every communicator, one thread each, and returns the results in rank order.
pub fn on_ranks<R: Send>(comms: &[Communicator], f: impl Fn(&Communicator) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms.iter().map(|c| s.spawn(|| f(c))).collect();
        hs.into_iter().map(|h| h.join().expect("rank thread panicked")).collect()
    })
}

pub const COUNTS: [usize; 8] = [0, 1, 2, 3, 7, 13, 97, 70_001];
