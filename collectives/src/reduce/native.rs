//! The native-type loops: plain zips LLVM vectorises, compiled twice on x86-64 (baseline and
//! AVX2, picked at run time).

use crate::op::ReduceOp;

/// Arithmetic the kernels need. Integers wrap; float min/max use plain comparisons (which
/// vectorise to `minps`/`maxps`). The bitwise operations act on the bits; on floats they are
/// never asked for ([`ReduceOp::supports`] refuses them first) and act on the bit patterns.
pub(crate) trait Arith: Copy {
    fn add(a: Self, b: Self) -> Self;
    fn mul(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
    fn div_n(a: Self, n: usize) -> Self;
    fn band(a: Self, b: Self) -> Self;
    fn bor(a: Self, b: Self) -> Self;
    fn bxor(a: Self, b: Self) -> Self;
}

macro_rules! arith_int {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self { if b < a { b } else { a } }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self { if b > a { b } else { a } }
            #[inline(always)]
            fn div_n(a: Self, n: usize) -> Self { a / (n as $t) }
            #[inline(always)]
            fn band(a: Self, b: Self) -> Self { a & b }
            #[inline(always)]
            fn bor(a: Self, b: Self) -> Self { a | b }
            #[inline(always)]
            fn bxor(a: Self, b: Self) -> Self { a ^ b }
        }
    )*};
}
arith_int!(i8, u8, i16, i32, i64);

macro_rules! arith_float {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self { a + b }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self { a * b }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self { if b < a { b } else { a } }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self { if b > a { b } else { a } }
            #[inline(always)]
            fn div_n(a: Self, n: usize) -> Self { a / (n as $t) }
            #[inline(always)]
            fn band(a: Self, b: Self) -> Self { <$t>::from_bits(a.to_bits() & b.to_bits()) }
            #[inline(always)]
            fn bor(a: Self, b: Self) -> Self { <$t>::from_bits(a.to_bits() | b.to_bits()) }
            #[inline(always)]
            fn bxor(a: Self, b: Self) -> Self { <$t>::from_bits(a.to_bits() ^ b.to_bits()) }
        }
    )*};
}
arith_float!(f32, f64);

#[inline(always)]
fn zip_apply<T: Arith>(dst: &mut [T], src: &[T], f: impl Fn(T, T) -> T) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f(*d, *s);
    }
}

#[inline(always)]
fn combine<T: Arith>(op: ReduceOp, dst: &mut [T], src: &[T]) {
    match op.combine() {
        ReduceOp::Sum | ReduceOp::Avg => zip_apply(dst, src, T::add),
        ReduceOp::Prod => zip_apply(dst, src, T::mul),
        ReduceOp::Min => zip_apply(dst, src, T::min),
        ReduceOp::Max => zip_apply(dst, src, T::max),
        ReduceOp::Band => zip_apply(dst, src, T::band),
        ReduceOp::Bor => zip_apply(dst, src, T::bor),
        ReduceOp::Bxor => zip_apply(dst, src, T::bxor),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn combine_avx2<T: Arith>(op: ReduceOp, dst: &mut [T], src: &[T]) {
    combine(op, dst, src);
}

/// Combines native slices of equal length, with the widest vector unit available.
pub(crate) fn combine_native<T: Arith>(op: ReduceOp, dst: &mut [T], src: &[T]) {
    debug_assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above), which is all the
        // `target_feature` function requires.
        unsafe { combine_avx2(op, dst, src) };
        return;
    }
    combine(op, dst, src);
}
