//! Bool buffers: one byte per element, 0 or 1 (torch's `bool`). As gloo combines them: a sum
//! is a logical or, a product a logical and, `Max` is or and `Min` is and, and the bitwise
//! operators act on the 0/1 values. Any non-zero byte counts as true and results are 0 or 1.
//! A mean of bools is not defined: `Avg` is refused by [`ReduceOp::supports`] first.

use crate::op::ReduceOp;

#[inline(always)]
fn zip(dst: &mut [u8], src: &[u8], f: impl Fn(bool, bool) -> bool) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = u8::from(f(*d != 0, *s != 0));
    }
}

/// `dst = dst (op) src` over bool bytes. Panics on `Avg` (a bug: the call's check refuses it).
pub(crate) fn combine_bool(op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    match op {
        ReduceOp::Sum | ReduceOp::Max | ReduceOp::Bor => zip(dst, src, |a, b| a | b),
        ReduceOp::Prod | ReduceOp::Min | ReduceOp::Band => zip(dst, src, |a, b| a & b),
        ReduceOp::Bxor => zip(dst, src, |a, b| a ^ b),
        ReduceOp::Avg => panic!("reduce op avg reached the bool kernel (refused by its check)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_ops_on_every_pair() {
        let a = [0u8, 0, 1, 1, 7];
        let b = [0u8, 1, 0, 1, 1];
        for (op, want) in [
            (ReduceOp::Sum, [0u8, 1, 1, 1, 1]),
            (ReduceOp::Max, [0, 1, 1, 1, 1]),
            (ReduceOp::Bor, [0, 1, 1, 1, 1]),
            (ReduceOp::Prod, [0, 0, 0, 1, 1]),
            (ReduceOp::Min, [0, 0, 0, 1, 1]),
            (ReduceOp::Band, [0, 0, 0, 1, 1]),
            (ReduceOp::Bxor, [0, 1, 1, 0, 0]),
        ] {
            let mut d = a;
            combine_bool(op, &mut d, &b);
            assert_eq!(d, want, "{op}");
        }
    }
}
