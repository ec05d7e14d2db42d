//! The native rendezvous client for Python: `NativeClient` over dt-rdzv's blocking client
//! (QUIC and TLS on a private one-thread runtime, heartbeats in the background), the GIL
//! released in every call that waits. `Welcome`, `Peer` and `RdzvEvent` are read-only values;
//! failures are typed exceptions (`RdzvRefusedError` with the server's code,
//! `RdzvJobEndedError` with how the job ended, `RdzvTimeoutError`, `RdzvLostError`,
//! `RdzvConnectError`).
//!
//! One concept per file:
//! * `client.rs`: `NativeClient`, the connection (join, wait for rounds, messages,
//!   configuration, operator calls, leave);
//! * `round.rs`: `Welcome` and `Peer`, a completed round as a member sees it;
//! * `event.rs`: `RdzvEvent`, a message the server pushed;
//! * `status.rs`: a job's status (the operator's view) as a dict;
//! * `errors.rs`: the typed exceptions of the client's errors;
//! * `tokens.rs`: `job_token` and `store_link_secret`, what a token derives;
//! * `listener.rs`: `DataListener`, the data socket bound before joining.

mod client;
mod errors;
mod event;
mod listener;
mod round;
mod status;
mod tokens;

pub(crate) use client::NativeClient;
pub(crate) use errors::{to_py, with_attrs};
pub(crate) use event::RdzvEvent;
pub(crate) use listener::PyDataListener;
pub(crate) use round::{PyPeer, PyWelcome};
pub(crate) use tokens::{job_token, store_link_secret};
