//! The safe typed API: every collective on slices of an [`Element`] type, blocking, and the
//! asynchronous variants on owned buffers. Each is a thin layer over the byte-level
//! [`Communicator::run`] / [`Communicator::submit_with`]: borrowed slices cannot dangle while a
//! blocking call runs, and an owned `Vec` lives in its [`Work`] until the call finished.

use crate::call::{Call, Collective, RawBuf};
use crate::config::Algo;
use crate::dtype::{DType, Element};
use crate::error::CommError;
use crate::op::ReduceOp;
use crate::progress::Work;
use crate::{Communicator, communicator::allreduce_algo};

impl Communicator {
    fn run_safe(&self, call: Call) -> Result<(), CommError> {
        // SAFETY: every caller below builds `call` from slices it borrows for the whole
        // (blocking) call; a `&[T]` and a `&mut [T]` never overlap.
        unsafe { self.run(&call) }
    }

    fn submit_owned<T: Element>(&self, call: impl FnOnce(RawBuf) -> Call, mut buf: Vec<T>) -> Work {
        let call = call(RawBuf::of_mut(&mut buf));
        // SAFETY: the `Vec`'s heap block does not move when the `Vec` does; the `Work` keeps
        // it until the call finished (`Work::take` hands it back only then).
        unsafe { self.submit_with(call, Some(Box::new(buf)), None) }
    }

    /// The allreduce algorithm this communicator uses for `count` elements of `dtype`.
    pub fn all_reduce_algo(&self, count: usize, dtype: DType) -> Algo {
        allreduce_algo(&self.inner.config, self.world(), count, dtype)
    }

    /// Reduces `buf` across all ranks in place; every rank ends with the same result.
    pub fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<(), CommError> {
        self.run_safe(Call::new(Collective::AllReduce { op }).recv(RawBuf::of_mut(buf)))
    }

    /// Out-of-place allreduce: `recv` gets the reduction of every rank's `send`. The ring
    /// reads `send` directly (no whole-buffer copy); the latency-optimal path copies first.
    pub fn all_reduce_into<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        self.run_safe(
            Call::new(Collective::AllReduce { op })
                .send(RawBuf::of(send))
                .recv(RawBuf::of_mut(recv)),
        )
    }

    /// Asynchronous [`all_reduce`](Self::all_reduce) of an owned buffer: runs after every call
    /// submitted before; [`Work::take`] hands the `Vec<T>` back once it finished.
    pub fn all_reduce_async<T: Element>(&self, buf: Vec<T>, op: ReduceOp) -> Work {
        self.submit_owned(|b| Call::new(Collective::AllReduce { op }).recv(b), buf)
    }

    /// Copies `root`'s `buf` into every rank's `buf`.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), CommError> {
        self.run_safe(Call::new(Collective::Broadcast { root }).recv(RawBuf::of_mut(buf)))
    }

    /// Asynchronous [`broadcast`](Self::broadcast) of an owned buffer ([`Work::take`] returns
    /// it).
    pub fn broadcast_async<T: Element>(&self, buf: Vec<T>, root: usize) -> Work {
        self.submit_owned(|b| Call::new(Collective::Broadcast { root }).recv(b), buf)
    }

    /// Reduces every rank's `buf` into `root`'s `buf`; other ranks' buffers are left as they
    /// were.
    pub fn reduce<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<(), CommError> {
        self.run_safe(Call::new(Collective::Reduce { op, root }).recv(RawBuf::of_mut(buf)))
    }

    /// Gathers every rank's `send` (equal lengths) into `recv` on every rank, in rank order;
    /// `recv.len() == send.len() * world`.
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        self.run_safe(
            Call::new(Collective::AllGather { counts: None })
                .send(RawBuf::of(send))
                .recv(RawBuf::of_mut(recv)),
        )
    }

    /// All-gather with per-rank lengths: rank p contributes `counts[p]` elements; every rank
    /// passes the same `counts`, and `recv.len()` is their sum.
    pub fn all_gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<(), CommError> {
        self.run_safe(
            Call::new(Collective::AllGather {
                counts: Some(counts.to_vec()),
            })
            .send(RawBuf::of(send))
            .recv(RawBuf::of_mut(recv)),
        )
    }

    /// Reduces every rank's `send` (`recv.len() * world` elements) and leaves block `rank` of
    /// the result in `recv`.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        self.run_safe(
            Call::new(Collective::ReduceScatter { op })
                .send(RawBuf::of(send))
                .recv(RawBuf::of_mut(recv)),
        )
    }

    /// Gathers every rank's `send` (equal lengths) into `root`'s `recv`
    /// (`send.len() * world` elements; other ranks may pass an empty `recv`).
    pub fn gather<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Result<(), CommError> {
        self.run_safe(
            Call::new(Collective::Gather { root })
                .send(RawBuf::of(send))
                .recv(RawBuf::of_mut(recv)),
        )
    }

    /// Scatters block p of `root`'s `send` (`recv.len() * world` elements; other ranks may pass
    /// an empty `send`) to rank p's `recv`.
    pub fn scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Result<(), CommError> {
        self.run_safe(
            Call::new(Collective::Scatter { root })
                .send(RawBuf::of(send))
                .recv(RawBuf::of_mut(recv)),
        )
    }

    /// All-to-all with equal blocks: block p of `send` goes to rank p, block p of `recv` comes
    /// from rank p. Both lengths are equal and divisible by `world`.
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        self.run_safe(
            Call::new(Collective::AllToAll {
                send_counts: None,
                recv_counts: None,
            })
            .send(RawBuf::of(send))
            .recv(RawBuf::of_mut(recv)),
        )
    }

    /// All-to-all with per-peer lengths: `send_counts[p]` elements of `send` go to rank p, and
    /// `recv_counts[p]` elements of `recv` come from it. Headers carry count 0 for this call;
    /// a rank whose counts disagree with its peer's fails on the frame length.
    pub fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        self.run_safe(
            Call::new(Collective::AllToAll {
                send_counts: Some(send_counts.to_vec()),
                recv_counts: Some(recv_counts.to_vec()),
            })
            .send(RawBuf::of(send))
            .recv(RawBuf::of_mut(recv)),
        )
    }

    /// Returns once every rank has called `barrier`.
    pub fn barrier(&self) -> Result<(), CommError> {
        self.run_safe(Call::new(Collective::Barrier))
    }

    /// Sends `buf` to `peer`, which must call [`recv`](Self::recv) with the same length.
    /// Calls between a pair are matched in order.
    pub fn send<T: Element>(&self, buf: &[T], peer: usize) -> Result<(), CommError> {
        self.run_safe(Call::new(Collective::Send { peer }).send(RawBuf::of(buf)))
    }

    /// Receives into `buf` from `peer`'s matching [`send`](Self::send).
    pub fn recv<T: Element>(&self, buf: &mut [T], peer: usize) -> Result<(), CommError> {
        self.run_safe(Call::new(Collective::Recv { peer }).recv(RawBuf::of_mut(buf)))
    }

    /// Receives into `buf` the next [`send`](Self::send) to this rank from any peer (the one
    /// whose message arrives first); returns that peer's rank.
    pub fn recv_any<T: Element>(&self, buf: &mut [T]) -> Result<usize, CommError> {
        let source = crate::call::Source::new();
        self.run_safe(
            Call::new(Collective::RecvAny {
                source: source.clone(),
            })
            .recv(RawBuf::of_mut(buf)),
        )?;
        Ok(source.get().expect("a completed receive knows its source"))
    }
}
