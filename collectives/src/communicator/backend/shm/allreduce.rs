//! Allreduce over shared memory (see `ops.rs` for the other collectives and the context).
//!
//! * **large**: per chunk, every rank copies the slices the others own into its buffer; each
//!   rank reduces its own slice straight from its input and the peers' buffers (reading every
//!   peer's segment: no ring of byte pipes) and publishes the result; then every rank copies
//!   the others' results out. Two copies and one reduction per byte, two posts per chunk.
//! * **small** (up to the latency threshold): every rank publishes its whole input and reduces
//!   all of them itself, in rank order (bitwise the same result everywhere); one post per call.
//! * **single copy** (`DTCOMM_SHM_SINGLE_COPY=1`): peers' buffers read by the kernel in one copy.
//! * **across hosts**: the same within each host around a cross-host allreduce of each rank's
//!   slice over the links.

use super::ctx::Ctx;
use super::group::ShmGroup;
use crate::call::CallDesc;
use crate::dtype::DType;
use crate::engine::error::EngineError;
use crate::engine::{Bufs, Engine};
use crate::op::ReduceOp;
use crate::reduce::reduce_bytes;
use crate::schedule::{Schedule, partition};
use crate::watchdog::Deadline;

/// Bytes reduced and copied out together in step 2 (well inside L1).
const BLOCK: usize = 16 << 10;

/// One chunk of a large allreduce: `base` its first element, `slices` who owns what.
struct Chunk {
    base: usize,
    slices: Vec<(usize, usize)>,
    es: usize,
}

impl Chunk {
    fn bytes(&self, s: usize) -> std::ops::Range<usize> {
        let (off, len) = self.slices[s];
        (self.base + off) * self.es..(self.base + off + len) * self.es
    }
}

/// Step 1: the slices the others own, from my input into my buffer; then post and wait.
fn scatter_in(
    cx: &mut Ctx<'_>,
    c: &Chunk,
    work: &[u8],
    input: Option<&[u8]>,
    first: bool,
) -> Result<(), EngineError> {
    cx.g.begin(cx.call);
    for s in 0..c.slices.len() {
        if s != cx.g.me {
            let r = c.bytes(s);
            let from = input.map_or(&work[r.clone()], |i| &i[r]);
            cx.mine(c.slices[s].0 * c.es, from.len())
                .copy_from_slice(from);
        }
    }
    cx.sync(first)
}

/// Step 2: my slice, my input combined with every peer's copy, into my output (and, when
/// `publish`, into my buffer too), in blocks that stay in L1 between reduction and copy.
fn reduce_mine(
    cx: &mut Ctx<'_>,
    c: &Chunk,
    dtype: DType,
    op: ReduceOp,
    work: &mut [u8],
    input: Option<&[u8]>,
    publish: bool,
) {
    let me = cx.g.me;
    let r = c.bytes(me);
    let mut b = r.start;
    while b < r.end {
        let e = (b + BLOCK - BLOCK % c.es).min(r.end);
        if let Some(i) = input {
            work[b..e].copy_from_slice(&i[b..e]);
        }
        let at = c.slices[me].0 * c.es + (b - r.start);
        for p in 0..c.slices.len() {
            if p != me {
                reduce_bytes(dtype, op, &mut work[b..e], cx.peer(p, at, e - b));
            }
        }
        if publish {
            cx.mine(at, e - b).copy_from_slice(&work[b..e]);
        }
        b = e;
    }
}

/// Step 3: (unless step 2 published it) my slice into my buffer; post, wait, and copy
/// everyone's slices out (with non-temporal stores when `stream`: the message is too large
/// to stay in cache anyway).
fn gather_out(
    cx: &mut Ctx<'_>,
    c: &Chunk,
    work: &mut [u8],
    publish: bool,
    stream: bool,
) -> Result<(), EngineError> {
    let me = cx.g.me;
    if publish {
        let r = c.bytes(me);
        cx.mine(c.slices[me].0 * c.es, r.len())
            .copy_from_slice(&work[r]);
    }
    cx.sync(false)?;
    for p in 0..c.slices.len() {
        if p != me {
            let r = c.bytes(p);
            let n = r.len();
            if stream {
                crate::transport::shm::stream::copy(
                    &mut work[r],
                    cx.peer(p, c.slices[p].0 * c.es, n),
                );
            } else {
                work[r].copy_from_slice(cx.peer(p, c.slices[p].0 * c.es, n));
            }
        }
    }
    cx.g.end();
    Ok(())
}

/// The chunks of an allreduce of `n` elements of `es` bytes over `l` ranks.
fn chunks(n: usize, es: usize, chunk: usize, l: usize) -> impl Iterator<Item = Chunk> {
    let per = (chunk / es).max(1);
    (0..n.div_ceil(per)).map(move |k| {
        let base = k * per;
        Chunk {
            base,
            slices: partition(per.min(n - base), l),
            es,
        }
    })
}

/// Allreduce of `work` (its input when `input` is `None`, else `input`'s elements) by `op`.
/// `small`: bytes up to which the one-post algorithm runs.
pub(crate) fn allreduce(
    cx: &mut Ctx<'_>,
    dtype: DType,
    op: ReduceOp,
    work: &mut [u8],
    input: Option<&[u8]>,
    small: usize,
) -> Result<(), EngineError> {
    let es = dtype.size();
    let n = work.len() / es;
    let l = cx.g.size();
    if work.len() <= small.min(cx.g.chunk()) || n < l {
        if let Some(i) = input {
            work.copy_from_slice(i);
        }
        return allreduce_small(cx, dtype, op, work);
    }
    if work.len() >= SINGLE_COPY_MIN && cx.g.single_copy.is_some() {
        return allreduce_single_copy(cx, dtype, op, work, input);
    }
    for (k, c) in chunks(n, es, cx.g.chunk(), l).enumerate() {
        scatter_in(cx, &c, work, input, k == 0)?;
        reduce_mine(cx, &c, dtype, op, work, input, true);
        gather_out(cx, &c, work, false, streams(work.len(), l))?;
    }
    Ok(())
}

/// Whether an allreduce of `bytes` over `l` host ranks lands its results with non-temporal
/// stores. Measured (2-core VM, 64 MiB): at 3 and 4 ranks 2.5-3x faster (1.1 -> 2.8-3.3 GB/s
/// busbw), at 2 ranks 10-20 % slower (the plain copies' lines are still cached when the
/// next call reads them); so from 16 MiB at 3 ranks and more.
fn streams(bytes: usize, l: usize) -> bool {
    bytes >= 16 << 20 && l >= 3
}

/// Smallest allreduce (bytes) that reads peers' buffers directly when the host allows it.
const SINGLE_COPY_MIN: usize = 256 << 10;
/// Bytes of a peer's slice read and reduced at a time (stays in L2).
const SINGLE_COPY_BLOCK: usize = 256 << 10;

/// Allreduce reading the peers' own buffers (`cma.rs`), no stop in the segment: every rank
/// publishes its buffers' addresses; reduces its slice from its input and every peer's input,
/// read block by block into a small staging buffer; then reads every peer's result slice
/// straight into its output. Three posts per call; each byte crosses once per read.
fn allreduce_single_copy(
    cx: &mut Ctx<'_>,
    dtype: DType,
    op: ReduceOp,
    work: &mut [u8],
    input: Option<&[u8]>,
) -> Result<(), EngineError> {
    let (es, l, me) = (dtype.size(), cx.g.size(), cx.g.me);
    let pids = cx.g.single_copy.clone().expect("caller checked");
    let slices = partition(work.len() / es, l);
    let range = |s: usize| slices[s].0 * es..(slices[s].0 + slices[s].1) * es;
    let in_addr = input.map_or(work.as_ptr(), <[u8]>::as_ptr) as u64;
    cx.g.publish_addrs(in_addr, work.as_ptr() as u64);
    cx.g.begin(cx.call);
    cx.sync(true)?;
    let rank = cx.g.ranks[me];
    let read = |cx: &Ctx<'_>, p: usize, addr: u64, dst: &mut [u8]| {
        crate::transport::shm::cma::read(pids[p], addr, dst).map_err(|e| {
            let peer = cx.g.ranks[p];
            if e.raw_os_error() == Some(libc::ESRCH) {
                EngineError::Link(crate::transport::LinkError::Closed {
                    peer,
                    graceful: false,
                    detail: format!("its process (pid {}) on this host exited", pids[p]),
                })
            } else {
                EngineError::Comm(crate::error::CommError::Protocol {
                    rank,
                    peer,
                    call: *cx.call,
                    detail: format!("single-copy read of its buffer: {e}"),
                })
            }
        })
    };
    // 1. My slice from every rank's input.
    let mine = range(me);
    let mut stage = vec![0i64; SINGLE_COPY_BLOCK / 8];
    let stage = crate::dtype::as_bytes_mut(&mut stage);
    let mut b = mine.start;
    while b < mine.end {
        let e = (b + SINGLE_COPY_BLOCK).min(mine.end);
        if let Some(i) = input {
            work[b..e].copy_from_slice(&i[b..e]);
        }
        for p in (0..l).filter(|&p| p != me) {
            let (pin, _) = cx.g.addrs(p);
            read(cx, p, pin + b as u64, &mut stage[..e - b])?;
            reduce_bytes(dtype, op, &mut work[b..e], &stage[..e - b]);
        }
        b = e;
    }
    cx.sync(false)?;
    // 2. Everyone's results, straight into my output.
    for p in (0..l).filter(|&p| p != me) {
        let r = range(p);
        let (_, pout) = cx.g.addrs(p);
        read(cx, p, pout + r.start as u64, &mut work[r])?;
    }
    // 3. Nobody leaves (and lets its buffers go) while a peer may still read them.
    cx.sync(false)?;
    cx.g.end();
    Ok(())
}

/// Allreduce across hosts: reduce within the host over shared memory, allreduce each rank's
/// slice with the ranks of the same local index on the other hosts (`cross`: the schedule for
/// a slice of that many elements, run over the links), then gather within the host. Every
/// local rank drives its own cross-host slice, so all of a host's links carry data at once.
#[allow(clippy::too_many_arguments)]
pub(crate) fn allreduce_across(
    e: &mut Engine,
    g: &mut ShmGroup,
    call: &CallDesc,
    deadline: &mut Deadline,
    dtype: DType,
    op: ReduceOp,
    work: &mut [u8],
    input: Option<&[u8]>,
    small: usize,
    cross: &dyn Fn(usize) -> Schedule,
) -> Result<(), EngineError> {
    let es = dtype.size();
    let n = work.len() / es;
    let l = g.size();
    let run_cross = |e: &mut Engine, w: &mut [u8], deadline: &mut Deadline| {
        let sched = cross(w.len() / es);
        let mut bufs = Bufs {
            work: w,
            input: &[],
        };
        e.run_within(&sched, call, op, &mut bufs, deadline)
    };
    if work.len() <= small.min(g.chunk()) || n < l {
        if let Some(i) = input {
            work.copy_from_slice(i);
        }
        let mut cx = Ctx {
            g: &mut *g,
            t: &mut e.links,
            call,
            deadline: &mut *deadline,
        };
        allreduce_small(&mut cx, dtype, op, work)?;
        // Every rank of the host holds the host's sum: each combines it with its
        // counterparts on the other hosts.
        return run_cross(e, work, deadline);
    }
    for (k, c) in chunks(n, es, g.chunk(), l).enumerate() {
        {
            let mut cx = Ctx {
                g: &mut *g,
                t: &mut e.links,
                call,
                deadline: &mut *deadline,
            };
            scatter_in(&mut cx, &c, work, input, k == 0)?;
            reduce_mine(&mut cx, &c, dtype, op, work, input, false);
        }
        let r = c.bytes(g.me);
        run_cross(e, &mut work[r], deadline)?;
        let mut cx = Ctx {
            g: &mut *g,
            t: &mut e.links,
            call,
            deadline: &mut *deadline,
        };
        gather_out(&mut cx, &c, work, true, streams(work.len(), l))?;
    }
    Ok(())
}

fn allreduce_small(
    cx: &mut Ctx<'_>,
    dtype: DType,
    op: ReduceOp,
    work: &mut [u8],
) -> Result<(), EngineError> {
    let bytes = work.len();
    cx.g.begin(cx.call);
    cx.mine(0, bytes).copy_from_slice(work);
    cx.sync(true)?;
    work.copy_from_slice(cx.peer(0, 0, bytes));
    for p in 1..cx.g.size() {
        reduce_bytes(dtype, op, work, cx.peer(p, 0, bytes));
    }
    cx.g.end();
    Ok(())
}
