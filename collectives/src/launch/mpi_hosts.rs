//! Meeting under an MPI launcher with no rendezvous endpoint set, through the process manager
//! MPI itself uses to find its peers.
//!
//! * Open MPI across hosts (`mpirun`, no shared directory): every rank has a PMIx server beside
//!   it (the `orted` of its host), asked through [`super::pmix`].
//! * MPICH's Hydra (`mpiexec.hydra`; Intel MPI's `mpirun` is Hydra too), on one host or many:
//!   every rank has a PMI-1 socket to its proxy (`PMI_FD`), asked through [`super::pmi1`].
//!
//! Rank 0 hosts a store on the address its data plane would advertise (`DTCOMM_SOCKET_IFNAME`'s
//! rule) and puts `host:port` under a key of its job; every rank fences (so the key is
//! committed before anyone reads it), and the others get it. The n-th init of a process meets
//! under the n-th key, like the one-host rule ([`super::mpi_session`]).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::pmi1::Pmi1;
use super::pmix::Pmix;

/// How a resolved endpoint names the PMIx meeting (followed by the job's namespace).
pub const MPI_PMIX: &str = "mpi-pmix://";
/// How a resolved endpoint names the PMI-1 meeting (followed by the variable that reaches it).
pub const MPI_PMI1: &str = "mpi-pmi://";

/// The PMIx namespace of an Open MPI job whose ranks span hosts, or `None` when the job is not
/// Open MPI's, fits on one host, or has no PMIx server to ask.
pub fn namespace(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let (size, local) = (
        var("OMPI_COMM_WORLD_SIZE")?,
        var("OMPI_COMM_WORLD_LOCAL_SIZE")?,
    );
    if size.trim() == local.trim() {
        return None;
    }
    var("PMIX_NAMESPACE")
}

/// How a Hydra job's ranks reach their PMI-1 proxy (`PMI_FD=6`, `PMI_PORT=host:port`), or
/// `None` when the ranks were not started by a PMI-1 process manager.
pub fn pmi1_socket(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    var("PMI_RANK")?;
    var("PMI_FD")
        .map(|fd| format!("PMI_FD={fd}"))
        .or_else(|| var("PMI_PORT").map(|p| format!("PMI_PORT={p}")))
}

/// The key the n-th init (from 1) of run `run_id` meets under.
pub fn key(run_id: &str, n: u64) -> String {
    format!("dtcomm.{run_id}.{n}.endpoint")
}

/// The address rank 0's store listens on: the one its data plane advertises
/// (`DTCOMM_SOCKET_IFNAME` as NCCL reads it, else the first interface that is up and not
/// loopback).
pub fn advertised_ip(socket_ifname: Option<&str>) -> Result<IpAddr, String> {
    let addrs = crate::transport::iface::list().map_err(|e| format!("listing interfaces: {e}"))?;
    crate::transport::iface::choose(socket_ifname, &addrs).map(|a| a.ip)
}

/// Why a meeting failed: at its deadline (a rank did not arrive, or the process manager did
/// not answer in time), or for another reason (no library, a refused request, bad input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MeetError {
    /// The deadline passed.
    Timeout(String),
    /// Anything else.
    Failed(String),
}

impl std::fmt::Display for MeetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MeetError::Timeout(m) | MeetError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for MeetError {}

/// The n-th meeting of run `run_id` through the process manager `endpoint` names
/// ([`MPI_PMIX`] or [`MPI_PMI1`]): rank 0 passes its store's `host:port` as `mine` and gets it
/// back once every rank has arrived; the others get rank 0's, waited for until `timeout`.
pub fn meet(
    endpoint: &str,
    rank: usize,
    run_id: &str,
    n: u64,
    mine: Option<&str>,
    timeout: Duration,
) -> Result<String, MeetError> {
    let deadline = Instant::now() + timeout;
    meet_by(endpoint, rank, run_id, n, mine, timeout, deadline).map_err(|e| {
        if Instant::now() >= deadline {
            MeetError::Timeout(e)
        } else {
            MeetError::Failed(e)
        }
    })
}

fn meet_by(
    endpoint: &str,
    rank: usize,
    run_id: &str,
    n: u64,
    mine: Option<&str>,
    timeout: Duration,
    deadline: Instant,
) -> Result<String, String> {
    let left = || deadline.saturating_duration_since(Instant::now());
    let key = key(run_id, n);
    let publish = match mine {
        Some(m) if rank == 0 => Some(m),
        _ if rank == 0 => return Err(format!("rank 0: no store address to publish ({endpoint})")),
        _ => None,
    };
    if endpoint.starts_with(MPI_PMIX) {
        let fail = |e: String| {
            format!("rank {rank}: meeting rank 0 through PMIx (mpirun across hosts): {e}")
        };
        let pmix: Arc<Pmix> = Pmix::get(timeout).map_err(fail)?;
        if let Some(m) = publish {
            pmix.publish(&key, m).map_err(fail)?;
        }
        pmix.fence(left()).map_err(fail)?;
        match publish {
            Some(m) => Ok(m.to_owned()),
            None => pmix.lookup(0, &key, left()).map_err(fail),
        }
    } else if endpoint.starts_with(MPI_PMI1) {
        let fail =
            |e: String| format!("rank {rank}: meeting rank 0 through PMI-1 (mpiexec.hydra): {e}");
        let pmi = Pmi1::get(timeout).map_err(fail)?;
        if let Some(m) = publish {
            pmi.publish(&key, m, left()).map_err(fail)?;
        }
        pmi.barrier(left()).map_err(fail)?;
        match publish {
            Some(m) => Ok(m.to_owned()),
            None => pmi.lookup(&key, left()).map_err(fail),
        }
    } else {
        Err(format!(
            "rank {rank}: {endpoint:?} names no MPI process manager"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn jobs_across_hosts_with_a_pmix_server_only() {
        let across = env(&[
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("PMIX_NAMESPACE", "1161560065"),
        ]);
        assert_eq!(namespace(&across).as_deref(), Some("1161560065"));
        let one_host = env(&[
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("PMIX_NAMESPACE", "1161560065"),
        ]);
        assert_eq!(namespace(&one_host), None);
        let no_server = env(&[
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ]);
        assert_eq!(namespace(&no_server), None);
        assert_eq!(namespace(&env(&[("PMIX_NAMESPACE", "x")])), None);
    }

    #[test]
    fn hydra_jobs_by_their_pmi_socket() {
        let hydra = env(&[("PMI_RANK", "1"), ("PMI_SIZE", "2"), ("PMI_FD", "6")]);
        assert_eq!(pmi1_socket(&hydra).as_deref(), Some("PMI_FD=6"));
        let port = env(&[("PMI_RANK", "1"), ("PMI_PORT", "h:5")]);
        assert_eq!(pmi1_socket(&port).as_deref(), Some("PMI_PORT=h:5"));
        assert_eq!(pmi1_socket(&env(&[("PMI_FD", "6")])), None);
        assert_eq!(pmi1_socket(&env(&[("PMI_RANK", "0")])), None);
    }

    #[test]
    fn an_endpoint_that_names_no_process_manager_is_refused() {
        let e = meet("h:1", 1, "r", 1, None, Duration::from_secs(1)).unwrap_err();
        assert!(
            matches!(&e, MeetError::Failed(m) if m.contains("names no MPI process manager")),
            "{e}"
        );
        let e = meet(MPI_PMI1, 0, "r", 1, None, Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("no store address"), "{e}");
        // Whatever failed, a meeting that ended at or past its deadline is a timeout.
        let e = meet("h:1", 1, "r", 1, None, Duration::ZERO).unwrap_err();
        assert!(matches!(e, MeetError::Timeout(_)), "past its deadline: {e}");
    }

    #[test]
    fn each_init_meets_under_its_own_key() {
        assert_eq!(key("job", 1), "dtcomm.job.1.endpoint");
        assert_ne!(key("job", 1), key("job", 2));
    }

    #[test]
    fn the_store_listens_where_the_data_plane_would() {
        let ip = advertised_ip(Some("=lo")).expect("loopback exists");
        assert!(ip.is_loopback(), "{ip}");
        assert!(advertised_ip(Some("=no-such-if0")).is_err());
    }
}
