//! The class `dtcomm._dtcomm.Communicator`: one rank's engine [`Communicator`] (shared with a
//! negotiator, and gone after `shutdown()`), its rank and world. Dropping it shuts the engine
//! communicator down without the GIL.

use std::sync::Arc;

use dtcomm::Communicator;
use pyo3::prelude::*;

use crate::errors::ShutdownError;

/// A group of ranks running collectives together (one per process and group).
#[pyclass(module = "dtcomm._dtcomm", name = "Communicator")]
pub struct PyCommunicator {
    /// The engine's communicator; `None` after `shutdown()`.
    pub(super) comm: Option<Arc<Communicator>>,
    /// This rank.
    pub(super) rank: usize,
    /// Number of ranks.
    pub(super) world: usize,
}

impl PyCommunicator {
    /// The Python face of a communicator built elsewhere (a native round's).
    pub(crate) fn wrap(comm: Communicator) -> PyCommunicator {
        let (rank, world) = (comm.rank(), comm.world());
        PyCommunicator {
            comm: Some(Arc::new(comm)),
            rank,
            world,
        }
    }

    /// The engine's communicator (for the negotiator), or the shutdown error.
    pub(crate) fn shared(&self, op: &str) -> PyResult<Arc<Communicator>> {
        self.comm(op).cloned()
    }

    pub(super) fn comm(&self, op: &str) -> PyResult<&Arc<Communicator>> {
        self.comm.as_ref().ok_or_else(|| {
            ShutdownError::new_err(format!(
                "rank {}: {op} after shutdown(); call dtcomm.init() again",
                self.rank
            ))
        })
    }
}

impl Drop for PyCommunicator {
    fn drop(&mut self) {
        if let Some(comm) = self.comm.take() {
            Python::attach(|py| {
                py.detach(move || {
                    comm.shutdown();
                    drop(comm);
                })
            });
        }
    }
}
