//! Reduction operators.

use std::fmt;

use crate::dtype::DType;

/// How a reduction combines elements. `Avg` is a sum divided by the world size at the end
/// (integer division for integer types). The bitwise operators take integer and bool buffers
/// only; [`ReduceOp::supports`] says which operator a dtype takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReduceOp {
    /// Sum (integers wrap on overflow).
    Sum = 1,
    /// Product (integers wrap on overflow).
    Prod = 2,
    /// Minimum.
    Min = 3,
    /// Maximum.
    Max = 4,
    /// Mean over ranks.
    Avg = 5,
    /// Bitwise and (integers and bool).
    Band = 6,
    /// Bitwise or (integers and bool).
    Bor = 7,
    /// Bitwise exclusive or (integers and bool).
    Bxor = 8,
}

impl ReduceOp {
    /// Every operator.
    pub const ALL: [ReduceOp; 8] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
        ReduceOp::Band,
        ReduceOp::Bor,
        ReduceOp::Bxor,
    ];

    /// The arithmetic operators, which every real and integer dtype takes (not the bitwise
    /// ones).
    pub const ARITHMETIC: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];

    /// The name nccl-tests prints.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
            ReduceOp::Band => "band",
            ReduceOp::Bor => "bor",
            ReduceOp::Bxor => "bxor",
        }
    }

    /// Whether this is one of the bitwise operators.
    pub const fn is_bitwise(self) -> bool {
        matches!(self, ReduceOp::Band | ReduceOp::Bor | ReduceOp::Bxor)
    }

    /// Whether this operator is defined on `dtype`, as torch and gloo define them: complex
    /// types have no order (no `Min`/`Max`), bool has no mean (no `Avg`), and the bitwise
    /// operators take integers and bool only. `Err` says why, to be wrapped with the rank and
    /// call; every rank answers alike, so a refused call is refused everywhere before anything
    /// is sent.
    pub fn supports(self, dtype: DType) -> Result<(), String> {
        let floating = matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
        let why = match self {
            ReduceOp::Min | ReduceOp::Max if dtype.is_complex() => "complex numbers have no order",
            ReduceOp::Avg if dtype == DType::Bool => "bool has no mean",
            ReduceOp::Band | ReduceOp::Bor | ReduceOp::Bxor if floating || dtype.is_complex() => {
                "bitwise operators take integer and bool buffers only"
            }
            _ => return Ok(()),
        };
        Err(format!(
            "reduce op {self} is not supported for {dtype} ({why})"
        ))
    }

    /// Parses a name (`sum`, `prod`, `min`, `max`, `avg`, `band`, `bor`, `bxor`).
    pub fn parse(s: &str) -> Option<ReduceOp> {
        ReduceOp::ALL
            .iter()
            .copied()
            .find(|o| o.name().eq_ignore_ascii_case(s))
    }

    pub(crate) fn from_u8(v: u8) -> Option<ReduceOp> {
        ReduceOp::ALL.iter().copied().find(|o| *o as u8 == v)
    }

    /// The operator partial results are combined with (`Avg` combines by `Sum`).
    pub(crate) fn combine(self) -> ReduceOp {
        if self == ReduceOp::Avg {
            ReduceOp::Sum
        } else {
            self
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supports_follows_torch() {
        for d in DType::ALL {
            assert!(ReduceOp::Sum.supports(d).is_ok(), "{d}");
            assert!(ReduceOp::Prod.supports(d).is_ok(), "{d}");
        }
        let e = ReduceOp::Max.supports(DType::C64).unwrap_err();
        assert!(e.contains("max") && e.contains("complex64"), "{e}");
        assert!(ReduceOp::Min.supports(DType::C128).is_err());
        assert!(ReduceOp::Avg.supports(DType::C128).is_ok());
        assert!(ReduceOp::Avg.supports(DType::Bool).is_err());
        assert!(ReduceOp::Max.supports(DType::Bool).is_ok());
        for op in [ReduceOp::Band, ReduceOp::Bor, ReduceOp::Bxor] {
            for d in [
                DType::I8,
                DType::U8,
                DType::I16,
                DType::I32,
                DType::I64,
                DType::Bool,
            ] {
                assert!(op.supports(d).is_ok(), "{op} {d}");
            }
            for d in [
                DType::F32,
                DType::F64,
                DType::F16,
                DType::BF16,
                DType::C64,
                DType::C128,
            ] {
                assert!(op.supports(d).is_err(), "{op} {d}");
            }
            assert_eq!(ReduceOp::parse(op.name()), Some(op));
            assert_eq!(ReduceOp::from_u8(op as u8), Some(op));
        }
    }
}
