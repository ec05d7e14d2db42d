//! The entry points: a call run on the caller's thread ([`Communicator::run`]) or queued for
//! the progress thread ([`Communicator::submit`]) in submission order; device calls started on
//! the caller's thread and watched by the progress thread; waiting for the queue to drain.

use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Communicator, Inner, State, backend, lock};
use crate::call::Call;
use crate::error::CommError;
use crate::progress::{Completion, Job, OnDone, Progress, Work};

impl Communicator {
    /// Runs `call` on this thread, after every call submitted before it, and returns when this
    /// rank's part is done. Argument errors ([`CommError::InvalidArgument`]) send nothing and
    /// leave the communicator usable; any other error fails it.
    ///
    /// # Safety
    /// The call's buffers must be valid for their element count and dtype (reads for `send`,
    /// reads and writes for `recv`) until this returns, and nothing else may write them (or,
    /// for `recv`, read them) meanwhile. `send` and `recv` may overlap.
    pub unsafe fn run(&self, call: &Call) -> Result<(), CommError> {
        let inner = &self.inner;
        inner.usable(call)?;
        inner.check(call)?;
        let device = crate::device::plan::device_of(call);
        let mut st = inner.drained_for(call, device.is_some())?;
        let rec = inner.flight_start(&st, call, None, device.is_some());
        if let Some((device, stream)) = device {
            let r = (|| {
                inner.refuse_if_over(&mut st, call)?;
                // SAFETY: the caller's contract.
                let started = unsafe { inner.enqueue_device(&mut st, call, device, stream) }?;
                drop(st);
                started.map_or(Ok(()), |f| inner.watch_unlocked(f))
            })();
            inner.flight_end(rec, &r);
            return r;
        }
        // SAFETY: the caller's contract.
        let r = unsafe { inner.execute(&mut st, call) };
        // Under the state lock: the next call's start is recorded after this end.
        inner.flight_end(rec, &r);
        drop(st);
        r
    }

    /// Queues `call` for the progress thread and returns its [`Work`] at once. Calls run in
    /// submission order (blocking [`run`](Self::run) calls included). Bad arguments give a
    /// `Work` that has already failed.
    ///
    /// # Safety
    /// As for [`run`](Self::run), but until the returned [`Work`] reports completion.
    pub unsafe fn submit(&self, call: Call) -> Work {
        // SAFETY: the caller's contract.
        unsafe { self.submit_with(call, None, None) }
    }

    /// [`submit`](Self::submit) with `keep` (dropped, or handed back by [`Work::take`], only
    /// after the call finished: the owner of the buffers) and `on_done` (run with the result on
    /// the thread that ran the call, once the `Work` reports completion).
    ///
    /// # Safety
    /// As for [`submit`](Self::submit).
    pub unsafe fn submit_with(
        &self,
        call: Call,
        keep: Option<Box<dyn Any + Send>>,
        on_done: Option<OnDone>,
    ) -> Work {
        if let Some((device, stream)) = crate::device::plan::device_of(&call) {
            // SAFETY: the caller's contract.
            return unsafe { self.submit_device(call, keep, on_done, device, stream) };
        }
        let inner = self.inner.clone();
        let op = call.collective.name();
        let done = Completion::new(keep);
        let early = inner.usable(&call).and_then(|()| inner.check(&call));
        let ahead = inner.pending.fetch_add(1, Ordering::AcqRel) as u32;
        let deadline = call.deadline.unwrap_or(inner.config.timeout.value);
        let default_wait = inner.config.timeout.value * (ahead + 1) + deadline;
        let work = inner.work(&done, op, default_wait);
        let finish = move |inner: &Inner, r: Result<(), CommError>| {
            done.complete(r, on_done, || {
                inner.pending.fetch_sub(1, Ordering::AcqRel);
                // Wake blocking calls waiting for the queue to drain (under the lock, so none
                // misses it between its check and its wait).
                drop(lock(&inner.state));
                inner.drained.notify_all();
            });
        };
        if let Err(e) = early {
            finish(&inner, Err(e));
            return work;
        }
        let queued = inner.flight_queued(&call);
        let job_inner = inner.clone();
        let job: Job = Box::new(move || {
            let r = {
                let mut st = lock(&job_inner.state);
                let rec = job_inner.flight_start(&st, &call, queued, false);
                // SAFETY: the submitter's contract covers the time until completion.
                let r = unsafe { job_inner.execute(&mut st, &call) };
                job_inner.flight_end(rec, &r);
                r
            };
            finish(&job_inner, r);
        });
        self.to_progress(job);
        work
    }

    /// A device call submitted: started on this thread (so the caller's stream is ordered after
    /// it when this returns: torch's and NCCL's stream semantics), then, on NCCL, watched to
    /// its end by the progress thread; a staged call runs to its end here.
    ///
    /// # Safety
    /// As for [`submit`](Self::submit).
    unsafe fn submit_device(
        &self,
        call: Call,
        keep: Option<Box<dyn Any + Send>>,
        on_done: Option<OnDone>,
        device: i32,
        stream: crate::device::StreamHandle,
    ) -> Work {
        let inner = self.inner.clone();
        let op = call.collective.name();
        let done = Completion::new(keep);
        let timeout = inner.config.timeout.value;
        let default_wait = 2 * timeout + call.deadline.unwrap_or(timeout);
        let work = inner.work(&done, op, default_wait);
        let mut rec = None;
        let started = inner
            .usable(&call)
            .and_then(|()| inner.check(&call))
            .and_then(|()| inner.drained_for(&call, true))
            .and_then(|mut st| {
                rec = inner.flight_start(&st, &call, None, true);
                inner.refuse_if_over(&mut st, &call)?;
                // SAFETY: the caller's contract.
                unsafe { inner.enqueue_device(&mut st, &call, device, stream) }
            });
        let report_inner = inner.clone();
        let report = move |r: Result<(), CommError>| {
            report_inner.flight_end(rec, &r);
            done.complete(r, on_done, || {})
        };
        let inflight = match started {
            Ok(Some(f)) => f,
            Ok(None) => {
                report(Ok(()));
                return work;
            }
            Err(e) => {
                report(Err(e));
                return work;
            }
        };
        inner.pending.fetch_add(1, Ordering::AcqRel);
        inner.watching.fetch_add(1, Ordering::AcqRel);
        let job_inner = inner.clone();
        let job: Job = Box::new(move || {
            let r = job_inner.watch_unlocked(inflight);
            job_inner.watching.fetch_sub(1, Ordering::AcqRel);
            job_inner.pending.fetch_sub(1, Ordering::AcqRel);
            drop(lock(&job_inner.state));
            job_inner.drained.notify_all();
            report(r);
        });
        self.to_progress(job);
        work
    }

    /// Hands `job` to the progress thread (started on first use), or runs it here when there
    /// is none.
    fn to_progress(&self, job: Job) {
        let inner = &self.inner;
        let progress = self.progress.get_or_init(|| {
            let p = Progress::start(inner.rank, inner.cancel.clone()).unwrap_or_else(|e| {
                tracing::error!(rank = inner.rank, "dtcomm: no progress thread: {e}");
                Progress::dead()
            });
            Mutex::new(p)
        });
        if let Err(job) = lock(progress).submit(job) {
            // No progress thread: run it here rather than lose it.
            job();
        }
    }
}

impl Inner {
    /// The state lock, once the calls queued before `call` are out of the way: all of them,
    /// or for a device call only host calls (device calls that are only watched run on).
    /// Fails the communicator when they stay stuck past their own deadlines: this rank could
    /// no longer keep the same call order as its peers.
    pub(super) fn drained_for(
        &self,
        call: &Call,
        device: bool,
    ) -> Result<MutexGuard<'_, State>, CommError> {
        let mut st = lock(&self.state);
        let ahead = || {
            let p = self.pending.load(Ordering::Acquire);
            if device {
                p.saturating_sub(self.watching.load(Ordering::Acquire))
            } else {
                p
            }
        };
        if ahead() == 0 {
            // Nothing queued (the common case): no clock read on the call path.
            return Ok(st);
        }
        let start = Instant::now();
        while ahead() > 0 {
            if let Some(reason) = crate::interrupt::requested() {
                // The calls ahead of this one stop too: the caller gave up on the sequence.
                self.interrupt(&reason);
                let e = CommError::Interrupted {
                    rank: self.rank,
                    call: call.desc(st.seq),
                    elapsed: start.elapsed(),
                    reason,
                };
                st.failed.get_or_insert_with(|| e.clone());
                return Err(e);
            }
            let limit = self.config.timeout.value * (ahead() as u32 + 1);
            if start.elapsed() > limit {
                let e = CommError::WaitTimeout {
                    rank: self.rank,
                    op: call.collective.name(),
                    waited: start.elapsed(),
                };
                st.failed.get_or_insert_with(|| e.clone());
                return Err(e);
            }
            st = self
                .drained
                .wait_timeout(st, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(st)
    }

    /// Watches a device call to its end, taking the state lock only for each look.
    pub(super) fn watch_unlocked(
        &self,
        mut f: backend::nccl_calls::Inflight,
    ) -> Result<(), CommError> {
        loop {
            let r = {
                let mut st = lock(&self.state);
                self.poll(&mut st, &mut f)
            };
            if let Some(r) = r {
                return r;
            }
            f.pause();
        }
    }

    /// The handle of a call of this communicator that completes through `done`.
    fn work(&self, done: &Arc<Completion>, op: &'static str, default_wait: Duration) -> Work {
        Work::new(
            done.clone(),
            self.rank,
            op,
            default_wait,
            self.cancel.clone(),
        )
    }

    /// Asks the calls in flight on the progress thread to stop (`reason` says why): each fails
    /// with [`CommError::Interrupted`] at its next look at its deadline (within 100 ms), which
    /// fails the communicator and tells the peers.
    pub(crate) fn interrupt(&self, reason: &str) {
        lock(&self.cancel).get_or_insert_with(|| reason.to_owned());
    }
}
