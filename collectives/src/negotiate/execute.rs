//! A negotiated [`Response`] run: fused allreduces through one buffer (scaled before and
//! after), broadcasts, allgathers with a first dimension of each rank's own, alltoalls,
//! reducescatters and barriers, on the communicator every rank feeds the same responses to.

use super::pending::{Local, NegotiateError, Output};
use super::request::{Kind, Request, Response};
use super::scale::scale;
use crate::call::{Call, Collective, RawBuf};
use crate::{CommError, Communicator};

/// `data` (elements of `head.dtype`) scaled by `head.prescale`, then allreduced in place by
/// `head.op` (the caller applies the postscale to what it keeps).
fn prescaled_allreduce(
    comm: &Communicator,
    data: &mut [u8],
    head: &Request,
) -> Result<(), CommError> {
    scale(data, head.dtype, head.prescale);
    let count = data.len() / head.dtype.size();
    let op = head.op.expect("an allreduce or reducescatter has an op");
    let call = Call::new(Collective::AllReduce { op }).recv(RawBuf::host(
        data.as_mut_ptr(),
        count,
        head.dtype,
    ));
    // SAFETY: `data` is a live, exclusively borrowed host buffer of `count` elements of
    // `dtype` for the whole blocking call.
    unsafe { comm.run(&call) }
}

/// Runs one negotiated response on `comm`, taking the operations it names from the pending
/// ones with `take` (those this rank still holds), and finishes their slots.
pub(super) fn execute(
    comm: &Communicator,
    take: &mut dyn FnMut(&[String]) -> Vec<Local>,
    resp: Response,
) -> Result<(), CommError> {
    match resp {
        Response::Error { name, message } => {
            for l in take(&[name]) {
                l.slot
                    .finish(Err(NegotiateError::Mismatch(message.clone())));
            }
        }
        Response::Run {
            kind,
            names,
            elements,
            bytes,
            head,
        } => {
            let mut locals = take(&names);
            for l in &locals {
                l.slot.mark(1);
            }
            if locals.is_empty() {
                // This rank has joined: it takes part without data.
                match (kind, head) {
                    (Kind::Allreduce, Some(head)) => {
                        // (zeros scaled are zeros: the prescale changes nothing here)
                        let mut zeros = vec![0u8; bytes as usize];
                        prescaled_allreduce(comm, &mut zeros, &head)?;
                    }
                    (Kind::Barrier, _) => comm.barrier()?,
                    _ => {}
                }
                return Ok(());
            }
            let head = locals[0].request.clone();
            match kind {
                Kind::Allreduce if locals.len() == 1 => {
                    // Nothing to fuse: reduce the tensor's own buffer, no copies.
                    let mut l = locals.remove(0);
                    prescaled_allreduce(comm, l.data.bytes_mut(), &head)?;
                    scale(l.data.bytes_mut(), head.dtype, head.postscale);
                    l.slot.finish(Ok(Output::of(l.data.into_result())));
                }
                Kind::Allreduce => {
                    let mut fused: Vec<u8> = Vec::new();
                    for l in &locals {
                        fused.extend_from_slice(l.data.bytes());
                    }
                    prescaled_allreduce(comm, &mut fused, &head)?;
                    scale(&mut fused, head.dtype, head.postscale);
                    let mut at = 0;
                    for l in &mut locals {
                        let n = l.data.len();
                        l.data.bytes_mut().copy_from_slice(&fused[at..at + n]);
                        at += n;
                    }
                    for l in locals {
                        l.slot.finish(Ok(Output::of(l.data.into_result())));
                    }
                }
                Kind::Broadcast => {
                    let mut l = locals.remove(0);
                    let root = head.root.expect("a broadcast has a root") as usize;
                    let count = l.data.len() / head.dtype.size();
                    let call = Call::new(Collective::Broadcast { root }).recv(RawBuf::host(
                        l.data.bytes_mut().as_mut_ptr(),
                        count,
                        head.dtype,
                    ));
                    // SAFETY: as above, `l.data` for the whole call.
                    unsafe { comm.run(&call)? };
                    l.slot.finish(Ok(Output::of(l.data.into_result())));
                }
                Kind::Allgather => {
                    let l = locals.remove(0);
                    let counts: Vec<usize> = elements.iter().map(|e| *e as usize).collect();
                    let total: usize = counts.iter().sum();
                    let mut out = vec![0u8; total * head.dtype.size()];
                    let call = Call::new(Collective::AllGather {
                        counts: Some(counts.clone()),
                    })
                    .send(RawBuf::host(
                        l.data.bytes().as_ptr().cast_mut(),
                        l.data.len() / head.dtype.size(),
                        head.dtype,
                    ))
                    .recv(RawBuf::host(out.as_mut_ptr(), total, head.dtype));
                    // SAFETY: both buffers live and unaliased for the call; send is read only.
                    unsafe { comm.run(&call)? };
                    l.slot.finish(Ok(Output {
                        data: out,
                        counts: elements,
                        times: [0; 3],
                    }));
                }
                Kind::Alltoall => {
                    let l = locals.remove(0);
                    let (me, world) = (comm.rank(), comm.world());
                    let send: Vec<usize> = (0..world)
                        .map(|p| elements[me * world + p] as usize)
                        .collect();
                    let recv: Vec<usize> = (0..world)
                        .map(|p| elements[p * world + me] as usize)
                        .collect();
                    let (ns, nr) = (send.iter().sum::<usize>(), recv.iter().sum::<usize>());
                    let mut out = vec![0u8; nr * head.dtype.size()];
                    let call = Call::new(Collective::AllToAll {
                        send_counts: Some(send),
                        recv_counts: Some(recv.clone()),
                    })
                    .send(RawBuf::host(
                        l.data.bytes().as_ptr().cast_mut(),
                        ns,
                        head.dtype,
                    ))
                    .recv(RawBuf::host(out.as_mut_ptr(), nr, head.dtype));
                    // SAFETY: `l.data` holds at least `ns` elements (splits never exceed the
                    // rows, checked by the coordinator) and `out` exactly `nr`.
                    unsafe { comm.run(&call)? };
                    l.slot.finish(Ok(Output {
                        data: out,
                        counts: recv.iter().map(|c| *c as u64).collect(),
                        times: [0; 3],
                    }));
                }
                Kind::Reducescatter => {
                    // Uneven first dimensions (the remainder rows go to the lowest ranks)
                    // are what Horovod promises: reduce the whole tensor, keep this rank's rows.
                    // (on a buffer of its own: the caller's tensor is only read)
                    let l = locals.remove(0);
                    let slot = l.slot;
                    let mut data = l.data.into_owned();
                    prescaled_allreduce(comm, &mut data, &head)?;
                    let (me, world) = (comm.rank() as u64, comm.world() as u64);
                    let rows = head.shape.first().copied().unwrap_or(0);
                    let (q, rem) = (rows / world, rows % world);
                    let first = me * q + me.min(rem);
                    let mine = q + u64::from(me < rem);
                    let row = (head.row_elements() as usize) * head.dtype.size();
                    let mut part =
                        data[first as usize * row..(first + mine) as usize * row].to_vec();
                    scale(&mut part, head.dtype, head.postscale);
                    slot.finish(Ok(Output::of(part)));
                }
                Kind::Barrier => {
                    comm.barrier()?;
                    for l in locals {
                        l.slot.finish(Ok(Output::default()));
                    }
                }
                Kind::Join => {
                    for l in locals {
                        l.slot.finish(Ok(Output {
                            data: Vec::new(),
                            counts: elements.clone(),
                            times: [0; 3],
                        }));
                    }
                }
            }
        }
    }
    Ok(())
}
