//! The one shape of every core in this crate: the TCPStore [`Engine`](crate::tcpstore::Engine),
//! the [`RendezvousMachine`](crate::rendezvous::RendezvousMachine), the etcd
//! [`V2Store`](crate::etcd_v2::V2Store), and a native client's
//! [`Member`](crate::native::member::Member) session.
//!
//! A driver feeds each input with the time it arrived ([`Core::handle`]), then takes the
//! outputs it caused, in order ([`Core::poll_output`]), and runs the core's deadlines when
//! [`Core::poll_timeout`] says ([`Core::handle_timeout`]). The core never reads a clock, so
//! tests drive it with a virtual one; the time is always a monotonic [`Instant`].
//!
//! Each core also has these as inherent methods (its outputs by their own name,
//! `poll_action` or `poll_output`); the trait is what lets one driver serve them all. (The
//! member machine has only the trait's.)

use std::time::Instant;

/// A sans-IO core: inputs in with the time, outputs polled, deadlines asked for.
pub trait Core {
    /// What the driver tells the core (a connection opened, a request came, it closed).
    type Input;
    /// What the core asks of the driver (send, close, log), in order.
    type Output;

    /// Feeds one input that arrived at `now`.
    fn handle(&mut self, now: Instant, input: Self::Input);

    /// The next output, or `None` when everything asked for was taken.
    fn poll_output(&mut self) -> Option<Self::Output>;

    /// When [`Core::handle_timeout`] should next run (`None`: no deadline).
    fn poll_timeout(&self) -> Option<Instant>;

    /// Runs every deadline due by `now`.
    fn handle_timeout(&mut self, now: Instant);
}
