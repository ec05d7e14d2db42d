//! Against the venv's real libnccl.so.2 (torch's `nvidia-nccl` wheel), named explicitly as
//! `DTCOMM_NCCL_LIBRARY` would name it but through `SearchConfig`, so no test here touches
//! the environment. Skipped, with the reason printed, where no such venv is found. No GPU
//! needed: without one, `ncclCommInitRank` must fail cleanly with a typed error.

#![warn(clippy::undocumented_unsafe_blocks)]

mod common;

use std::path::PathBuf;

use dtcomm_nccl_sys::bindings::{ncclComm_t, ncclResult_t};
use dtcomm_nccl_sys::{
    Failure, LoadError, Nccl, NcclError, SearchConfig, Source, Status, Version, config_initializer,
    unique_id_from_bytes, unique_id_to_bytes,
};

fn library_config(path: impl Into<PathBuf>) -> SearchConfig {
    SearchConfig {
        library: Some(path.into()),
        search_path: None,
        virtual_env: None,
        already_loaded: true,
        system: true,
    }
}

fn load(test: &str) -> Option<(Nccl, common::Wheel)> {
    let wheel = common::wheel_or_skip(test)?;
    let nccl = Nccl::load_with(&library_config(&wheel.library)).expect("the venv's NCCL loads");
    Some((nccl, wheel))
}

#[test]
fn loads_the_venv_library_and_reads_its_version() {
    let Some((nccl, wheel)) = load("loads_the_venv_library_and_reads_its_version") else {
        return;
    };
    eprintln!("NCCL {} from {}", nccl.version(), nccl.path().display());
    assert_eq!(nccl.source(), Source::Library);
    assert_eq!(nccl.path(), wheel.library);
    assert!(nccl.skipped().is_empty());
    assert!(nccl.version() >= Version::MINIMUM);
    assert_eq!(
        nccl.version(),
        wheel.header_version,
        "ncclGetVersion vs the venv's nccl.h"
    );

    // The venv's NCCL is newer than every gate, so every probe resolves.
    for probe in nccl.features() {
        assert!(probe.available, "{probe:?}");
        assert!(nccl.has(probe.symbol));
    }
    assert!(nccl.has("ncclCommInitRank"));
    assert!(!nccl.has("ncclNoSuchFunction"));
}

#[test]
fn error_strings_for_known_and_unknown_codes() {
    let Some((nccl, _)) = load("error_strings_for_known_and_unknown_codes") else {
        return;
    };
    for code in 0..=8 {
        let text = nccl.error_string(ncclResult_t(code));
        assert!(!text.is_empty(), "code {code}");
    }
    assert_eq!(nccl.error_string(ncclResult_t::ncclSuccess), "no error");
    let unknown = nccl.error_string(ncclResult_t(999));
    eprintln!("ncclGetErrorString(999) = {unknown:?}");
    assert!(!unknown.is_empty());

    let err = nccl.check("ncclAllReduce", ncclResult_t(999)).unwrap_err();
    assert_eq!(err.code(), Some(ncclResult_t(999)));
    assert_eq!(
        nccl.check("ncclGroupEnd", ncclResult_t(7)),
        Ok(Status::InProgress)
    );
}

#[test]
fn unique_ids_differ() {
    let Some((nccl, _)) = load("unique_ids_differ") else {
        return;
    };
    let a = nccl
        .unique_id()
        .expect("ncclGetUniqueId works without a GPU");
    let b = nccl
        .unique_id()
        .expect("ncclGetUniqueId works without a GPU");
    assert_ne!(unique_id_to_bytes(&a), unique_id_to_bytes(&b));
    assert_ne!(unique_id_to_bytes(&a), [0; 128]);
    let copy = unique_id_from_bytes(&unique_id_to_bytes(&a));
    assert_eq!(copy.internal, a.internal);
}

/// World size 1 needs no peers; without a GPU NCCL fails at once with
/// ncclUnhandledCudaError. (On a machine with a GPU the communicator comes up instead, and
/// is destroyed.)
#[test]
fn comm_init_rank_without_gpu_is_a_typed_error() {
    let Some((nccl, _)) = load("comm_init_rank_without_gpu_is_a_typed_error") else {
        return;
    };
    let id = nccl.unique_id().unwrap();
    let mut comm: ncclComm_t = std::ptr::null_mut();
    // SAFETY: `id` is fresh from this library's `ncclGetUniqueId` and, with one rank, the same on
    // every rank; `comm` is a local out pointer; no buffers or streams are involved. Without a GPU
    // NCCL fails cleanly; with one, its default device is current and the communicator is destroyed
    // below.
    let result = unsafe { nccl.comm_init_rank(&mut comm, 1, id, 0) };
    match result {
        Err(err @ NcclError::Failed { .. }) => {
            eprintln!("ncclCommInitRank: {err}");
            assert_eq!(err.code(), Some(ncclResult_t::ncclUnhandledCudaError));
            let NcclError::Failed {
                function,
                message,
                last_error,
                ..
            } = &err
            else {
                unreachable!()
            };
            assert_eq!(*function, "ncclCommInitRank");
            assert!(!message.is_empty());
            // NCCL says which CUDA call failed ("CUDA driver version is insufficient ...").
            assert!(!last_error.is_empty());
        }
        Ok(status) => {
            eprintln!("a GPU is present: ncclCommInitRank gave {status:?}; destroying it");
            // SAFETY: `comm` was just created by `ncclCommInitRank`, has no work queued and is not
            // used after this.
            unsafe { nccl.comm_destroy(comm) }.unwrap();
        }
        Err(other) => panic!("{other}"),
    }
}

#[test]
fn comm_init_rank_config_checks_the_config() {
    let Some((nccl, _)) = load("comm_init_rank_config_checks_the_config") else {
        return;
    };
    let id = nccl.unique_id().unwrap();
    let mut comm: ncclComm_t = std::ptr::null_mut();

    let mut broken = config_initializer();
    broken.size = 8;
    // SAFETY: `broken`'s size no longer matches the header's, so `comm_init_rank_config` refuses it
    // (`is_initialized`) before calling NCCL; nothing is read through `comm` or `id`.
    let err = unsafe { nccl.comm_init_rank_config(&mut comm, 1, id, 0, &mut broken) }.unwrap_err();
    assert_eq!(err.code(), Some(ncclResult_t::ncclInvalidArgument));

    let mut config = config_initializer();
    config.blocking = 1;
    // SAFETY: as for `ncclCommInitRank` in the test above (a fresh id, one rank, a local out
    // pointer, a communicator destroyed if created), and `config` comes from `config_initializer()`
    // with no string attributes, so it has the size, magic and version NCCL expects.
    match unsafe { nccl.comm_init_rank_config(&mut comm, 1, id, 0, &mut config) } {
        Err(err) => {
            eprintln!("ncclCommInitRankConfig: {err}");
            assert_eq!(err.code(), Some(ncclResult_t::ncclUnhandledCudaError));
        }
        Ok(_) => {
            eprintln!("a GPU is present: ncclCommInitRankConfig worked; destroying it");
            // SAFETY: `comm` was just created by `ncclCommInitRankConfig` (blocking), has no work
            // queued and is not used after this.
            unsafe { nccl.comm_destroy(comm) }.unwrap();
        }
    }
}

#[test]
fn a_missing_library_is_an_error_naming_its_path() {
    let tmp = common::TempDir::new("missing-library");
    let path = tmp.0.join("no/such/libnccl.so.2");
    let err = Nccl::load_with(&library_config(&path)).unwrap_err();
    assert!(
        matches!(&err, LoadError::Library { path: p, failure: Failure::Open(_) } if *p == path)
    );
    let text = err.to_string();
    assert!(text.starts_with("DTCOMM_NCCL_LIBRARY="), "{text}");
    assert!(text.contains(&*path.to_string_lossy()), "{text}");
}

#[test]
fn a_library_that_is_not_nccl_names_the_missing_symbol() {
    // libm is on every glibc system and exports no NCCL symbol.
    let err = Nccl::load_with(&library_config("libm.so.6")).unwrap_err();
    assert_eq!(
        err,
        LoadError::Library {
            path: "libm.so.6".into(),
            failure: Failure::MissingSymbol("ncclGetVersion"),
        }
    );
    let text = err.to_string();
    assert!(
        text.contains("libm.so.6") && text.contains("ncclGetVersion"),
        "{text}"
    );
}
