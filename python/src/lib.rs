//! # dtcomm-py
//!
//! The PyO3 module `dtcomm._dtcomm` under the Python package `dtcomm` (`python/dtcomm/`):
//! glue only, the algorithms are the engine's (`collectives/`).
//!
//! * `comm/`: `Communicator`, every collective on numpy arrays and CPU torch tensors,
//!   synchronous or `async_op=True`;
//! * `work.rs`: `Work`, the handle of an asynchronous call (the engine's executor orders
//!   and runs the calls);
//! * `buffer.rs`: zero-copy views (buffer protocol), `dlpack.rs`: torch tensors (DLPack);
//! * `pystore.rs`: a Rust `Store` over torch's c10d store objects;
//! * `native/`: the native rendezvous client (`NativeClient`, `Welcome`, `RdzvEvent`);
//! * `rdzv.rs`: the in-process `dt-rdzv` server and a store client (for `dtrun`);
//! * `flight.rs`: the flight recorder's entries, summary and Flight Recorder dumps;
//! * `cuda.rs`: `cuda_status()`, whether CUDA and NCCL are usable here (feature `cuda`);
//! * `launch.rs`: the engine's launcher-environment resolver (what the C ABI uses), for tests;
//! * `errors.rs`: the exception types and the mapping from the engine's errors.

#![warn(clippy::undocumented_unsafe_blocks)]

mod buffer;
mod comm;
mod cuda;
mod dlpack;
mod errors;
mod flight;
mod interrupt;
mod join;
mod launch;
mod member;
mod native;
mod negotiate;
mod options;
mod progress;
mod pystore;
mod rdzv;
mod work;

use pyo3::prelude::*;

/// Sends the engine's log lines (`tracing`) to stderr, filtered by `DTCOMM_LOG` (default
/// `warn`: deadline warnings and failures). Idempotent.
#[pyfunction]
fn init_logging() {
    let filter = std::env::var("DTCOMM_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
}

/// Tells the engine how many threads each rank of this process computes with (torch's
/// intra-op threads): its waits never spin while the host's ranks times this exceed the cores
/// this process may use.
#[pyfunction]
fn set_compute_threads(n: usize) {
    dtcomm::spin::set_compute_threads(n);
}

/// The cores this process may run on (its CPU affinity and cgroup quota).
#[pyfunction]
fn usable_cores() -> usize {
    dtcomm::spin::usable_cores()
}

/// `host[:port]` (IPv6 in brackets) as (host without brackets, port), `default_port` where none
/// is given: the one reading every crate uses (`dt_rdzv_proto::endpoint`). `ValueError` names
/// what does not read.
#[pyfunction]
fn split_host_port(endpoint: &str, default_port: u16) -> PyResult<(String, u16)> {
    dt_rdzv_proto::endpoint::split(endpoint, default_port)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("rendezvous {e}")))
}

/// `host:port`, with brackets around an IPv6 host.
#[pyfunction]
fn join_host_port(host: &str, port: u16) -> String {
    dt_rdzv_proto::endpoint::join(host, port)
}

/// The module `dtcomm._dtcomm`.
#[pymodule]
fn _dtcomm(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<comm::PyCommunicator>()?;
    m.add_class::<work::Work>()?;
    m.add_class::<negotiate::PyNegotiator>()?;
    m.add_class::<rdzv::RdzvServer>()?;
    m.add_class::<rdzv::StoreClient>()?;
    m.add_class::<native::NativeClient>()?;
    m.add_class::<native::PyWelcome>()?;
    m.add_class::<native::PyPeer>()?;
    m.add_class::<native::RdzvEvent>()?;
    m.add_class::<native::PyDataListener>()?;
    m.add_class::<member::PyNativeMember>()?;
    m.add_function(wrap_pyfunction!(init_logging, m)?)?;
    m.add_function(wrap_pyfunction!(progress::progress_record, m)?)?;
    m.add_function(wrap_pyfunction!(progress::flight_take_dump_ask, m)?)?;
    m.add_function(wrap_pyfunction!(progress::flight_dumps_on_timeout, m)?)?;
    m.add_function(wrap_pyfunction!(progress::flight_dump_asked, m)?)?;
    m.add_function(wrap_pyfunction!(set_compute_threads, m)?)?;
    m.add_function(wrap_pyfunction!(usable_cores, m)?)?;
    m.add_function(wrap_pyfunction!(split_host_port, m)?)?;
    m.add_function(wrap_pyfunction!(join_host_port, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::cuda_status, m)?)?;
    m.add_function(wrap_pyfunction!(flight::flight_entries, m)?)?;
    m.add_function(wrap_pyfunction!(flight::flight_summary, m)?)?;
    m.add_function(wrap_pyfunction!(flight::flight_dump, m)?)?;
    m.add_function(wrap_pyfunction!(flight::flight_dump_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(flight::flight_capacity, m)?)?;
    m.add_function(wrap_pyfunction!(native::job_token, m)?)?;
    m.add_function(wrap_pyfunction!(native::store_link_secret, m)?)?;
    m.add_function(wrap_pyfunction!(launch::resolve_launch, m)?)?;
    m.add_function(wrap_pyfunction!(launch::native_settings, m)?)?;
    m.add_function(wrap_pyfunction!(launch::slurm_step, m)?)?;
    m.add_function(wrap_pyfunction!(join::join_store, m)?)?;
    m.add_function(wrap_pyfunction!(launch::is_native, m)?)?;
    m.add_function(wrap_pyfunction!(launch::parse_members, m)?)?;
    m.add_function(wrap_pyfunction!(join::meet, m)?)?;
    m.add_function(wrap_pyfunction!(launch::engine_setup_timeout, m)?)?;
    errors::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The doors' default ports, from the one source the Rust crates use.
    m.add("STORE_PORT", dt_rdzv_proto::ports::STORE)?;
    m.add("NATIVE_PORT", dt_rdzv_proto::ports::NATIVE)?;
    m.add("HTTP_PORT", dt_rdzv_proto::ports::HTTP)?;
    Ok(())
}
