//! Which backend runs a checked call, decided in one place, and the dispatch to it. The
//! backends (`backend/`, a file each) only run what they are given:
//!
//! * [`Route::SharedMemory`] (`shm.rs`): every rank on this host and a collective shared
//!   memory has (all but point to point and the uneven forms);
//! * [`Route::Hierarchical`] (`hierarchical.rs`): an allreduce over hosts that each share
//!   memory within;
//! * [`Route::Links`] (`links.rs`, the schedules): everything else on host memory;
//! * [`DeviceRoute::Nccl`] (`nccl_calls.rs`): device buffers, the agreed path NCCL and the
//!   call one NCCL has;
//! * [`DeviceRoute::Staged`] (`staged.rs`): other device buffers (point to point always).
//!
//! Before any of them, a call on a communicator whose round ended, that failed or was shut down
//! is refused ([`Inner::refuse_if_over`]).

use std::time::{Duration, Instant};

use super::backend::nccl_calls::Inflight;
use super::backend::shm;
use super::{Inner, State};
use crate::call::{Call, Collective};
use crate::device::api::{DeviceRuntime, NcclOp, StreamHandle};
use crate::device::path::DevicePath;
use crate::device::plan;
use crate::error::CommError;
use crate::op::ReduceOp;

/// Where a call on host memory runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Route {
    /// Over shared memory: every rank of the communicator is on this host.
    SharedMemory,
    /// Shared memory within each host, the links between `peers` (one rank per host; this
    /// rank is `peers[host]`'s host's).
    Hierarchical {
        /// The reduction.
        op: ReduceOp,
        /// This host's index among `peers`.
        host: usize,
        /// The rank that carries each host's part over the links.
        peers: Vec<usize>,
    },
    /// The schedules over the links alone.
    Links,
}

/// Where a call on device memory runs.
#[derive(Debug)]
pub(super) enum DeviceRoute {
    /// NCCL's call on the caller's stream.
    Nccl(NcclOp),
    /// Copied to host memory, run over dtcomm's host routes, copied back.
    Staged,
}

impl Inner {
    /// The route of a checked call on host memory.
    pub(super) fn route(&self, st: &State, call: &Call) -> Route {
        let Some(g) = st.shm.as_ref() else {
            return Route::Links;
        };
        if g.size() == self.world {
            return if shm::has_algorithm(call) {
                Route::SharedMemory
            } else {
                Route::Links
            };
        }
        match (&call.collective, &g.across) {
            (Collective::AllReduce { op }, Some((host, peers))) => Route::Hierarchical {
                op: *op,
                host: *host,
                peers: peers.clone(),
            },
            _ => Route::Links,
        }
    }

    /// The route of a checked call on `device` memory: point to point is staged (only two
    /// ranks make it, so no all-rank agreement or NCCL set-up can run); otherwise the path
    /// every rank agrees on at the first such call, and NCCL where it has the call.
    pub(super) fn device_route(
        &self,
        st: &mut State,
        rt: &DeviceRuntime,
        call: &Call,
        device: i32,
    ) -> Result<DeviceRoute, CommError> {
        if plan::point_to_point(call) {
            return Ok(DeviceRoute::Staged);
        }
        if st.device.path.is_none() {
            let agreed = self.agree(st, rt, device)?;
            st.device.path = Some(agreed);
        }
        let path = st.device.path.clone().expect("agreed above");
        let (path, p2p) = path.map_err(|detail| CommError::Device {
            rank: self.rank,
            call: call.desc(st.seq),
            elapsed: Duration::ZERO,
            detail,
        })?;
        Ok(
            match (path, plan::nccl_op(call, self.rank, self.world, p2p)) {
                (DevicePath::Nccl, Some(op)) => DeviceRoute::Nccl(op),
                _ => DeviceRoute::Staged,
            },
        )
    }

    /// Runs a checked call under the state lock, on its route.
    ///
    /// # Safety
    /// `call` passed [`check`](Self::check); its buffers are valid as `Communicator::run`
    /// requires.
    pub(super) unsafe fn execute(&self, st: &mut State, call: &Call) -> Result<(), CommError> {
        self.refuse_if_over(st, call)?;
        if let Some((device, stream)) = plan::device_of(call) {
            // SAFETY: as for this function.
            return match unsafe { self.enqueue_device(st, call, device, stream) }? {
                None => Ok(()),
                Some(mut f) => self.watch(st, &mut f),
            };
        }
        match self.route(st, call) {
            // SAFETY: as for this function (checked call, valid buffers).
            Route::SharedMemory => unsafe { self.run_shm(st, call) },
            // SAFETY: as for this function (checked call, valid buffers).
            Route::Hierarchical { op, host, peers } => unsafe {
                self.run_hierarchical(st, call, op, host, &peers)
            },
            // SAFETY: as for this function (checked call, valid buffers).
            Route::Links => unsafe { self.run_links(st, call) },
        }
    }

    /// Starts a checked device call on its route: a staged call runs to its end here
    /// (`None`), an NCCL call is queued on the device and returned to be watched (the caller's
    /// stream is ordered after it already).
    ///
    /// # Safety
    /// As for [`execute`](Self::execute): the buffers are valid device memory for their
    /// counts until the call is over.
    pub(super) unsafe fn enqueue_device(
        &self,
        st: &mut State,
        call: &Call,
        device: i32,
        stream: StreamHandle,
    ) -> Result<Option<Inflight>, CommError> {
        let rt = self
            .device_runtime()
            .map_err(|why| self.invalid(call.collective.name(), why))?;
        match self.device_route(st, rt, call, device)? {
            DeviceRoute::Nccl(op) => {
                let size = call.send.or(call.recv).map_or(1, |b| b.dtype().size());
                if let Some((s, r)) = plan::overlap(&op, size) {
                    // The other ranks are entering NCCL: fail them too, at once.
                    let detail = format!(
                        "send and recv overlap ({} elements at {:#x} to rank {} and {} from rank \
                         {} at {:#x}): NCCL's grouped sends and receives may overwrite data \
                         before it is sent; use separate buffers (or DTCOMM_CUDA=stage)",
                        s.count, s.ptr.0, s.peer, r.count, r.peer, r.ptr.0
                    );
                    let desc = call.desc(st.seq);
                    return Err(self.device_failure(st, desc, Instant::now(), detail));
                }
                // SAFETY: the caller's contract.
                unsafe { self.enqueue_nccl(st, rt, call, op, device, stream) }.map(Some)
            }
            DeviceRoute::Staged => {
                // SAFETY: the caller's contract: valid device buffers until the call is over.
                unsafe { self.stage(st, rt, call, device, stream) }.map(|()| None)
            }
        }
    }

    /// Fails a call before it starts when the round ended or the communicator failed or was
    /// shut down.
    pub(super) fn refuse_if_over(&self, st: &mut State, call: &Call) -> Result<(), CommError> {
        if st.failed.is_none()
            && let Some(end) = st.engine.fence.ended()
        {
            // The round ended between calls: this one fails before sending anything.
            let e = CommError::RoundEnded {
                rank: self.rank,
                call: call.desc(st.seq),
                elapsed: Duration::ZERO,
                round: end.round,
                lost: end.lost.map(|r| r as usize),
                cause: end.why,
                removed: end.removed,
            };
            tracing::error!(rank = self.rank, "dtcomm: {e}");
            st.failed = Some(e.clone());
            return Err(e);
        }
        if let Some(e) = &st.failed {
            return Err(match e {
                CommError::Shutdown { detail, .. } => CommError::Shutdown {
                    rank: self.rank,
                    op: call.collective.name(),
                    detail: detail.clone(),
                },
                e => CommError::Failed(Box::new(e.clone())),
            });
        }
        Ok(())
    }
}
