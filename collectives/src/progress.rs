//! The one progress executor of a communicator and the one [`Work`] handle.
//!
//! Every call goes through the executor, which runs calls in submission order on every rank:
//! asynchronous calls queue for the progress thread (started on first use); a blocking call
//! runs on the caller's own thread once every call submitted before it has finished, which
//! keeps a small blocking call free of any thread hop.

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Sender};

use crate::error::CommError;

/// A queued call, ready to run on the progress thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// What runs once a call finished, with its result (on the thread that ran it).
pub type OnDone = Box<dyn FnOnce(&Result<(), CommError>) + Send>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The completion of one call: its result once set, and what the caller asked to keep alive
/// until then (its buffers).
pub(crate) struct Completion {
    finished: AtomicBool,
    result: Mutex<Option<Result<(), CommError>>>,
    cv: Condvar,
    keep: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Completion {
    pub(crate) fn new(keep: Option<Box<dyn Any + Send>>) -> Arc<Completion> {
        Arc::new(Completion {
            finished: AtomicBool::new(false),
            result: Mutex::new(None),
            cv: Condvar::new(),
            keep: Mutex::new(keep),
        })
    }

    fn set(&self, r: Result<(), CommError>) {
        *lock(&self.result) = Some(r);
        self.finished.store(true, Ordering::Release);
        self.cv.notify_all();
    }

    /// The one way a call completes, whatever ran it: the result set (its `Work` reports
    /// completion, waiters wake), then `after_set` (the executor's bookkeeping), then
    /// `on_done` with the result, last, so that a callback may itself call the communicator.
    pub(crate) fn complete(
        &self,
        r: Result<(), CommError>,
        on_done: Option<OnDone>,
        after_set: impl FnOnce(),
    ) {
        let for_callback = on_done.as_ref().map(|_| r.clone());
        self.set(r);
        after_set();
        if let (Some(f), Some(r)) = (on_done, for_callback) {
            f(&r);
        }
    }
}

/// The handle of a submitted call: [`wait`](Work::wait) with a deadline,
/// [`test`](Work::test) without blocking, and the error. Dropping it does not cancel the call;
/// the executor keeps what the call needs alive until it finished.
///
/// ```
/// # use dtcomm::{Communicator, Options, ReduceOp};
/// let comms = Communicator::in_memory(1, Options::default()).unwrap();
/// let work = comms[0].all_reduce_async(vec![1.0f32, 2.0], ReduceOp::Sum);
/// work.wait().unwrap();
/// assert!(work.test());
/// assert_eq!(work.take::<Vec<f32>>().unwrap(), vec![1.0, 2.0]);
/// ```
#[must_use = "a Work does nothing useful unless it is waited on or tested"]
pub struct Work {
    done: Arc<Completion>,
    rank: usize,
    op: &'static str,
    default_wait: Duration,
    /// The communicator's cancel flag (see [`Work::interrupt`]).
    cancel: Arc<Mutex<Option<String>>>,
}

impl Work {
    pub(crate) fn new(
        done: Arc<Completion>,
        rank: usize,
        op: &'static str,
        default_wait: Duration,
        cancel: Arc<Mutex<Option<String>>>,
    ) -> Work {
        Work {
            done,
            rank,
            op,
            default_wait,
            cancel,
        }
    }

    /// Whether the call has finished, successfully or not. Never blocks; true from the moment
    /// the call completed.
    pub fn test(&self) -> bool {
        self.done.finished.load(Ordering::Acquire)
    }

    /// The call's result, if it finished.
    pub fn result(&self) -> Option<Result<(), CommError>> {
        if !self.test() {
            return None;
        }
        lock(&self.done.result).clone()
    }

    /// Waits for the call and returns its result. Bounded by the deadlines of this call and of
    /// the calls queued before it; may be called again (it returns the same result).
    pub fn wait(&self) -> Result<(), CommError> {
        match self.wait_timeout(self.default_wait) {
            Some(r) => r,
            None => Err(CommError::WaitTimeout {
                rank: self.rank,
                op: self.op,
                waited: self.default_wait,
            }),
        }
    }

    /// Waits at most `timeout`: `None` if the call has not finished by then (it goes on).
    /// Sleeps on a condition variable: the thread running the call does the spinning, where
    /// its policy lets it (`spin.rs`); a second spinner would only take its core.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<(), CommError>> {
        let start = Instant::now();
        let mut g = lock(&self.done.result);
        while g.is_none() {
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return None;
            }
            g = self
                .done
                .cv
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        g.clone()
    }

    /// After the call finished: takes back what was submitted to be kept alive with it (the
    /// owned buffer of a typed `*_async` call), if it is a `B`.
    pub fn take<B: Any>(&self) -> Option<B> {
        if !self.test() {
            return None;
        }
        let mut k = lock(&self.done.keep);
        match k.take()?.downcast::<B>() {
            Ok(b) => Some(*b),
            Err(other) => {
                *k = Some(other);
                None
            }
        }
    }

    /// How long [`wait`](Self::wait) waits: the deadlines of this call and of those queued
    /// before it.
    pub fn default_wait(&self) -> Duration {
        self.default_wait
    }

    /// Interrupts the communicator's calls in flight, this one included, because the caller
    /// waiting on it was interrupted (`reason` says how, e.g. Ctrl-C): each fails with
    /// [`CommError::Interrupted`] within 100 ms, which fails the communicator and tells the
    /// peers. Does nothing to a call that already finished.
    pub fn interrupt(&self, reason: &str) {
        if !self.test() {
            lock(&self.cancel).get_or_insert_with(|| reason.to_owned());
        }
    }

    /// The call's name.
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// The rank that submitted it.
    pub fn rank(&self) -> usize {
        self.rank
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.result() {
            None => "running",
            Some(Ok(())) => "done",
            Some(Err(_)) => "failed",
        };
        write!(f, "Work({} on rank {}: {state})", self.op, self.rank)
    }
}

/// The progress thread: runs queued jobs in submission order.
pub(crate) struct Progress {
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts the thread of rank `rank`; its calls stop when `cancel` holds a reason
    /// (`interrupt.rs`).
    pub(crate) fn start(
        rank: usize,
        cancel: Arc<Mutex<Option<String>>>,
    ) -> std::io::Result<Progress> {
        let (tx, rx) = channel::unbounded::<Job>();
        // Sleeps in the kernel between jobs: no thread polls while no call is in flight.
        let thread = std::thread::Builder::new()
            .name(format!("dtcomm-progress-{rank}"))
            .spawn(move || {
                let check = Box::new(move || lock(&cancel).clone());
                crate::interrupt::with_check(check, || {
                    while let Ok(job) = rx.recv() {
                        job();
                    }
                });
            })?;
        Ok(Progress {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// A progress "thread" that could not be started: every submit gives the job back.
    pub(crate) fn dead() -> Progress {
        Progress {
            tx: None,
            thread: None,
        }
    }

    /// Queues `job`; gives it back if the thread is gone.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        match &self.tx {
            Some(tx) => tx.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }

    /// Finishes the queued jobs and joins the thread.
    pub(crate) fn stop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// In a forked child the thread does not exist: forget it without joining.
    pub(crate) fn forget(mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            std::mem::forget(t);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}
