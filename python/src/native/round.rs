//! A completed round as a member sees it: `Welcome` (its place in the round, the peers it
//! needs, the job's configuration) and `Peer` (one member's rank and addresses); read-only
//! copies of the server's message.

use dt_rdzv_proto::native::{Peer, Welcome};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// One member of a round as its peers see it.
#[pyclass(module = "dtcomm._dtcomm", name = "Peer", frozen, get_all)]
#[derive(Clone)]
pub struct PyPeer {
    /// Rank in the round.
    rank: u32,
    /// Member id.
    member: String,
    /// Node (host) name.
    node: String,
    /// Addresses it advertised.
    addrs: Vec<String>,
    /// The host identity it advertised (empty if none).
    host: Vec<u8>,
    /// The source IP the server saw (empty if unknown).
    observed_ip: String,
}

impl From<&Peer> for PyPeer {
    fn from(p: &Peer) -> Self {
        PyPeer {
            rank: p.rank,
            member: p.member.clone(),
            node: p.node.clone(),
            addrs: p.addrs.clone(),
            host: p.host.clone(),
            observed_ip: p.observed_ip.clone(),
        }
    }
}

#[pymethods]
impl PyPeer {
    fn __repr__(&self) -> String {
        format!(
            "Peer(rank={}, member={:?}, node={:?}, addrs={:?}, observed_ip={:?})",
            self.rank, self.member, self.node, self.addrs, self.observed_ip
        )
    }
}

/// A member's place in a completed round.
#[pyclass(module = "dtcomm._dtcomm", name = "Welcome", frozen, get_all)]
#[derive(Clone)]
pub struct PyWelcome {
    /// The job.
    job: String,
    /// Round number (1 for the first).
    round: u64,
    /// Why the round started, in words.
    cause: String,
    /// Global rank.
    rank: u32,
    /// Members in the round.
    world: u32,
    /// Rank among the round's members on this node.
    local_rank: u32,
    /// Members of the round on this node.
    local_world: u32,
    /// Index of this node among the round's nodes.
    node_rank: u32,
    /// Nodes in the round.
    nodes: u32,
    /// Peers this member needs (every member when `all_peers`).
    peers: Vec<PyPeer>,
    /// Whether `peers` is the whole round.
    all_peers: bool,
    /// Rounds started by losses so far.
    restarts: u32,
    /// Heartbeat timeout of the server, seconds.
    heartbeat_timeout: f64,
    config: Vec<(String, Vec<u8>)>,
}

impl From<&Welcome> for PyWelcome {
    fn from(w: &Welcome) -> Self {
        PyWelcome {
            job: w.job.clone(),
            round: w.round,
            cause: w.cause.to_string(),
            rank: w.rank,
            world: w.world,
            local_rank: w.local_rank,
            local_world: w.local_world,
            node_rank: w.node_rank,
            nodes: w.nodes,
            peers: w.peers.iter().map(PyPeer::from).collect(),
            all_peers: w.all_peers,
            restarts: w.restarts,
            heartbeat_timeout: w.heartbeat_timeout_ms as f64 / 1000.0,
            config: w.config.to_vec(),
        }
    }
}

#[pymethods]
impl PyWelcome {
    /// The job's published configuration when the round completed.
    fn config_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.config {
            d.set_item(k, PyBytes::new(py, v))?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Welcome(job={:?}, round={}, rank={}, world={}, local_rank={}, local_world={}, \
             node_rank={}, nodes={}, cause={:?})",
            self.job,
            self.round,
            self.rank,
            self.world,
            self.local_rank,
            self.local_world,
            self.node_rank,
            self.nodes,
            self.cause
        )
    }
}
