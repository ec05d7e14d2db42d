//! Version queries, building a communicator (from the launcher environment or explicit
//! arguments), destroying it, and its topology.

use std::ffi::{CStr, c_char, c_int};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dt_rdzv::server::{BackgroundServer, ServeConfig};
use dt_rdzv::store::{PrefixStore, Store};
use dtcomm::launch::native::{JoinError, Member, NativeExplicit, NativeSettings};
use dtcomm::launch::{self, Explicit, Launch, STORE_PORT, hosted, mpi_hosts, mpi_session};
use dtcomm::{CommError, Communicator, Config, DataListener, Options};

use crate::handles::{self, Comm};
use crate::status::{Fail, guard, invalid};
use crate::types::*;

/// The ABI version this library implements ([`DTCOMM_ABI_VERSION`] of its header).
#[unsafe(no_mangle)]
pub extern "C" fn dtcomm_abi_version() -> c_int {
    DTCOMM_ABI_VERSION
}

/// The library's version as major, minor, patch (any pointer may be NULL).
///
/// # Safety
/// Non-null pointers must be valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_version(
    major: *mut c_int,
    minor: *mut c_int,
    patch: *mut c_int,
) -> dtcomm_result_t {
    guard("dtcomm_version", || {
        let v = |s: &str| s.parse::<c_int>().unwrap_or(0);
        for (p, s) in [
            (major, env!("CARGO_PKG_VERSION_MAJOR")),
            (minor, env!("CARGO_PKG_VERSION_MINOR")),
            (patch, env!("CARGO_PKG_VERSION_PATCH")),
        ] {
            if !p.is_null() {
                // SAFETY: `p` is one of the caller's three pointers and is non-null (checked just
                // above); `dtcomm_version`'s contract makes a non-null one valid for a write of one
                // `c_int`. Nothing keeps the pointer after this write.
                unsafe { p.write(v(s)) };
            }
        }
        Ok(())
    })
}

fn setup(detail: impl Into<String>) -> Fail {
    setup_since(None, detail)
}

/// A set-up failure, timed from `start` when the set-up had begun (a refused variable is
/// refused before anything began: no time).
fn setup_since(start: Option<Instant>, detail: impl Into<String>) -> Fail {
    Fail::from(CommError::Setup {
        rank: 0,
        elapsed: start.map_or(Duration::ZERO, |s| s.elapsed()),
        detail: detail.into(),
    })
}

/// Joins the native rendezvous at `l`'s endpoint: the server assigns the ranks, the welcome's
/// peer table gives the addresses, and when the server ends the round (a member lost) the
/// communicator's calls fail with `DTCOMM_ROUND_ENDED`.
fn join_native(l: &Launch, ex: &Explicit) -> Result<(Comm, String), Fail> {
    let env = |k: &str| std::env::var(k).ok();
    let nex = NativeExplicit {
        endpoint: l.endpoint.value.clone(),
        job: ex.run_id.clone(),
        ..NativeExplicit::default()
    };
    let settings = NativeSettings::resolve(&nex, &env).map_err(setup)?;
    let line = settings.log_line();
    let listener = DataListener::bind(&Options::default())?;
    let start = Instant::now();
    let joined = |e: JoinError| match e {
        JoinError::Comm(c) => Fail::from(c),
        e => setup_since(Some(start), e.to_string()),
    };
    let mut member = Member::join(settings, Some(listener)).map_err(joined)?;
    // Takes the next round when one ends during set-up, as every front end does.
    let comm = member.connect_round(None).map_err(joined)?;
    let w = member.welcome().expect("connect_round took a round");
    let (round, local_rank) = (w.round, w.local_rank as usize);
    Ok((
        Comm {
            comm: Arc::new(comm),
            local_rank,
            _server: None,
            member: std::sync::Mutex::new(Some(member)),
        },
        format!("{line} round={round}"),
    ))
}

/// Joins the group the launcher environment describes (the precedence of Python's
/// `dtcomm.init()`); the native rendezvous is [`join_native`].
fn join(l: Launch) -> Result<Comm, Fail> {
    let cfg = Config::resolve(&Options::default()).map_err(setup)?;
    let wait = cfg.timeout.value;
    let Some(endpoint) = l.endpoint.value.clone() else {
        // A world of one: no store needed.
        let c = Communicator::in_memory(1, Options::default())?;
        let comm = c.into_iter().next().expect("one rank");
        return Ok(Comm {
            comm: Arc::new(comm),
            local_rank: l.local_rank.value,
            _server: None,
            member: Default::default(),
        });
    };
    if endpoint.starts_with(launch::HOROVOD_KV) {
        return Err(setup(format!(
            "horovodrun's key-value rendezvous ({}) is joined from Python only: set \
             DTCOMM_RDZV_ENDPOINT or MASTER_ADDR/MASTER_PORT",
            l.endpoint.source
        )));
    }
    let (endpoint, session_server) = if let Some(dir) =
        endpoint.strip_prefix(mpi_session::MPI_SESSION)
    {
        meet_in_session(dir, &l, wait)?
    } else if endpoint.starts_with(mpi_hosts::MPI_PMIX) || endpoint.starts_with(mpi_hosts::MPI_PMI1)
    {
        meet_through_mpi(&endpoint, &l, &cfg, wait)?
    } else {
        (endpoint, None)
    };
    let server = if session_server.is_some() {
        session_server
    } else if l.host_store.value {
        let (host, port) = launch::split_host_port(&endpoint, STORE_PORT).map_err(setup)?;
        let bind = if host.starts_with("127.") {
            host.as_str()
        } else {
            "::"
        };
        let ip: IpAddr = bind
            .parse()
            .map_err(|e| setup(format!("store host {bind:?}: {e}")))?;
        let cfg = ServeConfig::embedded_store(ip, port);
        Some(BackgroundServer::start(cfg).map_err(|e| {
            setup(format!(
                "hosting the store on {bind}:{port} ({}): {e}",
                l.host_store.source
            ))
        })?)
    } else {
        None
    };
    // Rank 0's store is a new server at every init: meet at the one of this init.
    let role = hosted::Role::of(server.is_some(), l.rank0_hosts.value);
    let client =
        hosted::connect(&endpoint, &l.run_id.value, role, l.rank.value, wait).map_err(setup)?;
    let base = format!("{}/dtcomm", l.run_id.value);
    let store_err = |e: dt_rdzv::store::StoreError| setup(format!("store {endpoint}: {e}"));
    let me = match l.rank.value {
        Some(r) => r,
        None => {
            // OCI workers: ranks 1.. in order of arrival.
            let r = client
                .add(&format!("{base}/oci-rank"), 1)
                .map_err(store_err)? as usize;
            if r >= l.world.value {
                return Err(setup(format!(
                    "OCI worker joined as number {r} but the world has {} ranks",
                    l.world.value
                )));
            }
            r
        }
    };
    // The n-th init of every rank meets under generation n, so an earlier run's keys (same
    // run id, long-lived server) are never read.
    let generation = client
        .add(&format!("{base}/gen/{me}"), 1)
        .map_err(store_err)?;
    let store: Arc<dyn Store> = Arc::new(PrefixStore::new(format!("{base}/g{generation}"), client));
    let comm = Communicator::new(store, me, l.world.value, Options::default())?;
    Ok(Comm {
        comm: Arc::new(comm),
        local_rank: l.local_rank.value,
        _server: server,
        member: Default::default(),
    })
}

/// How many times this process has met its peers under `mpirun` (the n-th init meets under
/// the n-th name, never an address an earlier init already shut down).
fn next_meeting() -> u64 {
    static INITS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    INITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
}

/// Under `mpirun` across hosts (PMIx) or `mpiexec.hydra` (PMI-1): rank 0 hosts the store on
/// the address its data plane advertises and passes it to the others through the process
/// manager ([`mpi_hosts`]).
fn meet_through_mpi(
    endpoint: &str,
    l: &Launch,
    cfg: &Config,
    wait: std::time::Duration,
) -> Result<(String, Option<BackgroundServer>), Fail> {
    let n = next_meeting();
    let rank = l
        .rank
        .value
        .ok_or_else(|| setup("meeting through the MPI process manager needs a rank variable"))?;
    if rank != 0 {
        let ep = mpi_hosts::meet(endpoint, rank, &l.run_id.value, n, None, wait)
            .map_err(|e| setup(e.to_string()))?;
        return Ok((ep, None));
    }
    let ip = mpi_hosts::advertised_ip(cfg.socket_ifname.value.as_deref()).map_err(setup)?;
    let server = BackgroundServer::start(ServeConfig::embedded_store(ip, 0))
        .map_err(|e| setup(format!("hosting the store on {ip}: {e}")))?;
    let mine = server.endpoint();
    mpi_hosts::meet(endpoint, 0, &l.run_id.value, n, Some(&mine), wait)
        .map_err(|e| setup(e.to_string()))?;
    Ok((mine, Some(server)))
}

/// Under `mpirun` on one host: rank 0 hosts the store on loopback and leaves its address in
/// Open MPI's session directory; the others read it there ([`mpi_session`]).
fn meet_in_session(
    dir: &str,
    l: &Launch,
    wait: std::time::Duration,
) -> Result<(String, Option<BackgroundServer>), Fail> {
    let n = next_meeting();
    let path = mpi_session::endpoint_file(dir, &l.run_id.value, n);
    match l.rank.value {
        Some(0) => {
            let cfg = ServeConfig::embedded_store(IpAddr::from([127, 0, 0, 1]), 0);
            let server = BackgroundServer::start(cfg)
                .map_err(|e| setup(format!("hosting the store on 127.0.0.1: {e}")))?;
            let endpoint = server.endpoint();
            mpi_session::publish(&path, &endpoint).map_err(setup)?;
            Ok((endpoint, Some(server)))
        }
        Some(r) => Ok((mpi_session::read(&path, r, wait).map_err(setup)?, None)),
        None => Err(setup(
            "Open MPI's session directory needs OMPI_COMM_WORLD_RANK",
        )),
    }
}

fn cstr(func: &str, what: &str, p: *const c_char) -> Result<Option<String>, Fail> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: `p` is non-null (checked above). The only caller, `dtcomm_comm_init_rank`, passes its
    // `endpoint` and `run_id`, which its contract makes NULL or NUL-terminated strings readable
    // until it returns; the borrowed `CStr` does not outlive this function (it is copied into an
    // owned `String`).
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(|s| Some(s.to_owned()))
        .map_err(|_| invalid(func, format!("{what} is not UTF-8")))
}

fn finish(func: &str, out: *mut dtcomm_comm_t, ex: Explicit) -> Result<(), Fail> {
    let l = launch::from_env(&ex).map_err(setup)?;
    let mut line = l.to_string();
    let c = if l.native.value {
        let (c, native) = join_native(&l, &ex)?;
        line = format!("{line}; {native}");
        c
    } else {
        join(l)?
    };
    tracing_line(&format!(
        "dtcomm ({func}): {line}; {}",
        c.comm.transport_description()
    ));
    let h = handles::add_comm(c);
    // SAFETY: both callers, `dtcomm_comm_init` and `dtcomm_comm_init_rank`, refuse a NULL `out`
    // before calling `finish`, and their contracts make it valid for a write of one
    // `dtcomm_comm_t`.
    unsafe { out.write(h) };
    Ok(())
}

fn tracing_line(line: &str) {
    if std::env::var_os("DTCOMM_QUIET").is_none() {
        eprintln!("{line}");
    }
}

/// Builds a communicator from the launcher environment: rank and world size from
/// `DTCOMM_RANK`/`DTCOMM_WORLD_SIZE`, torchrun's `RANK`/`WORLD_SIZE`, Horovod's, Open MPI's or
/// PMI's, or OCI's; the rendezvous from `DTCOMM_RDZV_ENDPOINT` (a dt-rdzv serve or torch
/// TCPStore) or `MASTER_ADDR`/`MASTER_PORT` (rank 0 hosts the store there, as torch does); the
/// run id from `DTCOMM_RUN_ID`/`TORCHELASTIC_RUN_ID`. Blocks until every rank joined, or fails
/// at the deadline (`DTCOMM_TIMEOUT`) naming the missing ranks. Prints one line on stderr with
/// each value and its source (`DTCOMM_QUIET` silences it).
///
/// # Safety
/// `comm` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_comm_init(comm: *mut dtcomm_comm_t) -> dtcomm_result_t {
    guard("dtcomm_comm_init", || {
        if comm.is_null() {
            return Err(invalid("dtcomm_comm_init", "comm is NULL"));
        }
        finish("dtcomm_comm_init", comm, Explicit::default())
    })
}

/// Builds rank `rank` of `world` through the store at `endpoint` (`host:port`; NULL: from the
/// environment as in [`dtcomm_comm_init`]) under run id `run_id` (NULL: from the environment,
/// else `dtcomm`). Blocks until every rank joined or the deadline passed.
///
/// # Safety
/// `comm` must be valid for a write; `endpoint` and `run_id` NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_comm_init_rank(
    comm: *mut dtcomm_comm_t,
    rank: c_int,
    world: c_int,
    endpoint: *const c_char,
    run_id: *const c_char,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_comm_init_rank";
    guard(F, || {
        if comm.is_null() {
            return Err(invalid(F, "comm is NULL"));
        }
        if world < 1 || rank < 0 || rank >= world {
            return Err(invalid(
                F,
                format!("rank {rank} is not in a world of {world}"),
            ));
        }
        let ex = Explicit {
            rank_world: Some((rank as usize, world as usize)),
            endpoint: cstr(F, "endpoint", endpoint)?,
            run_id: cstr(F, "run_id", run_id)?,
        };
        finish(F, comm, ex)
    })
}

/// Collective over `comm`: a communicator of `nranks` of its ranks, `ranks[i]` becoming rank
/// `i` of the new one (a Horovod process set: start a negotiator on it with
/// [`dtcomm_negotiator_start`](crate::negotiate::dtcomm_negotiator_start)). Every rank of
/// `comm` calls it with the same list; a rank not in it gets 0 in `out` (no communicator). A
/// list that differs between ranks, is empty, repeats a rank or names one outside `comm`
/// fails on every rank, naming the ranks. Its local rank is the process's own (as `comm`'s).
/// Destroy the new communicator as any other. It runs collectives on `comm`: call it while no
/// negotiator runs there (build the sets first, as Horovod's `hvd.init(process_sets=...)`).
///
/// # Safety
/// `ranks` valid for `nranks` reads; `out` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_comm_subset(
    comm: dtcomm_comm_t,
    ranks: *const c_int,
    nranks: usize,
    out: *mut dtcomm_comm_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_comm_subset";
    guard(F, || {
        if out.is_null() || (ranks.is_null() && nranks > 0) {
            return Err(invalid(F, "ranks or out is NULL"));
        }
        let parent = get(F, comm)?;
        let list: Vec<c_int> = if nranks == 0 {
            Vec::new()
        } else {
            // SAFETY: `ranks` is non-null here (NULL with `nranks > 0` was refused above, and this
            // branch has `nranks > 0`); the contract makes it valid for `nranks` reads of `c_int`
            // while this call runs, and the slice is copied into a `Vec` at once, so no borrow of
            // the caller's memory outlives this statement.
            unsafe { std::slice::from_raw_parts(ranks, nranks) }.to_vec()
        };
        let list = list
            .iter()
            .map(|r| usize::try_from(*r).map_err(|_| invalid(F, format!("rank {r} is negative"))))
            .collect::<Result<Vec<usize>, Fail>>()?;
        let name = format!(
            "subset.{}",
            list.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(".")
        );
        let h = match parent.comm.subset(&list, &name)? {
            // Its local rank stays the process's own (the GPU it drives does not change).
            Some(c) => handles::add_comm(Comm {
                comm: Arc::new(c),
                local_rank: parent.local_rank,
                _server: None,
                member: Default::default(),
            }),
            None => 0,
        };
        // SAFETY: `out` is non-null (checked at the top) and the contract makes it valid for a
        // write of one `dtcomm_comm_t`.
        unsafe { out.write(h) };
        Ok(())
    })
}

/// Says goodbye to the peers and frees the communicator. Calls still in flight on it (blocked
/// on other threads, or requests not yet waited for) fail with `DTCOMM_INTERRUPTED` within
/// 100 ms, and their peers are told, instead of holding this call until their deadline: wait
/// for requests first to finish them. Its handle is invalid afterwards (a second destroy
/// returns `DTCOMM_INVALID_ARGUMENT`).
#[unsafe(no_mangle)]
pub extern "C" fn dtcomm_comm_destroy(comm: dtcomm_comm_t) -> dtcomm_result_t {
    guard("dtcomm_comm_destroy", || {
        let c = handles::remove_comm(comm)
            .ok_or_else(|| invalid("dtcomm_comm_destroy", unknown_comm(comm)))?;
        // A call blocked on another thread stops within 100 ms (failing with
        // DTCOMM_INTERRUPTED; its peers are told) instead of holding this until its deadline.
        c.comm
            .interrupt("dtcomm_comm_destroy was called while the call was in flight");
        c.comm.shutdown();
        if let Some(m) = handles::take_member(&c) {
            m.leave();
        }
        Ok(())
    })
}

pub(crate) fn unknown_comm(h: dtcomm_comm_t) -> String {
    format!("communicator {h} is not a live communicator (destroyed, or never built)")
}

pub(crate) fn get(func: &str, h: dtcomm_comm_t) -> Result<Arc<Comm>, Fail> {
    handles::comm(h).ok_or_else(|| invalid(func, unknown_comm(h)))
}

fn topo(
    func: &str,
    h: dtcomm_comm_t,
    out: *mut c_int,
    f: impl FnOnce(&Comm) -> usize,
) -> dtcomm_result_t {
    guard(func, || {
        if out.is_null() {
            return Err(invalid(func, "output pointer is NULL"));
        }
        let c = get(func, h)?;
        // SAFETY: `out` is non-null (checked above). `topo`'s callers (`dtcomm_comm_rank`,
        // `dtcomm_comm_size`, `dtcomm_comm_local_rank`) pass their caller's pointer unchanged,
        // which their contracts make valid for a write of one `c_int`.
        unsafe { out.write(f(&c) as c_int) };
        Ok(())
    })
}

/// This rank, in `0..size`.
///
/// # Safety
/// `rank` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_comm_rank(
    comm: dtcomm_comm_t,
    rank: *mut c_int,
) -> dtcomm_result_t {
    topo("dtcomm_comm_rank", comm, rank, |c| c.comm.rank())
}

/// The number of ranks.
///
/// # Safety
/// `size` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_comm_size(
    comm: dtcomm_comm_t,
    size: *mut c_int,
) -> dtcomm_result_t {
    topo("dtcomm_comm_size", comm, size, |c| c.comm.world())
}

/// This rank's index among the ranks on its host (from the launcher; 0 when unknown).
///
/// # Safety
/// `local_rank` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_comm_local_rank(
    comm: dtcomm_comm_t,
    local_rank: *mut c_int,
) -> dtcomm_result_t {
    topo("dtcomm_comm_local_rank", comm, local_rank, |c| c.local_rank)
}
