//! What a rank submits, and what the coordinator answers.

use crate::{DType, ReduceOp};

/// The kind of a named operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Reduce and share (with `op`, prescale and postscale).
    Allreduce,
    /// Concatenate along the first dimension (which may differ per rank).
    Allgather,
    /// From `root` to every rank.
    Broadcast,
    /// Personalised exchange along the first dimension.
    Alltoall,
    /// Reduce, each rank keeping its slice of the first dimension.
    Reducescatter,
    /// Wait for every rank.
    Barrier,
    /// This rank has no more data: until every rank has joined, it contributes zeros to the
    /// others' allreduces (and joins their barriers).
    Join,
}

impl Kind {
    /// Horovod's name for it (the prefix of an op's full name).
    pub fn name(self) -> &'static str {
        match self {
            Self::Allreduce => "allreduce",
            Self::Allgather => "allgather",
            Self::Broadcast => "broadcast",
            Self::Alltoall => "alltoall",
            Self::Reducescatter => "reducescatter",
            Self::Barrier => "barrier",
            Self::Join => "join",
        }
    }
}

/// One rank's request for a named operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The full name (`"allreduce.grad.w1"`, or `"allreduce.noname.7"`).
    pub name: String,
    /// What it is.
    pub kind: Kind,
    /// Element type.
    pub dtype: DType,
    /// The tensor's shape on this rank.
    pub shape: Vec<u64>,
    /// Broadcast root (a rank of the process set).
    pub root: Option<u32>,
    /// Reduction (allreduce, reducescatter).
    pub op: Option<ReduceOp>,
    /// Factor applied before the reduction.
    pub prescale: f64,
    /// Factor applied after it.
    pub postscale: f64,
    /// Where the tensor lives (-1: host memory, else a device index).
    pub device: i32,
    /// Alltoall: rows of the first dimension to send to each rank (empty: an equal split).
    pub splits: Vec<u64>,
}

impl Request {
    /// An allreduce of `shape` with `op` and no scaling, on the host.
    pub fn allreduce(name: impl Into<String>, dtype: DType, shape: &[u64], op: ReduceOp) -> Self {
        Self {
            name: name.into(),
            kind: Kind::Allreduce,
            dtype,
            shape: shape.to_vec(),
            root: None,
            op: Some(op),
            prescale: 1.0,
            postscale: 1.0,
            device: -1,
            splits: Vec::new(),
        }
    }

    /// Elements in one row of the first dimension.
    pub fn row_elements(&self) -> u64 {
        self.shape.iter().skip(1).product()
    }

    /// Elements in the tensor.
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Bytes in the tensor.
    pub fn bytes(&self) -> u64 {
        self.elements() * self.dtype.size() as u64
    }
}

/// What every rank runs next, in this order.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// Run these names as one operation (several: a fused allreduce, in this order in the
    /// fusion buffer).
    Run {
        /// The kind (the same for every name).
        kind: Kind,
        /// The names, in buffer order.
        names: Vec<String>,
        /// Total bytes (per rank for allreduce; what the fusion threshold counts).
        bytes: u64,
        /// For an allgather: every rank's element count (its first dimension may differ); for
        /// an alltoall: the `world × world` matrix of element counts, row `r` what rank `r`
        /// sends to each rank; for a join: the rank that joined last; empty otherwise.
        elements: Vec<u64>,
        /// The first submitter's request, for ranks that joined and take part without one
        /// (they contribute zeros of `bytes`).
        head: Option<Request>,
    },
    /// The ranks disagreed about this name: every rank fails it with this message.
    Error {
        /// The name.
        name: String,
        /// What differed, naming the ranks.
        message: String,
    },
}
