//! How many native connections each source address holds, so that one host (or one address
//! behind which a crowd hides) cannot fill the whole door: past its share a source's newcomers
//! are refused at the handshake while other sources still get in (issue 42: idle connections
//! of one token filled the native connection cap for every job).
//!
//! A slot is taken when a connection arrives and given back when its task ends (the
//! [`Slot`] guard), so connections still in their handshake count too.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open native connections per source address, and in all. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub(crate) struct Sources {
    open: Arc<Mutex<Open>>,
}

#[derive(Debug, Default)]
struct Open {
    by_ip: HashMap<IpAddr, usize>,
    total: usize,
}

/// One connection's place in its source's count; given back on drop.
#[derive(Debug)]
pub(crate) struct Slot {
    sources: Sources,
    ip: IpAddr,
}

impl Sources {
    /// A slot for a connection from `ip` (IPv4-mapped IPv6 counted as IPv4), unless `ip`
    /// already holds `limit`: then `Err(held)`.
    pub(crate) fn take(&self, ip: IpAddr, limit: usize) -> Result<Slot, usize> {
        let ip = ip.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.by_ip.entry(ip).or_insert(0);
        if *n >= limit {
            return Err(*n);
        }
        *n += 1;
        open.total += 1;
        Ok(Slot {
            sources: self.clone(),
            ip,
        })
    }

    /// Connections open now (in their handshake too), from every source. A node agent's
    /// connection counts once, however many ranks' streams it carries.
    pub(crate) fn total(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).total
    }

    /// Connections `ip` holds now.
    #[cfg(test)]
    pub(crate) fn held(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.by_ip.get(&ip.to_canonical()).copied().unwrap_or(0)
    }

    /// Sources with at least one connection (the map never keeps an empty entry).
    #[cfg(test)]
    pub(crate) fn sources(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_ip
            .len()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.sources.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total -= 1;
        if let Some(n) = open.by_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.by_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_source_gets_its_share_and_no_more_while_others_still_get_in() {
        let s = Sources::default();
        let mine: Vec<Slot> = (0..3).map(|_| s.take(ip("10.0.0.1"), 3).unwrap()).collect();
        assert_eq!(s.take(ip("10.0.0.1"), 3).unwrap_err(), 3);
        let other = s.take(ip("10.0.0.2"), 3).unwrap();
        assert_eq!((s.held(ip("10.0.0.1")), s.held(ip("10.0.0.2"))), (3, 1));
        assert_eq!(s.total(), 4);
        drop(mine);
        drop(other);
        assert_eq!(s.sources(), 0, "no empty entry is kept");
        assert_eq!(s.total(), 0);
    }

    #[test]
    fn a_closed_connection_gives_its_place_back() {
        let s = Sources::default();
        let a = s.take(ip("10.0.0.1"), 1).unwrap();
        assert!(s.take(ip("10.0.0.1"), 1).is_err());
        drop(a);
        assert!(s.take(ip("10.0.0.1"), 1).is_ok());
    }

    #[test]
    fn an_ipv4_mapped_address_is_its_ipv4_source() {
        let s = Sources::default();
        let _a = s.take(ip("::ffff:10.0.0.1"), 1).unwrap();
        assert!(s.take(ip("10.0.0.1"), 1).is_err());
    }
}
