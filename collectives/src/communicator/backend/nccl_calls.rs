//! Device calls on NCCL: the communicator made at the first one (rank 0's unique id broadcast
//! over dtcomm's links, a non-blocking set-up polled against the deadline), the optional
//! cross-rank check of each call (`DTCOMM_NCCL_CHECK=1`), and the call itself: queued on this
//! communicator's own stream, ordered after the caller's stream by an event and the caller's
//! stream after it by another. This thread then watches the call to its end: NCCL's async
//! error, the control plane (a peer that failed or vanished), and the deadline; on any of
//! them it aborts the NCCL communicator and every rank fails naming the rank, the call, its
//! sequence number and NCCL's code and texts.

use std::time::{Duration, Instant};

use crate::call::{Call, CallDesc, Collective, RawBuf};
use crate::communicator::{Inner, State};
use crate::device::api::{
    DeviceEvent, DeviceRuntime, InitState, NcclComm, NcclOp, StreamHandle, UniqueId,
};
use crate::device::plan::{self, CHECK_WORDS};
use crate::device::roots;
use crate::device::settle::Backoff;
use crate::engine::error::EngineError;
use crate::error::CommError;
use crate::op::ReduceOp;
use crate::transport::ControlPlane;
use crate::watchdog::{Deadline, Phase, suspects};

/// This rank's NCCL communicator, its device and its own stream.
pub(crate) struct Session {
    comm: Box<dyn NcclComm>,
    device: i32,
    stream: StreamHandle,
}

/// What the wait loop watches for.
enum Watch {
    /// The set-up to finish.
    Init,
    /// This event to complete.
    Done(Box<dyn DeviceEvent>),
}

/// An NCCL call queued on the device and not known to be finished: what its watch polls.
pub(crate) struct Inflight {
    desc: CallDesc,
    what: Watch,
    deadline: Deadline,
    others: Vec<usize>,
    backoff: Backoff,
}

impl Inflight {
    fn new(inner: &Inner, desc: CallDesc, timeout: Duration, what: Watch) -> Inflight {
        Inflight {
            desc,
            what,
            deadline: Deadline::new(inner.rank, timeout, &inner.cancel).counting_now(),
            others: (0..inner.world).filter(|&r| r != inner.rank).collect(),
            backoff: Backoff::default(),
        }
    }

    /// Sleeps a little between polls.
    pub(in crate::communicator) fn pause(&mut self) {
        self.backoff.pause();
    }
}

impl Inner {
    /// Queues `call` on NCCL (making the communicator first if needed), ordered after the
    /// caller's stream and the caller's stream after it; returns what [`poll`](Self::poll)
    /// watches to its end.
    ///
    /// # Safety
    /// As for `execute_device`.
    pub(in crate::communicator) unsafe fn enqueue_nccl(
        &self,
        st: &mut State,
        rt: &DeviceRuntime,
        call: &Call,
        op: NcclOp,
        device: i32,
        stream: StreamHandle,
    ) -> Result<Inflight, CommError> {
        let started = Instant::now();
        let name = call.collective.name();
        if st.device.nccl.is_none() {
            self.open_nccl(st, rt, call, device)?;
        }
        let on = st.device.nccl.as_ref().map_or(device, |s| s.device);
        if on != device {
            return Err(self.invalid(
                name,
                format!(
                    "this communicator's NCCL is on device {on}; the buffers are on device {device}"
                ),
            ));
        }
        if self.config.nccl_check.value {
            // The check's own all-gather takes a sequence number; the call takes the next.
            let desc = plan::check_desc(call, call.desc(st.seq + 1));
            let mine = plan::check_record(&desc).map(|w| w as i64);
            let mut all = vec![[0i64; CHECK_WORDS]; self.world];
            let gather = Call::new(Collective::AllGather { counts: None })
                .send(RawBuf::of(&mine[..]))
                .recv(RawBuf::of_mut(all.as_flattened_mut()));
            // SAFETY: host buffers of this frame.
            unsafe { self.execute(st, &gather)? };
            let all: Vec<[u64; CHECK_WORDS]> = all.iter().map(|r| r.map(|w| w as u64)).collect();
            if let Some((peer, theirs)) = plan::first_mismatch(&desc, &all) {
                let e = CommError::Mismatch {
                    rank: self.rank,
                    peer,
                    ours: desc,
                    theirs,
                };
                tracing::error!(
                    rank = self.rank,
                    "dtcomm: {e} (found by DTCOMM_NCCL_CHECK before NCCL ran it)"
                );
                st.failed = Some(e.clone());
                return Err(e);
            }
        }
        let desc = call.desc(st.seq);
        st.seq += 1;
        let api = &*rt.api;
        let s = st.device.nccl.as_mut().expect("opened above");
        let queued = api
            .record(device, stream)
            .and_then(|before| api.wait(device, s.stream, &*before))
            .map_err(|e| e.to_string())
            .and_then(|()| {
                s.comm
                    .enqueue(&op, desc.dtype, s.stream)
                    .map_err(|e| e.to_string())
            })
            .and_then(|()| api.record(device, s.stream).map_err(|e| e.to_string()));
        let done = match queued {
            Ok(ev) => ev,
            Err(detail) => {
                s.comm.abort();
                return Err(self.device_failure(st, desc, started, detail));
            }
        };
        if let Err(e) = api.wait(device, stream, &*done) {
            s.comm.abort();
            return Err(self.device_failure(st, desc, started, e.to_string()));
        }
        let timeout = call.deadline.unwrap_or(self.config.timeout.value);
        Ok(Inflight::new(self, desc, timeout, Watch::Done(done)))
    }

    /// Makes the NCCL communicator: the unique ids over the host links (rank 0's, or past
    /// `nccl_ranks_per_root` ranks one per block of them, see [`roots`]), then the
    /// non-blocking set-up on every rank, watched to its end.
    fn open_nccl(
        &self,
        st: &mut State,
        rt: &DeviceRuntime,
        call: &Call,
        device: i32,
    ) -> Result<(), CommError> {
        let started = Instant::now();
        let desc = call.desc(st.seq);
        let nccl = match &rt.nccl {
            Ok(n) => n.clone(),
            Err(why) => return Err(self.device_failure(st, desc, started, why.clone())),
        };
        let ids = match self.nccl_ids(st, &*nccl, call) {
            Ok(ids) => ids,
            Err(IdsFailed::Call(e)) => return Err(e),
            Err(IdsFailed::Missing(detail)) => {
                let desc = call.desc(st.seq);
                return Err(self.device_failure(st, desc, started, detail));
            }
        };
        let desc = call.desc(st.seq);
        let opened = rt
            .api
            .new_stream(device)
            .map_err(|e| e.to_string())
            .and_then(|stream| {
                nccl.init(&ids, self.world, self.rank, device)
                    .map(|comm| Session {
                        comm,
                        device,
                        stream,
                    })
                    .map_err(|e| e.to_string())
            });
        match opened {
            Ok(s) => st.device.nccl = Some(s),
            Err(detail) => {
                return Err(self.device_failure(
                    st,
                    desc,
                    started,
                    format!("NCCL set-up: {detail}"),
                ));
            }
        }
        let mut init = Inflight::new(self, desc, self.config.setup_timeout.value, Watch::Init);
        self.watch(st, &mut init)
            .inspect(|()| {
                tracing::info!(
                    rank = self.rank,
                    "dtcomm: NCCL communicator of {} ranks ready on device {device} after {:?} ({})",
                    self.world,
                    started.elapsed(),
                    nccl.describe()
                );
            })
            .inspect_err(|_| st.device.nccl = None)
    }

    /// The unique ids every rank sets up from, the same on all: each root ([`roots`]) makes
    /// one and one host all-reduce (max over bytes: a slot is zero but at its root) hands them
    /// to every rank, no rank-0 broadcast at scale. The buffer's first byte says whether some
    /// rank's library cannot bootstrap from several roots: then all set up from rank 0's id.
    fn nccl_ids(
        &self,
        st: &mut State,
        nccl: &dyn crate::device::NcclApi,
        call: &Call,
    ) -> Result<Vec<UniqueId>, IdsFailed> {
        let roots = roots::roots(self.world, self.config.nccl_ranks_per_root.value);
        let mut buf = vec![0u8; 1 + roots.len() * roots::SLOT];
        buf[0] = u8::from(roots.len() > 1 && !nccl.has_scalable_init());
        let mut made = None;
        if let Some(i) = roots.iter().position(|&r| r == self.rank) {
            match nccl.unique_id() {
                Ok(u) => {
                    let slot = &mut buf[1 + i * roots::SLOT..][..roots::SLOT];
                    slot[..128].copy_from_slice(&u.0);
                    slot[128] = 1;
                }
                Err(e) => made = Some(e.to_string()),
            }
        }
        let exchange = Call::new(Collective::AllReduce { op: ReduceOp::Max })
            .recv(RawBuf::of_mut(&mut buf[..]))
            .deadline(call.deadline.unwrap_or(self.config.setup_timeout.value));
        // SAFETY: a host buffer of this frame.
        unsafe { self.execute(st, &exchange) }.map_err(IdsFailed::Call)?;
        let one_root = buf[0] != 0;
        let mut ids = Vec::with_capacity(roots.len());
        for (i, root) in roots.iter().enumerate() {
            let slot = &buf[1 + i * roots::SLOT..][..roots::SLOT];
            if slot[128] != 1 {
                let why = match (&made, *root == self.rank) {
                    (Some(e), true) => e.clone(),
                    _ => "it could not make one".into(),
                };
                return Err(IdsFailed::Missing(format!(
                    "no NCCL unique id from rank {root} ({why})"
                )));
            }
            ids.push(UniqueId(slot[..128].try_into().expect("128 bytes")));
            if one_root {
                break;
            }
        }
        Ok(ids)
    }

    /// Watches `f` to its end holding the state lock (the set-up, and calls run by a thread
    /// that holds it anyway).
    pub(in crate::communicator) fn watch(
        &self,
        st: &mut State,
        f: &mut Inflight,
    ) -> Result<(), CommError> {
        loop {
            if let Some(r) = self.poll(st, f) {
                return r;
            }
            f.pause();
        }
    }

    /// One look at `f`: `Some` once it finished or failed. Watches NCCL's async error, the
    /// control plane and the deadline; on any failure aborts the NCCL communicator and fails
    /// the communicator (telling the peers).
    pub(in crate::communicator) fn poll(
        &self,
        st: &mut State,
        f: &mut Inflight,
    ) -> Option<Result<(), CommError>> {
        let desc = f.desc;
        let start = Instant::now() - f.deadline.elapsed();
        if let Some(e) = &st.failed {
            // Failed meanwhile (by another call's watch): this call is over too.
            if let Some(s) = st.device.nccl.as_mut() {
                s.comm.abort();
            }
            return Some(Err(CommError::Failed(Box::new(e.clone()))));
        }
        let s = st
            .device
            .nccl
            .as_mut()
            .expect("watching an open communicator");
        let state = s.comm.state();
        let finished = match (&f.what, &state) {
            (_, Err(_)) => Ok(false),
            (Watch::Init, Ok(s)) => Ok(*s == InitState::Ready),
            (Watch::Done(ev), Ok(_)) => ev.done().map_err(|e| e.to_string()),
        };
        let failed = match (finished, state) {
            (Ok(true), _) => return Some(Ok(())),
            (Err(e), _) => Some(e),
            (_, Err(e)) => Some(e.to_string()),
            (Ok(false), Ok(_)) => None,
        };
        if let Some(detail) = failed {
            s.comm.abort();
            return Some(Err(self.device_failure(st, desc, start, detail)));
        }
        if let Err(link) = st.engine.links.check() {
            s.comm.abort();
            let e = st.engine.fail(EngineError::Link(link), &desc, &f.deadline);
            tracing::error!(rank = self.rank, "dtcomm: {e}");
            st.failed = Some(e.clone());
            return Some(Err(e));
        }
        match f.deadline.check(&desc, &f.others) {
            Phase::Half(_) => {
                st.engine
                    .links
                    .report_stall(desc.op as u8, desc.seq, &f.others);
            }
            Phase::Expired(elapsed) => {
                s.comm.abort();
                let reports = st.engine.links.stalls(desc.op as u8, desc.seq);
                let e = CommError::Timeout {
                    rank: self.rank,
                    call: desc,
                    elapsed,
                    waiting_for: f.others.clone(),
                    suspects: suspects(self.rank, &f.others, &reports).into(),
                    strangers: Box::new(st.engine.links.strangers()),
                };
                tracing::error!(rank = self.rank, "dtcomm: {e} (NCCL communicator aborted)");
                st.engine.links.abort(None, &e.to_string());
                st.failed = Some(e.clone());
                return Some(Err(e));
            }
            Phase::Interrupted(e) => {
                s.comm.abort();
                tracing::error!(rank = self.rank, "dtcomm: {e} (NCCL communicator aborted)");
                st.engine.links.abort(None, &e.to_string());
                st.failed = Some(e.clone());
                return Some(Err(e));
            }
            Phase::Wait(_) => {}
        }
        None
    }
}

/// Why the unique ids did not reach every rank.
enum IdsFailed {
    /// The exchange itself failed (a peer lost, a mismatch): the communicator has failed.
    Call(CommError),
    /// A root could not make its id.
    Missing(String),
}
