//! Name-based negotiation and fusion ([`dtcomm::negotiate`], the Horovod model) from C: a
//! negotiator runs cycles over a communicator; ranks submit *named* operations in any order,
//! each completes once every rank has submitted its name, small allreduces are fused. A name
//! whose ranks disagree (dtype, shape, root, op, scale factors) fails on every rank with
//! `DTCOMM_MISMATCH`, and later names still work.
//!
//! Submitting copies the caller's buffer (the operation owns its data); the result is copied
//! out with `dtcomm_named_result` once `dtcomm_named_wait` succeeded. While a negotiator runs
//! it is its communicator's only caller.
//!
//! One concept per file:
//! * `registry.rs`: the handle types and the tables of live negotiators and named operations;
//! * `negotiator.rs`: starting and shutting down a negotiator;
//! * `submit.rs`: turning a submission's C arguments into a request and its payload;
//! * `kinds.rs`: one entry point per kind of named operation (`dtcomm_named_allreduce`, ...);
//! * `outcome.rs`: testing, waiting for, reading out and freeing a named operation.
//!
//! cbindgen writes the functions to `include/dtcomm.h` in the order the modules are declared,
//! so the `mod` lines below keep the header's order; each stands alone because rustfmt sorts
//! adjacent ones.

mod registry;
mod submit;

mod negotiator;

mod kinds;

mod outcome;

pub use kinds::*;
pub use negotiator::*;
pub use outcome::*;
pub use registry::{dtcomm_named_t, dtcomm_negotiator_t};
