//! Meeting under `mpirun` across hosts with no rendezvous endpoint set.
//!
//! The ranks of an Open MPI job on several hosts share no directory, but each has a PMIx
//! server beside it (the `orted` of its host), and PMIx carries keys between the ranks of a
//! job: that is how MPI itself finds its peers. Rank 0 hosts a store on the address its data
//! plane would advertise (`DTCOMM_SOCKET_IFNAME`'s rule) and puts `host:port` under a key of
//! its job; every rank fences (so the key is committed before anyone reads it), and the others
//! get it. The n-th init of a process meets under the n-th key, like the one-host rule
//! ([`super::mpi_session`]).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::pmix::Pmix;

/// How a resolved endpoint names the PMIx meeting (followed by the job's namespace).
pub const MPI_PMIX: &str = "mpi-pmix://";

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

/// The n-th meeting of run `run_id`: rank 0 passes its store's `host:port` as `mine` and gets
/// it back once every rank has arrived; the others get rank 0's, waited for until `timeout`.
pub fn meet(
    rank: usize,
    run_id: &str,
    n: u64,
    mine: Option<&str>,
    timeout: Duration,
) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    let fail =
        |e: String| format!("rank {rank}: meeting rank 0 through PMIx (mpirun across hosts): {e}");
    let pmix: Arc<Pmix> = Pmix::get(timeout).map_err(fail)?;
    let key = key(run_id, n);
    if rank == 0 {
        let mine = mine.ok_or_else(|| fail("rank 0 has no store address to publish".into()))?;
        pmix.publish(&key, mine).map_err(fail)?;
    }
    pmix.fence(left()).map_err(fail)?;
    match mine {
        Some(m) if rank == 0 => Ok(m.to_owned()),
        _ => pmix.lookup(0, &key, left()).map_err(fail),
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
