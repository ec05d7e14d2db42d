//! Complex buffers (`complex64`, `complex128`: real part then imaginary part, both floats).
//! A sum (and `Avg`'s sum) is the componentwise float sum, so it runs on the float kernels
//! over the buffer's float view; a product is the complex product. Complex numbers have no
//! order: `Min`/`Max` (and the bitwise operators) are refused by [`ReduceOp::supports`] before
//! a call starts, so they never reach here.

use super::native::{Arith, combine_native};
use crate::op::ReduceOp;

/// A float type a complex number is made of.
pub(crate) trait Component: Arith + std::ops::Sub<Output = Self> {}
impl Component for f32 {}
impl Component for f64 {}

/// `dst = dst (op) src` over interleaved (re, im) pairs of `F`; both slices have an even
/// length. Panics on an operator complex numbers do not have (a bug: the call's check refuses
/// it).
pub(crate) fn combine_complex<F: Component>(op: ReduceOp, dst: &mut [F], src: &[F]) {
    debug_assert!(dst.len() == src.len() && dst.len().is_multiple_of(2));
    match op.combine() {
        ReduceOp::Sum | ReduceOp::Avg => combine_native(ReduceOp::Sum, dst, src),
        ReduceOp::Prod => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src.chunks_exact(2)) {
                let (a, b, c, e) = (d[0], d[1], s[0], s[1]);
                d[0] = F::mul(a, c) - F::mul(b, e);
                d[1] = F::add(F::mul(a, e), F::mul(b, c));
            }
        }
        other => panic!("reduce op {other} reached a complex kernel (refused by its check)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_is_componentwise_and_prod_is_complex() {
        // (1+2i), (3-1i) and (-0.5+4i), (2+2i)
        let mut d = [1.0f32, 2.0, 3.0, -1.0];
        combine_complex(ReduceOp::Sum, &mut d, &[-0.5, 4.0, 2.0, 2.0]);
        assert_eq!(d, [0.5, 6.0, 5.0, 1.0]);
        let mut p = [1.0f64, 2.0, 3.0, -1.0];
        combine_complex(ReduceOp::Prod, &mut p, &[-0.5, 4.0, 2.0, 2.0]);
        // (1+2i)(-0.5+4i) = -0.5 + 4i - i + 8i^2 = -8.5 + 3i; (3-i)(2+2i) = 6 + 6i - 2i + 2 = 8 + 4i
        assert_eq!(p, [-8.5, 3.0, 8.0, 4.0]);
        let mut i = [0.0f64, 1.0];
        combine_complex(ReduceOp::Prod, &mut i, &[0.0, 1.0]);
        assert_eq!(i, [-1.0, 0.0], "i * i = -1");
    }

    #[test]
    #[should_panic(expected = "max")]
    fn max_never_runs() {
        combine_complex(ReduceOp::Max, &mut [1.0f32, 0.0], &[2.0, 0.0]);
    }
}
