//! The store path (torch's `from_store`, env://, `dtcomm.init()` on a TCPStore): each rank
//! publishes `address\nhost\ninterface\nworld\nsecret\nhost record` under
//! `<prefix>/<generation>/addr/<rank>`. The links' secret: where the launcher handed every
//! rank one (`DTCOMM_LINK_SECRET`: `dtrun` and the torchrun handler derive it from the job
//! token and round) the store holds only its fingerprint (`L` + 8 bytes of a hash, on rank 0's
//! line), so reading the store is not enough to pass the handshake; otherwise rank 0 draws the
//! generation's secret and publishes it (hex; the other ranks leave that line empty), which
//! proves only that a connector could read the store. The host record (hex, `shm::host::record`) lets the shared-memory set-up
//! skip its identity exchange. Every rank reads rank 0's entry first (rank 0
//! is in every world), so a rank started with another world size fails at once naming both
//! sizes instead of waiting for a rank that will never come.

use std::net::SocketAddr;
use std::time::Duration;

use dt_rdzv::store::{Store, StoreError};

use super::generation::{Generations, Waited, rank_of_key, wait_catching_up};
use super::{bind, check_loopback, hostname, mesh};
use crate::config::Config;
use crate::error::CommError;
use crate::transport::tcp::TcpTransport;
use crate::transport::tcp::handshake::{self, Auth};
use crate::transport::tcp::setup::{Setup, mismatch};

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

/// Where the links' secret comes from, as rank 0 published it.
#[derive(Debug, PartialEq, Eq)]
enum Secret {
    /// Drawn by rank 0 and published in the store.
    Published(Vec<u8>),
    /// The launcher's (`DTCOMM_LINK_SECRET`): only its fingerprint is in the store.
    Launcher([u8; 8]),
}

const FINGERPRINT_CONTEXT: &[u8] = b"dtcomm link secret fingerprint v1\0";

/// What the store may show of a launcher's secret: 8 bytes of a hash of it.
fn fingerprint(secret: &[u8]) -> [u8; 8] {
    let d = ring::digest::digest(
        &ring::digest::SHA256,
        &[FINGERPRINT_CONTEXT, secret].concat(),
    );
    let mut out = [0u8; 8];
    out.copy_from_slice(&d.as_ref()[..8]);
    out
}

impl Secret {
    fn line(&self) -> String {
        match self {
            Secret::Published(s) => hex(s),
            Secret::Launcher(f) => format!("L{}", hex(f)),
        }
    }

    fn parse(line: &str) -> Option<Secret> {
        if let Some(f) = line.strip_prefix('L') {
            let f = unhex(f)?;
            return Some(Secret::Launcher(f.try_into().ok()?));
        }
        unhex(line).filter(|s| !s.is_empty()).map(Secret::Published)
    }
}

/// The secret this rank proves links with, given what rank 0 published and what this rank's
/// launcher handed it: a disagreement (one launcher's secret and not the other's, or two
/// different ones) is an error naming `DTCOMM_LINK_SECRET`, never a silent fallback.
fn agree(zero: Secret, mine: Option<&[u8]>) -> Result<Vec<u8>, String> {
    match (zero, mine) {
        (Secret::Published(s), None) => Ok(s),
        (Secret::Launcher(f), Some(m)) if fingerprint(m) == f => Ok(m.to_vec()),
        (Secret::Launcher(f), Some(m)) => Err(format!(
            "this rank's DTCOMM_LINK_SECRET (fingerprint {}) is not rank 0's ({}): ranks of \
             different rounds or jobs on one store prefix?",
            hex(&fingerprint(m)),
            hex(&f)
        )),
        (Secret::Launcher(f), None) => Err(format!(
            "rank 0 proves links with its launcher's DTCOMM_LINK_SECRET (fingerprint {}) and \
             this rank has none: ranks started by different launchers?",
            hex(&f)
        )),
        (Secret::Published(_), Some(m)) => Err(format!(
            "this rank has a DTCOMM_LINK_SECRET (fingerprint {}) and rank 0 has none (it \
             published a secret in the store): ranks started by different launchers?",
            hex(&fingerprint(m))
        )),
    }
}

/// One rank's published entry.
struct Entry {
    addr: SocketAddr,
    host: String,
    world: Option<usize>,
    secret: Option<Secret>,
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
    let secret = it.next().and_then(Secret::parse);
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
    let mut gens = Generations::new(store, prefix, rank, &su)?;
    let launcher = cfg.link_secret.value.as_ref().map(|s| s.bytes());
    let mine = (rank == 0).then(|| match launcher {
        Some(s) => Secret::Launcher(fingerprint(s)),
        None => Secret::Published(handshake::secret().to_vec()),
    });
    let value = format!(
        "{me}\n{host}\n{}\n{world}\n{}\n{}",
        bound.iface,
        mine.as_ref().map(Secret::line).unwrap_or_default(),
        hex(&crate::transport::shm::host::own_record(cfg))
    );
    // Publish under this rank's generation; a rank that finds another's counter ahead of its
    // own (a run interrupted during set-up on this store and prefix) moves up to it and
    // publishes again, so the ranks of a rerun meet at the highest generation.
    let (auth, values) = 'generation: loop {
        let generation = gens.current;
        let key = |r: usize| format!("{prefix}/{generation}/addr/{r}");
        store
            .set(&key(rank), value.as_bytes())
            .map_err(|e| su.err(format!("publishing address: {e}")))?;

        // Rank 0 first: its world size and the secret.
        let left = su.remaining().unwrap_or(Duration::from_millis(1));
        let zero = match wait_catching_up(&su, store, &[key(0).as_str()], left, &mut gens)? {
            Waited::Moved => continue 'generation,
            Waited::Done(r) => r,
        };
        let zero = zero
            .and_then(|()| store.multi_get(&[key(0).as_str()], su.remaining().unwrap_or(left)))
            .map_err(|e| match e {
                StoreError::Timeout { .. } => su.err("rank 0 never published its address"),
                e => su.err(format!("reading rank 0's address: {e}")),
            })?;
        let zero = parse(&su, 0, &zero[0])?;
        if let Some(w) = zero.world
            && w != world
        {
            gens.keep_address();
            return Err(mismatch(&su, 0, w, None));
        }
        let zero_secret = zero.secret.ok_or_else(|| {
            su.err(format!(
                "rank 0's entry {} has no link secret (a dtcomm older than this rank's?)",
                key(0)
            ))
        })?;
        let secret = agree(zero_secret, launcher).map_err(|e| su.err(e))?;
        tracing::debug!(
            rank,
            proof = if launcher.is_some() {
                "launcher"
            } else {
                "store"
            },
            "dtcomm: links of {prefix}/{generation} prove {}",
            if launcher.is_some() {
                "the launcher's secret (the job token and round)"
            } else {
                "only that the connector could read the store"
            }
        );
        let auth = Auth::new(&secret, format!("store {prefix}/{generation}"));

        // Every peer's address: half the deadline, a warning naming who is missing, the rest.
        let keys: Vec<String> = (0..world).map(key).collect();
        let krefs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let half = su.timeout / 2;
        match wait_catching_up(&su, store, &krefs, half, &mut gens)? {
            Waited::Moved => continue 'generation,
            Waited::Done(Err(StoreError::Timeout { missing, .. })) => {
                let ranks: Vec<String> = missing.iter().map(|k| rank_of_key(k)).collect();
                tracing::warn!(
                    rank,
                    ?ranks,
                    "dtcomm: half the setup deadline passed; ranks not heard from: {ranks:?}"
                );
            }
            Waited::Done(_) => {}
        }
        let rest = su.remaining().unwrap_or(Duration::from_millis(1));
        let done = match wait_catching_up(&su, store, &krefs, rest, &mut gens)? {
            Waited::Moved => continue 'generation,
            Waited::Done(r) => r,
        };
        let values = done
            .and_then(|()| store.multi_get(&krefs, su.remaining().unwrap_or(rest)))
            .map_err(|e| match e {
                StoreError::Timeout { missing, .. } => {
                    let ranks: Vec<String> = missing.iter().map(|k| rank_of_key(k)).collect();
                    su.err(format!("ranks {ranks:?} never published their address"))
                }
                e => su.err(format!("reading peer addresses: {e}")),
            })?;
        break (auth, values);
    };
    let mut peers = Vec::with_capacity(world);
    let mut records = Vec::with_capacity(world);
    for (r, v) in values.iter().enumerate() {
        let e = parse(&su, r, v)?;
        if let Some(w) = e.world
            && w != world
        {
            gens.keep_address();
            return Err(mismatch(&su, r, w, None));
        }
        peers.push((r, e.addr, e.host));
        records.push(e.record);
    }
    check_loopback(&su, me.ip(), &host, &peers)?;
    let addrs = peers.iter().map(|(_, a, _)| Some(*a)).collect();
    let records = records.into_iter().collect::<Option<Vec<_>>>();
    let links = mesh(&su, &auth, bound, addrs)?;
    gens.commit();
    Ok((links, records))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_shows_a_fingerprint_of_a_launchers_secret_never_the_secret() {
        let s = [7u8; 32];
        let line = Secret::Launcher(fingerprint(&s)).line();
        assert!(line.starts_with('L') && line.len() == 17, "{line}");
        assert!(!line.contains(&hex(&s[..4])), "{line}");
        assert_eq!(
            Secret::parse(&line),
            Some(Secret::Launcher(fingerprint(&s)))
        );
        let p = Secret::Published(vec![1, 2, 3]);
        assert_eq!(Secret::parse(&p.line()), Some(p));
        assert_eq!(Secret::parse(""), None);
        assert_eq!(Secret::parse("Lzz"), None);
    }

    #[test]
    fn ranks_agree_on_the_secret_or_fail_naming_the_variable() {
        let a = [1u8; 32];
        let b = [2u8; 32];
        assert_eq!(
            agree(Secret::Launcher(fingerprint(&a)), Some(&a)).unwrap(),
            a
        );
        assert_eq!(agree(Secret::Published(b.to_vec()), None).unwrap(), b);
        for (zero, mine) in [
            (Secret::Launcher(fingerprint(&a)), Some(&b[..])),
            (Secret::Launcher(fingerprint(&a)), None),
            (Secret::Published(b.to_vec()), Some(&a[..])),
        ] {
            let e = agree(zero, mine).unwrap_err();
            assert!(e.contains("DTCOMM_LINK_SECRET"), "{e}");
        }
    }
}
