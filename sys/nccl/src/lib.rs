//! NCCL for dtcomm, loaded at run time.
//!
//! Nothing here links against NCCL: [`bindings`] holds NCCL's types and constants, generated
//! once by `scripts/regen-nccl-bindings.sh` and committed, and the functions are looked up
//! with `dlopen`/`dlsym` by [`Nccl::load`], which searches the places [`load`] lists, checks
//! the version ([`Version::MINIMUM`]) and probes the optional functions. See `docs/nccl.md`.
//!
//! ```no_run
//! let nccl = dtcomm_nccl_sys::Nccl::load()?;
//! println!("NCCL {} from {}", nccl.version(), nccl.path().display());
//! let id = nccl.unique_id()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(clippy::undocumented_unsafe_blocks)]

/// NCCL's types and constants from `nccl.h` (bindgen output; do not edit).
///
/// C enums are integer newtypes (`ncclResult_t(pub u32)` with associated constants), so a
/// code from a newer library than the header is an ordinary value, not undefined behaviour.
#[allow(
    missing_docs,
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    clippy::all
)]
pub mod bindings;

mod comm;
pub mod config;
pub mod error;
pub mod load;
mod nccl;
pub mod result;
pub mod source;
pub mod symbols;
pub mod unique_id;
pub mod version;

pub use config::config_initializer;
pub use error::{Attempt, Failure, LoadError};
pub use load::{SearchConfig, Source};
pub use nccl::Nccl;
pub use result::{NcclError, NcclResult, Status};
pub use symbols::Probe;
pub use unique_id::{UNIQUE_ID_BYTES, unique_id_from_bytes, unique_id_to_bytes};
pub use version::Version;
