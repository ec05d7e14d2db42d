//! Blocking calls that answer Ctrl-C: the engine's waits ask a check installed here
//! (`dtcomm::interrupt`), which runs the interpreter's pending signal handlers at most every
//! [`EVERY`]. When a handler raises (`KeyboardInterrupt`, `pytest-timeout`'s error, a
//! notebook's interrupt), the call fails with `Interrupted` (the communicator is failed, the
//! peers are told) and the caller gets the handler's exception.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// How often a blocked call looks for pending signals.
pub(crate) const EVERY: Duration = Duration::from_millis(50);

/// What a signal handler raised, as the reason an interrupted call gives its peers.
fn reason(py: Python<'_>, e: &PyErr) -> String {
    let name = e
        .get_type(py)
        .name()
        .map_or_else(|_| "exception".to_owned(), |n| n.to_string());
    format!("{name} raised by a signal handler while it waited")
}

/// Runs `f` without the GIL, interruptible by Python's signal handlers. Returns `f`'s result
/// and the exception a handler raised, if one did (then `f` failed with `Interrupted`).
pub(crate) fn detach<R: Send>(py: Python<'_>, f: impl FnOnce() -> R + Send) -> (R, Option<PyErr>) {
    py.detach(|| {
        let raised: Rc<RefCell<Option<PyErr>>> = Rc::default();
        let stash = raised.clone();
        let mut last = Instant::now();
        let check: dtcomm::interrupt::Check = Box::new(move || {
            if last.elapsed() < EVERY {
                return None;
            }
            last = Instant::now();
            Python::attach(|py| {
                py.check_signals().err().map(|e| {
                    let why = reason(py, &e);
                    *stash.borrow_mut() = Some(e);
                    why
                })
            })
        });
        let r = dtcomm::interrupt::with_check(check, f);
        let e = raised.borrow_mut().take();
        (r, e)
    })
}

/// Waits for `work` in slices of [`EVERY`], running pending signal handlers between them. When
/// one raises, the communicator's calls in flight are interrupted (they fail within 100 ms,
/// and the peers hear of it), this waits up to `settle` for the call to end, and returns the
/// handler's exception. `None` from the closure means "not finished by `limit`".
pub(crate) fn wait_work(
    py: Python<'_>,
    work: &dtcomm::Work,
    limit: Duration,
    settle: Duration,
) -> PyResult<Option<Result<(), dtcomm::CommError>>> {
    let start = Instant::now();
    loop {
        let left = limit.saturating_sub(start.elapsed());
        let slice = left.min(EVERY);
        if let Some(r) = py.detach(|| work.wait_timeout(slice)) {
            return Ok(Some(r));
        }
        if left.is_zero() {
            return Ok(None);
        }
        if let Err(e) = py.check_signals() {
            work.interrupt(&reason(py, &e));
            py.detach(|| work.wait_timeout(settle));
            return Err(e);
        }
    }
}
