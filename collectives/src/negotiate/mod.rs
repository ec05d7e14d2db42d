//! Name-based negotiation and tensor fusion, sans-IO: the coordinator of Horovod's model, for
//! the Horovod-compatible front end (`dtcomm.horovod.torch`), the C ABI's `dtcomm_named_*`
//! calls and any other that wants it.
//!
//! Every rank of a process set submits named [`Request`]s as its program reaches them. Each
//! cycle the ranks' new requests reach the coordinator (rank 0 of the set), which starts an
//! operation only once **every** rank has submitted that name, so operations may complete in
//! another order than they were submitted, and a barrier may complete while unrelated
//! operations are still pending. A name whose requests disagree (kind, dtype, shape, root, op,
//! scale factors, device) becomes an error [`Response`] that every rank sees, and later names
//! still work. Ready allreduces of the same kind are fused into one [`Response`] up to the
//! fusion threshold.
//!
//! * [`Request`], [`Kind`]: what a rank submits;
//! * [`Coordinator`]: the table of pending names, readiness, validation ([`check`], `validate.rs`) and fusion
//!   ([`fuse`]), one cycle at a time ([`Coordinator::cycle`]);
//! * [`Response`]: what every rank runs next, in the coordinator's order;
//! * [`Payload`]: a submission's buffer, owned or the caller's memory in place.
//!
//! The coordinator has no sockets and no clocks; [`Negotiator`] drives it over a
//! [`crate::Communicator`]: each cycle every rank all-gathers its new requests and runs the
//! same coordinator on them, so every rank computes the same responses without a broadcast.
//! The all-gather is one round trip: contributions travel in fixed-size slots sized from the
//! previous cycles (`slot`), and only what overflows takes a second round. `driver.rs` is
//! the cycle thread, `execute.rs` runs each response on the communicator, `pending.rs` holds an
//! operation between its submission and its result, `stall_clock.rs` says what a cycle
//! counts toward the stall deadline.

mod coordinator;
mod driver;
mod execute;
mod fuse;
mod payload;
mod pending;
mod request;
mod scale;
mod slot;
mod stall_clock;
mod validate;
mod wire;

pub use coordinator::{Coordinator, Duplicate};
pub use driver::{Handle, NegotiateError, Negotiator, Output};
pub use fuse::{DEFAULT_FUSION_THRESHOLD, fuse};
pub use payload::{InPlace, Payload};
pub use request::{Kind, Request, Response};
pub use scale::scale;
pub use validate::check;
