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
    dtcomm::advertised_ip(socket_ifname)
}

/// Why a meeting failed: at its deadline (a rank did not arrive, or the process manager did
/// not answer in time), or for another reason (no library, a refused request, bad input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeetError {
    /// The deadline passed.
    #[error("{0}")]
    Timeout(String),
    /// Anything else.
    #[error("{0}")]
    Failed(String),
}

/// What a meeting needs of a process manager: PMIx ([`Pmix`]), PMI-1 ([`Pmi1`]), or the
/// in-memory twin in the tests.
pub trait JobKv {
    /// Puts `value` under `key` for every rank of the job.
    fn put(&self, key: &str, value: &str, timeout: Duration) -> Result<(), String>;
    /// Waits until every rank of the job has arrived (puts before it are then visible).
    fn fence(&self, timeout: Duration) -> Result<(), String>;
    /// What rank 0 put under `key`.
    fn get_rank0(&self, key: &str, timeout: Duration) -> Result<String, String>;
}

impl JobKv for Arc<Pmix> {
    fn put(&self, key: &str, value: &str, _timeout: Duration) -> Result<(), String> {
        self.publish(key, value)
    }
    fn fence(&self, timeout: Duration) -> Result<(), String> {
        Pmix::fence(self, timeout)
    }
    fn get_rank0(&self, key: &str, timeout: Duration) -> Result<String, String> {
        self.lookup(0, key, timeout)
    }
}

impl JobKv for &Pmi1 {
    fn put(&self, key: &str, value: &str, timeout: Duration) -> Result<(), String> {
        self.publish(key, value, timeout)
    }
    fn fence(&self, timeout: Duration) -> Result<(), String> {
        self.barrier(timeout)
    }
    fn get_rank0(&self, key: &str, timeout: Duration) -> Result<String, String> {
        self.lookup(key, timeout)
    }
}

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
    let (label, kv): (_, Result<Box<dyn JobKv>, String>) = if endpoint.starts_with(MPI_PMIX) {
        let kv = Pmix::get(timeout).map(|p| Box::new(p) as _);
        ("PMIx (mpirun across hosts)", kv)
    } else if endpoint.starts_with(MPI_PMI1) {
        (
            "PMI-1 (mpiexec.hydra)",
            Pmi1::get(timeout).map(|p| Box::new(p) as _),
        )
    } else {
        return Err(MeetError::Failed(format!(
            "rank {rank}: {endpoint:?} names no MPI process manager"
        )));
    };
    kv.and_then(|kv| meet_with(&*kv, rank, &key(run_id, n), mine, deadline))
        .map_err(|e| {
            classify(
                format!("rank {rank}: meeting rank 0 through {label}: {e}"),
                deadline,
                Instant::now(),
            )
        })
}

/// A meeting's failure `e` at `now`: a timeout once its deadline has passed, whatever the
/// process manager said, else a failure.
fn classify(e: String, deadline: Instant, now: Instant) -> MeetError {
    if now >= deadline {
        MeetError::Timeout(e)
    } else {
        MeetError::Failed(e)
    }
}

/// The meeting's choreography over any [`JobKv`]: rank 0 puts `mine` under `key`, every rank
/// fences, the others get it; every wait ends by `deadline`.
pub fn meet_with(
    kv: &dyn JobKv,
    rank: usize,
    key: &str,
    mine: Option<&str>,
    deadline: Instant,
) -> Result<String, String> {
    let left = || deadline.saturating_duration_since(Instant::now());
    if rank == 0 {
        let mine = mine.ok_or("rank 0 has no store address to publish")?;
        kv.put(key, mine, left())?;
        kv.fence(left())?;
        return Ok(mine.to_owned());
    }
    kv.fence(left())?;
    kv.get_rank0(key, left())
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
        // Bad input is never a timeout; whatever else failed at or past the deadline is.
        let e = meet("h:1", 1, "r", 1, None, Duration::ZERO).unwrap_err();
        assert!(matches!(e, MeetError::Failed(_)), "{e}");
        let t = Instant::now();
        let late = t + Duration::from_secs(1);
        assert_eq!(
            classify("x".into(), t, late),
            MeetError::Timeout("x".into())
        );
        assert_eq!(classify("x".into(), late, t), MeetError::Failed("x".into()));
    }

    /// The twin: a key-value space and a fence for `world` ranks (threads) of one process.
    struct MemKv {
        world: usize,
        state: std::sync::Mutex<(std::collections::HashMap<String, String>, usize)>,
        cv: std::sync::Condvar,
    }

    impl JobKv for MemKv {
        fn put(&self, key: &str, value: &str, _: Duration) -> Result<(), String> {
            self.state
                .lock()
                .unwrap()
                .0
                .insert(key.into(), value.into());
            Ok(())
        }
        fn fence(&self, timeout: Duration) -> Result<(), String> {
            let mut st = self.state.lock().unwrap();
            st.1 += 1;
            let round = st.1.div_ceil(self.world);
            self.cv.notify_all();
            let (st, t) = self
                .cv
                .wait_timeout_while(st, timeout, |s| s.1 < round * self.world)
                .unwrap();
            drop(st);
            if t.timed_out() {
                return Err(format!(
                    "not every rank reached the fence within {timeout:?}"
                ));
            }
            Ok(())
        }
        fn get_rank0(&self, key: &str, _: Duration) -> Result<String, String> {
            let st = self.state.lock().unwrap();
            st.0.get(key)
                .cloned()
                .ok_or_else(|| format!("{key} not found"))
        }
    }

    fn twin(world: usize) -> Arc<MemKv> {
        Arc::new(MemKv {
            world,
            state: Default::default(),
            cv: Default::default(),
        })
    }

    #[test]
    fn every_rank_gets_rank_0s_address_at_each_init() {
        let kv = twin(3);
        let ranks: Vec<_> = (0..3)
            .map(|r| {
                let kv = kv.clone();
                std::thread::spawn(move || {
                    (1..=2)
                        .map(|n| {
                            let mine = format!("10.0.0.1:{n}");
                            let deadline = Instant::now() + Duration::from_secs(10);
                            let k = key("job", n);
                            meet_with(&*kv, r, &k, (r == 0).then_some(&mine[..]), deadline)
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        for t in ranks {
            assert_eq!(
                t.join().unwrap(),
                Ok(vec!["10.0.0.1:1".to_owned(), "10.0.0.1:2".to_owned()])
            );
        }
    }

    #[test]
    fn a_rank_that_never_arrives_fails_the_others_by_their_deadline() {
        let kv = twin(3);
        let t = Instant::now();
        let deadline = t + Duration::from_millis(200);
        let e = meet_with(&*kv, 1, &key("job", 1), None, deadline).unwrap_err();
        assert!(e.contains("not every rank reached the fence"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
        let e = meet_with(&*kv, 0, &key("job", 1), None, deadline).unwrap_err();
        assert!(e.contains("no store address"), "{e}");
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
