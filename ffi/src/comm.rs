//! Version queries, building a communicator (from the launcher environment or explicit
//! arguments), destroying it, and its topology.

use std::ffi::{CStr, c_char, c_int};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dtcomm::{CommError, Options};
use dtcomm_launch::Explicit;

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
    let l = dtcomm_launch::from_env(&ex).map_err(setup)?;
    // The one join every front end shares: the store path, or the native rendezvous (taking
    // the next round when one ends during set-up).
    let j = dtcomm_launch::join(&l, &Options::default())?;
    tracing_line(&format!(
        "dtcomm ({func}): {}; {}",
        j.line,
        j.comm.transport_description()
    ));
    let c = Comm {
        comm: Arc::new(j.comm),
        local_rank: j.local_rank,
        _server: j.server,
        member: std::sync::Mutex::new(j.member),
    };
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
