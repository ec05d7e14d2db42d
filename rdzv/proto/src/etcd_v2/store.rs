//! [`V2Store`]: etcd's v2 key tree with its global index, TTLs, event history and watches,
//! behaving as etcd 3.4's `v2store` does for every request the v2 keys API maps onto it, and
//! the run namespaces that keep a rerun from reading a dead run's keys.
//!
//! Sans IO, in the shape of every core of this crate ([`crate::sans_io::Core`]): the driver
//! feeds [`V2Store::handle`] the time and an [`Input`] (a parsed request, a watch whose client
//! went away, a closed connection), then takes the [`Output`]s it caused from
//! [`V2Store::poll_output`], in order: the request's answer, the events of the pending watches
//! it finished, the runs it purged. [`V2Store::poll_timeout`] says when
//! [`V2Store::handle_timeout`] is due (a TTL runs out, a run has been idle for the TTL).
//!
//! This file holds the store's state, its inputs and outputs and the run namespaces; the key
//! tree's rules are by concept:
//!
//! * `tree`: finding nodes, the size limits and the byte quota;
//! * `reads`: reads and watches;
//! * `writes`: set, create, update, compare-and-swap, in-order keys, delete;
//! * `expiry`: TTLs running out, and purges.
//!
//! Below [`V2Store::handle`] those rules take the time as Unix milliseconds, dated from each
//! input's `now` by the store's [`WallClock`]: etcd shows expiry as a date.

use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

use super::clock::WallClock;
use super::config::StoreConfig;
use super::error::V2Error;
use super::input::Input;
use super::key::clean_key;
use super::namespace::{RunNamespace, RunTracker, run_namespace, run_start};
use super::node::{Kind, Node};
use super::output::{Answer, Output, PurgeReason};
use super::request::V2Request;
use super::watch::Watches;

mod expiry;
mod reads;
mod tree;
mod writes;

/// The v2 key tree and the runs in it. See the module docs.
#[derive(Debug)]
pub struct V2Store {
    config: StoreConfig,
    /// Dates every `now` (TTL deadlines are Unix milliseconds).
    clock: WallClock,
    root: Node,
    index: u64,
    watches: Watches,
    /// (expiry in Unix ms, key) of every node with a TTL.
    expiry: BTreeSet<(u64, String)>,
    bytes: u64,
    /// Which connections touched which run.
    runs: RunTracker,
    outputs: VecDeque<Output>,
    /// Bytes of answers the driver is still sending, over every connection
    /// ([`V2Store::set_answers_in_flight`]).
    answers_in_flight: u64,
    /// The size of the last read's answer ([`V2Store::take_answer_bytes`]).
    answer_bytes: u64,
    /// The server's memory budget over every door and what its other doors hold
    /// ([`V2Store::set_server_budget`]).
    server: Option<(u64, u64)>,
}

impl V2Store {
    /// An empty store at index 0, dating time by `clock`.
    pub fn new(config: StoreConfig, clock: WallClock) -> Self {
        Self {
            config,
            clock,
            root: Node::dir(0, None),
            index: 0,
            watches: Watches::default(),
            expiry: BTreeSet::new(),
            bytes: 0,
            runs: RunTracker::default(),
            outputs: VecDeque::new(),
            answers_in_flight: 0,
            server: None,
            answer_bytes: 0,
        }
    }

    /// Feeds one input that arrived at `now`.
    pub fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Request { conn, key, request } => {
                // A run's first request, where no client of the earlier run is left: the
                // earlier run's keys go first.
                if let Some(ns) = run_start(&key, &request)
                    && self.runs.abandoned(&ns, conn)
                {
                    self.purge_run_as(&ns, PurgeReason::Rerun);
                }
                let answer = self.apply(&key, &request, self.clock.unix_ms_at(now));
                // A run is marked live by a request that finds or leaves a key: a read of a
                // missing key leaves no trace. The bookkeeping counts against the byte
                // budget; with no room for it the request is answered all the same and
                // leaves no trace either (liveness protects keys; it is not data).
                if let Some(ns) = run_namespace(&key)
                    && (answer.is_ok() || self.exists(&key))
                    && self.check_quota(self.runs.touch_cost(conn, &ns)).is_ok()
                {
                    self.runs.touch(conn, ns);
                }
                self.deliver();
                self.outputs.push_back(Output::Answer { conn, answer });
            }
            Input::Cancel { watch } => {
                self.watches.cancel(watch);
            }
            Input::Closed { conn } => self.runs.disconnect(conn, now),
        }
    }

    /// The next thing the driver must do.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When [`V2Store::handle_timeout`] should next run: the earliest TTL deadline, or the
    /// first idle run's purge.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let ttl = self
            .expiry
            .first()
            .and_then(|(at, _)| self.clock.instant_at(*at));
        let idle = self.config.idle_ttl.and_then(|t| self.runs.next_idle(t));
        ttl.into_iter().chain(idle).min()
    }

    /// Removes every node whose TTL ran out by `now` (an `expire` event each), then purges
    /// the runs no open connection touched for the idle TTL.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.expire(self.clock.unix_ms_at(now));
        self.deliver();
        if let Some(ttl) = self.config.idle_ttl {
            for ns in self.runs.idle(now, ttl) {
                self.purge_run_as(&ns, PurgeReason::Idle);
                self.runs.forget(&ns);
            }
        }
    }

    /// Forgets a run's keys now, without an event; returns how many files went.
    pub fn purge_run(&mut self, run: &RunNamespace) -> usize {
        self.purge_run_as(run, PurgeReason::Explicit)
    }

    /// The current index (`X-Etcd-Index`).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Bytes of keys and values held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Every byte held for clients against the byte budget ([`super::Limits::max_bytes`]):
    /// keys and values, the run bookkeeping, and the answers being sent.
    pub fn held_bytes(&self) -> u64 {
        self.bytes + self.runs.bytes() + self.answers_in_flight
    }

    /// The server's memory budget over every door (`None`: none) and what its other doors
    /// hold now: a write or a read's answer must fit in what that leaves too, and a refusal it
    /// causes names the server's budget.
    pub fn set_server_budget(&mut self, limit: Option<u64>, elsewhere: u64) {
        self.server = limit.map(|l| (l, elsewhere));
    }

    /// The driver is still sending `bytes` of answers, over every connection: a read whose
    /// answer would pass the server-wide answer bound ([`super::Limits::max_answer_bytes`])
    /// or the byte budget beside them is refused.
    pub fn set_answers_in_flight(&mut self, bytes: u64) {
        self.answers_in_flight = bytes;
    }

    /// The size (keys and values) of the answer of the last request, if it was a read, for
    /// the driver to count as in flight until sent; 0 after.
    pub fn take_answer_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.answer_bytes)
    }

    /// Runs tracked (tests and status: what requests left behind).
    pub fn tracked_runs(&self) -> usize {
        self.runs.len()
    }

    /// Bytes the event history holds (bounded by [`super::watch::HISTORY_BYTES`]).
    pub fn history_bytes(&self) -> u64 {
        self.watches.history_bytes()
    }

    /// Watches waiting.
    pub fn pending_watches(&self) -> usize {
        self.watches.pending()
    }

    /// The names directly under directory `key` (empty if it is missing or a file).
    pub fn children(&self, key: &str) -> Vec<String> {
        match self.lookup(&clean_key(key)) {
            Ok(Some(Node {
                kind: Kind::Dir(c), ..
            })) => c.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Whether `key` exists.
    pub fn exists(&self, key: &str) -> bool {
        matches!(self.lookup(&clean_key(key)), Ok(Some(_)))
    }

    /// Runs one request at `now` (Unix ms).
    fn apply(&mut self, key: &str, request: &V2Request, now: u64) -> Result<Answer, V2Error> {
        Ok(match request {
            V2Request::Get(g) if g.wait => self.watch(key, g.recursive, g.wait_index, now)?,
            V2Request::Get(g) => Answer::Now(self.get(key, g.recursive, now)?),
            V2Request::Put(p) => Answer::Now(self.put(key, p, now)?),
            V2Request::Post(p) => Answer::Now(self.post(key, p, now)?),
            V2Request::Delete(d) => Answer::Now(self.delete(key, d, now)?),
        })
    }

    /// Removes a run's keys; tells the driver when there were any.
    fn purge_run_as(&mut self, run: &RunNamespace, reason: PurgeReason) -> usize {
        let roots = run.roots(|dir| self.children(dir));
        let files: usize = roots.iter().map(|k| self.purge(k)).sum();
        if files > 0 {
            self.outputs.push_back(Output::Purged {
                run: run.clone(),
                files,
                reason,
            });
        }
        files
    }

    /// Hands the events of the watches finished since the last call to the driver.
    fn deliver(&mut self) {
        let done = self.watches.take();
        self.outputs.extend(done.into_iter().map(Output::Watched));
    }
}

impl crate::sans_io::Core for V2Store {
    type Input = Input;
    type Output = Output;

    fn handle(&mut self, now: Instant, input: Input) {
        V2Store::handle(self, now, input);
    }

    fn poll_output(&mut self) -> Option<Output> {
        V2Store::poll_output(self)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        V2Store::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Instant) {
        V2Store::handle_timeout(self, now);
    }
}
