//! Element types: the [`DType`] tag that travels in frame headers and the [`Element`] trait
//! that ties a Rust type to it.

use std::fmt;

use half::{bf16, f16};

dt_rdzv_proto::wire_enum! {
    /// The element type of a buffer. Its `u8` value goes into every data frame header.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum DType: u8 {
        /// 32-bit IEEE float (`float`).
        F32 = 1 => "float" | "f32" | "float32",
        /// 64-bit IEEE float (`double`).
        F64 = 2 => "double" | "f64" | "float64",
        /// 16-bit IEEE float (`half`).
        F16 = 3 => "half" | "f16" | "float16",
        /// bfloat16 (`bfloat16`).
        BF16 = 4 => "bfloat16" | "bf16",
        /// Signed 8-bit integer (`int8`).
        I8 = 5 => "int8" | "i8" | "char",
        /// Unsigned 8-bit integer (`uint8`).
        U8 = 6 => "uint8" | "u8",
        /// Signed 32-bit integer (`int32`).
        I32 = 7 => "int32" | "i32" | "int",
        /// Signed 64-bit integer (`int64`).
        I64 = 8 => "int64" | "i64" | "long",
        /// Signed 16-bit integer (`int16`).
        I16 = 9 => "int16" | "i16" | "short",
        /// Complex number of two 32-bit floats, real part first (`complex64`).
        C64 = 10 => "complex64" | "c64" | "cfloat",
        /// Complex number of two 64-bit floats, real part first (`complex128`).
        C128 = 11 => "complex128" | "c128" | "cdouble",
        /// Boolean, one byte holding 0 or 1 (`bool`).
        Bool = 12 => "bool",
    }
    /// Every dtype, in tag order.
    pub const ALL;
    /// The name nccl-tests prints (`float`, `half`, `bfloat16`, `int32`, ...).
    pub const fn name;
    /// The dtype of a wire number (the `u8` value above, which the C ABI's `DTCOMM_FLOAT32`
    /// .. `DTCOMM_BOOL` and frame headers carry); `None` for a number no dtype has.
    pub const fn from_u8(code);
    /// Parses a name as nccl-tests spells it, or the Rust/torch spelling (`f32`, `float32`).
    pub fn parse(name);
}

impl DType {
    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 | DType::C64 => 8,
            DType::C128 => 16,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// The alignment a buffer of this type needs: its size, or for complex types the size of
    /// one component (numpy and C align `complex128` to 8 bytes).
    pub const fn align(self) -> usize {
        match self {
            DType::C64 => 4,
            DType::C128 => 8,
            d => d.size(),
        }
    }

    /// Whether this is a complex type (two floats per element).
    pub const fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A plain-old-data element type the collectives accept: `f32`, `f64`, `half::f16`,
/// `half::bf16`, `i8`, `u8`, `i16`, `i32`, `i64`. (Complex and bool buffers have no Rust type
/// here: they travel as raw buffers tagged [`DType::C64`], [`DType::C128`], [`DType::Bool`].)
/// Sealed: every bit pattern is a valid value and
/// the type has no padding, which is what lets the engine move it as bytes.
pub trait Element: sealed::Sealed + Copy + Send + Sync + PartialEq + fmt::Debug + 'static {
    /// The tag of this type.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}
element!(f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, i8 => I8, u8 => U8, i32 => I32, i64 => I64, i16 => I16);

/// Views a slice of elements as bytes.
pub fn as_bytes<T: Element>(s: &[T]) -> &[u8] {
    // SAFETY: `T` is one of the sealed plain-old-data types (no padding, no invalid bit
    // patterns); the byte view covers exactly the same memory and lifetime.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

/// Views a mutable slice of elements as bytes.
pub fn as_bytes_mut<T: Element>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; every byte pattern written through the view is a valid `T`.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

/// Views bytes as elements. Panics if `b` is misaligned for `T` or not a multiple of its size
/// (the engine only hands out element-aligned ranges of element buffers, so it never is).
pub(crate) fn cast_slice<T: Element>(b: &[u8]) -> &[T] {
    // SAFETY: every bit pattern is a valid `T`; `align_to` only yields the aligned middle.
    let (pre, mid, post) = unsafe { b.align_to::<T>() };
    assert!(
        pre.is_empty() && post.is_empty(),
        "misaligned element buffer"
    );
    mid
}

/// Mutable twin of [`cast_slice`].
pub(crate) fn cast_slice_mut<T: Element>(b: &mut [u8]) -> &mut [T] {
    // SAFETY: as in `cast_slice`.
    let (pre, mid, post) = unsafe { b.align_to_mut::<T>() };
    assert!(
        pre.is_empty() && post.is_empty(),
        "misaligned element buffer"
    );
    mid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_roundtrip_and_names_parse() {
        for d in DType::ALL {
            assert_eq!(DType::from_u8(d as u8), Some(d));
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        assert_eq!(DType::from_u8(0), None);
        assert_eq!(DType::from_u8(13), None);
        assert_eq!(
            (DType::C64 as u8, DType::C128 as u8, DType::Bool as u8),
            (10, 11, 12)
        );
        assert_eq!(
            (DType::C64.size(), DType::C128.size(), DType::Bool.size()),
            (8, 16, 1)
        );
        assert_eq!((DType::C64.align(), DType::C128.align()), (4, 8));
        assert_eq!(<bf16 as Element>::DTYPE.size(), 2);
    }

    #[test]
    fn table_round_trips() {
        let mut codes = std::collections::HashSet::new();
        assert_eq!(DType::SPELLINGS.len(), DType::ALL.len());
        for (&(d, spellings), all) in DType::SPELLINGS.iter().zip(DType::ALL) {
            assert_eq!(d, all);
            assert!(codes.insert(d as u8), "{d:?}: code {} twice", d as u8);
            assert_eq!(DType::from_u8(d as u8), Some(d));
            assert_eq!(spellings[0], d.name());
            assert_eq!(d.to_string(), d.name());
            for s in spellings {
                assert_eq!(DType::parse(s), Some(d), "{s}");
                assert_eq!(DType::parse(&s.to_ascii_uppercase()), Some(d), "{s}");
            }
        }
        assert_eq!(DType::parse("Float32"), Some(DType::F32));
        assert_eq!(DType::parse("cdouble"), Some(DType::C128));
        assert_eq!(DType::parse("float128"), None);
        assert_eq!(DType::parse(""), None);
    }
}
