//! Asynchronous calls: the progress thread that runs queued calls in order, and the [`Work`]
//! handle the caller waits on (spinning briefly before it parks).

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};

use crate::error::CommError;

pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// The handle of an asynchronous call.
///
/// ```
/// # use dtcomm::{Communicator, Options, ReduceOp};
/// let comms = Communicator::in_memory(1, Options::default()).unwrap();
/// let mut work = comms[0].all_reduce_async(vec![1.0f32, 2.0], ReduceOp::Sum);
/// let _ready_now = work.test();
/// assert_eq!(work.wait().unwrap(), vec![1.0, 2.0]);
/// ```
#[must_use = "a Work does nothing useful unless it is waited on"]
pub struct Work<T> {
    rx: Receiver<Result<T, CommError>>,
    got: Option<Result<T, CommError>>,
    spin: Duration,
    deadline: Duration,
    rank: usize,
}

impl<T> Work<T> {
    pub(crate) fn new(
        rx: Receiver<Result<T, CommError>>,
        spin: Duration,
        deadline: Duration,
        rank: usize,
    ) -> Work<T> {
        Work {
            rx,
            got: None,
            spin,
            deadline,
            rank,
        }
    }

    /// Whether the call has finished (successfully or not). Never blocks.
    pub fn test(&mut self) -> bool {
        if self.got.is_none() {
            match self.rx.try_recv() {
                Ok(r) => self.got = Some(r),
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Disconnected) => self.got = Some(Err(self.lost())),
            }
        }
        true
    }

    fn lost(&self) -> CommError {
        CommError::Setup {
            rank: self.rank,
            elapsed: Duration::ZERO,
            detail: "the progress thread dropped this call (communicator dropped or a panic)"
                .into(),
        }
    }

    /// Waits for the call and returns its result (for calls with a buffer, the buffer).
    /// Spins briefly, then parks; bounded by the deadlines of the calls queued before it.
    pub fn wait(mut self) -> Result<T, CommError> {
        if let Some(r) = self.got.take() {
            return r;
        }
        let start = Instant::now();
        while start.elapsed() < self.spin {
            match self.rx.try_recv() {
                Ok(r) => return r,
                Err(TryRecvError::Disconnected) => return Err(self.lost()),
                Err(TryRecvError::Empty) => std::thread::yield_now(),
            }
        }
        match self.rx.recv_timeout(self.deadline) {
            Ok(r) => r,
            Err(RecvTimeoutError::Disconnected) => Err(self.lost()),
            Err(RecvTimeoutError::Timeout) => Err(CommError::Setup {
                rank: self.rank,
                elapsed: start.elapsed(),
                detail: "asynchronous call did not finish within the deadlines of the calls queued before it".into(),
            }),
        }
    }
}

/// The progress thread: runs jobs in submission order.
pub(crate) struct Progress {
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    pub(crate) fn start(rank: usize, spin: Duration) -> Progress {
        let (tx, rx) = channel::unbounded::<Job>();
        let thread = std::thread::Builder::new()
            .name(format!("dtcomm-progress-{rank}"))
            .spawn(move || {
                loop {
                    // Spin briefly for the next job, so back-to-back calls skip a wake-up.
                    let start = Instant::now();
                    let job = loop {
                        match rx.try_recv() {
                            Ok(j) => break Some(j),
                            Err(TryRecvError::Disconnected) => break None,
                            Err(TryRecvError::Empty) if start.elapsed() < spin => {
                                std::thread::yield_now()
                            }
                            Err(TryRecvError::Empty) => match rx.recv() {
                                Ok(j) => break Some(j),
                                Err(_) => break None,
                            },
                        }
                    };
                    match job {
                        Some(j) => j(),
                        None => return,
                    }
                }
            })
            .expect("spawning the dtcomm progress thread");
        Progress {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    pub(crate) fn submit(&self, job: Job) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.send(job).is_ok())
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A one-shot result channel for a job.
pub(crate) fn oneshot<T>() -> (Sender<T>, Receiver<T>) {
    channel::bounded(1)
}
