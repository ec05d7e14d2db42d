//! The shared-memory collectives of one host other than allreduce (`allreduce.rs`), over
//! the host group's epochs.
//!
//! * **broadcast**: the root publishes each chunk, the others copy it out.
//! * **allgather** (equal counts): every rank publishes its piece, chunk by chunk.
//! * **reduce-scatter**, **all-to-all** (equal blocks), **gather**, **scatter**: one slot
//!   per rank in each buffer, one post per chunk.
//! * **barrier**: one post.
//!
//! Reduce runs as an allreduce whose result only the root keeps. Point-to-point calls and the
//! v-collectives go over the links. The context every one of them gets is `ctx.rs`.
//!
//! Every epoch publishes the call's header, so mismatched calls fail in the first one.

pub(crate) use super::ctx::Ctx;
use crate::dtype::DType;
use crate::engine::error::EngineError;
use crate::op::ReduceOp;
use crate::reduce::reduce_bytes;

pub(crate) use super::allreduce::{allreduce, allreduce_across};

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

/// Elements per slot when a buffer holds one slot per rank.
fn per_slot(cx: &Ctx<'_>, es: usize) -> usize {
    (cx.g.chunk() / (cx.g.size() * es)).max(1)
}

/// The exchange under reduce-scatter and all-to-all: block `s` of `input` (`world` blocks of
/// `n` bytes) goes to rank `s`, chunk by chunk through one slot per rank in each buffer; once a
/// chunk is there, `take(cx, k, len, slot)` consumes bytes `k..k + len` of every block meant
/// for this rank (peer `p`'s at `cx.peer(p, me * slot, len)`).
fn exchange(
    cx: &mut Ctx<'_>,
    es: usize,
    input: &[u8],
    n: usize,
    mut take: impl FnMut(&Ctx<'_>, usize, usize, usize),
) -> Result<(), EngineError> {
    let (l, me) = (cx.g.size(), cx.g.me);
    let m = per_slot(cx, es) * es;
    let mut k = 0;
    loop {
        let len = m.min(n - k);
        cx.g.begin(cx.call);
        for s in (0..l).filter(|&s| s != me) {
            cx.mine(s * m, len)
                .copy_from_slice(&input[s * n + k..s * n + k + len]);
        }
        cx.sync(k == 0)?;
        take(cx, k, len, m);
        cx.g.end();
        k += len;
        if k >= n {
            return Ok(());
        }
    }
}

/// Reduce-scatter of `input` (`world` blocks of `out.len()` bytes) into `out`: every rank
/// publishes the others' blocks, then reduces its own block from every peer's buffer.
pub(crate) fn reduce_scatter(
    cx: &mut Ctx<'_>,
    dtype: DType,
    op: ReduceOp,
    input: &[u8],
    out: &mut [u8],
) -> Result<(), EngineError> {
    let (l, me, n) = (cx.g.size(), cx.g.me, out.len());
    exchange(cx, dtype.size(), input, n, |cx, k, len, m| {
        out[k..k + len].copy_from_slice(&input[me * n + k..me * n + k + len]);
        for p in (0..l).filter(|&p| p != me) {
            reduce_bytes(dtype, op, &mut out[k..k + len], cx.peer(p, me * m, len));
        }
    })
}

/// All-to-all of equal blocks: block `s` of `input` goes to rank `s`, whose block `r` of `out`
/// it becomes.
pub(crate) fn all_to_all(
    cx: &mut Ctx<'_>,
    es: usize,
    input: &[u8],
    out: &mut [u8],
) -> Result<(), EngineError> {
    let (l, me) = (cx.g.size(), cx.g.me);
    let n = out.len() / l;
    exchange(cx, es, input, n, |cx, k, len, m| {
        out[me * n + k..me * n + k + len].copy_from_slice(&input[me * n + k..me * n + k + len]);
        for p in (0..l).filter(|&p| p != me) {
            out[p * n + k..p * n + k + len].copy_from_slice(cx.peer(p, me * m, len));
        }
    })
}

/// Gather to `root`: every rank publishes its piece; the root copies them out (`out` is
/// empty elsewhere).
pub(crate) fn gather(
    cx: &mut Ctx<'_>,
    root: usize,
    piece: &[u8],
    out: &mut [u8],
) -> Result<(), EngineError> {
    let (n, l, me) = (piece.len(), cx.g.size(), cx.g.me);
    let chunk = cx.g.chunk();
    let mut k = 0;
    loop {
        let len = chunk.min(n - k);
        cx.g.begin(cx.call);
        if me != root {
            cx.mine(0, len).copy_from_slice(&piece[k..k + len]);
        }
        cx.sync(k == 0)?;
        if me == root {
            for p in 0..l {
                let dst = &mut out[p * n + k..p * n + k + len];
                if p == me {
                    dst.copy_from_slice(&piece[k..k + len]);
                } else {
                    dst.copy_from_slice(cx.peer(p, 0, len));
                }
            }
        }
        cx.g.end();
        k += len;
        if k >= n {
            return Ok(());
        }
    }
}

/// Scatter from `root`: the root publishes every rank's block; each copies its own.
pub(crate) fn scatter(
    cx: &mut Ctx<'_>,
    es: usize,
    root: usize,
    input: &[u8],
    out: &mut [u8],
) -> Result<(), EngineError> {
    let (n, l, me) = (out.len(), cx.g.size(), cx.g.me);
    let m = per_slot(cx, es) * es;
    let mut k = 0;
    loop {
        let len = m.min(n - k);
        cx.g.begin(cx.call);
        if me == root {
            for s in (0..l).filter(|&s| s != me) {
                cx.mine(s * m, len)
                    .copy_from_slice(&input[s * n + k..s * n + k + len]);
            }
        }
        cx.sync(k == 0)?;
        if me == root {
            out[k..k + len].copy_from_slice(&input[me * n + k..me * n + k + len]);
        } else {
            out[k..k + len].copy_from_slice(cx.peer(root, me * m, len));
        }
        cx.g.end();
        k += len;
        if k >= n {
            return Ok(());
        }
    }
}
