//! Running a checked call: refused when the communicator is over ([`Inner::refuse_if_over`]),
//! else on host memory lowered once (`lower.rs`) and run on the route `route.rs` picks, or on
//! device memory on its device route (NCCL or staged). A host backend's error fails the
//! communicator here, in one place.

use std::time::{Duration, Instant};

use super::backend;
use super::backend::nccl_calls::Inflight;
use super::lower::{Copies, Lowered, SeqKind};
use super::route::{DeviceRoute, HostShape, Route, Topology, route};
use super::{Inner, State};
use crate::call::Call;
use crate::device::api::{DeviceRuntime, StreamHandle};
use crate::device::path::DevicePath;
use crate::device::plan;
use crate::error::CommError;

impl Inner {
    /// The route of a checked call on host memory, from this communicator's shape.
    pub(super) fn route(&self, st: &State, call: &Call) -> Route {
        let host = st.shm.as_ref().map(|g| HostShape {
            ranks: g.size(),
            across: g.across.as_ref().map(|(h, p)| (*h, p.as_slice())),
        });
        route(
            call,
            &Topology {
                world: self.world,
                host,
            },
        )
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

    /// Runs a checked call on host memory under the state lock: lowered once, on its route;
    /// a backend's error fails the communicator here and nowhere else. Device calls start in
    /// [`enqueue_device`](Self::enqueue_device) (their host steps, staged copies and NCCL's id
    /// exchange, come back here with host buffers).
    ///
    /// # Safety
    /// `call` passed [`check`](Self::check); its buffers are valid as `Communicator::run`
    /// requires.
    pub(super) unsafe fn execute(&self, st: &mut State, call: &Call) -> Result<(), CommError> {
        self.refuse_if_over(st, call)?;
        debug_assert!(
            crate::device::plan::device_of(call).is_none(),
            "device calls start in enqueue_device"
        );
        let route = self.route(st, call);
        let mut copies = Copies::default();
        // SAFETY: as for this function (checked call, valid buffers).
        let mut l =
            unsafe { Lowered::new(call, self.rank, self.config.timeout.value, &mut copies) };
        let counter = match l.seq {
            SeqKind::Collective => Some(&mut st.seq),
            SeqKind::SendTo(p) => st.send_seq.get_mut(p),
            SeqKind::RecvFrom(p) => st.recv_seq.get_mut(p),
            SeqKind::RecvAny => None,
        };
        if let Some(seq) = counter {
            l.desc.seq = *seq;
            *seq += 1;
        }
        let cfg = &self.config;
        const GROUP: &str = "route() sends here only with a host group";
        let result = match route {
            Route::SharedMemory => {
                let g = st.shm.as_mut().expect(GROUP);
                backend::shm::run(&mut st.engine, g, &mut l, cfg)
            }
            Route::Hierarchical { host, peers } => {
                let g = st.shm.as_mut().expect(GROUP);
                backend::hierarchical::run(&mut st.engine, g, &mut l, cfg, host, &peers)
            }
            Route::Links => {
                let at = (self.rank, self.world);
                backend::links::run(&mut st.engine, &mut st.recv_seq, &mut l, cfg, at)
            }
        };
        match result {
            Ok(()) => {
                l.finish(self.world);
                Ok(())
            }
            Err(e) => {
                tracing::error!(rank = self.rank, "dtcomm: {e}");
                st.failed = Some(e.clone());
                Err(e)
            }
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
