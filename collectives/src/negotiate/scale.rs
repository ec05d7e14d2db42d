//! Pre- and post-scaling of a buffer, in the precision Horovod uses: `f32` for 16- and 32-bit
//! floats, `f64` for doubles and for integers (then truncated toward zero).

use half::{bf16, f16};

use crate::DType;

/// Multiplies every element of `bytes` (native-endian elements of `dtype`) by `factor`.
pub fn scale(bytes: &mut [u8], dtype: DType, factor: f64) {
    if factor == 1.0 {
        return;
    }
    macro_rules! each {
        ($t:ty, $n:expr, |$x:ident| $body:expr) => {
            for c in bytes.chunks_exact_mut($n) {
                let $x = <$t>::from_ne_bytes(c.try_into().expect("element"));
                c.copy_from_slice(&($body).to_ne_bytes());
            }
        };
    }
    match dtype {
        DType::F32 => each!(f32, 4, |x| x * factor as f32),
        DType::F64 => each!(f64, 8, |x| x * factor),
        DType::F16 => each!(u16, 2, |x| f16::from_f32(
            f16::from_bits(x).to_f32() * factor as f32
        )
        .to_bits()),
        DType::BF16 => each!(u16, 2, |x| bf16::from_f32(
            bf16::from_bits(x).to_f32() * factor as f32
        )
        .to_bits()),
        DType::I32 => each!(i32, 4, |x| (f64::from(x) * factor) as i32),
        DType::I64 => each!(i64, 8, |x| (x as f64 * factor) as i64),
        DType::I16 => each!(i16, 2, |x| (f64::from(x) * factor) as i16),
        DType::I8 => each!(i8, 1, |x| (f64::from(x) * factor) as i8),
        DType::U8 => each!(u8, 1, |x| (f64::from(x) * factor) as u8),
        // both components of a complex number; a bool stays true unless scaled by zero
        DType::C64 => each!(f32, 4, |x| x * factor as f32),
        DType::C128 => each!(f64, 8, |x| x * factor),
        DType::Bool => each!(u8, 1, |x| u8::from(x != 0 && factor != 0.0)),
    }
}
