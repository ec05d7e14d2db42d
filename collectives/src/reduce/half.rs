//! Combining f16 and bf16 buffers: widen a block to f32, combine with the f32 kernel, round
//! back to nearest-even. bf16 conversions are bit shifts written so LLVM vectorises them; f16
//! uses the F16C instructions (`vcvtph2ps`/`vcvtps2ph`) when the CPU has them, else `half`.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use super::native::combine_native;
use crate::op::ReduceOp;

const BLOCK: usize = 256;

#[inline(always)]
fn bf16_widen(src: &[bf16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits(u32::from(s.to_bits()) << 16);
    }
}

#[inline(always)]
fn bf16_narrow(src: &[f32], dst: &mut [bf16]) {
    for (d, s) in dst.iter_mut().zip(src) {
        let b = s.to_bits();
        // Round to nearest, ties to even; NaNs stay quiet NaNs (branch-free, so it vectorises).
        let rounded = (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16;
        let quiet_nan = ((b >> 16) as u16) | 0x40;
        *d = bf16::from_bits(if s.is_nan() { quiet_nan } else { rounded });
    }
}

#[inline(always)]
fn bf16_blocks(op: ReduceOp, dst: &mut [bf16], src: &[bf16]) {
    let mut a = [0f32; BLOCK];
    let mut b = [0f32; BLOCK];
    for (d, s) in dst.chunks_mut(BLOCK).zip(src.chunks(BLOCK)) {
        let n = d.len();
        bf16_widen(d, &mut a[..n]);
        bf16_widen(s, &mut b[..n]);
        combine_native(op, &mut a[..n], &b[..n]);
        bf16_narrow(&a[..n], d);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn bf16_blocks_avx2(op: ReduceOp, dst: &mut [bf16], src: &[bf16]) {
    bf16_blocks(op, dst, src);
}

/// `dst = dst (op) src` for bf16.
pub(crate) fn combine_bf16(op: ReduceOp, dst: &mut [bf16], src: &[bf16]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present (checked just above).
        unsafe { bf16_blocks_avx2(op, dst, src) };
        return;
    }
    bf16_blocks(op, dst, src);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
fn f16_blocks_f16c(op: ReduceOp, dst: &mut [f16], src: &[f16]) {
    use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_storeu_si128, _mm256_cvtph_ps, _mm256_cvtps_ph,
    };
    use std::arch::x86_64::{_mm256_loadu_ps, _mm256_storeu_ps};
    let widen = |s: &[f16], d: &mut [f32]| {
        let full = s.len() / 8 * 8;
        for i in (0..full).step_by(8) {
            // SAFETY: i + 8 <= len of both slices; unaligned loads and stores.
            unsafe {
                let h = _mm_loadu_si128(s.as_ptr().add(i).cast::<__m128i>());
                _mm256_storeu_ps(d.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
        }
        s[full..].convert_to_f32_slice(&mut d[full..s.len()]);
    };
    let mut a = [0f32; BLOCK];
    let mut b = [0f32; BLOCK];
    for (d, s) in dst.chunks_mut(BLOCK).zip(src.chunks(BLOCK)) {
        let n = d.len();
        widen(d, &mut a[..n]);
        widen(s, &mut b[..n]);
        combine_native(op, &mut a[..n], &b[..n]);
        let full = n / 8 * 8;
        for i in (0..full).step_by(8) {
            // SAFETY: i + 8 <= n for `a` and `d`; unaligned loads and stores. Rounding mode 0
            // is round to nearest even.
            unsafe {
                let v = _mm256_loadu_ps(a.as_ptr().add(i));
                _mm_storeu_si128(
                    d.as_mut_ptr().add(i).cast::<__m128i>(),
                    _mm256_cvtps_ph::<0>(v),
                );
            }
        }
        d[full..].convert_from_f32_slice(&a[full..n]);
    }
}

fn f16_blocks_portable(op: ReduceOp, dst: &mut [f16], src: &[f16]) {
    let mut a = [0f32; BLOCK];
    let mut b = [0f32; BLOCK];
    for (d, s) in dst.chunks_mut(BLOCK).zip(src.chunks(BLOCK)) {
        let n = d.len();
        d.convert_to_f32_slice(&mut a[..n]);
        s.convert_to_f32_slice(&mut b[..n]);
        combine_native(op, &mut a[..n], &b[..n]);
        d.convert_from_f32_slice(&a[..n]);
    }
}

/// `dst = dst (op) src` for f16.
pub(crate) fn combine_f16(op: ReduceOp, dst: &mut [f16], src: &[f16]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: AVX2 and F16C are present (checked just above).
        unsafe { f16_blocks_f16c(op, dst, src) };
        return;
    }
    f16_blocks_portable(op, dst, src);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_match_half_on_every_f16_and_tricky_bf16() {
        // Every f16 bit pattern, summed with a fixed value, against half's scalar conversion.
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let other: Vec<f16> = (0..=u16::MAX)
            .map(|i| f16::from_f32((i % 97) as f32 * 0.37))
            .collect();
        let mut fast = all.clone();
        combine_f16(ReduceOp::Sum, &mut fast, &other);
        let mut slow = all.clone();
        f16_blocks_portable(ReduceOp::Sum, &mut slow, &other);
        for (i, (a, b)) in fast.iter().zip(&slow).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "f16 pattern {i:#x}: {a} vs {b}"
            );
        }
        // bf16: rounding ties to even, NaN, infinities, against half's bf16::from_f32.
        let xs = [
            1.0f32,
            f32::from_bits(0x3F80_8000), // a tie: rounds to even (1.0)
            f32::from_bits(0x3F81_8000), // a tie: rounds to even (1.015625)
            -3.3e38,
            f32::INFINITY,
            f32::NAN,
            1e-40,
            0.1,
            65504.0,
        ];
        let mut buf = [0f32; 9];
        for (x, y) in xs.iter().zip(xs.iter().rev()) {
            let mut d = [bf16::from_f32(*x)];
            combine_bf16(ReduceOp::Sum, &mut d, &[bf16::from_f32(*y)]);
            let want = bf16::from_f32(bf16::from_f32(*x).to_f32() + bf16::from_f32(*y).to_f32());
            assert!(
                d[0].to_bits() == want.to_bits() || (d[0].is_nan() && want.is_nan()),
                "{x} + {y}: {} vs {want}",
                d[0]
            );
        }
        bf16_widen(&[bf16::from_f32(2.5); 9], &mut buf);
        assert!(buf.iter().all(|v| *v == 2.5));
    }
}
