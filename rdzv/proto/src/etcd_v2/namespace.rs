//! Run namespaces: which keys belong to one torchelastic run, so that a rerun with the same
//! id never reads a dead run's keys (the TCPStore door's rule, for torch's two etcd layouts).
//!
//! * `etcd-v2` (dynamic handler): the state key `/torch/elastic/rendezvous/<id>` and the
//!   `EtcdStore` keys under `/torch/elastic/store/` whose base64 name decodes to
//!   `torch.rendezvous.<id>.<round>/...`.
//! * `etcd` (legacy handler): the run directory `<etcd_prefix>/run_<id>`, recognised by what
//!   torch puts in it (`run_<id>/rdzv/...`) or, for the directory itself, by torch's default
//!   prefix `/torchelastic/p2p`. Another key with a `run_` component (`/apps/run_2024/db`) is
//!   no run's.
//!
//! A run *starts* with a read of its state key (dynamic) or a create-if-missing of its run
//! directory (legacy). If that namespace holds keys but no open connection has touched it,
//! every agent of the earlier run is gone, and its keys are purged first. A namespace no open
//! connection touched for the idle TTL is purged too. Keys outside these layouts are never
//! purged (they go by their TTL, a delete, or the store's byte quota).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::input::ConnId;
use super::key::clean_key;
use super::request::V2Request;

/// Where the dynamic handler keeps its state blobs.
const DYNAMIC_STATE: [&str; 3] = ["torch", "elastic", "rendezvous"];
/// The legacy handler's default `etcd_prefix`.
const LEGACY_PREFIX: [&str; 2] = ["torchelastic", "p2p"];
/// What the legacy handler keeps in a run directory.
const LEGACY_RDZV: &str = "rdzv";
/// Where the dynamic handler's `EtcdStore` keeps its keys.
const DYNAMIC_STORE: [&str; 3] = ["torch", "elastic", "store"];

/// One run's keys.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RunNamespace {
    /// `--rdzv-backend=etcd-v2`, by run id.
    Dynamic(String),
    /// `--rdzv-backend=etcd`, by run directory (`/torchelastic/p2p/run_<id>`).
    Legacy(String),
}

impl RunNamespace {
    /// How logs name it.
    pub fn label(&self) -> String {
        match self {
            Self::Dynamic(id) => format!("etcd-v2 run {id}"),
            Self::Legacy(dir) => format!("etcd run {dir}"),
        }
    }

    /// The keys (files or directories) to remove to forget the run; `children` lists the
    /// names directly under a directory of the store (as [`super::V2Store::children`]).
    pub fn roots(&self, children: impl Fn(&str) -> Vec<String>) -> Vec<String> {
        match self {
            Self::Legacy(dir) => vec![dir.clone()],
            Self::Dynamic(id) => {
                let mut keys = vec![format!("/{}/{id}", DYNAMIC_STATE.join("/"))];
                let store_dir = format!("/{}", DYNAMIC_STORE.join("/"));
                keys.extend(
                    children(&store_dir)
                        .into_iter()
                        .filter(|name| store_run(name).as_deref() == Some(id.as_str()))
                        .map(|name| format!("{store_dir}/{name}")),
                );
                keys
            }
        }
    }
}

/// The run id of an `EtcdStore` key name (base64 of `torch.rendezvous.<id>.<round>/<key>`).
fn store_run(name: &str) -> Option<String> {
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(name)
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let prefix = text.split('/').next()?;
    let rest = prefix.strip_prefix("torch.rendezvous.")?;
    let (id, round) = rest.rsplit_once('.')?;
    (!id.is_empty() && !round.is_empty() && round.bytes().all(|b| b.is_ascii_digit()))
        .then(|| id.to_owned())
}

/// The run a key belongs to, if any.
pub fn run_namespace(key: &str) -> Option<RunNamespace> {
    let key = clean_key(key);
    let comps: Vec<&str> = key.split('/').filter(|c| !c.is_empty()).collect();
    if comps.len() >= 4 && comps[..3] == DYNAMIC_STATE {
        return Some(RunNamespace::Dynamic(comps[3].to_owned()));
    }
    if comps.len() >= 4 && comps[..3] == DYNAMIC_STORE {
        return store_run(comps[3]).map(RunNamespace::Dynamic);
    }
    let legacy = |i: usize| {
        comps[i].len() > "run_".len()
            && comps[i].starts_with("run_")
            && (comps.get(i + 1) == Some(&LEGACY_RDZV)
                || (comps.len() == i + 1 && comps[..i] == LEGACY_PREFIX))
    };
    let i = (0..comps.len()).find(|&i| legacy(i))?;
    Some(RunNamespace::Legacy(format!("/{}", comps[..=i].join("/"))))
}

/// The run a request starts, if it is a run's first request: a plain read of a dynamic state
/// key, or a create-if-missing of a legacy run directory.
pub fn run_start(key: &str, request: &V2Request) -> Option<RunNamespace> {
    let ns = run_namespace(key)?;
    let key = clean_key(key);
    let starts = match (&ns, request) {
        (RunNamespace::Dynamic(id), V2Request::Get(g)) => {
            !g.wait && key == format!("/{}/{id}", DYNAMIC_STATE.join("/"))
        }
        (RunNamespace::Legacy(dir), V2Request::Put(p)) => {
            p.dir && p.prev_exist == Some(false) && &key == dir
        }
        _ => false,
    };
    starts.then_some(ns)
}

/// What a run's entry costs beside its name, charged to the store's byte budget.
const RUN_OVERHEAD: u64 = 128;
/// What one connection's touch of a run costs beside the name.
const TOUCH_OVERHEAD: u64 = 64;

impl RunNamespace {
    /// Bytes of its name.
    fn name_bytes(&self) -> u64 {
        match self {
            Self::Dynamic(s) | Self::Legacy(s) => s.len() as u64,
        }
    }
}

/// Which open connections touched which run, and since when a run has had none.
#[derive(Debug, Default)]
pub struct RunTracker {
    runs: BTreeMap<RunNamespace, Run>,
    conns: BTreeMap<ConnId, BTreeSet<RunNamespace>>,
    /// Bytes this bookkeeping holds (names and entries).
    bytes: u64,
}

#[derive(Debug, Default)]
struct Run {
    conns: BTreeSet<ConnId>,
    /// Since when no open connection has touched it.
    idle_since: Option<Instant>,
}

impl RunTracker {
    /// Whether `ns` is abandoned as seen from connection `conn`: no other open connection has
    /// touched it (and `conn` has not either).
    pub fn abandoned(&self, ns: &RunNamespace, conn: ConnId) -> bool {
        self.runs.get(ns).is_none_or(|r| r.conns.is_empty())
            && !self.conns.get(&conn).is_some_and(|s| s.contains(ns))
    }

    /// What [`RunTracker::touch`] of `ns` by `conn` would add to [`RunTracker::bytes`].
    pub fn touch_cost(&self, conn: ConnId, ns: &RunNamespace) -> u64 {
        if self.conns.get(&conn).is_some_and(|s| s.contains(ns)) {
            return 0;
        }
        let run = if self.runs.contains_key(ns) {
            0
        } else {
            ns.name_bytes() + RUN_OVERHEAD
        };
        run + ns.name_bytes() + TOUCH_OVERHEAD
    }

    /// Connection `conn` touched `ns`.
    pub fn touch(&mut self, conn: ConnId, ns: RunNamespace) {
        self.bytes += self.touch_cost(conn, &ns);
        let run = self.runs.entry(ns.clone()).or_default();
        run.conns.insert(conn);
        run.idle_since = None;
        self.conns.entry(conn).or_default().insert(ns);
    }

    /// Bytes this bookkeeping holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Connection `conn` closed at `now`.
    pub fn disconnect(&mut self, conn: ConnId, now: Instant) {
        for ns in self.conns.remove(&conn).unwrap_or_default() {
            self.bytes = self.bytes.saturating_sub(ns.name_bytes() + TOUCH_OVERHEAD);
            if let Some(run) = self.runs.get_mut(&ns) {
                run.conns.remove(&conn);
                if run.conns.is_empty() {
                    run.idle_since = Some(now);
                }
            }
        }
    }

    /// Forgets a purged run.
    pub fn forget(&mut self, ns: &RunNamespace) {
        if self.runs.remove(ns).is_some() {
            self.bytes = self.bytes.saturating_sub(ns.name_bytes() + RUN_OVERHEAD);
        }
    }

    /// Runs no open connection touched for `ttl` by `now`.
    pub fn idle(&self, now: Instant, ttl: Duration) -> Vec<RunNamespace> {
        self.runs
            .iter()
            .filter(|(_, r)| {
                r.idle_since
                    .is_some_and(|t| now.saturating_duration_since(t) >= ttl)
            })
            .map(|(ns, _)| ns.clone())
            .collect()
    }

    /// When the first idle run will have been idle for `ttl`.
    pub fn next_idle(&self, ttl: Duration) -> Option<Instant> {
        self.runs
            .values()
            .filter_map(|r| r.idle_since)
            .min()
            .map(|t| t + ttl)
    }

    /// Runs tracked.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether no run is tracked.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}
