//! The loader against stand-in libraries built from `tests/fake/fake_nccl.c` with the system
//! C compiler (skipped, with the reason printed, when there is no compiler; a compiler that
//! fails fails the test): the minimum version, a missing
//! required symbol, version-gated probes, the search going past an unusable library, and an
//! unusable library already in the process ending the search.
//!
//! One test: every fake has the soname libnccl.so.2, so the order in which they are mapped
//! into this process matters.

#![warn(clippy::undocumented_unsafe_blocks)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use dtcomm_nccl_sys::{Failure, LoadError, Nccl, SearchConfig, Source, Version};

/// Builds a fake into `DIR/libnccl.so.2`; `Err` when there is no compiler to run.
fn build(dir: &Path, version: u32, extra: &[&str]) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).unwrap();
    let source = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("tests/fake/fake_nccl.c");
    let output = dir.join("libnccl.so.2");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-Wl,-soname,libnccl.so.2"])
        .arg(format!("-DFAKE_VERSION={version}"))
        .args(extra)
        .arg("-o")
        .arg(&output)
        .arg(&source)
        .status()
        .map_err(|e| format!("{cc}: {e}"))?;
    // A compiler that runs and fails is a failure (a stale or missing source), not a skip.
    assert!(
        status.success(),
        "{cc} {} failed: {status}",
        source.display()
    );
    Ok(output)
}

fn only(library: &Path) -> SearchConfig {
    SearchConfig {
        library: Some(library.to_owned()),
        search_path: None,
        virtual_env: None,
        already_loaded: false,
        system: false,
    }
}

#[test]
fn version_gate_symbols_and_probes() {
    let tmp = common::TempDir::new("fake");
    let old = match build(&tmp.0.join("old"), 21703, &[]) {
        Ok(path) => path,
        Err(why) => {
            eprintln!("SKIPPED version_gate_symbols_and_probes: {why}");
            return;
        }
    };
    let partial = build(&tmp.0.join("partial"), 21800, &["-DOMIT_ALLREDUCE"]).unwrap();
    let good = build(&tmp.0.join("good"), 21800, &[]).unwrap();

    // Too old: refused after ncclGetVersion, before any other symbol.
    let err = Nccl::load_with(&only(&old)).unwrap_err();
    assert_eq!(
        err,
        LoadError::Library {
            path: old.clone(),
            failure: Failure::TooOld {
                found: Version::new(2, 17, 3),
                minimum: Version::MINIMUM
            },
        }
    );
    assert!(err.to_string().contains("2.17.3"), "{err}");

    // A required symbol missing: named.
    let err = Nccl::load_with(&only(&partial)).unwrap_err();
    assert_eq!(
        err.attempts()[0].failure,
        Failure::MissingSymbol("ncclAllReduce")
    );

    // 2.18.0 with every required symbol: loads. ncclCommSplit (2.18) resolves; ncclMemAlloc
    // is exported but newer than the library says it is, so it is not resolved; ncclSend is
    // absent.
    let nccl = Nccl::load_with(&only(&good)).expect("a 2.18 fake is enough");
    assert_eq!(nccl.version(), Version::new(2, 18, 0));
    assert!(nccl.has("ncclCommSplit"));
    assert!(!nccl.has("ncclMemAlloc"));
    assert!(!nccl.has("ncclSend"));
    assert!(nccl.symbols().mem_alloc.is_none());
    assert_eq!(
        nccl.error_string(dtcomm_nccl_sys::bindings::ncclResult_t(0)),
        "fake: no error"
    );
    assert_eq!(nccl.unique_id().unwrap().internal, [0x5a; 128]);
    assert_eq!(nccl.last_error(), None, "ncclGetLastError is absent");
    // SAFETY: the fake library reports NCCL 2.18, before `ncclMemAlloc` (2.19), so the symbol was
    // not resolved (asserted above) and `mem_alloc` returns `Unavailable` without calling anything:
    // no device is needed and no memory is handed out to free.
    let err = unsafe { nccl.mem_alloc(16) }.unwrap_err();
    assert!(
        err.to_string()
            .contains("ncclMemAlloc is not available in the loaded NCCL 2.18.0")
    );

    // The search goes past unusable libraries, reporting them.
    let search = SearchConfig {
        library: None,
        search_path: Some(vec![
            tmp.0.join("old"),
            tmp.0.join("partial"),
            tmp.0.join("good"),
        ]),
        ..only(&good)
    };
    let nccl = Nccl::load_with(&search).expect("the good fake, third on the path");
    assert_eq!(nccl.source(), Source::SearchPath);
    assert_eq!(nccl.path(), good);
    let failures: Vec<_> = nccl.skipped().iter().map(|a| a.failure.clone()).collect();
    assert!(
        matches!(
            failures.as_slice(),
            [
                Failure::TooOld { .. },
                Failure::MissingSymbol("ncclAllReduce")
            ]
        ),
        "{failures:?}"
    );

    // The first fake mapped (the old one; RTLD_NODELETE keeps it) answers to the soname now.
    // It is unusable, and the search stops there rather than map a second NCCL beside it.
    let err = Nccl::load_with(&SearchConfig {
        already_loaded: true,
        ..search
    })
    .unwrap_err();
    eprintln!("{err}");
    assert!(matches!(
        err,
        LoadError::AlreadyLoaded {
            failure: Failure::TooOld { .. }
        }
    ));
}
