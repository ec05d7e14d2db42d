//! Reduction operators.

use crate::dtype::DType;

dt_rdzv_proto::wire_enum! {
    /// How a reduction combines elements. `Avg` is a sum divided by the world size at the end
    /// (integer division for integer types). The bitwise operators take integer and bool buffers
    /// only; [`ReduceOp::supports`] says which operator a dtype takes.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ReduceOp: u8 {
        /// Sum (integers wrap on overflow).
        Sum = 1 => "sum",
        /// Product (integers wrap on overflow).
        Prod = 2 => "prod",
        /// Minimum.
        Min = 3 => "min",
        /// Maximum.
        Max = 4 => "max",
        /// Mean over ranks.
        Avg = 5 => "avg",
        /// Bitwise and (integers and bool).
        Band = 6 => "band",
        /// Bitwise or (integers and bool).
        Bor = 7 => "bor",
        /// Bitwise exclusive or (integers and bool).
        Bxor = 8 => "bxor",
    }
    /// Every operator.
    pub const ALL;
    /// The name nccl-tests prints.
    pub const fn name;
    /// The operator of a wire number (the `u8` value above, which Python's `dtcomm.ReduceOp`,
    /// the C ABI's `DTCOMM_SUM` .. `DTCOMM_BXOR` and frame headers carry); `None` for a number
    /// no operator has.
    pub const fn from_u8(code);
    /// Parses a name (`sum`, `prod`, `min`, `max`, `avg`, `band`, `bor`, `bxor`).
    pub fn parse(name);
}

impl ReduceOp {
    /// The arithmetic operators, which every real and integer dtype takes (not the bitwise
    /// ones).
    pub const ARITHMETIC: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];

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

    /// The operator partial results are combined with (`Avg` combines by `Sum`).
    pub(crate) fn combine(self) -> ReduceOp {
        if self == ReduceOp::Avg {
            ReduceOp::Sum
        } else {
            self
        }
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

    #[test]
    fn table_round_trips() {
        let mut codes = std::collections::HashSet::new();
        assert_eq!(ReduceOp::SPELLINGS.len(), ReduceOp::ALL.len());
        for (&(op, spellings), all) in ReduceOp::SPELLINGS.iter().zip(ReduceOp::ALL) {
            assert_eq!(op, all);
            assert!(codes.insert(op as u8), "{op:?}: code {} twice", op as u8);
            assert_eq!(ReduceOp::from_u8(op as u8), Some(op));
            assert_eq!(spellings, [op.name()]);
            assert_eq!(op.to_string(), op.name());
            assert_eq!(ReduceOp::parse(op.name()), Some(op));
            assert_eq!(ReduceOp::parse(&op.name().to_ascii_uppercase()), Some(op));
        }
        assert_eq!((ReduceOp::from_u8(0), ReduceOp::from_u8(9)), (None, None));
        assert_eq!(ReduceOp::parse("average"), None);
    }
}
