//! Each request's rules: what it reads and writes, what it replies (the bytes of
//! `reference/tcpstore-protocol.md` §5), and when it closes its connection instead.

use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

use bytes::Bytes;

use super::super::namespace::{is_torchelastic_state_key, namespace_of};
use super::super::opcode::VALIDATE_MAGIC;
use super::super::request::{Request, put_bytes};
use super::super::semantics::{self, CounterError};
use super::super::{NOT_READY, READY, STOP_WAITING, WAIT_CANCELED};
use super::Engine;
use super::input::ConnId;
use super::output::{CloseReason, PurgeReason};
use super::usage;

impl Engine {
    /// Handles one request from `conn`, queuing its reply (if any) and any wake-ups.
    pub(super) fn request(&mut self, now: Instant, conn: ConnId, req: Request) {
        let op = req.query_type();
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        self.stats.ops[op as usize] += 1;
        if !c.validated {
            match req {
                Request::Validate {
                    magic: VALIDATE_MAGIC,
                } => c.validated = true,
                Request::Validate { magic } => self.close(conn, CloseReason::BadMagic(magic), now),
                _ => self.close(conn, CloseReason::NotValidated(op.name()), now),
            }
            return;
        }
        match req {
            Request::Validate { .. } => self.close(conn, CloseReason::RepeatedValidate, now),
            Request::Ping { nonce } => self.send(conn, nonce.to_le_bytes().to_vec()),
            Request::Set { key, value } => {
                if self.admit(conn, "SET", &key, value.len(), now) {
                    self.mark(conn, &key);
                    self.store(key, value.into());
                }
            }
            Request::Append { key, value } => self.append(conn, key, value, now),
            Request::MultiSet { pairs } => {
                for (key, value) in pairs {
                    // Pairs before a refused one stay stored (as a pipeline of SETs would).
                    if !self.admit(conn, "MULTI_SET", &key, value.len(), now) {
                        return;
                    }
                    self.mark(conn, &key);
                    self.store(key, value.into());
                }
            }
            Request::CompareSet {
                key,
                expected,
                desired,
            } => self.compare_set(conn, key, expected, desired, now),
            Request::Get { key } => {
                self.touch(conn, &key);
                let mut out = Vec::with_capacity(2);
                self.put_value(&mut out, &key);
                self.send_chunks(conn, out, 8);
            }
            Request::MultiGet { keys } => {
                let mut out = Vec::with_capacity(2 * keys.len());
                for key in &keys {
                    self.touch(conn, key);
                    self.put_value(&mut out, key);
                }
                self.send_chunks(conn, out, 8 * keys.len());
            }
            Request::Add { key, delta } => {
                match semantics::add(self.kv.get(&key).map(Bytes::as_ref), delta) {
                    Ok(v) => {
                        let counter = semantics::encode_counter(v);
                        if !self.admit(conn, "ADD", &key, counter.len(), now) {
                            return;
                        }
                        self.mark(conn, &key);
                        self.store(key, counter.into());
                        self.send(conn, v.to_le_bytes().to_vec());
                    }
                    Err(error) => self.counter_error(conn, "ADD", &key, error, now),
                }
            }
            Request::Check { keys } => {
                keys.iter().for_each(|k| self.touch(conn, k));
                let ready = keys.iter().all(|k| self.present(k));
                self.send(conn, vec![if ready { READY } else { NOT_READY }]);
            }
            Request::Wait { keys } => {
                keys.iter().for_each(|k| self.touch(conn, k));
                self.wait(conn, keys, now);
            }
            Request::CancelWait => {
                self.waits.cancel(conn);
                self.send(conn, vec![WAIT_CANCELED]);
            }
            Request::GetNumKeys => self.send(conn, (self.kv.len() as i64).to_le_bytes().to_vec()),
            Request::DeleteKey { key } => {
                self.touch(conn, &key);
                let n = i64::from(self.kv_remove(&key).is_some());
                self.send(conn, n.to_le_bytes().to_vec());
            }
            Request::ListKeys => self.list_keys(conn, now),
            Request::QueuePush { key, value } => self.queue_push(conn, key, value, now),
            Request::QueuePop { key } => self.queue_pop(conn, key),
            Request::QueueLen { key } => {
                self.touch(conn, &key);
                let len = self.queues.get(&key).map_or(0, VecDeque::len) as i64;
                self.send(conn, len.to_le_bytes().to_vec());
            }
            Request::Barrier { key, world_size } => self.barrier(conn, key, world_size, now),
        }
    }

    /// COMPARE_SET; an empty `expected` on a torchelastic state key nobody holds starts a new
    /// run (see the module docs).
    fn compare_set(
        &mut self,
        conn: ConnId,
        key: Vec<u8>,
        expected: Vec<u8>,
        desired: Vec<u8>,
        now: Instant,
    ) {
        if expected.is_empty() && is_torchelastic_state_key(&key) && self.kv.contains_key(&key) {
            let ns = namespace_of(&key);
            if self.namespaces.abandoned(ns) {
                let ns = ns.to_vec();
                self.namespaces.forget_idle(&ns);
                self.purge(&BTreeSet::from([ns]), PurgeReason::NewTorchelasticRun);
            }
        }
        self.touch(conn, &key);
        // `semantics::compare_set`'s rules, with the stored value shared rather than copied.
        let desired = Bytes::from(desired);
        let (store, reply) = match self.kv.get(&key) {
            None if expected.is_empty() => (true, desired.clone()),
            None => (false, Bytes::from(expected)),
            Some(cur) if cur[..] == expected[..] => (true, desired.clone()),
            Some(cur) => (false, cur.clone()),
        };
        // The reply's own bytes: its head, and `expected` when that is what it echoes.
        let owned = 8 + if store || self.kv.contains_key(&key) {
            0
        } else {
            reply.len()
        };
        if store {
            if !self.admit(conn, "COMPARE_SET", &key, desired.len(), now) {
                return;
            }
            self.mark(conn, &key);
            self.store(key, desired);
        }
        let head = Bytes::copy_from_slice(&(reply.len() as u64).to_le_bytes());
        self.send_chunks(conn, vec![head, reply], owned);
    }

    /// WAIT: `00` at once if every key is present, else when the last missing one is written.
    fn wait(&mut self, conn: ConnId, mut keys: Vec<Vec<u8>>, now: Instant) {
        keys.sort_unstable();
        keys.dedup();
        keys.retain(|k| !self.present(k));
        if keys.is_empty() {
            self.send(conn, vec![STOP_WAITING]);
            return;
        }
        if !self.admit_wait(conn, "WAIT", &keys, now) {
            return;
        }
        for key in keys {
            self.waits.add(conn, key);
        }
    }

    /// Whether waiting for `keys` stays within the server-wide bound on waiting keys and the
    /// store quota; if not, closes `conn`.
    fn admit_wait(
        &mut self,
        conn: ConnId,
        op: &'static str,
        keys: &[Vec<u8>],
        now: Instant,
    ) -> bool {
        if let Err(over) = self.waits.check(keys) {
            let reason = CloseReason::TooManyWaits {
                op,
                keys: keys.len(),
                bytes: over.bytes,
                limit: super::waits::MAX_WAITING_BYTES,
            };
            self.close(conn, reason, now);
            return false;
        }
        let adding: u64 = keys.iter().map(|k| super::waits::cost(k)).sum();
        let Some(first) = keys.first() else {
            return true;
        };
        if let Err(over) = self.usage.check(first, adding, None, self.store_quota()) {
            let first = first.clone();
            self.over_quota(conn, op, &first, over, now);
            return false;
        }
        true
    }

    /// LIST_KEYS: refused (the connection closed, naming the sizes) when its answer would not
    /// fit in what the store quota leaves, so that no answer bigger than the door's budget is
    /// ever built for a client that may never read it.
    fn list_keys(&mut self, conn: ConnId, now: Instant) {
        let size = 8 + self.kv.keys().map(|k| 8 + k.len() as u64).sum::<u64>();
        if let Some(quota) = self.store_quota() {
            let room = quota.saturating_sub(self.usage.total());
            if size > room {
                let (scope, limit) = self.binding_budget();
                let reason = CloseReason::AnswerOverBudget {
                    op: "LIST_KEYS",
                    bytes: size,
                    room,
                    budget: if scope == "store" {
                        "the store quota (the door's memory budget)"
                    } else {
                        "the server's memory budget (--max-memory-bytes)"
                    },
                    limit: limit.unwrap_or(quota),
                };
                return self.close(conn, reason, now);
            }
        }
        let mut out = Vec::with_capacity(size as usize);
        out.extend_from_slice(&(self.kv.len() as i64).to_le_bytes());
        self.kv.keys().for_each(|k| put_bytes(&mut out, k));
        self.send(conn, out);
    }

    /// BARRIER: counts the arrival; the last of `world_size` releases everyone.
    fn barrier(&mut self, conn: ConnId, key: Vec<u8>, world_size: i64, now: Instant) {
        let count = match self.kv.get(&key) {
            None => Ok(1),
            Some(v) => semantics::stoll(v).and_then(|n| {
                n.checked_add(1)
                    .ok_or_else(|| CounterError::Overflow(n.to_string(), 1))
            }),
        };
        let count = match count {
            Ok(n) => n,
            Err(error) => return self.counter_error(conn, "BARRIER", &key, error, now),
        };
        let counter = semantics::encode_counter(count);
        let waits = count < world_size;
        if waits && !self.admit_wait(conn, "BARRIER", std::slice::from_ref(&key), now) {
            return;
        }
        if !self.admit(conn, "BARRIER", &key, counter.len(), now) {
            return;
        }
        self.mark(conn, &key);
        self.kv_insert(key.clone(), counter.into());
        if waits {
            self.waits.add(conn, key);
        } else {
            self.wake_all(&key);
            self.send(conn, vec![STOP_WAITING]);
        }
    }

    /// QUEUE_PUSH: appends to the queue and releases its first waiter.
    fn queue_push(&mut self, conn: ConnId, key: Vec<u8>, value: Vec<u8>, now: Instant) {
        let grow = usage::cost(&key, value.len());
        if let Err(over) = self.check_grow(conn, &key, grow) {
            return self.over_quota(conn, "QUEUE_PUSH", &key, over, now);
        }
        self.usage.add(&key, grow);
        self.mark(conn, &key);
        self.queues
            .entry(key.clone())
            .or_default()
            .push_back(value.into());
        self.wake_one(&key);
    }

    /// QUEUE_POP: the queue's length before the pop, then its head if it had one.
    fn queue_pop(&mut self, conn: ConnId, key: Vec<u8>) {
        self.touch(conn, &key);
        let q = self.queues.get_mut(&key);
        let len = q.as_ref().map_or(0, |q| q.len());
        let mut head = (len as i64).to_le_bytes().to_vec();
        let mut out = Vec::with_capacity(2);
        if let Some(q) = q {
            if let Some(v) = q.pop_front() {
                head.extend_from_slice(&(v.len() as u64).to_le_bytes());
                self.usage.sub(&key, usage::cost(&key, v.len()));
                out.push(v);
            }
            if q.is_empty() {
                self.queues.remove(&key);
            }
        }
        // A popped value left the store: the reply owns it now.
        let owned = head.len() + out.iter().map(Bytes::len).sum::<usize>();
        out.insert(0, Bytes::from(head));
        self.send_chunks(conn, out, owned);
    }

    fn counter_error(
        &mut self,
        conn: ConnId,
        op: &'static str,
        key: &[u8],
        error: CounterError,
        now: Instant,
    ) {
        let key = String::from_utf8_lossy(key).into_owned();
        self.close(conn, CloseReason::Counter { op, key, error }, now);
    }
}
