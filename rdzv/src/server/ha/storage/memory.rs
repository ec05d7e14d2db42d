//! The in-memory twin of the shared storage: leases expire by the clock, claims are atomic
//! under one lock. Servers of one process share it (the simulation tests), each through its
//! own [`MemoryStorage::handle`], which [`MemoryStorage::set_reachable`] can cut off to play
//! an outage or a partition.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, FutureExt};

use super::{Claim, LeaseId, Storage, StorageError};

/// See the module docs.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    state: Arc<Mutex<State>>,
    down: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    next_lease: LeaseId,
    /// Lease → (expires at, its time to live).
    leases: BTreeMap<LeaseId, (Instant, Duration)>,
    /// Key → (value, lease).
    keys: BTreeMap<String, (Vec<u8>, Option<LeaseId>)>,
}

impl State {
    /// Drops the leases past their time and their keys.
    fn expire(&mut self, now: Instant) {
        let gone: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.drop_lease(id);
        }
    }

    fn drop_lease(&mut self, id: LeaseId) {
        self.leases.remove(&id);
        self.keys.retain(|_, (_, l)| *l != Some(id));
    }
}

impl MemoryStorage {
    /// An empty storage.
    pub fn new() -> Self {
        Self::default()
    }

    /// Another handle on the same keys and leases, with its own reachability (one per server
    /// of a simulated group).
    pub fn handle(&self) -> Self {
        Self {
            state: self.state.clone(),
            down: AtomicBool::new(false),
        }
    }

    /// Makes every call through this handle fail as unreachable (`false`) or work again
    /// (`true`). Leases go on expiring meanwhile, as an etcd cluster's would for a server cut
    /// off from it.
    pub fn set_reachable(&self, reachable: bool) {
        self.down.store(!reachable, Ordering::SeqCst);
    }

    /// The value at `key` now, without the reachability check (tests).
    pub fn peek(&self, key: &str) -> Option<Vec<u8>> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.expire(Instant::now());
        s.keys.get(key).map(|(v, _)| v.clone())
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>, StorageError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StorageError::Unreachable {
                endpoints: self.describe(),
                why: "made unreachable (test)".into(),
            });
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.expire(Instant::now());
        Ok(s)
    }
}

impl Storage for MemoryStorage {
    fn describe(&self) -> String {
        "memory".into()
    }

    fn grant(&self, ttl: Duration) -> BoxFuture<'_, Result<LeaseId, StorageError>> {
        let r = self.lock().map(|mut s| {
            s.next_lease += 1;
            let id = s.next_lease;
            s.leases.insert(id, (Instant::now() + ttl, ttl));
            id
        });
        async move { r }.boxed()
    }

    fn keep_alive(&self, lease: LeaseId) -> BoxFuture<'_, Result<Option<Duration>, StorageError>> {
        let r = self.lock().map(|mut s| {
            s.leases.get_mut(&lease).map(|(at, ttl)| {
                *at = Instant::now() + *ttl;
                *ttl
            })
        });
        async move { r }.boxed()
    }

    fn revoke(&self, lease: LeaseId) -> BoxFuture<'_, Result<(), StorageError>> {
        let r = self.lock().map(|mut s| s.drop_lease(lease));
        async move { r }.boxed()
    }

    fn claim<'a>(
        &'a self,
        key: &'a str,
        value: &'a [u8],
        lease: LeaseId,
    ) -> BoxFuture<'a, Result<Claim, StorageError>> {
        let r = self.lock().and_then(|mut s| {
            if !s.leases.contains_key(&lease) {
                return Err(StorageError::Failed {
                    endpoints: "memory".into(),
                    why: format!("lease {lease} not found"),
                });
            }
            Ok(match s.keys.get(key) {
                Some((v, _)) if v == value => Claim::Mine,
                Some((v, _)) => Claim::Held(v.clone()),
                None => {
                    s.keys.insert(key.into(), (value.to_vec(), Some(lease)));
                    Claim::Mine
                }
            })
        });
        async move { r }.boxed()
    }

    fn delete_if<'a>(
        &'a self,
        key: &'a str,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<bool, StorageError>> {
        let r = self.lock().map(|mut s| {
            let hit = s.keys.get(key).is_some_and(|(v, _)| v == value);
            if hit {
                s.keys.remove(key);
            }
            hit
        });
        async move { r }.boxed()
    }

    fn put<'a>(&'a self, key: &'a str, value: &'a [u8]) -> BoxFuture<'a, Result<(), StorageError>> {
        let r = self.lock().map(|mut s| {
            s.keys.insert(key.into(), (value.to_vec(), None));
        });
        async move { r }.boxed()
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StorageError>> {
        let r = self.lock().map(|s| s.keys.get(key).map(|(v, _)| v.clone()));
        async move { r }.boxed()
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        let r = self.lock().map(|mut s| {
            s.keys.remove(key);
        });
        async move { r }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn a_claim_is_exclusive_until_its_lease_expires() {
        run(async {
            let s = MemoryStorage::new();
            let a = s.grant(Duration::from_millis(50)).await.unwrap();
            let b = s.grant(Duration::from_secs(10)).await.unwrap();
            assert_eq!(s.claim("k", b"a", a).await.unwrap(), Claim::Mine);
            assert_eq!(s.claim("k", b"a", a).await.unwrap(), Claim::Mine);
            assert_eq!(
                s.claim("k", b"b", b).await.unwrap(),
                Claim::Held(b"a".to_vec())
            );
            std::thread::sleep(Duration::from_millis(60));
            assert_eq!(s.keep_alive(a).await.unwrap(), None, "expired");
            assert_eq!(s.claim("k", b"b", b).await.unwrap(), Claim::Mine);
            assert!(!s.delete_if("k", b"a").await.unwrap());
            assert!(s.delete_if("k", b"b").await.unwrap());
            // Handles share keys; reachability is each handle's own.
            let h = s.handle();
            h.put("shared", b"x").await.unwrap();
            h.set_reachable(false);
            assert_eq!(s.get("shared").await.unwrap(), Some(b"x".to_vec()));
            assert!(h.get("shared").await.is_err());
        });
    }

    #[test]
    fn an_unreachable_storage_fails_every_call_and_leases_still_expire() {
        run(async {
            let s = MemoryStorage::new();
            let a = s.grant(Duration::from_millis(30)).await.unwrap();
            s.put("r", b"1").await.unwrap();
            s.set_reachable(false);
            assert!(matches!(
                s.keep_alive(a).await,
                Err(StorageError::Unreachable { .. })
            ));
            std::thread::sleep(Duration::from_millis(40));
            s.set_reachable(true);
            assert_eq!(s.keep_alive(a).await.unwrap(), None);
            assert_eq!(s.get("r").await.unwrap(), Some(b"1".to_vec()));
        });
    }
}
