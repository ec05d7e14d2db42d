//! The shared-memory collectives of one host, over [`ShmGroup`]'s epochs.
//!
//! * **allreduce**, large: per chunk, every rank copies the slices the others own into its
//!   buffer; each rank reduces its own slice straight from its input and the peers' buffers
//!   (reading every peer's segment: no ring of byte pipes) and publishes the result; then every
//!   rank copies the others' results out. Two copies and one reduction per byte, two posts
//!   per chunk.
//! * **allreduce**, small (up to the latency threshold): every rank publishes its whole input
//!   and reduces all of them itself, in rank order (bitwise the same result everywhere); one
//!   post per call.
//! * **broadcast**: the root publishes each chunk, the others copy it out.
//! * **allgather** (equal counts): every rank publishes its piece, chunk by chunk.
//! * **barrier**: one post.
//!
//! Every epoch publishes the call's header, so mismatched calls fail in the first one.

use super::group::ShmGroup;
use crate::call::CallDesc;
use crate::dtype::DType;
use crate::engine::EngineError;
use crate::op::ReduceOp;
use crate::reduce::reduce_bytes;
use crate::schedule::partition;
use crate::transport::Transport;
use crate::watchdog::Deadline;

/// Bytes reduced and copied out together in step 2 (well inside L1).
const BLOCK: usize = 16 << 10;

/// What every shared-memory collective gets.
pub(crate) struct Ctx<'a> {
    pub g: &'a mut ShmGroup,
    pub t: &'a mut dyn Transport,
    pub call: &'a CallDesc,
    pub deadline: &'a mut Deadline,
}

impl Ctx<'_> {
    fn sync(&mut self, first: bool) -> Result<(), EngineError> {
        self.g.post();
        self.g.wait_all(self.t, self.call, self.deadline, first)
    }
    fn peer(&self, i: usize, off: usize, len: usize) -> &[u8] {
        // SAFETY: `off + len` is within one buffer (callers chunk by `chunk()`); the peer
        // wrote these bytes before a post this rank has waited for, and writes them again only
        // after this rank's next post.
        unsafe { std::slice::from_raw_parts(self.g.buf(i).add(off), len) }
    }
    fn mine(&mut self, off: usize, len: usize) -> &mut [u8] {
        let me = self.g.me;
        // SAFETY: our own buffer; peers read it only between our post and our next one.
        unsafe { std::slice::from_raw_parts_mut(self.g.buf(me).add(off), len) }
    }
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
    let per_chunk = cx.g.chunk() / es;
    if work.len() <= small.min(cx.g.chunk()) || n < l {
        if let Some(i) = input {
            work.copy_from_slice(i);
        }
        return allreduce_small(cx, dtype, op, work);
    }
    let mut base = 0;
    let mut first = true;
    while base < n {
        let blk = per_chunk.min(n - base);
        let slices = partition(blk, l);
        let me = cx.g.me;
        cx.g.begin(cx.call);
        // 1. The slices the others own, into my buffer.
        for (s, &(off, len)) in slices.iter().enumerate() {
            if s != me {
                let src = (base + off) * es..(base + off + len) * es;
                let from = input.map_or(&work[src.clone()], |i| &i[src]);
                cx.mine(off * es, len * es).copy_from_slice(from);
            }
        }
        cx.sync(first)?;
        first = false;
        // 2. My slice: my input combined with every peer's copy, into my output and buffer,
        //    in blocks that stay in L1 between the reduction and the copy out.
        let (off, len) = slices[me];
        let (lo, hi) = ((base + off) * es, (base + off + len) * es);
        let mut b = lo;
        while b < hi {
            let e = (b + BLOCK - BLOCK % es).min(hi);
            if let Some(i) = input {
                work[b..e].copy_from_slice(&i[b..e]);
            }
            let at = off * es + (b - lo);
            for p in 0..l {
                if p != me {
                    reduce_bytes(dtype, op, &mut work[b..e], cx.peer(p, at, e - b));
                }
            }
            cx.mine(at, e - b).copy_from_slice(&work[b..e]);
            b = e;
        }
        cx.sync(false)?;
        // 3. Everyone's results.
        for (p, &(off, len)) in slices.iter().enumerate() {
            if p != me {
                let r = (base + off) * es..(base + off + len) * es;
                work[r].copy_from_slice(cx.peer(p, off * es, len * es));
            }
        }
        cx.g.end();
        base += blk;
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

/// Broadcast of `work` from local rank `root`.
pub(crate) fn broadcast(cx: &mut Ctx<'_>, root: usize, work: &mut [u8]) -> Result<(), EngineError> {
    let chunk = cx.g.chunk();
    let mut first = true;
    let mut at = 0;
    loop {
        let len = chunk.min(work.len() - at);
        cx.g.begin(cx.call);
        if cx.g.me == root {
            cx.mine(0, len).copy_from_slice(&work[at..at + len]);
        }
        cx.sync(first)?;
        first = false;
        if cx.g.me != root {
            work[at..at + len].copy_from_slice(cx.peer(root, 0, len));
        }
        cx.g.end();
        at += len;
        if at >= work.len() {
            return Ok(());
        }
    }
}

/// Allgather: `piece` from every rank into `work` (rank `i`'s at `i * piece.len()`).
pub(crate) fn allgather(
    cx: &mut Ctx<'_>,
    piece: &[u8],
    work: &mut [u8],
) -> Result<(), EngineError> {
    let (chunk, n, l) = (cx.g.chunk(), piece.len(), cx.g.size());
    let mut first = true;
    let mut at = 0;
    loop {
        let len = chunk.min(n - at);
        cx.g.begin(cx.call);
        cx.mine(0, len).copy_from_slice(&piece[at..at + len]);
        cx.sync(first)?;
        first = false;
        for p in 0..l {
            let dst = p * n + at;
            work[dst..dst + len].copy_from_slice(cx.peer(p, 0, len));
        }
        cx.g.end();
        at += len;
        if at >= n {
            return Ok(());
        }
    }
}

/// Barrier: one post.
pub(crate) fn barrier(cx: &mut Ctx<'_>) -> Result<(), EngineError> {
    cx.g.begin(cx.call);
    cx.sync(true)?;
    cx.g.end();
    Ok(())
}
