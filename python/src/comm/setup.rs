//! Building a `Communicator`: through a rendezvous store (a `dt-rdzv serve` or torch TCPStore
//! at an endpoint, or a Python object with torch's `c10d.Store` methods), the ranks meeting
//! interruptibly without the GIL; or from a native round's welcome over the member's data
//! listener, with no store, the member's client (if given) ending the round when the server
//! says so.

use std::sync::Arc;
use std::time::Duration;

use dt_rdzv::client::TcpStoreClient;
use dt_rdzv::store::{PrefixStore, Store};
use dtcomm::{Communicator, Options};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::communicator::PyCommunicator;
use crate::errors::{SetupError, to_py};
use crate::native::{NativeClient, PyDataListener};
use crate::pystore::PyStore;

/// Rank `rank` of `world` meeting its peers through `store`.
fn build(
    py: Python<'_>,
    store: Arc<dyn Store>,
    rank: usize,
    world: usize,
    opts: Options,
) -> PyResult<PyCommunicator> {
    if world == 0 || rank >= world {
        return Err(PyValueError::new_err(format!(
            "rank {rank} is not in a world of {world}"
        )));
    }
    // Interruptible while the ranks meet: Ctrl-C raises at once (the set-up fails).
    let (comm, raised) =
        crate::interrupt::detach(py, move || Communicator::new(store, rank, world, opts));
    if let Some(e) = raised {
        return Err(e);
    }
    let comm = comm.map_err(to_py)?;
    Ok(PyCommunicator {
        comm: Some(Arc::new(comm)),
        rank,
        world,
    })
}

/// `Communicator.connect`: through the store at `endpoint`, under key prefix `prefix`.
pub(super) fn connect(
    py: Python<'_>,
    endpoint: &str,
    rank: usize,
    world: usize,
    prefix: &str,
    opts: Options,
) -> PyResult<PyCommunicator> {
    let wait = opts.timeout.unwrap_or(Duration::from_secs(300));
    let ep = endpoint.to_owned();
    let client = py
        .detach(move || TcpStoreClient::connect(&ep, wait))
        .map_err(|e| {
            SetupError::new_err(format!(
                "rank {rank}: cannot reach the rendezvous store at {endpoint}: {e}"
            ))
        })?;
    let store: Arc<dyn Store> = if prefix.is_empty() {
        Arc::new(client)
    } else {
        Arc::new(PrefixStore::new(prefix, client))
    };
    build(py, store, rank, world, opts)
}

/// `Communicator.from_store`: through a Python store object.
pub(super) fn from_store(
    py: Python<'_>,
    store: Py<PyAny>,
    rank: usize,
    world: usize,
    opts: Options,
) -> PyResult<PyCommunicator> {
    build(py, Arc::new(PyStore::new(store)), rank, world, opts)
}

/// `Communicator.from_welcome`: rank `rank` of round `round` of native job `job` over
/// `listener`, the peers at `addrs`, the links proving the round's secret from `token`.
#[allow(clippy::too_many_arguments)]
pub(super) fn from_welcome(
    py: Python<'_>,
    listener: &Bound<'_, PyDataListener>,
    job: String,
    round: u64,
    rank: usize,
    world: usize,
    addrs: Vec<Option<String>>,
    token: &str,
    client: Option<&Bound<'_, NativeClient>>,
    hosts: Option<Vec<Vec<u8>>>,
) -> PyResult<PyCommunicator> {
    if world == 0 || rank >= world {
        return Err(PyValueError::new_err(format!(
            "rank {rank} is not in a world of {world}"
        )));
    }
    let addrs = addrs
        .into_iter()
        .enumerate()
        .map(|(p, a)| {
            a.map(|a| {
                a.parse::<std::net::SocketAddr>().map_err(|e| {
                    PyValueError::new_err(format!(
                        "rank {rank}: rank {p}'s data address {a:?}: {e}"
                    ))
                })
            })
            .transpose()
        })
        .collect::<PyResult<Vec<_>>>()?;
    let l = listener.borrow().inner.try_clone().map_err(to_py)?;
    let secret = dtcomm::round_secret(token, &job, round);
    let peers = dtcomm::RoundPeers {
        job,
        round,
        rank,
        world,
        addrs,
        hosts: hosts.unwrap_or_default(),
    };
    let handle = client.map(|c| c.borrow().member_handle(py)).transpose()?;
    let comm = py
        .detach(move || Communicator::from_welcome(l, &peers, &secret))
        .map_err(to_py)?;
    if let Some(h) = handle {
        dtcomm_launch::native::watch_round(&h, &comm, round);
    }
    Ok(PyCommunicator {
        comm: Some(Arc::new(comm)),
        rank,
        world,
    })
}
