//! Where rank, world size, local rank and the rendezvous come from, with provenance: the rules
//! of Python's `dtcomm.init()` (`python/dtcomm/_config.py`) for Rust and C callers, as a pure
//! function of explicit arguments and an environment lookup.
//!
//! Precedence: explicit arguments, then `DTCOMM_*`, then torchrun (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`/`MASTER_PORT`, `TORCHELASTIC_RUN_ID`; a
//! Kubernetes Indexed Job's `JOB_COMPLETION_INDEX` with a world size and no rank), then
//! Horovod, Open MPI and PMI (`HOROVOD_RANK`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK` and their
//! sizes), then a PyTorchJob pod's `PET_*` with one process per pod ([`pytorchjob`]), then
//! Slurm's `srun` (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID` and the
//! step's node list and task counts: rank 0 hosts the store on the first host, [`slurm`]), then
//! OCI Data Science (`OCI__MODE`, `OCI__WORKER_COUNT`), else rank 0 of 1. A pair
//! set by half (a rank without its size, an address without its port) is an error naming both
//! variables. An endpoint on dt-rdzv's native port (29401, or `DTCOMM_RDZV_BACKEND=native`, or
//! a pinned fingerprint) asks for the native rendezvous, which assigns the ranks. Under
//! `mpirun` on one host with no endpoint, the ranks meet in Open MPI's session directory
//! ([`mpi_session`]); across hosts, through the job's PMIx server, and under MPICH's Hydra
//! through its PMI-1 socket ([`mpi_hosts`]). Under `horovodrun --gloo`, its HTTP key-value
//! server ([`HOROVOD_KV`]; Python's front end speaks it).
//!
//! From a resolved [`Launch`], [`join()`] builds the communicator, the same way for every
//! front end (the C ABI, Python's `dtcomm.init()`): meeting at a store or joining the native
//! rendezvous ([`join`](mod@join)).

use std::fmt;

pub mod hosted;
pub mod join;
pub mod mpi_hosts;
pub mod mpi_session;
pub mod native;
pub mod pmi1;
pub mod pmix;
pub mod pytorchjob;
pub mod slurm;

/// The TCPStore port (torchrun's default).
pub const STORE_PORT: u16 = dt_rdzv_proto::ports::STORE;
/// dt-rdzv's native (QUIC) port.
pub const NATIVE_PORT: u16 = dt_rdzv_proto::ports::NATIVE;

/// `(rank variable, size variable)` pairs in precedence order after explicit arguments.
pub const RANK_PAIRS: [(&str, &str); 5] = [
    ("DTCOMM_RANK", "DTCOMM_WORLD_SIZE"),
    ("RANK", "WORLD_SIZE"),
    ("HOROVOD_RANK", "HOROVOD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
];
/// `(local rank variable, local size variable)` pairs in precedence order.
pub const LOCAL_PAIRS: [(&str, &str); 5] = [
    ("DTCOMM_LOCAL_RANK", "DTCOMM_LOCAL_WORLD_SIZE"),
    ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
];
/// How an endpoint names `horovodrun --gloo`'s HTTP key-value server (its rendezvous, which
/// Python's `dtcomm._horovod_kv` speaks).
pub const HOROVOD_KV: &str = "horovod-kv://";
/// The provenance of a rank that Slurm's `srun` gave.
const SLURM_RANK: &str = "SLURM_PROCID";
/// The provenance of the store rank 0 of an `srun` step hosts.
const SLURM_STORE: &str =
    "Slurm: first host of the step's node list, port from SLURM_JOB_ID and SLURM_STEP_ID";
/// Run id variables in precedence order.
pub const RUN_ID_VARS: [&str; 2] = ["DTCOMM_RUN_ID", "TORCHELASTIC_RUN_ID"];

/// A resolved value and where it came from (`explicit`, a variable name, `default`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: String,
}

fn s<T>(value: T, source: impl Into<String>) -> Sourced<T> {
    Sourced {
        value,
        source: source.into(),
    }
}

/// What the caller passed explicitly (each pair both or neither).
#[derive(Debug, Clone, Default)]
pub struct Explicit {
    /// Rank and world size.
    pub rank_world: Option<(usize, usize)>,
    /// Rendezvous endpoint `host:port`.
    pub endpoint: Option<String>,
    /// Run id (the key namespace on the store).
    pub run_id: Option<String>,
}

/// Everything needed to join a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// This rank; `None` for an OCI worker (numbered on arrival) or under native rendezvous.
    pub rank: Sourced<Option<usize>>,
    /// Number of ranks (0 under native rendezvous: the server decides).
    pub world: Sourced<usize>,
    /// Rank on this host.
    pub local_rank: Sourced<usize>,
    /// Ranks on this host.
    pub local_size: Sourced<usize>,
    /// The rendezvous endpoint, `host:port`; `None` for a world of one.
    pub endpoint: Sourced<Option<String>>,
    /// The run id.
    pub run_id: Sourced<String>,
    /// Whether this process hosts the store at `endpoint` (torch's env:// rule: rank 0 of
    /// `MASTER_ADDR`/`MASTER_PORT`; OCI's MAIN).
    pub host_store: Sourced<bool>,
    /// Whether the rule that lets rank 0 host the store applies to this job, which every rank
    /// can tell (rank 0 of env://, of a PyTorchJob's pods, of an `srun` step; OCI's MAIN): a
    /// new server at every init, so a re-init meets rank 0's hosting for it ([`hosted`]).
    pub rank0_hosts: Sourced<bool>,
    /// Whether `endpoint` is dt-rdzv's native port (ranks come from the native rendezvous).
    pub native: Sourced<bool>,
}

impl fmt::Display for Launch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rank.value {
            Some(r) => write!(f, "rank={r} ({})", self.rank.source)?,
            None => write!(f, "rank=assigned at rendezvous ({})", self.rank.source)?,
        }
        write!(
            f,
            " world_size={} ({}) local_rank={} ({}) local_size={} ({}) rdzv={} ({}) run_id={} ({}) host_store={} ({})",
            self.world.value,
            self.world.source,
            self.local_rank.value,
            self.local_rank.source,
            self.local_size.value,
            self.local_size.source,
            self.endpoint.value.as_deref().unwrap_or("None"),
            self.endpoint.source,
            self.run_id.value,
            self.run_id.source,
            self.host_store.value,
            self.host_store.source,
        )
    }
}

/// `host:port` from an address variable and a port variable (`[v6]` brackets dropped); `None`
/// when neither is set; one without the other is an error naming both.
fn addr_port(
    env: &dyn Fn(&str) -> Option<String>,
    addr: &str,
    port: &str,
) -> Result<Option<String>, String> {
    match (var(env, addr), var(env, port)) {
        (Some(a), Some(p)) => {
            let n = u16::try_from(int(port, &p, 1)?)
                .map_err(|_| format!("{port}={p:?} is not a port"))?;
            let host = a.trim_start_matches('[').trim_end_matches(']');
            Ok(Some(join_host_port(host, n)))
        }
        (None, None) => Ok(None),
        (a, _) => {
            let (have, miss) = if a.is_some() {
                (addr, port)
            } else {
                (port, addr)
            };
            let hv = env(have).unwrap_or_default();
            Err(format!(
                "{have}='{hv}' is set but {miss} is not: set both {addr} and {port}, or neither"
            ))
        }
    }
}

/// A variable, trimmed; unset and blank are the same.
fn var(env: &dyn Fn(&str) -> Option<String>, k: &str) -> Option<String> {
    env(k)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// The most ranks one group takes (a million: far past any job, far short of what would make
/// the per-peer tables of `init()` an allocation failure).
pub const MAX_WORLD: usize = 1 << 20;

fn int(k: &str, text: &str, min: usize) -> Result<usize, String> {
    let v: usize = text
        .parse()
        .map_err(|_| format!("{k}='{text}' is not an integer"))?;
    if v < min {
        return Err(format!("{k}='{text}' must be >= {min}"));
    }
    Ok(v)
}

/// The first fully set pair as `(a, b, a_name, b_name)`; a half-set pair is an error.
fn pair(
    env: &dyn Fn(&str) -> Option<String>,
    pairs: &[(&'static str, &'static str)],
    below: bool,
) -> Result<Option<(usize, usize, &'static str, &'static str)>, String> {
    for &(a, b) in pairs {
        match (var(env, a), var(env, b)) {
            (None, None) => continue,
            (Some(va), Some(vb)) => {
                let (r, n) = (int(a, &va, 0)?, int(b, &vb, 1)?);
                if below && r >= n {
                    return Err(format!("{a}={r} is not below {b}={n}"));
                }
                return Ok(Some((r, n, a, b)));
            }
            (va, _) => {
                let (have, miss) = if va.is_some() { (a, b) } else { (b, a) };
                let hv = env(have).unwrap_or_default();
                return Err(format!(
                    "{have}='{hv}' is set but {miss} is not: set both {a} and {b}, or neither"
                ));
            }
        }
    }
    Ok(None)
}

/// A Kubernetes Indexed Job's pod: `JOB_COMPLETION_INDEX` as the rank when a world size
/// (`DTCOMM_WORLD_SIZE`, else `WORLD_SIZE`: the job's completions) is set and no rank variable
/// is. An index past the world size is an error naming both. Without a world size the index
/// says nothing here (a native rendezvous assigns the ranks; `dtrun` takes it as its node rank).
fn indexed_job(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(usize, usize, &'static str)>, String> {
    let Some(idx) = var(env, "JOB_COMPLETION_INDEX") else {
        return Ok(None);
    };
    if RANK_PAIRS.iter().any(|(r, _)| var(env, r).is_some()) {
        return Ok(None);
    }
    let Some((wvar, w)) = ["DTCOMM_WORLD_SIZE", "WORLD_SIZE"]
        .into_iter()
        .find_map(|k| var(env, k).map(|v| (k, v)))
    else {
        return Ok(None);
    };
    let (i, n) = (int("JOB_COMPLETION_INDEX", &idx, 0)?, int(wvar, &w, 1)?);
    if i >= n {
        return Err(format!(
            "JOB_COMPLETION_INDEX={i} is not below {wvar}={n} (the Indexed Job's completions)"
        ));
    }
    Ok(Some((i, n, wvar)))
}

/// `host[:port]` (IPv6 in brackets) as (host without brackets, port): the one reading of
/// [`dt_rdzv_proto::endpoint::split`], its error in words.
pub fn split_host_port(endpoint: &str, default_port: u16) -> Result<(String, u16), String> {
    dt_rdzv_proto::endpoint::split(endpoint, default_port).map_err(|e| format!("rendezvous {e}"))
}

pub use dt_rdzv_proto::endpoint::join as join_host_port;
pub use join::{Joined, Meeting, join, join_native, join_store, meet};

/// Whether `ep` (one endpoint or a fail-over list) speaks dt-rdzv's native protocol:
/// `DTCOMM_RDZV_BACKEND`, else a pinned fingerprint or CA, else the first endpoint's port
/// (29401). An unknown backend is an error naming the variable.
pub fn is_native(env: &dyn Fn(&str) -> Option<String>, ep: &str) -> Result<Sourced<bool>, String> {
    match var(env, "DTCOMM_RDZV_BACKEND")
        .map(|b| b.to_ascii_lowercase())
        .as_deref()
    {
        Some("native") => return Ok(s(true, "DTCOMM_RDZV_BACKEND")),
        Some("store" | "tcpstore" | "c10d") => return Ok(s(false, "DTCOMM_RDZV_BACKEND")),
        Some(b) => {
            return Err(format!(
                "DTCOMM_RDZV_BACKEND='{b}': expected 'native' or 'store'"
            ));
        }
        None => {}
    }
    for v in ["DTCOMM_RDZV_FINGERPRINT", "DTCOMM_RDZV_CACERT"] {
        if var(env, v).is_some() {
            return Ok(s(true, v));
        }
    }
    // (a list of servers in fail-over order: the first one's port)
    let first = ep.split(',').next().unwrap_or(ep);
    if split_host_port(first, STORE_PORT)?.1 == NATIVE_PORT {
        return Ok(s(true, format!("port {NATIVE_PORT}")));
    }
    Ok(s(false, "default (TCPStore protocol)"))
}

fn truthy(v: Option<String>) -> bool {
    v.is_some_and(|t| {
        matches!(
            t.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "t" | "yes" | "y"
        )
    })
}

/// Resolves the launcher environment (`env` looks a variable up). Errors name the variables.
pub fn resolve(ex: &Explicit, env: &dyn Fn(&str) -> Option<String>) -> Result<Launch, String> {
    let oci = var(env, "OCI__MODE")
        .unwrap_or_default()
        .to_ascii_uppercase();
    // Slurm's `srun` (read only for what no launcher above it set; parsed once).
    let step = std::cell::OnceCell::new();
    let slurm = || step.get_or_init(|| slurm::step(env)).clone();
    let raw = ex
        .endpoint
        .clone()
        .or_else(|| var(env, "DTCOMM_RDZV_ENDPOINT"));
    let mut native = match &raw {
        Some(ep) => is_native(env, ep)?,
        None => s(false, "default"),
    };
    // A PyTorchJob pod's `PET_*`: read only where no rank variable is set, and not where the
    // native rendezvous is asked for (it assigns the ranks).
    let mut pod = None;
    let (mut rank, mut world) = if let Some((r, w)) = ex.rank_world {
        if w < 1 || r >= w {
            return Err(format!("rank {r} is not in a world of {w}"));
        }
        (s(Some(r), "explicit"), s(w, "explicit"))
    } else if let Some((r, w, wvar)) = indexed_job(env)? {
        (s(Some(r), "JOB_COMPLETION_INDEX"), s(w, wvar))
    } else if let Some((r, w, a, b)) = pair(env, &RANK_PAIRS, true)? {
        pytorchjob::check_started_alone(env, a)?;
        (s(Some(r), a), s(w, b))
    } else if !native.value
        && let Some(p) = pytorchjob::pod(env)?
    {
        let found = (s(Some(p.rank), p.rank_var), s(p.world, "PET_NNODES"));
        pod = Some(p);
        found
    } else if let Some(st) = slurm()? {
        (s(Some(st.rank), SLURM_RANK), s(st.world, st.world_var))
    } else if oci == "MAIN" || oci == "WORKER" {
        let (n, src) = match var(env, "OCI__WORKER_COUNT") {
            Some(c) => (
                int("OCI__WORKER_COUNT", &c, 0)?.saturating_add(1),
                "OCI__WORKER_COUNT + 1 (main)",
            ),
            None => (2, "OCI default"),
        };
        let r = if oci == "MAIN" {
            s(Some(0), "OCI__MODE=MAIN")
        } else {
            s(None, "OCI__MODE=WORKER")
        };
        (r, s(n, src))
    } else {
        (s(Some(0), "default"), s(1, "default"))
    };
    let (mut local_rank, mut local_size) = match pair(env, &LOCAL_PAIRS, true)? {
        Some((r, n, a, b)) => (s(r, a), s(n, b)),
        // (also under `srun --mpi=pmi2`, whose PMI-1 ranks come with no local rank)
        None if var(env, "SLURM_LOCALID").is_some() => match slurm()? {
            Some(st) => (
                s(st.local_rank, "SLURM_LOCALID"),
                s(st.local_size, "SLURM_STEP_TASKS_PER_NODE"),
            ),
            None if world.value == 1 => (s(0, "default"), s(1, "default")),
            None => (s(0, "default (unknown)"), s(1, "default (unknown)")),
        },
        None if world.value == 1 => (s(0, "default"), s(1, "default")),
        None => (s(0, "default (unknown)"), s(1, "default (unknown)")),
    };
    if world.value > MAX_WORLD {
        return Err(format!(
            "a world of {} ranks (from {}) is more than dtcomm takes ({MAX_WORLD})",
            world.value, world.source
        ));
    }

    let launcher_rank = !matches!(
        rank.source.as_str(),
        "default" | "OCI__MODE=MAIN" | "OCI__MODE=WORKER"
    );
    let mut explicit_ep = ex.endpoint.clone();
    let mut dtcomm_ep = var(env, "DTCOMM_RDZV_ENDPOINT");
    if native.value && launcher_rank {
        native = s(
            false,
            format!(
                "rank from {}: that launcher's rendezvous is used",
                rank.source
            ),
        );
        explicit_ep = None;
        dtcomm_ep = None;
    }
    let endpoint = if native.value {
        let raw = raw.expect("native implies an endpoint");
        // One server or a comma-separated list of them (fail-over order).
        let servers = raw
            .split(',')
            .filter(|e| !e.trim().is_empty())
            .map(|e| split_host_port(e, NATIVE_PORT).map(|(h, p)| join_host_port(&h, p)))
            .collect::<Result<Vec<_>, _>>()?;
        let why = format!("native rendezvous ({})", native.source);
        rank = s(None, why.clone());
        world = s(0, why.clone());
        local_rank = s(0, why.clone());
        local_size = s(1, why);
        let src = if ex.endpoint.is_some() {
            "explicit"
        } else {
            "DTCOMM_RDZV_ENDPOINT"
        };
        s(Some(servers.join(",")), src)
    } else if let Some(ep) = explicit_ep {
        s(Some(ep), "explicit")
    } else if let Some(ep) = dtcomm_ep {
        let (host, port) = split_host_port(&ep, STORE_PORT)?;
        s(Some(join_host_port(&host, port)), "DTCOMM_RDZV_ENDPOINT")
    } else {
        match addr_port(env, "MASTER_ADDR", "MASTER_PORT")? {
            Some(ep) => s(Some(ep), "MASTER_ADDR, MASTER_PORT"),
            None if var(env, "HOROVOD_GLOO_RENDEZVOUS_ADDR").is_some()
                && var(env, "HOROVOD_GLOO_RENDEZVOUS_PORT").is_some() =>
            {
                let p = var(env, "HOROVOD_GLOO_RENDEZVOUS_PORT").expect("checked");
                int("HOROVOD_GLOO_RENDEZVOUS_PORT", &p, 1)?;
                let a = var(env, "HOROVOD_GLOO_RENDEZVOUS_ADDR").expect("checked");
                s(
                    Some(format!("{HOROVOD_KV}{a}:{p}")),
                    "HOROVOD_GLOO_RENDEZVOUS_ADDR, HOROVOD_GLOO_RENDEZVOUS_PORT",
                )
            }
            None if mpi_session::session_dir(env).is_some() => s(
                Some(format!(
                    "{}{}",
                    mpi_session::MPI_SESSION,
                    mpi_session::session_dir(env).expect("checked")
                )),
                "Open MPI session directory (one host)",
            ),
            None if mpi_hosts::namespace(env).is_some() => s(
                Some(format!(
                    "{}{}",
                    mpi_hosts::MPI_PMIX,
                    mpi_hosts::namespace(env).expect("checked")
                )),
                "Open MPI's PMIx server (across hosts)",
            ),
            None if mpi_hosts::pmi1_socket(env).is_some() => s(
                Some(format!(
                    "{}{}",
                    mpi_hosts::MPI_PMI1,
                    mpi_hosts::pmi1_socket(env).expect("checked")
                )),
                "Hydra's PMI-1 socket (mpiexec.hydra)",
            ),
            // A PyTorchJob pod's store (PET_MASTER_ADDR/PORT or PET_RDZV_ENDPOINT).
            None if pod.as_ref().is_some_and(|p| p.endpoint.is_some()) => {
                let (ep, src) = pod
                    .as_ref()
                    .and_then(|p| p.endpoint.clone())
                    .expect("checked");
                s(Some(ep), src)
            }
            // srun --mpi=pmix: Slurm's PMIx server carries rank 0's address (no derived port).
            None if rank.source == SLURM_RANK && var(env, "PMIX_NAMESPACE").is_some() => s(
                Some(format!(
                    "{}{}",
                    mpi_hosts::MPI_PMIX,
                    var(env, "PMIX_NAMESPACE").expect("checked")
                )),
                "Slurm's PMIx server (srun --mpi=pmix)",
            ),
            None if rank.source == SLURM_RANK => {
                let st = slurm()?.expect("ranks from Slurm");
                s(Some(join_host_port(&st.first_host, st.port)), SLURM_STORE)
            }
            None if oci == "MAIN" => s(
                Some(format!("0.0.0.0:{STORE_PORT}")),
                "OCI__MODE=MAIN hosts it",
            ),
            None => s(None, "default"),
        }
    };
    if endpoint.value.is_none() && world.value > 1 {
        let hint = if rank.source == "OMPI_COMM_WORLD_RANK" {
            " (mpirun across hosts without a PMIx server, PMIX_NAMESPACE unset: pass it to \
             every rank, e.g. mpirun -x DTCOMM_RDZV_ENDPOINT=host:port, with a dt-rdzv serve \
             there)"
        } else {
            ""
        };
        return Err(format!(
            "rank {}: a world of {} ({}) needs a rendezvous endpoint: set \
             DTCOMM_RDZV_ENDPOINT=host:port (or MASTER_ADDR and MASTER_PORT), or launch with dtrun{hint}",
            rank.value.map_or("None".into(), |r| r.to_string()),
            world.value,
            world.source
        ));
    }
    let rank0_hosts = if native.value {
        s(false, "native rendezvous")
    } else if var(env, "DTCOMM_RDZV_HOST").is_some() {
        s(false, "DTCOMM_RDZV_HOST")
    } else if endpoint.source == "MASTER_ADDR, MASTER_PORT" {
        if truthy(env("TORCHELASTIC_USE_AGENT_STORE")) {
            s(false, "TORCHELASTIC_USE_AGENT_STORE")
        } else {
            s(true, "rank 0 of env://")
        }
    } else if endpoint.source.starts_with("PET_") {
        s(true, "rank 0 of the PyTorchJob's pods")
    } else if endpoint.source == SLURM_STORE {
        s(true, "rank 0 of the srun step")
    } else {
        // (OCI's MAIN hosts too, but its workers are numbered at the store, by another rule)
        s(false, "default")
    };
    let host_store = if native.value {
        s(false, "native rendezvous")
    } else if var(env, "DTCOMM_RDZV_HOST").is_some() {
        s(truthy(env("DTCOMM_RDZV_HOST")), "DTCOMM_RDZV_HOST")
    } else if rank0_hosts.value && rank.value == Some(0) {
        s(true, rank0_hosts.source.clone())
    } else if oci == "MAIN" && ex.endpoint.is_none() {
        s(true, "OCI__MODE=MAIN")
    } else {
        s(false, rank0_hosts.source.clone())
    };
    let run_id = match &ex.run_id {
        Some(r) => s(r.clone(), "explicit"),
        None => RUN_ID_VARS
            .iter()
            .find_map(|v| var(env, v).map(|x| s(x, *v)))
            .unwrap_or_else(|| match (rank.source == SLURM_RANK).then(slurm) {
                Some(Ok(Some(st))) => s(st.run_id, "SLURM_JOB_ID, SLURM_STEP_ID"),
                _ => s("dtcomm".to_owned(), "default"),
            }),
    };
    Ok(Launch {
        rank,
        world,
        local_rank,
        local_size,
        endpoint,
        run_id,
        host_store,
        rank0_hosts,
        native,
    })
}

/// [`resolve`] over the process environment.
pub fn from_env(ex: &Explicit) -> Result<Launch, String> {
    resolve(ex, &|k| std::env::var(k).ok())
}

#[cfg(test)]
mod tests;
