//! A Kubeflow PyTorchJob's pod whose process was started without `torchrun`: the operator
//! sets torchrun's `PET_*` variables for torchrun to read (`PET_NNODES`, `PET_NPROC_PER_NODE`,
//! `PET_NODE_RANK`, `PET_MASTER_ADDR`/`PET_MASTER_PORT` or `PET_RDZV_ENDPOINT`), and with one
//! process per pod the pod's node rank is the process's rank. What a process cannot be on its
//! own (one of several per pod, an elastic range of pods, a rendezvous backend other than a
//! store) is refused naming the variables, rather than run as a world that never forms.

use super::{int, var};

/// The rank, world and rendezvous a pod's `PET_*` variables give one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    /// The pod's node rank (`PET_NODE_RANK`, else the Indexed Job's `JOB_COMPLETION_INDEX`).
    pub rank: usize,
    /// Where the rank came from.
    pub rank_var: &'static str,
    /// The number of pods (`PET_NNODES`).
    pub world: usize,
    /// The store's `host:port` and the variables it came from, if the pod was given one.
    pub endpoint: Option<(String, &'static str)>,
}

/// The store port torchrun's c10d rendezvous uses when an endpoint names none.
const RDZV_PORT: u16 = dt_rdzv_proto::ports::STORE;

/// `PET_NPROC_PER_NODE` as a count, 1 when unset; `None` for a word (`auto`, `gpu`).
fn nproc(env: &dyn Fn(&str) -> Option<String>) -> Option<usize> {
    match var(env, "PET_NPROC_PER_NODE") {
        None => Some(1),
        Some(v) => v.parse().ok(),
    }
}

/// The pod's rank and world from `PET_*` (`None` where neither `PET_NNODES` nor
/// `PET_NODE_RANK` is set). Call only where no rank variable (`RANK`, ...) is set.
pub fn pod(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Pod>, String> {
    let (Some(nn), node_rank) = (var(env, "PET_NNODES"), var(env, "PET_NODE_RANK")) else {
        return match var(env, "PET_NODE_RANK") {
            Some(r) => Err(format!(
                "PET_NODE_RANK='{r}' is set but PET_NNODES is not: a PyTorchJob sets both"
            )),
            None => Ok(None),
        };
    };
    let world = match nn.split_once(':') {
        Some((lo, hi)) if lo.trim() == hi.trim() => int("PET_NNODES", lo.trim(), 1)?,
        Some(_) => {
            return Err(format!(
                "PET_NNODES='{nn}' is an elastic range of pods, which a process started without \
                 torchrun cannot join: start it with dtrun or torchrun (both read PET_*)"
            ));
        }
        None => int("PET_NNODES", &nn, 1)?,
    };
    match nproc(env) {
        Some(1) => {}
        _ => {
            let n = var(env, "PET_NPROC_PER_NODE").unwrap_or_default();
            return Err(format!(
                "PET_NPROC_PER_NODE='{n}' asks for {n} processes per pod, and this one was started \
                 alone (no RANK, no LOCAL_RANK): start them with dtrun or torchrun (both read \
                 PET_*), or set RANK and WORLD_SIZE"
            ));
        }
    }
    if let Some(b) = var(env, "PET_RDZV_BACKEND")
        && !matches!(b.as_str(), "c10d" | "static")
    {
        return Err(format!(
            "PET_RDZV_BACKEND='{b}' names a rendezvous a process started without torchrun \
             cannot use: start it with torchrun, or use c10d"
        ));
    }
    let index = var(env, "JOB_COMPLETION_INDEX");
    let (rank, rank_var) = match (&node_rank, &index) {
        (Some(r), Some(i)) if r != i => {
            return Err(format!(
                "PET_NODE_RANK='{r}' and JOB_COMPLETION_INDEX='{i}' disagree about this pod's rank"
            ));
        }
        (Some(r), _) => (int("PET_NODE_RANK", r, 0)?, "PET_NODE_RANK"),
        (None, Some(i)) => (int("JOB_COMPLETION_INDEX", i, 0)?, "JOB_COMPLETION_INDEX"),
        (None, None) if world == 1 => (0, "PET_NNODES=1"),
        (None, None) => {
            return Err(format!(
                "PET_NNODES={world} with no PET_NODE_RANK (nor JOB_COMPLETION_INDEX): this pod \
                 cannot tell its rank"
            ));
        }
    };
    if rank >= world {
        return Err(format!(
            "{rank_var}={rank} is not below PET_NNODES={world} (the job's pods)"
        ));
    }
    Ok(Some(Pod {
        rank,
        rank_var,
        world,
        endpoint: endpoint(env)?,
    }))
}

/// The store a pod was given: `PET_MASTER_ADDR`/`PET_MASTER_PORT`, else `PET_RDZV_ENDPOINT`.
fn endpoint(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(String, &'static str)>, String> {
    if let Some(ep) = super::addr_port(env, "PET_MASTER_ADDR", "PET_MASTER_PORT")? {
        return Ok(Some((ep, "PET_MASTER_ADDR, PET_MASTER_PORT")));
    }
    match var(env, "PET_RDZV_ENDPOINT") {
        Some(ep) => {
            let (host, port) = super::split_host_port(&ep, RDZV_PORT)?;
            Ok(Some((
                super::join_host_port(&host, port),
                "PET_RDZV_ENDPOINT",
            )))
        }
        None => Ok(None),
    }
}

/// A pod that is one of several per node (`PET_NPROC_PER_NODE` > 1) whose process has a
/// `RANK` but no local rank was started alone, not by torchrun or dtrun (which set
/// `LOCAL_RANK`): its siblings will never arrive. `rank_var` is where the rank came from.
pub fn check_started_alone(
    env: &dyn Fn(&str) -> Option<String>,
    rank_var: &str,
) -> Result<(), String> {
    if rank_var != "RANK" || var(env, "PET_NNODES").is_none() {
        return Ok(());
    }
    if ["LOCAL_RANK", "DTCOMM_LOCAL_RANK"]
        .iter()
        .any(|k| var(env, k).is_some())
    {
        return Ok(());
    }
    match nproc(env) {
        Some(1) => Ok(()),
        _ => {
            let n = var(env, "PET_NPROC_PER_NODE").unwrap_or_default();
            let r = var(env, "RANK").unwrap_or_default();
            let w = var(env, "WORLD_SIZE").unwrap_or_default();
            Err(format!(
                "RANK={r}, WORLD_SIZE={w} with PET_NPROC_PER_NODE='{n}' and no LOCAL_RANK: this \
                 pod's {n} processes were not started (one process ran alone); start them with \
                 dtrun or torchrun"
            ))
        }
    }
}
