//! `dtcomm._dtcomm.Communicator`: the engine's [`dtcomm::Communicator`] for Python. Every
//! collective takes numpy arrays (buffer protocol) or CPU torch tensors (DLPack) in place,
//! builds one byte-level [`Call`](dtcomm::Call) over the caller's memory (zero copy), releases
//! the GIL while it runs, and with `async_op=True` submits it to the engine's executor and
//! returns a [`Work`](crate::work::Work) instead.
//!
//! One concept per file:
//! * `communicator.rs`: the class `Communicator` itself, its engine communicator (gone after
//!   `shutdown()`), rank and world;
//! * `setup.rs`: building one: through a rendezvous store (`connect`, `from_store`) or from
//!   a native round's welcome (`from_welcome`);
//! * `args.rs`: the Python arguments of a collective as the engine's (reduce ops, buffers);
//! * `run.rs`: running a built call without the GIL, or submitting it (`async_op`, callbacks);
//! * `methods.rs`: what Python sees: every method and property of `Communicator` (PyO3 takes
//!   them in one `#[pymethods]` block).

mod args;
mod communicator;
mod methods;
mod run;
mod setup;

pub(crate) use communicator::PyCommunicator;
