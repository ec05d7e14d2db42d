//! The staged backend for calls on device buffers: the path every rank agrees on before the
//! first one, and host staging (copy to host memory on the caller's stream, the host collective
//! over dtcomm's own links, copy back). The NCCL backend is `nccl_calls.rs`, the choice between
//! them `route.rs`; the pure parts are in `crate::device`.

use std::time::Instant;

use crate::call::{Call, CallDesc, Collective, RawBuf};
use crate::communicator::{Inner, State};
use crate::device::api::{DevPtr, DeviceError, DeviceRuntime, HostMemory, StreamHandle};
use crate::device::path::{self, Agreed, DevicePath, PROBE_LEN, Probe};
use crate::device::plan;
use crate::device::pool::StagingPool;
use crate::device::settle::settle;
use crate::error::CommError;
use crate::transport::ControlPlane;

/// A device buffer of a call and the host memory staging it.
type Staged = Option<(RawBuf, Box<dyn HostMemory>)>;

/// One communicator's device state, under its state lock.
#[derive(Default)]
pub(crate) struct DeviceState {
    /// The agreed path and whether every rank's NCCL has `ncclSend`/`ncclRecv`, or the error
    /// every rank got (agreed once per communicator).
    pub(in crate::communicator) path: Option<Result<(DevicePath, bool), String>>,
    /// The NCCL communicator, once the first NCCL call made it.
    pub(in crate::communicator) nccl: Option<super::nccl_calls::Session>,
    /// Host memory staged calls used, lent again to later ones.
    staging: StagingPool,
}

impl Inner {
    /// The device runtime: the one set with `Communicator::set_device_runtime`, else the real
    /// CUDA and NCCL (feature `cuda`), else why there is none.
    pub(crate) fn device_runtime(&self) -> Result<&DeviceRuntime, String> {
        self.device_rt
            .get_or_init(crate::cuda::default_runtime)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Every rank's [`Probe`] all-gathered over the host links, and the path [`path::decide`]s
    /// from them (the same on every rank), logged once.
    pub(in crate::communicator) fn agree(
        &self,
        st: &mut State,
        rt: &DeviceRuntime,
        device: i32,
    ) -> Result<Result<(DevicePath, bool), String>, CommError> {
        let visible = rt.api.device_count();
        let (nccl, p2p, note) = match (&rt.nccl, &visible) {
            (_, Err(e)) => (false, false, format!("no CUDA devices: {e}")),
            (_, Ok(n)) if device as usize >= *n => (
                false,
                false,
                format!("device {device} asked for, {n} visible"),
            ),
            (Ok(n), _) => (true, n.has_p2p(), n.describe()),
            (Err(why), _) => (false, false, why.clone()),
        };
        let host =
            crate::transport::shm::host::HostId::current(self.config.host_id.value.as_deref());
        let mine = Probe {
            mode: self.config.cuda.value,
            nccl,
            p2p,
            device,
            host: host.digest,
            note,
        }
        .encode();
        let mut all = vec![0u8; PROBE_LEN * self.world];
        let gather = Call::new(Collective::AllGather { counts: None })
            .send(RawBuf::of(&mine[..]))
            .recv(RawBuf::of_mut(&mut all));
        // SAFETY: host buffers of this frame, valid for the call.
        unsafe { self.execute(st, &gather)? };
        let decided = all
            .chunks(PROBE_LEN)
            .enumerate()
            .map(|(r, c)| Probe::decode(c).map_err(|e| format!("rank {r}'s device probe: {e}")))
            .collect::<Result<Vec<_>, _>>()
            .and_then(|ps| path::decide(&ps));
        let rank = self.rank;
        match &decided {
            Ok(a) if a.path == DevicePath::Nccl && a.p2p => {
                tracing::info!(rank, "dtcomm: device buffers go by NCCL: {}", a.why);
            }
            Ok(a) if a.path == DevicePath::Nccl => {
                tracing::warn!(rank, "dtcomm: device buffers go by NCCL: {}", a.why);
            }
            Ok(a) if self.config.cuda.value == path::CudaMode::Stage => {
                tracing::info!(rank, "dtcomm: device buffers go by host staging: {}", a.why);
            }
            Ok(Agreed { why, .. }) => {
                tracing::warn!(
                    rank,
                    "dtcomm: device buffers go by host staging (copies through host memory, \
                     slower than NCCL): {why}"
                );
            }
            Err(e) => tracing::error!(rank, "dtcomm: no path for device buffers: {e}"),
        }
        Ok(decided.map(|a| (a.path, a.p2p)))
    }

    /// A device failure of this rank: the communicator fails and the peers are told.
    pub(in crate::communicator) fn device_failure(
        &self,
        st: &mut State,
        call: CallDesc,
        started: Instant,
        detail: String,
    ) -> CommError {
        let e = CommError::Device {
            rank: self.rank,
            call,
            elapsed: started.elapsed(),
            detail,
        };
        tracing::error!(rank = self.rank, "dtcomm: {e}");
        st.engine.links.abort(None, &e.to_string());
        st.failed = Some(e.clone());
        e
    }

    /// Host staging: the inputs copied to host memory on the caller's stream, the host
    /// collective, the output copied back on the caller's stream (this returns once it is
    /// there). The waits for the stream poll an event against the call's deadline.
    ///
    /// # Safety
    /// As for [`execute_device`](Self::execute_device).
    pub(in crate::communicator) unsafe fn stage(
        &self,
        st: &mut State,
        rt: &DeviceRuntime,
        call: &Call,
        device: i32,
        stream: StreamHandle,
    ) -> Result<(), CommError> {
        let started = Instant::now();
        let api = &*rt.api;
        let desc = call.desc(st.seq);
        let timeout = call.deadline.unwrap_or(self.config.timeout.value);
        let deadline = started + timeout;
        let fail = |st: &mut State, e: DeviceError| {
            self.device_failure(st, desc, started, format!("host staging: {e}"))
        };
        let mut host_of = |b: Option<&RawBuf>| -> Result<Staged, DeviceError> {
            b.map(|b| {
                let bytes = b.byte_len().unwrap_or(0);
                Ok((*b, st.device.staging.take(bytes, |n| api.host_memory(n))?))
            })
            .transpose()
        };
        let staged =
            host_of(call.send.as_ref()).and_then(|s| Ok((s, host_of(call.recv.as_ref())?)));
        let (mut send, mut recv) = match staged {
            Ok(v) => v,
            Err(e) => return Err(fail(st, e)),
        };
        let view = |x: &mut Staged| {
            x.as_mut()
                .map(|(b, m)| RawBuf::host(m.bytes().as_mut_ptr(), b.count(), b.dtype()))
        };
        let (hsend, hrecv) = (view(&mut send), view(&mut recv));
        let copy_in = |from: Option<&RawBuf>, to: Option<RawBuf>| -> Result<(), DeviceError> {
            if let (Some(d), Some(h)) = (from, to) {
                let len = d.byte_len().unwrap_or(0);
                if len > 0 {
                    // SAFETY: `h` is staging memory of `len` bytes kept until the stream is synced.
                    unsafe { api.to_host(device, stream, DevPtr(d.ptr() as u64), h.ptr(), len)? };
                }
            }
            Ok(())
        };
        let copied = copy_in(call.send.as_ref(), hsend)
            .and_then(|()| {
                if plan::reads_recv(call) {
                    copy_in(call.recv.as_ref(), hrecv)
                } else {
                    Ok(())
                }
            })
            .and_then(|()| settle(api, device, stream, deadline, timeout));
        if let Err(e) = copied {
            abandon(self.rank, [send, recv]);
            return Err(fail(st, e));
        }
        let host = Call {
            collective: call.collective.clone(),
            send: hsend,
            recv: hrecv,
            deadline: call.deadline,
        };
        // SAFETY: host staging buffers sized like the device ones.
        unsafe { self.execute(st, &host)? };
        if plan::writes_recv(call, self.rank)
            && let (Some(d), Some(h)) = (call.recv.as_ref(), hrecv)
            && d.count() > 0
        {
            let len = d.byte_len().unwrap_or(0);
            // SAFETY: `h` lives until the sync below.
            let back =
                unsafe { api.to_device(device, stream, h.ptr(), DevPtr(d.ptr() as u64), len) }
                    .and_then(|()| settle(api, device, stream, deadline, timeout));
            if let Err(e) = back {
                abandon(self.rank, [send, recv]);
                return Err(fail(st, e));
            }
        }
        // Kept for the next staged call only once this one is over: on an error above a copy
        // may still be queued on the stream, so they are abandoned, neither reused nor freed.
        for (_, m) in [send, recv].into_iter().flatten() {
            st.device.staging.give(m);
        }
        Ok(())
    }
}

/// Staging memory of a call that failed while a copy to or from it may still be queued on the
/// caller's stream (a stream stuck past the call's deadline): freeing it would let that copy
/// write into freed memory later, so it is left allocated (logged with its size). Only calls
/// that fail this way leak, once each.
fn abandon(rank: usize, mut bufs: [Staged; 2]) {
    let bytes: usize = bufs
        .iter_mut()
        .flatten()
        .map(|(_, m)| m.bytes().len())
        .sum();
    if bytes > 0 {
        tracing::warn!(
            rank,
            bytes,
            "dtcomm: rank {rank}: {bytes} bytes of host staging memory are left allocated: a \
             copy to or from them may still be queued on the stream"
        );
    }
    for (_, m) in bufs.into_iter().flatten() {
        std::mem::forget(m);
    }
}
