//! One join for every front end: from a resolved [`Launch`] to a joined communicator, the same
//! choreography for the C ABI's `dtcomm_comm_init`, Python's `dtcomm.init()` (its store and
//! native paths) and what they share with `dtcomm://` ([`meet`]).
//!
//! * **The store path** ([`join_store`]): a world of one needs no store. Otherwise the ranks
//!   meet at one store ([`meet`]): the endpoint the launch names; rank 0's own under `mpirun`
//!   (its address left in Open MPI's session directory on one host, [`mpi_session`]; passed
//!   through the job's PMIx server or Hydra's PMI-1 socket across hosts, [`mpi_hosts`]); or
//!   the store this process hosts (torch's env:// rule, Slurm, OCI's MAIN). Rank 0's store is a
//!   new server at every init, so every rank connects to this init's ([`hosted`]). An OCI
//!   worker takes its rank in order of arrival; the n-th init of every rank meets under
//!   generation n (`<run>/dtcomm/g<n>`), so an earlier run's keys on a long-lived store are
//!   never read.
//! * **The native path** ([`join_native`]): the settings resolved once ([`NativeSettings`]),
//!   the data listener bound before joining (its address goes in the join), and the first
//!   round's communicator built from its welcome, taking the next round when one ends during
//!   set-up ([`Member::connect_round`]).
//!
//! Every wait is bounded by the engine's set-up deadline and answers this thread's interrupt
//! check (`dtcomm::interrupt`).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dt_rdzv::server::{BackgroundServer, ServeConfig};
use dt_rdzv::store::{PrefixStore, Store};
use dtcomm::{CommError, Communicator, Config, DataListener, Options};

use crate::native::{JoinError, Member, NativeExplicit, NativeSettings};
use crate::{HOROVOD_KV, Launch, STORE_PORT, hosted, mpi_hosts, mpi_session, split_host_port};

/// A joined group: what a front end keeps until its shutdown.
pub struct Joined {
    /// The communicator.
    pub comm: Communicator,
    /// This rank on its host (the launch's, or the native round's).
    pub local_rank: usize,
    /// The store this process hosts for the group (rank 0's; a meeting under `mpirun`'s),
    /// serving until dropped.
    pub server: Option<BackgroundServer>,
    /// The native member (its rounds, the next round, its leaving).
    pub member: Option<Member>,
    /// The store generation this init met under (the store path).
    pub generation: Option<u64>,
    /// What was joined, for the one line front ends print: the launch's values and sources,
    /// then the generation or the native settings and round.
    pub line: String,
}

/// The store every rank of a launch meets at, and the server this process hosts for it.
pub struct Meeting {
    /// `host:port` of the store.
    pub endpoint: String,
    /// The store this process hosts, if it does.
    pub server: Option<BackgroundServer>,
}

/// A set-up failure of `l`'s rank (0 while the rendezvous has not assigned one), timed from
/// `start`.
fn setup(l: &Launch, start: Instant, detail: impl Into<String>) -> CommError {
    CommError::Setup {
        rank: l.rank.value.unwrap_or(0),
        elapsed: start.elapsed(),
        detail: detail.into(),
    }
}

/// How many times this process has met its peers under `mpirun` (the n-th init meets under
/// the n-th name, never an address an earlier init already shut down). One count per
/// process, whichever front end joins.
fn next_meeting() -> u64 {
    static INITS: AtomicU64 = AtomicU64::new(0);
    INITS.fetch_add(1, Ordering::Relaxed) + 1
}

/// Joins the group `l` describes: [`join_native`] when its endpoint is dt-rdzv's native port,
/// else [`join_store`]. `opts`: the engine's options beyond the environment.
pub fn join(l: &Launch, opts: &Options) -> Result<Joined, CommError> {
    if l.native.value {
        join_native(l, opts)
    } else {
        join_store(l, opts)
    }
}

/// The store endpoint every rank of `l` meets at, and the server this process hosts for it, by
/// the launch rules (see the module docs); `Ok(None)` for a world of one (no endpoint).
/// `socket_ifname`: where a rank 0 meeting across hosts advertises its store (else
/// `DTCOMM_SOCKET_IFNAME`'s choice). Waits at most `wait`.
pub fn meet(
    l: &Launch,
    socket_ifname: Option<&str>,
    wait: Duration,
) -> Result<Option<Meeting>, CommError> {
    let start = Instant::now();
    let Some(endpoint) = l.endpoint.value.clone() else {
        return Ok(None);
    };
    if endpoint.starts_with(HOROVOD_KV) {
        return Err(setup(
            l,
            start,
            format!(
                "horovodrun's key-value rendezvous ({}) is joined from Python only: set \
                 DTCOMM_RDZV_ENDPOINT or MASTER_ADDR/MASTER_PORT",
                l.endpoint.source
            ),
        ));
    }
    if let Some(dir) = endpoint.strip_prefix(mpi_session::MPI_SESSION) {
        return meet_in_session(dir, l, wait).map(Some);
    }
    if endpoint.starts_with(mpi_hosts::MPI_PMIX) || endpoint.starts_with(mpi_hosts::MPI_PMI1) {
        return meet_through_mpi(&endpoint, l, socket_ifname, wait).map(Some);
    }
    let server = if l.host_store.value {
        let (host, port) =
            split_host_port(&endpoint, STORE_PORT).map_err(|e| setup(l, start, e))?;
        let bind = if host.starts_with("127.") {
            host.as_str()
        } else {
            "::"
        };
        let ip: IpAddr = bind
            .parse()
            .map_err(|e| setup(l, start, format!("store host {bind:?}: {e}")))?;
        let server = BackgroundServer::start(ServeConfig::embedded_store(ip, port));
        Some(server.map_err(|e| {
            setup(
                l,
                start,
                format!(
                    "hosting the store on {bind}:{port} ({}): {e}",
                    l.host_store.source
                ),
            )
        })?)
    } else {
        None
    };
    Ok(Some(Meeting { endpoint, server }))
}

/// Under `mpirun` across hosts (PMIx) or `mpiexec.hydra` (PMI-1): rank 0 hosts the store on
/// the address its data plane advertises and passes it to the others through the process
/// manager ([`mpi_hosts`]).
fn meet_through_mpi(
    endpoint: &str,
    l: &Launch,
    socket_ifname: Option<&str>,
    wait: Duration,
) -> Result<Meeting, CommError> {
    let start = Instant::now();
    let n = next_meeting();
    let failed = |e: mpi_hosts::MeetError| setup(l, start, e.to_string());
    let Some(rank) = l.rank.value else {
        return Err(setup(
            l,
            start,
            "meeting through the MPI process manager needs a rank variable",
        ));
    };
    if rank != 0 {
        let ep = mpi_hosts::meet(endpoint, rank, &l.run_id.value, n, None, wait).map_err(failed)?;
        return Ok(Meeting {
            endpoint: ep,
            server: None,
        });
    }
    let ip = mpi_hosts::advertised_ip(socket_ifname).map_err(|e| setup(l, start, e))?;
    let server = BackgroundServer::start(ServeConfig::embedded_store(ip, 0))
        .map_err(|e| setup(l, start, format!("hosting the store on {ip}: {e}")))?;
    let mine = server.endpoint();
    mpi_hosts::meet(endpoint, 0, &l.run_id.value, n, Some(&mine), wait).map_err(failed)?;
    Ok(Meeting {
        endpoint: mine,
        server: Some(server),
    })
}

/// Under `mpirun` on one host: rank 0 hosts the store on loopback and leaves its address in
/// Open MPI's session directory; the others read it there ([`mpi_session`]).
fn meet_in_session(dir: &str, l: &Launch, wait: Duration) -> Result<Meeting, CommError> {
    let start = Instant::now();
    let n = next_meeting();
    let path = mpi_session::endpoint_file(dir, &l.run_id.value, n);
    match l.rank.value {
        Some(0) => {
            let cfg = ServeConfig::embedded_store(IpAddr::from([127, 0, 0, 1]), 0);
            let server = BackgroundServer::start(cfg)
                .map_err(|e| setup(l, start, format!("hosting the store on 127.0.0.1: {e}")))?;
            let endpoint = server.endpoint();
            mpi_session::publish(&path, &endpoint).map_err(|e| setup(l, start, e))?;
            Ok(Meeting {
                endpoint,
                server: Some(server),
            })
        }
        Some(r) => Ok(Meeting {
            endpoint: mpi_session::read(&path, r, wait).map_err(|e| setup(l, start, e))?,
            server: None,
        }),
        None => Err(setup(
            l,
            start,
            "Open MPI's session directory needs OMPI_COMM_WORLD_RANK",
        )),
    }
}

/// The rank of this process in `l` and the generation its init meets under, through `store`
/// under `base` (`<run>/dtcomm`): the launcher's rank, or an OCI worker's number of arrival;
/// the generation counts this rank's inits on the store.
pub fn rank_and_generation(
    store: &dyn Store,
    l: &Launch,
    base: &str,
) -> Result<(usize, u64), String> {
    let me = match l.rank.value {
        Some(r) => r,
        None => {
            // OCI workers: ranks 1.. in order of arrival.
            let r = store
                .add(&format!("{base}/oci-rank"), 1)
                .map_err(|e| e.to_string())? as usize;
            if r >= l.world.value {
                return Err(format!(
                    "OCI worker joined as number {r} but OCI__WORKER_COUNT allows {} workers",
                    l.world.value.saturating_sub(1)
                ));
            }
            r
        }
    };
    let generation = store
        .add(&format!("{base}/gen/{me}"), 1)
        .map_err(|e| e.to_string())?;
    Ok((me, generation as u64))
}

/// Joins through a store (see the module docs).
pub fn join_store(l: &Launch, opts: &Options) -> Result<Joined, CommError> {
    let start = Instant::now();
    let cfg = Config::resolve(opts).map_err(|e| setup(l, start, e))?;
    let wait = cfg.setup_timeout.value;
    let Some(meeting) = meet(l, cfg.socket_ifname.value.as_deref(), wait)? else {
        // A world of one: no store needed.
        let comm = Communicator::in_memory(1, opts.clone())?;
        return Ok(Joined {
            comm: comm.into_iter().next().expect("one rank"),
            local_rank: l.local_rank.value,
            server: None,
            member: None,
            generation: None,
            line: l.to_string(),
        });
    };
    let Meeting { endpoint, server } = meeting;
    // Rank 0's store is a new server at every init: meet at the one of this init.
    let role = hosted::Role::of(server.is_some(), l.rank0_hosts.value);
    let client = hosted::connect(&endpoint, &l.run_id.value, role, l.rank.value, wait)
        .map_err(|e| setup(l, start, e))?;
    let base = format!("{}/dtcomm", l.run_id.value);
    let (me, generation) = rank_and_generation(&client, l, &base)
        .map_err(|e| setup(l, start, format!("store {endpoint}: {e}")))?;
    let store: Arc<dyn Store> = Arc::new(PrefixStore::new(format!("{base}/g{generation}"), client));
    let comm = Communicator::new(store, me, l.world.value, opts.clone())?;
    Ok(Joined {
        comm,
        local_rank: l.local_rank.value,
        server,
        member: None,
        generation: Some(generation),
        line: format!("{l} generation={generation}"),
    })
}

/// Joins the native rendezvous at `l`'s endpoint: the server assigns the ranks, the welcome's
/// peer table gives the addresses, and when the server ends the round (a member lost) the
/// communicator's calls fail with `CommError::RoundEnded`.
pub fn join_native(l: &Launch, opts: &Options) -> Result<Joined, CommError> {
    let env = |k: &str| std::env::var(k).ok();
    let nex = NativeExplicit {
        endpoint: l.endpoint.value.clone(),
        job: (l.run_id.source == "explicit").then(|| l.run_id.value.clone()),
        ..NativeExplicit::default()
    };
    let start = Instant::now();
    let settings = NativeSettings::resolve(&nex, &env).map_err(|e| setup(l, start, e))?;
    let line = settings.log_line();
    // Bound before joining: its address goes in the join, and every round's links come to it.
    let listener = DataListener::bind(opts)?;
    let joined = |e: JoinError| match e {
        JoinError::Comm(c) => c,
        e => setup(l, start, e.to_string()),
    };
    let mut member = Member::join(settings, Some(listener)).map_err(joined)?;
    // Takes the next round when one ends during set-up.
    let comm = match member.connect_round(None) {
        Ok(c) => c,
        Err(e) => {
            member.leave();
            return Err(joined(e));
        }
    };
    let w = member.welcome().expect("connect_round took a round");
    Ok(Joined {
        comm,
        local_rank: w.local_rank as usize,
        server: None,
        line: format!("{l}; {line} round={} ({})", w.round, w.cause),
        member: Some(member),
        generation: None,
    })
}
