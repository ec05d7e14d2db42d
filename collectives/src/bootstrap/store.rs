//! The store path (torch's `from_store`, env://, `dtcomm.init()` on a TCPStore): each rank
//! publishes `address\nhost\ninterface\nworld\nsecret\nhost record` under
//! `<prefix>/<generation>/addr/<rank>`: rank 0 draws the generation's link secret and
//! publishes it (hex; the other ranks leave that line empty), the store being what this path
//! already trusts; the host record (hex, `shm::host::record`) lets the shared-memory set-up
//! skip its identity exchange. Every rank reads rank 0's entry first (rank 0
//! is in every world), so a rank started with another world size fails at once naming both
//! sizes instead of waiting for a rank that will never come.

use std::net::SocketAddr;
use std::time::Duration;

use dt_rdzv::store::{Store, StoreError};

use super::handshake::{self, Auth};
use super::{Setup, bind, check_loopback, hostname, mesh};
use crate::config::Config;
use crate::error::CommError;
use crate::transport::tcp::TcpTransport;

fn rank_of_key(k: &str) -> String {
    k.rsplit('/').next().unwrap_or(k).to_owned()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// One rank's published entry.
struct Entry {
    addr: SocketAddr,
    host: String,
    world: Option<usize>,
    secret: Option<Vec<u8>>,
    record: Option<Vec<u8>>,
}

fn parse(su: &Setup, r: usize, v: &[u8]) -> Result<Entry, CommError> {
    let s = String::from_utf8_lossy(v);
    let mut it = s.lines();
    let addr: SocketAddr = it
        .next()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| su.err(format!("rank {r} published a bad address {s:?}")))?;
    let host = it.next().unwrap_or("").to_owned();
    let _iface = it.next();
    let world = it.next().and_then(|w| w.parse().ok());
    let secret = it.next().and_then(unhex).filter(|s| !s.is_empty());
    let record = it.next().and_then(unhex).filter(|r| !r.is_empty());
    Ok(Entry {
        addr,
        host,
        world,
        secret,
        record,
    })
}

/// Every rank's host record (`shm::host::record`), by rank.
pub(crate) type HostBook = Vec<Vec<u8>>;

/// Builds this rank's TCP transport through `store`, and every rank's host record when all
/// published one.
pub(crate) fn tcp_mesh(
    store: &dyn Store,
    rank: usize,
    world: usize,
    cfg: &Config,
) -> Result<(TcpTransport, Option<HostBook>), CommError> {
    let su = Setup::new(rank, world, cfg);
    let bound = bind(rank, cfg)?;
    let me = bound.addr;
    let host = hostname();
    tracing::info!(rank, world, interface = %bound.iface, address = %me, host = %host, "dtcomm: advertising data address");
    // The k-th communicator a rank builds on this store and prefix uses generation k, so
    // several communicators (created in the same order on every rank) never read each other's
    // addresses.
    let prefix = &cfg.store_prefix.value;
    let generation = store
        .add(&format!("{prefix}/generation/{rank}"), 1)
        .map_err(|e| su.err(format!("store: {e}")))?;
    let key = |r: usize| format!("{prefix}/{generation}/addr/{r}");
    let mine = (rank == 0).then(handshake::secret);
    let value = format!(
        "{me}\n{host}\n{}\n{world}\n{}\n{}",
        bound.iface,
        mine.as_ref().map(|s| hex(s)).unwrap_or_default(),
        hex(&crate::shm::host::own_record(cfg))
    );
    store
        .set(&key(rank), value.as_bytes())
        .map_err(|e| su.err(format!("publishing address: {e}")))?;

    // Rank 0 first: its world size and the secret.
    let left = su.remaining().unwrap_or(Duration::from_millis(1));
    let first = wait_sliced(&su, store, &[key(0).as_str()], left)?;
    let zero = first
        .and_then(|()| store.multi_get(&[key(0).as_str()], su.remaining().unwrap_or(left)))
        .map_err(|e| match e {
            StoreError::Timeout { .. } => su.err("rank 0 never published its address"),
            e => su.err(format!("reading rank 0's address: {e}")),
        })?;
    let zero = parse(&su, 0, &zero[0])?;
    if let Some(w) = zero.world
        && w != world
    {
        return Err(super::mismatch(&su, 0, w, None));
    }
    let secret = zero.secret.ok_or_else(|| {
        su.err(format!(
            "rank 0's entry {} has no link secret (a dtcomm older than this rank's?)",
            key(0)
        ))
    })?;
    let auth = Auth::new(&secret, format!("store {prefix}/{generation}"));

    // Every peer's address: half the deadline, a warning naming who is missing, the rest.
    let keys: Vec<String> = (0..world).map(key).collect();
    let krefs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let half = su.timeout / 2;
    if let Err(StoreError::Timeout { missing, .. }) = wait_sliced(&su, store, &krefs, half)? {
        let ranks: Vec<String> = missing.iter().map(|k| rank_of_key(k)).collect();
        tracing::warn!(
            rank,
            ?ranks,
            "dtcomm: half the setup deadline passed; ranks not heard from: {ranks:?}"
        );
    }
    let rest = su.remaining().unwrap_or(Duration::from_millis(1));
    let values = wait_sliced(&su, store, &krefs, rest)?
        .and_then(|()| store.multi_get(&krefs, su.remaining().unwrap_or(rest)))
        .map_err(|e| match e {
            StoreError::Timeout { missing, .. } => {
                let ranks: Vec<String> = missing.iter().map(|k| rank_of_key(k)).collect();
                su.err(format!("ranks {ranks:?} never published their address"))
            }
            e => su.err(format!("reading peer addresses: {e}")),
        })?;
    let mut peers = Vec::with_capacity(world);
    let mut records = Vec::with_capacity(world);
    for (r, v) in values.iter().enumerate() {
        let e = parse(&su, r, v)?;
        if let Some(w) = e.world
            && w != world
        {
            return Err(super::mismatch(&su, r, w, None));
        }
        peers.push((r, e.addr, e.host));
        records.push(e.record);
    }
    check_loopback(&su, me.ip(), &host, &peers)?;
    let addrs = peers.iter().map(|(_, a, _)| Some(*a)).collect();
    let records = records.into_iter().collect::<Option<Vec<_>>>();
    Ok((mesh(&su, &auth, bound, addrs)?, records))
}

/// How long one store wait of the set-up lasts before the interrupt check is asked again.
const SLICE: Duration = Duration::from_millis(100);

/// `store.wait(keys, limit)` in slices of [`SLICE`], asking this thread's interrupt check
/// between them: `Err` when interrupted, else the store's answer.
fn wait_sliced(
    su: &Setup,
    store: &dyn Store,
    keys: &[&str],
    limit: Duration,
) -> Result<Result<(), StoreError>, CommError> {
    let start = std::time::Instant::now();
    loop {
        let left = limit.saturating_sub(start.elapsed());
        if left <= SLICE {
            return Ok(store.wait(keys, left.max(Duration::from_millis(1))));
        }
        match store.wait(keys, SLICE) {
            Err(StoreError::Timeout { .. }) => su.interrupted()?,
            r => return Ok(r),
        }
    }
}
