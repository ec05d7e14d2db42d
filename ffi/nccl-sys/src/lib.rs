//! NCCL for dtcomm, loaded at run time.
//!
//! Nothing here links against NCCL: [`bindings`] holds NCCL's types and constants, generated
//! once by `scripts/regen-nccl-bindings.sh` and committed, and the functions are looked up
//! with `dlopen`/`dlsym` when a program asks for them. See `docs/nccl.md`.

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
