//! `Nccl::load()` reading `DTCOMM_NCCL_LIBRARY` from the real environment. The only test in
//! this binary (its own process), so its `set_var` calls race nothing.

#![warn(clippy::undocumented_unsafe_blocks)]

mod common;

use dtcomm_nccl_sys::{Failure, LoadError, Nccl, Source};

fn set(name: &str, value: Option<&std::path::Path>) {
    // SAFETY: `set_var`/`remove_var` race only with another thread reading or writing the
    // environment. This binary holds this one test, so the harness runs no other test beside it,
    // and nothing the test calls has started a thread of its own (loading NCCL reads the
    // environment on this thread).
    unsafe {
        match value {
            Some(value) => std::env::set_var(name, value),
            None => std::env::remove_var(name),
        }
    }
}

#[test]
fn dtcomm_nccl_library_is_the_only_place_tried() {
    let tmp = common::TempDir::new("env-library");
    // A directory that would work must not be consulted while DTCOMM_NCCL_LIBRARY is set.
    let wheel = common::wheel();
    set(
        "DTCOMM_NCCL_SEARCH_PATH",
        wheel.as_ref().ok().map(|w| w.lib_dir()),
    );

    let missing = tmp.0.join("nope/libnccl.so.2");
    set("DTCOMM_NCCL_LIBRARY", Some(&missing));
    let err = Nccl::load().unwrap_err();
    eprintln!("{err}");
    assert!(
        matches!(&err, LoadError::Library { path, failure: Failure::Open(_) } if *path == missing)
    );
    assert!(err.to_string().contains(&*missing.to_string_lossy()));

    let bogus = tmp.bogus_nccl("bogus").join("libnccl.so.2");
    set("DTCOMM_NCCL_LIBRARY", Some(&bogus));
    let err = Nccl::load().unwrap_err();
    eprintln!("{err}");
    assert!(matches!(&err, LoadError::Library { path, .. } if *path == bogus));

    set("DTCOMM_NCCL_LIBRARY", Some("libc.so.6".as_ref()));
    let err = Nccl::load().unwrap_err();
    eprintln!("{err}");
    assert_eq!(
        err.attempts()[0].failure,
        Failure::MissingSymbol("ncclGetVersion")
    );
    assert!(err.to_string().contains("libc.so.6"));
    assert!(err.to_string().contains("ncclGetVersion"));

    let Ok(wheel) = wheel else {
        eprintln!("SKIPPED the loading half: {}", wheel.err().unwrap());
        return;
    };
    set("DTCOMM_NCCL_LIBRARY", Some(&wheel.library));
    let nccl = Nccl::load().expect("DTCOMM_NCCL_LIBRARY names the venv's NCCL");
    assert_eq!(nccl.source(), Source::Library);
    assert_eq!(nccl.path(), wheel.library);
    assert_eq!(nccl.version(), wheel.header_version);
}
