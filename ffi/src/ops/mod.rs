//! Every collective, blocking (`dtcomm_all_reduce`) and non-blocking (`dtcomm_iall_reduce`,
//! returning a request). Each builds one byte-level [`Call`](dtcomm::Call) and hands it to the
//! engine; the engine checks buffers, counts and roots (a refused call sends nothing and leaves
//! the communicator usable).
//!
//! Counts are in elements. For calls with an input and an output, a NULL input where the
//! output may serve as input means in place (`all_reduce`, `broadcast`, `reduce`); the
//! rooted side of `gather`/`scatter`/`reduce` may be NULL on the other ranks.
//!
//! One concept per file:
//! * `args.rs`: the C arguments as the engine's types (dtypes, reductions, indices, buffers,
//!   count arrays);
//! * `run.rs`: running a built call now, or submitting it and handing out its request;
//! * `in_place.rs`: the calls whose output may be their input (`all_reduce`, `broadcast`,
//!   `reduce`);
//! * `blocks.rs`: the calls that lay one block per rank side by side on every rank
//!   (`all_gather`, `all_gather_v`, `reduce_scatter`);
//! * `rooted.rs`: the block calls whose one side is the root's alone (`gather`, `scatter`);
//! * `all_to_all.rs`: `all_to_all` and `all_to_all_v`;
//! * `barrier.rs`: `barrier`;
//! * `p2p.rs`: `send` and `recv`.
//!
//! cbindgen writes the functions to `include/dtcomm.h` in the order the modules are declared,
//! so the `mod` lines below keep the header's order; each stands alone because rustfmt sorts
//! adjacent ones.

mod args;
mod run;

mod in_place;

mod blocks;

mod rooted;

mod all_to_all;

mod barrier;

mod p2p;

pub(crate) use args::{dtype, redop};
pub(crate) use run::go;

pub use all_to_all::*;
pub use barrier::*;
pub use blocks::*;
pub use in_place::*;
pub use p2p::*;
pub use rooted::*;
