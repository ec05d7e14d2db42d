//! Reduction operators.

use std::fmt;

/// How a reduction combines elements. `Avg` is a sum divided by the world size at the end
/// (integer division for integer types).
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
}

impl ReduceOp {
    /// Every operator.
    pub const ALL: [ReduceOp; 5] = [
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
        }
    }

    /// Parses a name (`sum`, `prod`, `min`, `max`, `avg`).
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
