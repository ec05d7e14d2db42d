//! `Nccl::load()` finding the wheel through `VIRTUAL_ENV`, as in an activated venv. The only
//! test in this binary (its own process), so its `set_var` calls race nothing.

#![warn(clippy::undocumented_unsafe_blocks)]

mod common;

use dtcomm_nccl_sys::{Failure, Nccl, Source};

#[test]
fn virtual_env_wheel_is_found() {
    let Some(wheel) = common::wheel_or_skip("virtual_env_wheel_is_found") else {
        return;
    };
    // SAFETY: `set_var`/`remove_var` race only with another thread reading or writing the
    // environment. This binary holds this one test, so the harness runs no other test beside it,
    // and nothing the test calls has started a thread of its own (loading NCCL reads the
    // environment on this thread).
    unsafe {
        std::env::remove_var("DTCOMM_NCCL_LIBRARY");
        std::env::remove_var("DTCOMM_NCCL_SEARCH_PATH");
        std::env::set_var("VIRTUAL_ENV", &wheel.venv);
    }
    let nccl = Nccl::load().expect("found in $VIRTUAL_ENV");
    assert_eq!(nccl.source(), Source::VirtualEnv);
    assert_eq!(nccl.path(), wheel.library);
    let skipped: Vec<_> = nccl.skipped().iter().map(|a| a.failure.clone()).collect();
    assert_eq!(
        skipped,
        [
            Failure::NotLoaded,
            Failure::NotSet("DTCOMM_NCCL_SEARCH_PATH")
        ]
    );
}
