//! Slurm's `srun`: rank, world size and local rank from the step's variables, and where rank
//! 0's store listens (the first host of the step's node list, on a port every task derives
//! alike from the job and step ids). Pure functions of an environment lookup; Slurm's host-list
//! and task-count syntaxes are expanded here (no `scontrol` call).
//!
//! Read only when `SLURM_PROCID` and `SLURM_STEP_ID` are both set (a task `srun` started; a
//! batch script alone is not a step's task). Variables that disagree are refused, naming them.

/// What a task of an `srun` step learns from Slurm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// `SLURM_PROCID`.
    pub rank: usize,
    /// `SLURM_STEP_NUM_TASKS`, else `SLURM_NTASKS`.
    pub world: usize,
    /// `SLURM_LOCALID`.
    pub local_rank: usize,
    /// This node's entry in the step's task counts (`SLURM_STEP_TASKS_PER_NODE`).
    pub local_size: usize,
    /// The first host of `SLURM_STEP_NODELIST` (else `SLURM_JOB_NODELIST`): where rank 0 runs.
    pub first_host: String,
    /// The store's port: [`port_for`] of the job and step ids.
    pub port: u16,
    /// `slurm-<job>.<step>`: the key namespace of this step.
    pub run_id: String,
    /// The variable that gave the world size (for provenance).
    pub world_var: &'static str,
    /// `SLURM_NODEID`: this node's index in the step's node list.
    pub node: usize,
    /// Nodes in the step (hosts of the node list).
    pub nodes: usize,
}

/// The store port of job `job`, step `step`: 15000 + (16 × job + step) mod 10000, below the
/// usual ephemeral range and different for consecutive steps of one job.
pub fn port_for(job: u64, step: u64) -> u16 {
    (15_000 + (job.wrapping_mul(16).wrapping_add(step)) % 10_000) as u16
}

/// Most hosts a host list may name (Slurm's own clusters stop far below).
pub const MAX_HOSTS: usize = 1 << 20;

/// Expands Slurm's host-list syntax: `node[01-04,07],gpu-a[1-2]`, `rack[1-2]-n[1-2]`
/// (every combination, in order), zero padding kept.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in split_top(list)? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let mut hosts = vec![String::new()];
        let mut rest = item;
        while let Some(open) = rest.find('[') {
            let close = rest[open..]
                .find(']')
                .map(|c| open + c)
                .ok_or_else(|| format!("host list {list:?}: '[' without ']'"))?;
            let prefix = &rest[..open];
            let ranges = range_values(&rest[open + 1..close])
                .map_err(|e| format!("host list {list:?}: {e}"))?;
            // Counted before anything is built: `a[0-999][0-999][0-999]` is refused at once.
            if hosts.len().saturating_mul(ranges.len()) > MAX_HOSTS - out.len() {
                return Err(format!("host list {list:?}: more than {MAX_HOSTS} hosts"));
            }
            hosts = hosts
                .iter()
                .flat_map(|h| ranges.iter().map(move |r| format!("{h}{prefix}{r}")))
                .collect();
            rest = &rest[close + 1..];
        }
        if rest.contains(']') {
            return Err(format!("host list {list:?}: ']' without '['"));
        }
        if hosts.len() > MAX_HOSTS - out.len() {
            return Err(format!("host list {list:?}: more than {MAX_HOSTS} hosts"));
        }
        out.extend(hosts.into_iter().map(|h| h + rest));
    }
    if out.is_empty() {
        return Err(format!("host list {list:?} names no host"));
    }
    Ok(out)
}

/// Splits at the commas outside brackets.
fn split_top(list: &str) -> Result<Vec<&str>, String> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("host list {list:?}: unbalanced or nested brackets"));
        }
    }
    if depth != 0 {
        return Err(format!("host list {list:?}: '[' without ']'"));
    }
    out.push(&list[start..]);
    Ok(out)
}

/// `01-04,07` → `01 02 03 04 07` (the width of the lower bound kept).
fn range_values(body: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in body.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let num = |t: &str| {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                Err(format!("{part:?} is not a number or a range of numbers"))
            } else {
                t.parse::<u64>().map_err(|e| format!("{part:?}: {e}"))
            }
        };
        let (a, b) = (num(lo)?, num(hi)?);
        if b < a || b - a >= MAX_HOSTS as u64 - out.len() as u64 {
            return Err(format!(
                "range {part:?} is empty, or the ranges name more than {MAX_HOSTS} hosts"
            ));
        }
        let width = lo.len();
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

/// Expands Slurm's task counts per node: `2(x3),1` → `[2, 2, 2, 1]`.
pub fn tasks_per_node(counts: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in counts.split(',') {
        let part = part.trim();
        let bad = || format!("task counts {counts:?}: {part:?} is not N or N(xM)");
        let (n, times) = match part.split_once("(x") {
            Some((n, rest)) => {
                let m = rest.strip_suffix(')').ok_or_else(bad)?;
                (n, m.parse::<usize>().map_err(|_| bad())?)
            }
            None => (part, 1),
        };
        let n = n.parse::<usize>().map_err(|_| bad())?;
        // At most a million nodes in all (the list is counted before it is expanded).
        if times > (1 << 20) - out.len().min(1 << 20) {
            return Err(format!(
                "task counts {counts:?}: more than {} nodes",
                1 << 20
            ));
        }
        out.extend(std::iter::repeat_n(n, times));
    }
    Ok(out)
}

fn num(env: &dyn Fn(&str) -> Option<String>, k: &str) -> Result<Option<u64>, String> {
    match env(k)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
    {
        None => Ok(None),
        Some(v) => v
            .parse::<u64>()
            .map(Some)
            .map_err(|_| format!("{k}={v:?} is not a non-negative integer")),
    }
}

fn need(env: &dyn Fn(&str) -> Option<String>, k: &str) -> Result<u64, String> {
    num(env, k)?.ok_or_else(|| format!("{k} is not set (srun sets it for every task)"))
}

/// The step this process is a task of, when `srun` started it; an error naming the variables
/// when they disagree.
pub fn step(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Step>, String> {
    let (Some(rank), Some(step_id)) = (num(env, "SLURM_PROCID")?, num(env, "SLURM_STEP_ID")?)
    else {
        return Ok(None);
    };
    let (world, world_var) = match num(env, "SLURM_STEP_NUM_TASKS")? {
        Some(n) => (n, "SLURM_STEP_NUM_TASKS"),
        None => (need(env, "SLURM_NTASKS")?, "SLURM_NTASKS"),
    };
    let job = need(env, "SLURM_JOB_ID")?;
    let local_rank = need(env, "SLURM_LOCALID")?;
    let node = need(env, "SLURM_NODEID")?;
    if rank >= world {
        return Err(format!(
            "SLURM_PROCID={rank} is not below {world_var}={world}"
        ));
    }
    let (counts_var, counts) = ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"]
        .into_iter()
        .find_map(|k| env(k).map(|v| (k, v)))
        .ok_or("SLURM_STEP_TASKS_PER_NODE is not set (srun sets it for every task)")?;
    let per_node = tasks_per_node(&counts)?;
    let total = per_node
        .iter()
        .try_fold(0u64, |t, &n| t.checked_add(n as u64))
        .unwrap_or(u64::MAX);
    if total != world {
        return Err(format!(
            "{counts_var}={counts:?} counts {total} tasks but {world_var}={world}"
        ));
    }
    let (list_var, list) = [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ]
    .into_iter()
    .find_map(|k| env(k).map(|v| (k, v)))
    .ok_or("SLURM_STEP_NODELIST is not set (srun sets it for every task)")?;
    let hosts = expand_hostlist(&list).map_err(|e| format!("{list_var}: {e}"))?;
    if hosts.len() != per_node.len() {
        return Err(format!(
            "{list_var}={list:?} names {} hosts but {counts_var}={counts:?} counts tasks on {}",
            hosts.len(),
            per_node.len()
        ));
    }
    let local_size = *per_node.get(node as usize).ok_or_else(|| {
        format!(
            "SLURM_NODEID={node} is past the {} nodes of {counts_var}={counts:?}",
            per_node.len()
        )
    })?;
    if local_rank as usize >= local_size {
        return Err(format!(
            "SLURM_LOCALID={local_rank} is not below this node's {local_size} tasks \
             ({counts_var}={counts:?}, SLURM_NODEID={node})"
        ));
    }
    if rank == 0 && node != 0 {
        return Err(format!(
            "SLURM_PROCID=0 runs on node {node} (SLURM_NODEID), not on the first host of \
             {list_var}: with this task distribution set DTCOMM_RDZV_ENDPOINT"
        ));
    }
    Ok(Some(Step {
        rank: rank as usize,
        world: world as usize,
        local_rank: local_rank as usize,
        local_size,
        first_host: hosts[0].clone(),
        port: port_for(job, step_id),
        run_id: format!("slurm-{job}.{step_id}"),
        world_var,
        node: node as usize,
        nodes: hosts.len(),
    }))
}
