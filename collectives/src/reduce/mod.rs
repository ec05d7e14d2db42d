//! Reduction kernels: `dst[i] = dst[i] (op) src[i]` over byte buffers of one dtype.
//!
//! The loops are plain zips that LLVM vectorises (SSE2 baseline); on x86-64 a second copy of
//! each loop is compiled with AVX2 enabled and picked at run time. f16 and bf16 are widened
//! to f32 in blocks, combined, and rounded back once per step (`half.rs`); `native.rs` holds
//! the native-type loops.
//! `reduce_kernel_perf` in `benches/` measures them.

use ::half::{bf16, f16};

use crate::dtype::{DType, cast_slice, cast_slice_mut};
use crate::op::ReduceOp;

mod boolean;
mod complex;
mod half;
mod native;

pub(crate) use native::{Arith, combine_native};

use self::boolean::combine_bool;
use self::complex::combine_complex;
use self::half::{combine_bf16, combine_f16};

/// `dst = dst (op) src` elementwise; both are byte views of `dtype` elements of equal length.
/// `op` must be one `dtype` supports ([`ReduceOp::supports`], checked before a call starts).
pub(crate) fn reduce_bytes(dtype: DType, op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "reduce of unequal lengths");
    match dtype {
        DType::F32 => combine_native::<f32>(op, cast_slice_mut(dst), cast_slice(src)),
        DType::F64 => combine_native::<f64>(op, cast_slice_mut(dst), cast_slice(src)),
        DType::I8 => combine_native::<i8>(op, cast_slice_mut(dst), cast_slice(src)),
        DType::U8 => combine_native::<u8>(op, cast_slice_mut(dst), cast_slice(src)),
        DType::I32 => combine_native::<i32>(op, cast_slice_mut(dst), cast_slice(src)),
        DType::I64 => combine_native::<i64>(op, cast_slice_mut(dst), cast_slice(src)),
        DType::I16 => combine_native::<i16>(op, cast_slice_mut(dst), cast_slice(src)),
        DType::F16 => combine_f16(op, cast_slice_mut(dst), cast_slice(src)),
        DType::BF16 => combine_bf16(op, cast_slice_mut(dst), cast_slice(src)),
        DType::C64 => combine_complex::<f32>(op, cast_slice_mut(dst), cast_slice(src)),
        DType::C128 => combine_complex::<f64>(op, cast_slice_mut(dst), cast_slice(src)),
        DType::Bool => combine_bool(op, cast_slice_mut(dst), cast_slice(src)),
    }
}

/// Combines `src` into `dst` elementwise on this rank (`dst[i] = dst[i] op src[i]`; `Avg`
/// combines by sum), with the same vectorised kernels the collectives use.
///
/// Panics if `op` is not defined on `T` ([`ReduceOp::supports`]: the bitwise operators on a
/// float type).
///
/// ```
/// let mut a = [1.0f32, 5.0];
/// dtcomm::reduce_local(dtcomm::ReduceOp::Max, &mut a, &[3.0, 2.0]);
/// assert_eq!(a, [3.0, 5.0]);
/// ```
pub fn reduce_local<T: crate::Element>(op: ReduceOp, dst: &mut [T], src: &[T]) {
    if let Err(why) = op.supports(T::DTYPE) {
        panic!("reduce_local: {why}");
    }
    reduce_bytes(
        T::DTYPE,
        op,
        crate::dtype::as_bytes_mut(dst),
        crate::dtype::as_bytes(src),
    );
}

fn div_native<T: Arith>(buf: &mut [T], n: usize) {
    for x in buf {
        *x = T::div_n(*x, n);
    }
}

/// Divides every element by `n` (the last step of `Avg`; a complex number's two components
/// are divided). Bool has no `Avg` ([`ReduceOp::supports`]): its bytes are left as they are.
pub(crate) fn divide_bytes(dtype: DType, buf: &mut [u8], n: usize) {
    match dtype {
        DType::C64 => div_native::<f32>(cast_slice_mut(buf), n),
        DType::C128 => div_native::<f64>(cast_slice_mut(buf), n),
        DType::Bool => {}
        DType::F32 => div_native::<f32>(cast_slice_mut(buf), n),
        DType::F64 => div_native::<f64>(cast_slice_mut(buf), n),
        DType::I8 => div_native::<i8>(cast_slice_mut(buf), n),
        DType::U8 => div_native::<u8>(cast_slice_mut(buf), n),
        DType::I32 => div_native::<i32>(cast_slice_mut(buf), n),
        DType::I64 => div_native::<i64>(cast_slice_mut(buf), n),
        DType::I16 => div_native::<i16>(cast_slice_mut(buf), n),
        DType::F16 => {
            for x in cast_slice_mut::<f16>(buf) {
                *x = f16::from_f32(x.to_f32() / n as f32);
            }
        }
        DType::BF16 => {
            for x in cast_slice_mut::<bf16>(buf) {
                *x = bf16::from_f32(x.to_f32() / n as f32);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{as_bytes, as_bytes_mut};

    #[test]
    fn every_op_on_f32_and_i8() {
        let src = [1.0f32, -2.0, 3.0, 8.0, 0.5];
        for (op, want) in [
            (ReduceOp::Sum, [3.0f32, 0.0, 4.0, 12.0, 1.0]),
            (ReduceOp::Prod, [2.0, -4.0, 3.0, 32.0, 0.25]),
            (ReduceOp::Min, [1.0, -2.0, 1.0, 4.0, 0.5]),
            (ReduceOp::Max, [2.0, 2.0, 3.0, 8.0, 0.5]),
        ] {
            let mut dst = [2.0f32, 2.0, 1.0, 4.0, 0.5];
            reduce_bytes(DType::F32, op, as_bytes_mut(&mut dst), as_bytes(&src));
            assert_eq!(dst, want, "{op}");
        }
        let mut d = [100i8, -128, 5];
        reduce_bytes(
            DType::I8,
            ReduceOp::Sum,
            as_bytes_mut(&mut d),
            as_bytes(&[100i8, -1, -7]),
        );
        assert_eq!(d, [-56, 127, -2], "integers wrap");
        divide_bytes(DType::I8, as_bytes_mut(&mut d), 2);
        assert_eq!(d, [-28, 63, -1]);
        let mut h = [30_000i16, -5, 7];
        let s = [10_000i16, -3, 9];
        reduce_bytes(
            DType::I16,
            ReduceOp::Sum,
            as_bytes_mut(&mut h),
            as_bytes(&s),
        );
        assert_eq!(h, [-25_536, -8, 16], "int16 wraps at 16 bits");
        reduce_bytes(
            DType::I16,
            ReduceOp::Max,
            as_bytes_mut(&mut h),
            as_bytes(&s),
        );
        assert_eq!(h, [10_000, -3, 16]);
        divide_bytes(DType::I16, as_bytes_mut(&mut h), 2);
        assert_eq!(h, [5_000, -1, 8]);
    }

    #[test]
    fn complex_and_bool_by_dtype_and_integer_bitwise() {
        // complex64 (1+2i, 3-4i) summed with (0.5+0.5i, 1+1i), then averaged over 2
        let mut c = [1.0f32, 2.0, 3.0, -4.0];
        let s = [0.5f32, 0.5, 1.0, 1.0];
        reduce_bytes(
            DType::C64,
            ReduceOp::Avg,
            as_bytes_mut(&mut c),
            as_bytes(&s),
        );
        divide_bytes(DType::C64, as_bytes_mut(&mut c), 2);
        assert_eq!(c, [0.75, 1.25, 2.0, -1.5]);
        let mut z = [2.0f64, 3.0];
        reduce_bytes(
            DType::C128,
            ReduceOp::Prod,
            as_bytes_mut(&mut z),
            as_bytes(&[4.0f64, -1.0]),
        );
        assert_eq!(z, [11.0, 10.0], "(2+3i)(4-i) = 11+10i");
        let mut b = [1u8, 0, 1];
        reduce_bytes(DType::Bool, ReduceOp::Sum, &mut b, &[0, 0, 1]);
        assert_eq!(b, [1, 0, 1]);
        reduce_bytes(DType::Bool, ReduceOp::Bxor, &mut b, &[1, 1, 1]);
        assert_eq!(b, [0, 1, 0]);
        let mut i = [0b1100i32, -1, 6];
        let j = [0b1010i32, 5, 3];
        for (op, want) in [
            (ReduceOp::Band, [0b1000i32, 5, 2]),
            (ReduceOp::Bor, [0b1110, -1, 7]),
            (ReduceOp::Bxor, [0b0110, -6, 5]),
        ] {
            let mut d = i;
            reduce_bytes(DType::I32, op, as_bytes_mut(&mut d), as_bytes(&j));
            assert_eq!(d, want, "{op}");
        }
        reduce_local(ReduceOp::Bxor, &mut i, &j);
        assert_eq!(i, [0b0110, -6, 5]);
        let mut u = [0xF0u8];
        reduce_local(ReduceOp::Band, &mut u, &[0x3C]);
        assert_eq!(u, [0x30]);
    }

    #[test]
    #[should_panic(expected = "not supported for float")]
    fn reduce_local_refuses_bitwise_on_floats() {
        reduce_local(ReduceOp::Band, &mut [1.0f32], &[2.0]);
    }

    #[test]
    fn half_types_widen_and_round() {
        let mut d: Vec<f16> = (0..1000).map(|i| f16::from_f32((i % 7) as f32)).collect();
        let s: Vec<f16> = (0..1000).map(|i| f16::from_f32((i % 5) as f32)).collect();
        reduce_bytes(
            DType::F16,
            ReduceOp::Max,
            as_bytes_mut(&mut d),
            as_bytes(&s),
        );
        for (i, x) in d.iter().enumerate() {
            assert_eq!(x.to_f32(), ((i % 7).max(i % 5)) as f32);
        }
        let mut b = vec![bf16::from_f32(3.0); 300];
        reduce_bytes(
            DType::BF16,
            ReduceOp::Prod,
            as_bytes_mut(&mut b),
            as_bytes(&vec![bf16::from_f32(-2.0); 300]),
        );
        assert!(b.iter().all(|x| x.to_f32() == -6.0));
    }
}
