//! Interrupting a blocked call: its waits ask this thread's interrupt check (installed by the
//! front end around the call) at every turn of their deadline loop, at least every 100 ms.
//!
//! Python installs a check that runs the interpreter's pending signal handlers, so Ctrl-C,
//! `pytest-timeout` and a notebook's interrupt button stop a call blocked on a peer that never
//! comes; the progress thread installs one that reads its communicator's cancel flag, set when
//! a caller waiting on a [`Work`](crate::Work) was interrupted. A call that sees a request fails
//! with [`CommError::Interrupted`](crate::CommError::Interrupted): the communicator is failed
//! and its peers are told, as for any local error.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

/// A communicator's cancel flag: once it holds a reason, every call of the communicator in
/// flight (blocking ones on any thread, and the progress thread's) stops at its next look at
/// its deadline ([`Communicator::interrupt`](crate::Communicator::interrupt)).
pub(crate) type Cancel = Arc<Mutex<Option<String>>>;

/// The reason in `cancel`, if there is one.
pub(crate) fn cancelled(cancel: &Cancel) -> Option<String> {
    cancel.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// A check: `Some(why)` when the call in progress on this thread should stop.
pub type Check = Box<dyn FnMut() -> Option<String>>;

thread_local! {
    static CHECK: RefCell<Option<Check>> = const { RefCell::new(None) };
}

/// Runs `body` with `check` installed for this thread (the previous check, if any, is put
/// back afterwards, also when `body` unwinds).
pub fn with_check<R>(check: Check, body: impl FnOnce() -> R) -> R {
    struct Restore(Option<Check>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            CHECK.with(|c| *c.borrow_mut() = prev);
        }
    }
    let prev = CHECK.with(|c| c.borrow_mut().replace(check));
    let _restore = Restore(prev);
    body()
}

/// Asks this thread's check, if one is installed: `Some(why)` means stop.
pub fn requested() -> Option<String> {
    CHECK.with(|c| match c.try_borrow_mut() {
        Ok(mut c) => c.as_mut().and_then(|f| f()),
        // The check itself is running (it called back into a wait): no nested answer.
        Err(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn installed_only_inside_and_restored() {
        assert_eq!(requested(), None);
        let n = Rc::new(Cell::new(0));
        let n2 = n.clone();
        let r = with_check(
            Box::new(move || {
                n2.set(n2.get() + 1);
                (n2.get() >= 2).then(|| "signal".to_owned())
            }),
            || {
                let inner = with_check(Box::new(|| None), requested);
                assert_eq!(inner, None, "the innermost check answers");
                (requested(), requested())
            },
        );
        assert_eq!(r, (None, Some("signal".to_owned())));
        assert_eq!(n.get(), 2);
        assert_eq!(requested(), None, "removed after the body");
    }

    #[test]
    fn other_threads_do_not_see_it() {
        with_check(Box::new(|| Some("x".into())), || {
            let seen = std::thread::spawn(requested).join().unwrap();
            assert_eq!(seen, None);
        });
    }
}
