//! The byte-level call: what every front end (the typed Rust API, Python, the C ABI) hands the
//! engine. A [`Call`] names the collective ([`Collective`]: its reduction op, root, per-rank
//! counts), its buffers ([`RawBuf`]: pointer, element count, dtype, memory kind) and an optional
//! deadline. [`OpKind`] and [`CallDesc`] are the vocabulary of data frame headers and errors.

use std::fmt;
use std::time::Duration;

use crate::dtype::{DType, Element};
use crate::op::ReduceOp;

dt_rdzv_proto::wire_enum! {
    /// The kind of a collective or point-to-point call; its `u8` value travels in frame headers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum OpKind: u8 {
        /// `all_reduce`.
        AllReduce = 1 => "all_reduce",
        /// `broadcast`.
        Broadcast = 2 => "broadcast",
        /// `reduce`.
        Reduce = 3 => "reduce",
        /// `all_gather` and `all_gather_v`.
        AllGather = 4 => "all_gather",
        /// `reduce_scatter`.
        ReduceScatter = 5 => "reduce_scatter",
        /// `gather`.
        Gather = 6 => "gather",
        /// `scatter`.
        Scatter = 7 => "scatter",
        /// `all_to_all` and `all_to_all_v`.
        AllToAll = 8 => "all_to_all",
        /// `barrier`.
        Barrier = 9 => "barrier",
        /// `send` / `recv` (point to point).
        SendRecv = 10 => "send/recv",
    }
    const ALL;
    /// The snake-case name of the call.
    pub const fn name;
    pub(crate) const fn from_u8(code);
}

/// One call as the engine sees it; what a frame header carries and what errors print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallDesc {
    /// Which call.
    pub op: OpKind,
    /// Element type.
    pub dtype: DType,
    /// Reduction operator, for reducing calls.
    pub redop: Option<ReduceOp>,
    /// Total element count of the call (the whole buffer; for point to point, the message).
    pub count: u64,
    /// Root rank of rooted calls.
    pub root: Option<usize>,
    /// Sequence number: collectives count up per communicator, point-to-point per pair.
    pub seq: u64,
}

impl fmt::Display for CallDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}(seq {}, {} x {}",
            self.op.name(),
            self.seq,
            self.dtype,
            self.count
        )?;
        if let Some(r) = self.redop {
            write!(f, ", {r}")?;
        }
        if let Some(r) = self.root {
            write!(f, ", root {r}")?;
        }
        f.write_str(")")
    }
}

/// Where a buffer's memory lives: host memory, or a GPU's with the stream the call is ordered
/// on (see [`device`](crate::device)). Non-exhaustive: other kinds may come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Memory {
    /// Ordinary host memory the CPU reads and writes.
    #[default]
    Host,
    /// Memory of CUDA device `device`. The call is ordered after the work queued so far on
    /// `stream` (a `CUstream`/`cudaStream_t` as an integer; `0` is the legacy default stream),
    /// and work queued on `stream` after the call is ordered after it.
    Device {
        /// CUDA device ordinal.
        device: i32,
        /// The caller's stream.
        stream: u64,
    },
}

/// A buffer of the caller's: pointer, element count, dtype and memory kind. It borrows nothing
/// as far as the compiler knows; whoever submits a [`Call`] with it promises the memory stays
/// valid (and, for outputs, unaliased) until the call completes, which is why
/// [`Communicator::run`](crate::Communicator::run) and
/// [`submit`](crate::Communicator::submit) are `unsafe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawBuf {
    ptr: *mut u8,
    count: usize,
    dtype: DType,
    memory: Memory,
}

// SAFETY: a `RawBuf` is an address and a length; the submitter of a call vouches that the
// memory may be used from the executor's thread until the call completes.
unsafe impl Send for RawBuf {}
// SAFETY: as above; the engine never touches the memory through a shared `RawBuf` concurrently.
unsafe impl Sync for RawBuf {}

impl RawBuf {
    /// A host buffer of `count` elements of `dtype` at `ptr`. Nothing is checked here: a null
    /// pointer, a misaligned one or a byte length that overflows is refused when the call is
    /// submitted, with an error naming the call.
    pub fn host(ptr: *mut u8, count: usize, dtype: DType) -> RawBuf {
        RawBuf {
            ptr,
            count,
            dtype,
            memory: Memory::Host,
        }
    }

    /// A buffer of `count` elements of `dtype` at device address `ptr` on CUDA device `device`,
    /// ordered on `stream` (see [`Memory::Device`]). The host never dereferences it.
    pub fn device(ptr: *mut u8, count: usize, dtype: DType, device: i32, stream: u64) -> RawBuf {
        RawBuf {
            ptr,
            count,
            dtype,
            memory: Memory::Device { device, stream },
        }
    }

    /// A view of a slice an out-of-place call reads.
    pub fn of<T: Element>(s: &[T]) -> RawBuf {
        RawBuf::host(s.as_ptr().cast::<u8>().cast_mut(), s.len(), T::DTYPE)
    }

    /// A view of a slice a call writes.
    pub fn of_mut<T: Element>(s: &mut [T]) -> RawBuf {
        RawBuf::host(s.as_mut_ptr().cast::<u8>(), s.len(), T::DTYPE)
    }

    /// The start address.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Number of elements.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Memory kind.
    pub fn memory(&self) -> Memory {
        self.memory
    }

    /// Byte length, or `None` when `count * size` overflows.
    pub fn byte_len(&self) -> Option<usize> {
        self.count.checked_mul(self.dtype.size())
    }

    /// Whether the byte ranges of `self` and `other` intersect.
    pub(crate) fn overlaps(&self, other: &RawBuf) -> bool {
        let (a, b) = (self.ptr as usize, other.ptr as usize);
        let (la, lb) = (self.byte_len().unwrap_or(0), other.byte_len().unwrap_or(0));
        la > 0 && lb > 0 && a < b + lb && b < a + la
    }
}

/// The per-peer element counts of one side of an all-to-all: `counts` when given, else
/// `len / world` to each rank (equal blocks), as every path lays the buffers out.
pub(crate) fn block_counts(counts: Option<&Vec<usize>>, len: usize, world: usize) -> Vec<usize> {
    counts
        .cloned()
        .unwrap_or_else(|| vec![len / world.max(1); world])
}

/// Which collective a [`Call`] runs, with the arguments that are not buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Collective {
    /// `recv` (in place, or out of place from `send`) becomes the reduction over all ranks.
    AllReduce {
        /// The reduction.
        op: ReduceOp,
    },
    /// `root`'s `recv` (or its `send`, copied into its `recv` first) lands in every rank's
    /// `recv`.
    Broadcast {
        /// The rank whose data is copied.
        root: usize,
    },
    /// `root`'s `recv` becomes the reduction; other ranks' buffers are left as they were.
    /// With `send`, the input is `send` and only the root needs a `recv`.
    Reduce {
        /// The reduction.
        op: ReduceOp,
        /// The rank that receives the result.
        root: usize,
    },
    /// Every rank's `send` lands in `recv`, in rank order; `counts[p]` elements from rank p
    /// (`None`: every rank sends `send.count`).
    AllGather {
        /// Per-rank element counts.
        counts: Option<Vec<usize>>,
    },
    /// `send` (`world` blocks of `recv.count`) is reduced over all ranks and block `rank` of
    /// the result lands in `recv`.
    ReduceScatter {
        /// The reduction.
        op: ReduceOp,
    },
    /// Every rank's `send` lands in `root`'s `recv` (other ranks pass none), in rank order.
    Gather {
        /// The gathering rank.
        root: usize,
    },
    /// Block p of `root`'s `send` (other ranks pass none) lands in rank p's `recv`.
    Scatter {
        /// The scattering rank.
        root: usize,
    },
    /// Block p of `send` goes to rank p; block p of `recv` comes from rank p. Equal blocks
    /// unless counts are given (elements per peer).
    AllToAll {
        /// Elements of `send` for each peer.
        send_counts: Option<Vec<usize>>,
        /// Elements of `recv` from each peer.
        recv_counts: Option<Vec<usize>>,
    },
    /// Returns once every rank has entered it.
    Barrier,
    /// `send` goes to `peer`, whose matching `Recv` takes it (calls between a pair match in
    /// order).
    Send {
        /// The receiving rank.
        peer: usize,
    },
    /// `recv` takes `peer`'s matching `Send`.
    Recv {
        /// The sending rank.
        peer: usize,
    },
    /// `recv` takes the next `Send` to this rank from whichever peer's arrives first (MPI's
    /// `ANY_SOURCE`); `source` tells which peer it was once the call completed.
    RecvAny {
        /// Where the sender's rank is written.
        source: Source,
    },
}

/// The sender of a [`Collective::RecvAny`], known once the call completed. Clones share it.
#[derive(Debug, Clone)]
pub struct Source(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Default for Source {
    /// Not known yet (as [`Source::new`]).
    fn default() -> Source {
        Source::new()
    }
}

impl Source {
    /// A source not known yet.
    pub fn new() -> Source {
        Source(std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(
            usize::MAX,
        )))
    }
    /// The sender's rank, once the receive has matched a send.
    ///
    /// ```
    /// assert_eq!(dtcomm::Source::default().get(), None);
    /// ```
    pub fn get(&self) -> Option<usize> {
        match self.0.load(std::sync::atomic::Ordering::Acquire) {
            usize::MAX => None,
            r => Some(r),
        }
    }
    pub(crate) fn set(&self, rank: usize) {
        self.0.store(rank, std::sync::atomic::Ordering::Release);
    }
}

impl PartialEq for Source {
    fn eq(&self, other: &Source) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Source {}

impl Collective {
    /// The frame-header kind of this collective.
    pub fn kind(&self) -> OpKind {
        match self {
            Collective::AllReduce { .. } => OpKind::AllReduce,
            Collective::Broadcast { .. } => OpKind::Broadcast,
            Collective::Reduce { .. } => OpKind::Reduce,
            Collective::AllGather { .. } => OpKind::AllGather,
            Collective::ReduceScatter { .. } => OpKind::ReduceScatter,
            Collective::Gather { .. } => OpKind::Gather,
            Collective::Scatter { .. } => OpKind::Scatter,
            Collective::AllToAll { .. } => OpKind::AllToAll,
            Collective::Barrier => OpKind::Barrier,
            Collective::Send { .. } | Collective::Recv { .. } | Collective::RecvAny { .. } => {
                OpKind::SendRecv
            }
        }
    }

    /// The name errors use (`send` and `recv` apart).
    pub fn name(&self) -> &'static str {
        match self {
            Collective::Send { .. } => "send",
            Collective::Recv { .. } | Collective::RecvAny { .. } => "recv",
            c => c.kind().name(),
        }
    }
}

/// One call: the collective, its buffers and its deadline.
///
/// Buffers by collective: in-place calls (`all_reduce`, `broadcast`, `reduce`) use `recv`, and
/// read `send` instead when one is given (out of place); `all_gather`, `reduce_scatter`,
/// `all_to_all` read `send` and write `recv`; `gather` and `scatter` need the rooted side only
/// on the root; `send` uses `send`, `recv` uses `recv`; `barrier` uses neither.
#[derive(Debug, Clone)]
pub struct Call {
    /// What to run.
    pub collective: Collective,
    /// The input, for calls that read one apart from the output.
    pub send: Option<RawBuf>,
    /// The output (or the in-place buffer).
    pub recv: Option<RawBuf>,
    /// This call's deadline; `None`: the communicator's (`DTCOMM_TIMEOUT`).
    pub deadline: Option<Duration>,
}

impl Call {
    /// The [`CallDesc`] errors of this call name when it takes sequence number `seq`: the
    /// element count of the buffer the call is counted by (the send buffer of a reduce or
    /// gather, else the receive buffer), its reduction and root.
    pub fn desc(&self, seq: u64) -> CallDesc {
        let (send, recv) = (self.send.as_ref(), self.recv.as_ref());
        let (redop, root) = match self.collective {
            Collective::AllReduce { op } | Collective::ReduceScatter { op } => (Some(op), None),
            Collective::Reduce { op, root } => (Some(op), Some(root)),
            Collective::Broadcast { root }
            | Collective::Gather { root }
            | Collective::Scatter { root } => (None, Some(root)),
            _ => (None, None),
        };
        let counted = match self.collective {
            Collective::Reduce { .. } | Collective::Gather { .. } => send.or(recv),
            _ => recv.or(send),
        };
        CallDesc {
            op: self.collective.kind(),
            dtype: counted.map_or(crate::dtype::DType::U8, RawBuf::dtype),
            redop,
            count: counted.map_or(0, |b| b.count() as u64),
            root,
            seq,
        }
    }

    /// A call with no buffers yet and the communicator's deadline.
    pub fn new(collective: Collective) -> Call {
        Call {
            collective,
            send: None,
            recv: None,
            deadline: None,
        }
    }

    /// Sets the input buffer.
    pub fn send(mut self, buf: RawBuf) -> Call {
        self.send = Some(buf);
        self
    }

    /// Sets the output (or in-place) buffer.
    pub fn recv(mut self, buf: RawBuf) -> Call {
        self.recv = Some(buf);
        self
    }

    /// Sets this call's deadline.
    pub fn deadline(mut self, d: Duration) -> Call {
        self.deadline = Some(d);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_kind_table_round_trips() {
        let mut codes = std::collections::HashSet::new();
        assert_eq!(OpKind::SPELLINGS.len(), OpKind::ALL.len());
        for (&(op, spellings), all) in OpKind::SPELLINGS.iter().zip(OpKind::ALL) {
            assert_eq!(op, all);
            assert!(codes.insert(op as u8), "{op:?}: code {} twice", op as u8);
            assert_eq!(OpKind::from_u8(op as u8), Some(op));
            assert_eq!(spellings, [op.name()]);
            assert_eq!(op.to_string(), op.name());
        }
        assert_eq!((OpKind::from_u8(0), OpKind::from_u8(11)), (None, None));
        assert_eq!(OpKind::SendRecv.name(), "send/recv");
    }
}
