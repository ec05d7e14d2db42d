//! The collectives of [`Communicator`]: argument checks, the choice of schedule, and the
//! local pre- and post-processing (out-of-place copies, the division of `Avg`).

use crate::Communicator;
use crate::communicator::{Call, SeqKind};
use crate::config::{Algo, Config};
use crate::dtype::{DType, Element, as_bytes, as_bytes_mut};
use crate::error::{CommError, OpKind};
use crate::op::ReduceOp;
use crate::reduce::divide_bytes;
use crate::schedule::{Schedule, direct, doubling, ring, tree};
use crate::work::Work;

fn collective(
    op: OpKind,
    dtype: DType,
    redop: Option<ReduceOp>,
    count: usize,
    root: Option<usize>,
) -> Call {
    Call {
        op,
        dtype,
        redop,
        count,
        root,
        seq: SeqKind::Collective,
    }
}

/// The allreduce algorithm `auto` picks: the latency-optimal one up to the threshold (and
/// whenever there are fewer elements than ranks), the ring above it.
pub(crate) fn allreduce_algo(cfg: &Config, world: usize, count: usize, dtype: DType) -> Algo {
    match cfg.algo.value {
        Algo::Auto if count * dtype.size() <= cfg.tree_threshold.value || count < world => {
            Algo::Tree
        }
        Algo::Auto => Algo::Ring,
        a => a,
    }
}

fn allreduce_schedule(
    cfg: &Config,
    rank: usize,
    world: usize,
    count: usize,
    dtype: DType,
) -> Schedule {
    match allreduce_algo(cfg, world, count, dtype) {
        Algo::Ring => ring::allreduce(rank, world, count),
        Algo::Direct => direct::allreduce(rank, world, count),
        _ => doubling::allreduce(rank, world, count),
    }
}

fn broadcast_schedule(
    cfg: &Config,
    rank: usize,
    world: usize,
    root: usize,
    count: usize,
    dtype: DType,
) -> Schedule {
    let bytes = count * dtype.size();
    let chain = match cfg.algo.value {
        Algo::Auto | Algo::Direct => bytes > cfg.tree_threshold.value && world > 2,
        a => a == Algo::Ring,
    };
    if chain {
        tree::broadcast_chain(
            rank,
            world,
            root,
            count,
            (bytes / (512 << 10)).clamp(1, 1024),
        )
    } else {
        tree::broadcast_binomial(rank, world, root, count)
    }
}

impl Communicator {
    fn check_root(&self, op: &'static str, root: usize) -> Result<(), CommError> {
        if root >= self.world() {
            return Err(self.invalid(
                op,
                format!("root {root} is not in a world of {}", self.world()),
            ));
        }
        Ok(())
    }

    /// The allreduce algorithm this communicator uses for `count` elements of `dtype`.
    pub fn all_reduce_algo(&self, count: usize, dtype: DType) -> Algo {
        allreduce_algo(&self.inner.config, self.world(), count, dtype)
    }

    /// Reduces `buf` across all ranks in place; every rank ends with the same result.
    pub fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<(), CommError> {
        let (rank, world) = (self.rank(), self.world());
        let sched = allreduce_schedule(&self.inner.config, rank, world, buf.len(), T::DTYPE);
        let call = collective(OpKind::AllReduce, T::DTYPE, Some(op), buf.len(), None);
        self.exec(&call, sched, as_bytes_mut(buf), &[])?;
        if op == ReduceOp::Avg {
            divide_bytes(T::DTYPE, as_bytes_mut(buf), world);
        }
        Ok(())
    }

    /// Out-of-place allreduce: `recv` gets the reduction of every rank's `send`. The ring
    /// reads `send` directly (no whole-buffer copy); the latency-optimal path copies first.
    pub fn all_reduce_into<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        if send.len() != recv.len() {
            return Err(self.invalid(
                "all_reduce",
                format!("send has {} elements, recv {}", send.len(), recv.len()),
            ));
        }
        let (rank, world) = (self.rank(), self.world());
        if allreduce_algo(&self.inner.config, world, send.len(), T::DTYPE) != Algo::Ring {
            recv.copy_from_slice(send);
            return self.all_reduce(recv, op);
        }
        let sched = ring::allreduce_out_of_place(rank, world, send.len());
        let call = collective(OpKind::AllReduce, T::DTYPE, Some(op), send.len(), None);
        self.exec(&call, sched, as_bytes_mut(recv), as_bytes(send))?;
        if op == ReduceOp::Avg {
            divide_bytes(T::DTYPE, as_bytes_mut(recv), world);
        }
        Ok(())
    }

    /// Asynchronous [`all_reduce`](Self::all_reduce): the progress thread runs it after every
    /// call submitted before; [`Work::wait`] returns the buffer.
    pub fn all_reduce_async<T: Element>(&self, mut buf: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        self.submit(move |inner, st| {
            let sched =
                allreduce_schedule(&inner.config, inner.rank, inner.world, buf.len(), T::DTYPE);
            let call = collective(OpKind::AllReduce, T::DTYPE, Some(op), buf.len(), None);
            inner.exec_locked(st, &call, sched, as_bytes_mut(&mut buf), &[])?;
            if op == ReduceOp::Avg {
                divide_bytes(T::DTYPE, as_bytes_mut(&mut buf), inner.world);
            }
            Ok(buf)
        })
    }

    /// Copies `root`'s `buf` into every rank's `buf`.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), CommError> {
        self.check_root("broadcast", root)?;
        let sched = broadcast_schedule(
            &self.inner.config,
            self.rank(),
            self.world(),
            root,
            buf.len(),
            T::DTYPE,
        );
        let call = collective(OpKind::Broadcast, T::DTYPE, None, buf.len(), Some(root));
        self.exec(&call, sched, as_bytes_mut(buf), &[])
    }

    /// Asynchronous [`broadcast`](Self::broadcast).
    pub fn broadcast_async<T: Element>(&self, mut buf: Vec<T>, root: usize) -> Work<Vec<T>> {
        let bad = self.check_root("broadcast", root).err();
        self.submit(move |inner, st| {
            if let Some(e) = bad {
                return Err(e);
            }
            let sched = broadcast_schedule(
                &inner.config,
                inner.rank,
                inner.world,
                root,
                buf.len(),
                T::DTYPE,
            );
            let call = collective(OpKind::Broadcast, T::DTYPE, None, buf.len(), Some(root));
            inner.exec_locked(st, &call, sched, as_bytes_mut(&mut buf), &[])?;
            Ok(buf)
        })
    }

    /// Reduces every rank's `buf` into `root`'s `buf`; other ranks' buffers are left as they
    /// were.
    pub fn reduce<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<(), CommError> {
        self.check_root("reduce", root)?;
        let (rank, world) = (self.rank(), self.world());
        let sched = tree::reduce_binomial(rank, world, root, buf.len());
        let call = collective(OpKind::Reduce, T::DTYPE, Some(op), buf.len(), Some(root));
        if rank == root {
            self.exec(&call, sched, as_bytes_mut(buf), &[])?;
            if op == ReduceOp::Avg {
                divide_bytes(T::DTYPE, as_bytes_mut(buf), world);
            }
            Ok(())
        } else {
            let mut tmp = buf.to_vec();
            self.exec(&call, sched, as_bytes_mut(&mut tmp), &[])
        }
    }

    /// Gathers every rank's `send` (equal lengths) into `recv` on every rank, in rank order;
    /// `recv.len() == send.len() * world`.
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let counts = vec![send.len(); self.world()];
        self.all_gather_v(send, recv, &counts)
    }

    /// All-gather with per-rank lengths: rank p contributes `counts[p]` elements; every rank
    /// passes the same `counts`, and `recv.len()` is their sum.
    pub fn all_gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<(), CommError> {
        let (rank, world) = (self.rank(), self.world());
        let total: usize = counts.iter().sum();
        if counts.len() != world || counts[rank] != send.len() || recv.len() != total {
            return Err(self.invalid(
                "all_gather",
                format!(
                    "counts {counts:?} (world {world}), send {} elements, recv {}",
                    send.len(),
                    recv.len()
                ),
            ));
        }
        let sched = ring::allgather(rank, world, counts, true);
        let call = collective(OpKind::AllGather, T::DTYPE, None, total, None);
        self.exec(&call, sched, as_bytes_mut(recv), as_bytes(send))
    }

    /// Reduces every rank's `send` (`recv.len() * world` elements) and leaves block `rank` of
    /// the result in `recv`.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let (rank, world) = (self.rank(), self.world());
        if send.len() != recv.len() * world {
            return Err(self.invalid(
                "reduce_scatter",
                format!(
                    "send has {} elements, recv {} x world {world}",
                    send.len(),
                    recv.len()
                ),
            ));
        }
        let n = recv.len();
        let mut work = send.to_vec();
        let sched = ring::reduce_scatter(rank, world, &vec![n; world]);
        let call = collective(OpKind::ReduceScatter, T::DTYPE, Some(op), send.len(), None);
        self.exec(&call, sched, as_bytes_mut(&mut work), &[])?;
        recv.copy_from_slice(&work[rank * n..(rank + 1) * n]);
        if op == ReduceOp::Avg {
            divide_bytes(T::DTYPE, as_bytes_mut(recv), world);
        }
        Ok(())
    }

    /// Gathers every rank's `send` (equal lengths) into `root`'s `recv`
    /// (`send.len() * world` elements; other ranks may pass an empty `recv`).
    pub fn gather<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Result<(), CommError> {
        self.check_root("gather", root)?;
        let (rank, world) = (self.rank(), self.world());
        if rank == root && recv.len() != send.len() * world {
            return Err(self.invalid(
                "gather",
                format!(
                    "root recv has {} elements, need {}",
                    recv.len(),
                    send.len() * world
                ),
            ));
        }
        let sched = direct::gather(rank, world, root, &vec![send.len(); world]);
        let call = collective(OpKind::Gather, T::DTYPE, None, send.len(), Some(root));
        let work: &mut [u8] = if rank == root {
            as_bytes_mut(recv)
        } else {
            &mut []
        };
        self.exec(&call, sched, work, as_bytes(send))
    }

    /// Scatters block p of `root`'s `send` (`recv.len() * world` elements; other ranks may pass
    /// an empty `send`) to rank p's `recv`.
    pub fn scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Result<(), CommError> {
        self.check_root("scatter", root)?;
        let (rank, world) = (self.rank(), self.world());
        if rank == root && send.len() != recv.len() * world {
            return Err(self.invalid(
                "scatter",
                format!(
                    "root send has {} elements, need {}",
                    send.len(),
                    recv.len() * world
                ),
            ));
        }
        let sched = direct::scatter(rank, world, root, &vec![recv.len(); world]);
        let call = collective(OpKind::Scatter, T::DTYPE, None, recv.len(), Some(root));
        let input: &[u8] = if rank == root { as_bytes(send) } else { &[] };
        self.exec(&call, sched, as_bytes_mut(recv), input)
    }

    /// All-to-all with equal blocks: block p of `send` goes to rank p, block p of `recv` comes
    /// from rank p. Both lengths are equal and divisible by `world`.
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let world = self.world();
        if send.len() != recv.len() || send.len() % world != 0 {
            return Err(self.invalid(
                "all_to_all",
                format!(
                    "send {} / recv {} elements must be equal multiples of world {world}",
                    send.len(),
                    recv.len()
                ),
            ));
        }
        let counts = vec![send.len() / world; world];
        self.all_to_all_impl(send, &counts, recv, &counts, send.len())
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
        self.all_to_all_impl(send, send_counts, recv, recv_counts, 0)
    }

    fn all_to_all_impl<T: Element>(
        &self,
        send: &[T],
        sc: &[usize],
        recv: &mut [T],
        rc: &[usize],
        count: usize,
    ) -> Result<(), CommError> {
        let (rank, world) = (self.rank(), self.world());
        if sc.len() != world
            || rc.len() != world
            || sc.iter().sum::<usize>() != send.len()
            || rc.iter().sum::<usize>() != recv.len()
            || sc[rank] != rc[rank]
        {
            return Err(self.invalid(
                "all_to_all",
                format!(
                    "send {} elements with counts {sc:?}, recv {} with counts {rc:?}",
                    send.len(),
                    recv.len()
                ),
            ));
        }
        let sched = direct::all_to_all(rank, world, sc, rc);
        let call = collective(OpKind::AllToAll, T::DTYPE, None, count, None);
        self.exec(&call, sched, as_bytes_mut(recv), as_bytes(send))
    }

    /// Returns once every rank has called `barrier`.
    pub fn barrier(&self) -> Result<(), CommError> {
        let sched = doubling::barrier(self.rank(), self.world());
        let call = collective(OpKind::Barrier, DType::U8, None, 0, None);
        self.exec(&call, sched, &mut [], &[])
    }

    /// Sends `buf` to `peer`, which must call [`recv`](Self::recv) with the same length.
    /// Calls between a pair are matched in order.
    pub fn send<T: Element>(&self, buf: &[T], peer: usize) -> Result<(), CommError> {
        if peer >= self.world() || peer == self.rank() {
            return Err(self.invalid(
                "send",
                format!(
                    "peer {peer} (this is rank {} of {})",
                    self.rank(),
                    self.world()
                ),
            ));
        }
        let call = Call {
            op: OpKind::SendRecv,
            dtype: T::DTYPE,
            redop: None,
            count: buf.len(),
            root: None,
            seq: SeqKind::SendTo(peer),
        };
        self.exec(&call, direct::send(peer, buf.len()), &mut [], as_bytes(buf))
    }

    /// Receives into `buf` from `peer`'s matching [`send`](Self::send).
    pub fn recv<T: Element>(&self, buf: &mut [T], peer: usize) -> Result<(), CommError> {
        if peer >= self.world() || peer == self.rank() {
            return Err(self.invalid(
                "recv",
                format!(
                    "peer {peer} (this is rank {} of {})",
                    self.rank(),
                    self.world()
                ),
            ));
        }
        // The header names the sender's call: its peer-pair sequence and count.
        let call = Call {
            op: OpKind::SendRecv,
            dtype: T::DTYPE,
            redop: None,
            count: buf.len(),
            root: None,
            seq: SeqKind::RecvFrom(peer),
        };
        self.exec(&call, direct::recv(peer, buf.len()), as_bytes_mut(buf), &[])
    }
}
