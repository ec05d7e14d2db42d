//! `Nccl::load()` reading `DTCOMM_NCCL_SEARCH_PATH` from the real environment, then finding
//! the same library already loaded. The only test in this binary (its own process, where
//! nothing has loaded NCCL before it), so its `set_var` calls race nothing.

#![warn(clippy::undocumented_unsafe_blocks)]

mod common;

use dtcomm_nccl_sys::{Failure, LoadError, Nccl, Source};

#[test]
fn search_path_then_already_loaded() {
    let Some(wheel) = common::wheel_or_skip("search_path_then_already_loaded") else {
        return;
    };
    let tmp = common::TempDir::new("env-search-path");
    let empty = tmp.empty("empty");
    let bogus = tmp.bogus_nccl("bogus");
    let set = |name: &str, value: Option<std::ffi::OsString>| {
        // SAFETY: `set_var`/`remove_var` race only with another thread reading or writing the
        // environment. This binary holds this one test, so the harness runs no other test beside
        // it, and nothing the test calls has started a thread of its own (loading NCCL reads the
        // environment on this thread).
        unsafe {
            match value {
                Some(value) => std::env::set_var(name, value),
                None => std::env::remove_var(name),
            }
        }
    };
    set("DTCOMM_NCCL_LIBRARY", None);
    set("VIRTUAL_ENV", None);

    // Nothing usable on the path: the report lists each place and why, in order.
    set(
        "DTCOMM_NCCL_SEARCH_PATH",
        Some(std::env::join_paths([&empty, &bogus]).unwrap()),
    );
    let report = Nccl::load();
    if let Err(LoadError::NotFound { attempts }) = &report {
        eprintln!("{}", report.as_ref().unwrap_err());
        assert_eq!(attempts[0].source, Source::AlreadyLoaded);
        assert_eq!(attempts[0].failure, Failure::NotLoaded);
        assert_eq!(attempts[1].place, empty.join("libnccl.so.2"));
        assert_eq!(attempts[1].failure, Failure::Missing);
        assert_eq!(attempts[2].place, bogus.join("libnccl.so.2"));
        assert!(matches!(attempts[2].failure, Failure::Open(_)));
        assert_eq!(attempts[3].failure, Failure::NotSet("VIRTUAL_ENV"));
        assert_eq!(attempts[4].source, Source::System);
    } else {
        // A system-wide NCCL (ld.so.cache) ends the search instead; nothing more to check.
        eprintln!(
            "a system NCCL was found: {:?}",
            report.map(|n| n.path().to_owned())
        );
        return;
    }

    // The wheel's directory after them: found there, with the failures before it reported.
    let dirs = [&empty, &bogus, &wheel.lib_dir().to_path_buf()];
    set(
        "DTCOMM_NCCL_SEARCH_PATH",
        Some(std::env::join_paths(dirs).unwrap()),
    );
    let nccl = Nccl::load().expect("found on DTCOMM_NCCL_SEARCH_PATH");
    assert_eq!(nccl.source(), Source::SearchPath);
    assert_eq!(nccl.path(), wheel.library);
    assert_eq!(nccl.version(), wheel.header_version);
    let skipped: Vec<_> = nccl.skipped().iter().map(|a| a.failure.clone()).collect();
    assert!(matches!(
        skipped.as_slice(),
        [Failure::NotLoaded, Failure::Missing, Failure::Open(_)]
    ));

    // Loaded now: the next search takes the mapped library, whatever the path says.
    set("DTCOMM_NCCL_SEARCH_PATH", Some(bogus.into_os_string()));
    let again = Nccl::load().expect("already loaded");
    assert_eq!(again.source(), Source::AlreadyLoaded);
    assert_eq!(again.path(), wheel.library);
}
