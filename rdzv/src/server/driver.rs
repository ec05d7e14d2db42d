//! One driver for the server's three sans-IO cores (the TCPStore engine, the rendezvous
//! machine, the etcd v2 store; see [`dt_rdzv_proto::sans_io`]).
//!
//! A [`Driver`] holds a core and its [`Route`]s (the connections' outboxes, watchers, what
//! else its door keeps) behind one lock. Every output is routed while the lock is held, so the
//! messages a connection receives (its own replies, and the wake-ups or round ends other
//! connections cause) reach its outbox in exactly the core's order. [`Driver::run_timers`]
//! runs the core's deadlines; an input that moves the next deadline earlier wakes it.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dt_rdzv_proto::sans_io::Core;
use tokio::sync::{Notify, watch};

/// Longest the timer sleeps without looking at the core again.
const MAX_SLEEP: Duration = Duration::from_secs(1);

/// Where a core's outputs go: the driver side of one door.
pub(crate) trait Route<O> {
    /// Carries out one output (under the lock; must not block).
    fn route(&mut self, output: O);
}

/// A core and its routes, as the lock holds them.
pub(crate) struct Driven<C, R> {
    /// The sans-IO core.
    pub(crate) core: C,
    /// Where its outputs go.
    pub(crate) routes: R,
    /// When the timer task wakes next (`None`: it is not sleeping on a deadline).
    armed: Option<Instant>,
}

impl<C: Core, R: Route<C::Output>> Driven<C, R> {
    /// Feeds one input and routes every output it caused.
    pub(crate) fn handle(&mut self, now: Instant, input: C::Input) {
        self.core.handle(now, input);
        self.route();
    }

    /// Routes every output waiting in the core.
    pub(crate) fn route(&mut self) {
        while let Some(output) = self.core.poll_output() {
            self.routes.route(output);
        }
    }
}

/// A core behind a lock, and its timer. See the module docs.
pub(crate) struct Driver<C, R> {
    inner: Mutex<Driven<C, R>>,
    /// Tells the timer task that the next deadline came earlier.
    wake: Notify,
}

impl<C: Core, R: Route<C::Output>> Driver<C, R> {
    pub(crate) fn new(core: C, routes: R) -> Self {
        Self {
            inner: Mutex::new(Driven {
                core,
                routes,
                armed: None,
            }),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Driven<C, R>> {
        // A core keeps itself consistent at every return; a panic elsewhere must not take the
        // whole server down.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the core and its routes under the lock, then routes what it left and wakes
    /// the timer if the next deadline came earlier than the one it sleeps to.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut Driven<C, R>) -> T) -> T {
        let mut g = self.lock();
        let out = f(&mut g);
        g.route();
        let next = g.core.poll_timeout();
        if next.is_some_and(|n| g.armed.is_none_or(|armed| n < armed)) {
            self.wake.notify_one();
        }
        out
    }

    /// Reads the core and its routes under the lock.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Driven<C, R>) -> T) -> T {
        f(&self.lock())
    }

    /// Runs the core's deadlines until `stop` turns.
    pub(crate) async fn run_timers(&self, mut stop: watch::Receiver<bool>) {
        loop {
            let sleep = {
                let mut g = self.lock();
                let now = Instant::now();
                let sleep = g.core.poll_timeout().map_or(MAX_SLEEP, |t| {
                    t.saturating_duration_since(now).min(MAX_SLEEP)
                });
                g.armed = Some(now + sleep);
                sleep
            };
            tokio::select! {
                _ = stop.changed() => return,
                _ = self.wake.notified() => continue,
                _ = tokio::time::sleep(sleep) => {}
            }
            self.with(|g| g.core.handle_timeout(Instant::now()));
        }
    }
}
