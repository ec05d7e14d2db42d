//! The etcd v2 store without a server: history, expiry, watches, run namespaces. (Its answers
//! are compared with real etcd 3.4's in `tests/interop/test_etcd_v2.py`.)

use std::time::{Duration, Instant};

use dt_rdzv_proto::etcd_v2::namespace::{RunNamespace, RunTracker, run_namespace, run_start};
use dt_rdzv_proto::etcd_v2::request::{
    self, DeleteOpts, GetOpts, Method, Params, PutOpts, V2Request,
};
use dt_rdzv_proto::etcd_v2::{
    Action, Answer, Delivery, ErrorCode, Event, HISTORY, HISTORY_BYTES, Input, Limits,
    MAX_TTL_SECS, Output, PurgeReason, StoreConfig, V2Error, V2Store, WallClock,
};

/// A store fed through `handle` on a virtual clock: times are milliseconds after `t0`, which
/// is Unix time 0. Requests come on connection 1; the events of finished watches are kept for
/// [`S::take_deliveries`].
struct S {
    s: V2Store,
    t0: Instant,
    delivered: Vec<Delivery>,
}

impl S {
    fn new(limits: Limits) -> Self {
        let t0 = Instant::now();
        let config = StoreConfig {
            limits,
            idle_ttl: None,
        };
        Self {
            s: V2Store::new(config, WallClock::new(t0, 0)),
            t0,
            delivered: Vec::new(),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    /// Takes every output: keeps the deliveries, returns the answer if there was one.
    fn drain(&mut self) -> Option<Result<Answer, V2Error>> {
        let mut answer = None;
        while let Some(o) = self.s.poll_output() {
            match o {
                Output::Answer { conn: 1, answer: a } => answer = Some(a),
                Output::Watched(d) => self.delivered.push(d),
                other => panic!("unexpected {other:?}"),
            }
        }
        answer
    }

    fn ask(&mut self, key: &str, request: V2Request, ms: u64) -> Result<Answer, V2Error> {
        let input = Input::Request {
            conn: 1,
            key: key.into(),
            request,
        };
        self.s.handle(self.at(ms), input);
        self.drain().expect("an answer")
    }

    fn event(answer: Result<Answer, V2Error>) -> Result<Event, V2Error> {
        match answer? {
            Answer::Now(e) => Ok(e),
            other => panic!("not an event: {other:?}"),
        }
    }

    fn put(&mut self, key: &str, opts: &PutOpts, ms: u64) -> Result<Event, V2Error> {
        Self::event(self.ask(key, V2Request::Put(opts.clone()), ms))
    }

    fn post(&mut self, key: &str, opts: &PutOpts, ms: u64) -> Result<Event, V2Error> {
        Self::event(self.ask(key, V2Request::Post(opts.clone()), ms))
    }

    fn delete(&mut self, key: &str, opts: &DeleteOpts, ms: u64) -> Result<Event, V2Error> {
        Self::event(self.ask(key, V2Request::Delete(opts.clone()), ms))
    }

    fn get(&mut self, key: &str, recursive: bool, ms: u64) -> Result<Event, V2Error> {
        let opts = GetOpts {
            recursive,
            ..Default::default()
        };
        Self::event(self.ask(key, V2Request::Get(opts), ms))
    }

    fn watch(
        &mut self,
        key: &str,
        recursive: bool,
        wait_index: Option<u64>,
        ms: u64,
    ) -> Result<Answer, V2Error> {
        let opts = GetOpts {
            recursive,
            wait: true,
            wait_index,
        };
        self.ask(key, V2Request::Get(opts), ms)
    }

    /// Runs the deadlines due at `ms`.
    fn expire(&mut self, ms: u64) {
        self.s.handle_timeout(self.at(ms));
        assert!(self.drain().is_none());
    }

    fn take_deliveries(&mut self) -> Vec<Delivery> {
        std::mem::take(&mut self.delivered)
    }

    /// The next deadline, in milliseconds after `t0`.
    fn next_expiry(&self) -> Option<u64> {
        let t = self.s.poll_timeout()?;
        Some(t.duration_since(self.t0).as_millis() as u64)
    }

    fn exists(&self, key: &str) -> bool {
        self.s.exists(key)
    }

    fn index(&self) -> u64 {
        self.s.index()
    }

    fn bytes(&self) -> u64 {
        self.s.bytes()
    }

    fn history_bytes(&self) -> u64 {
        self.s.history_bytes()
    }
}

fn put(value: &str) -> PutOpts {
    PutOpts {
        value: Some(value.into()),
        ..Default::default()
    }
}

fn ttl(value: &str, secs: u64) -> PutOpts {
    PutOpts {
        ttl: Some(secs),
        ..put(value)
    }
}

#[test]
fn a_wait_index_older_than_the_history_is_refused_as_etcd_does() {
    let mut s = S::new(Limits::default());
    for i in 0..HISTORY + 10 {
        s.put("/spin", &put(&i.to_string()), 0).unwrap();
    }
    let e = s.watch("/spin", false, Some(3), 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::EventIndexCleared);
    assert_eq!(e.cause, "the requested history has been cleared [11/3]");
    assert_eq!(e.index, (HISTORY + 10) as u64);
    match s.watch("/spin", false, Some(11), 0).unwrap() {
        Answer::Watched(e) => assert_eq!(e.node.value.as_deref(), Some("10")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ttls_expire_with_an_event_for_watches_of_the_key_and_of_its_parents() {
    let mut s = S::new(Limits::default());
    s.put("/run/lease", &ttl("x", 2), 1_000).unwrap();
    let Answer::Pending { watch: key, .. } = s.watch("/run/lease", false, None, 1_000).unwrap()
    else {
        panic!()
    };
    let Answer::Pending { watch: dir, .. } = s.watch("/run", true, None, 1_000).unwrap() else {
        panic!()
    };
    assert_eq!(s.next_expiry(), Some(3_000));
    s.expire(2_999);
    assert!(s.take_deliveries().is_empty());
    assert_eq!(s.get("/run/lease", false, 2_999).unwrap().node.ttl, Some(1));
    s.expire(3_000);
    let got = s.take_deliveries();
    assert_eq!(got.len(), 2);
    assert!(got.iter().any(|d| d.watch == key) && got.iter().any(|d| d.watch == dir));
    assert!(got.iter().all(|d| d.event.action == Action::Expire));
    assert_eq!(
        s.get("/run/lease", false, 3_000).unwrap_err().code,
        ErrorCode::KeyNotFound
    );
    assert_eq!(s.next_expiry(), None);
}

#[test]
fn a_refresh_resets_the_ttl_and_tells_no_watch() {
    let mut s = S::new(Limits::default());
    s.put("/k", &ttl("v", 10), 0).unwrap();
    let Answer::Pending { .. } = s.watch("/k", false, None, 0).unwrap() else {
        panic!()
    };
    let refresh = PutOpts {
        ttl: Some(10),
        refresh: true,
        prev_exist: Some(true),
        ..Default::default()
    };
    let e = s.put("/k", &refresh, 9_000).unwrap();
    assert_eq!(
        (e.action, e.node.value.as_deref()),
        (Action::Update, Some("v"))
    );
    assert!(s.take_deliveries().is_empty(), "refresh is silent");
    s.expire(12_000);
    assert!(s.exists("/k"), "the refreshed TTL runs from 9 s");
    s.expire(19_000);
    assert!(!s.exists("/k"));
}

#[test]
fn deleting_a_directory_finishes_watches_inside_it_and_hidden_keys_stay_hidden() {
    let mut s = S::new(Limits::default());
    s.put("/d/a", &put("1"), 0).unwrap();
    s.put("/d/_h", &put("h"), 0).unwrap();
    let Answer::Pending { watch: inner, .. } = s.watch("/d/a", false, None, 0).unwrap() else {
        panic!()
    };
    let Answer::Pending { watch: parent, .. } = s.watch("/d", true, None, 0).unwrap() else {
        panic!()
    };
    s.put("/d/_h", &put("h2"), 0).unwrap();
    assert!(
        s.take_deliveries().is_empty(),
        "hidden keys are not shown to recursive watches"
    );
    let listed = s.get("/d", false, 0).unwrap().node.nodes.unwrap();
    assert_eq!(listed.len(), 1, "hidden keys are not listed");
    let del = DeleteOpts {
        recursive: true,
        ..Default::default()
    };
    s.delete("/d", &del, 0).unwrap();
    let got: Vec<_> = s.take_deliveries().into_iter().map(|d| d.watch).collect();
    assert!(got.contains(&inner) && got.contains(&parent), "{got:?}");
    assert_eq!(s.bytes(), 0);
}

#[test]
fn limits_refuse_and_store_nothing() {
    let mut s = S::new(Limits {
        max_bytes: 100,
        ..Limits::default()
    });
    let e = s.put("/big", &put(&"x".repeat(200)), 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::RaftInternal);
    assert!(!s.exists("/big"));
    let e = s.put("/big", &put(&"x".repeat(3 << 20)), 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField);
    assert_eq!(s.index(), 0, "nothing applied");
}

#[test]
fn parameters_are_checked_like_etcd() {
    let p = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    };
    let e = request::parse(Method::Put, &Params(&p(&[("ttl", "x")]))).unwrap_err();
    assert_eq!(e.code, ErrorCode::TtlNaN);
    let e = request::parse(Method::Get, &Params(&p(&[("waitIndex", "-1")]))).unwrap_err();
    assert_eq!(e.code, ErrorCode::IndexNaN);
    let e = request::parse(Method::Put, &Params(&p(&[("prevValue", "")]))).unwrap_err();
    assert_eq!(e.code, ErrorCode::PrevValueRequired);
    // Body fields come first and win; unknown ones are ignored.
    let r = request::parse(
        Method::Put,
        &Params(&p(&[("value", "body"), ("x", "1"), ("value", "q")])),
    );
    assert_eq!(r.unwrap(), V2Request::Put(put("body")));
}

#[test]
fn run_namespaces_follow_torchs_two_layouts() {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    assert_eq!(
        run_namespace("/torch/elastic/rendezvous/job.1"),
        Some(RunNamespace::Dynamic("job.1".into()))
    );
    let store_key = format!(
        "/torch/elastic/store/{}",
        b64("torch.rendezvous.job.1.0/MASTER_ADDR")
    );
    assert_eq!(
        run_namespace(&store_key),
        Some(RunNamespace::Dynamic("job.1".into()))
    );
    assert_eq!(
        run_namespace("/torchelastic/p2p/run_abc/rdzv/active_version"),
        Some(RunNamespace::Legacy("/torchelastic/p2p/run_abc".into()))
    );
    assert_eq!(run_namespace("/config/x"), None);
    // Keys outside torch's layouts are no run's, whatever their names.
    assert_eq!(run_namespace("/apps/run_2024/db/password"), None);
    assert_eq!(run_namespace("/apps/run_2024"), None);
    assert_eq!(run_namespace("/torchelastic/p2p/run_/rdzv"), None);
    assert_eq!(
        run_namespace("/my/prefix/run_job/rdzv/v_1/kv/x"),
        Some(RunNamespace::Legacy("/my/prefix/run_job".into()))
    );
    let read = V2Request::Get(Default::default());
    assert!(run_start("/torch/elastic/rendezvous/job.1", &read).is_some());
    let mkdir = V2Request::Put(PutOpts {
        dir: true,
        prev_exist: Some(false),
        ..Default::default()
    });
    assert!(run_start("/torchelastic/p2p/run_abc", &mkdir).is_some());
    assert!(run_start("/torchelastic/p2p/run_abc/rdzv", &mkdir).is_none());
    assert!(run_start("/apps/run_2024", &mkdir).is_none());

    // The dead run's keys are the state key and its own store keys, not another run's.
    let mut s = S::new(Limits::default());
    s.put("/torch/elastic/rendezvous/job.1", &put("state"), 0)
        .unwrap();
    s.put(&store_key, &put("v"), 0).unwrap();
    let other = format!("/torch/elastic/store/{}", b64("torch.rendezvous.job.2.0/k"));
    s.put(&other, &put("v"), 0).unwrap();
    let ns = RunNamespace::Dynamic("job.1".into());
    let roots = ns.roots(|dir| s.s.children(dir));
    assert_eq!(roots.len(), 2, "{roots:?}");
    assert_eq!(s.s.purge_run(&ns), 2);
    assert!(s.exists(&other));

    let mut t = RunTracker::default();
    assert!(t.abandoned(&ns, 1));
    t.touch(1, ns.clone());
    assert!(!t.abandoned(&ns, 2), "connection 1 is open");
    assert!(!t.abandoned(&ns, 1), "connection 1 itself touched it");
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    t.disconnect(1, ms(5_000));
    assert!(t.abandoned(&ns, 2));
    let ttl = Duration::from_secs(10);
    assert_eq!(t.idle(ms(6_000), ttl), vec![]);
    assert_eq!(t.next_idle(ttl), Some(ms(15_000)));
    assert_eq!(t.idle(ms(15_000), ttl), vec![ns]);
}

mod random_ops {
    //! Random sequences of every operation, against invariants: the index never goes back,
    //! every success moves it by one (a read by none), byte accounting equals a recount of what
    //! a recursive read shows, nothing expired is ever read, and no operation panics.

    use super::*;
    use dt_rdzv_proto::etcd_v2::NodeView;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Put(usize, u8, Option<u64>, u8),
        Post(usize, u8),
        Delete(usize, u8),
        Get(usize),
        Watch(usize, bool),
        Advance(u64),
    }

    const KEYS: [&str; 8] = [
        "/a", "/a/b", "/a/c", "/a/b/d", "/x", "/x/_h", "/q", "/a/b/e",
    ];

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (
                0..KEYS.len(),
                any::<u8>(),
                proptest::option::of(0u64..4),
                0u8..6
            )
                .prop_map(|(k, v, t, m)| Op::Put(k, v, t, m)),
            (0..KEYS.len(), any::<u8>()).prop_map(|(k, v)| Op::Post(k, v)),
            (0..KEYS.len(), 0u8..4).prop_map(|(k, m)| Op::Delete(k, m)),
            (0..KEYS.len()).prop_map(Op::Get),
            (0..KEYS.len(), any::<bool>()).prop_map(|(k, r)| Op::Watch(k, r)),
            (0u64..3_000).prop_map(Op::Advance),
        ]
    }

    fn count(n: &NodeView) -> u64 {
        let name = n
            .key
            .as_deref()
            .and_then(|k| k.rsplit('/').next())
            .unwrap_or("");
        name.len() as u64
            + n.value.as_deref().map_or(0, |v| v.len() as u64)
            + n.nodes.iter().flatten().map(count).sum::<u64>()
    }

    proptest! {
        #[test]
        fn invariants_hold(ops in proptest::collection::vec(op(), 1..120)) {
            let mut s = S::new(Limits::default());
            let mut now = 1_000u64;
            for op in ops {
                let before = s.index();
                let wrote = match op {
                    Op::Put(k, v, ttl, mode) => {
                        let mut o = PutOpts {
                            value: Some(format!("v{v}")),
                            ttl,
                            ..Default::default()
                        };
                        match mode {
                            1 => o.prev_exist = Some(false),
                            2 => o.prev_exist = Some(true),
                            3 => o.prev_value = Some(format!("v{}", v / 2)),
                            4 => { o.dir = true; o.value = None; }
                            5 => { o.refresh = true; o.value = None; o.ttl = Some(3); o.prev_exist = Some(true); }
                            _ => {}
                        }
                        s.put(KEYS[k], &o, now).is_ok()
                    }
                    Op::Post(k, v) => s.post(KEYS[k], &put(&format!("p{v}")), now).is_ok(),
                    Op::Delete(k, mode) => {
                        let o = DeleteOpts {
                            dir: mode & 1 == 1,
                            recursive: mode & 2 == 2,
                            ..Default::default()
                        };
                        s.delete(KEYS[k], &o, now).is_ok()
                    }
                    Op::Get(k) => { let _ = s.get(KEYS[k], true, now); false }
                    Op::Watch(k, r) => { let _ = s.watch(KEYS[k], r, Some(1), now); false }
                    Op::Advance(ms) => { now += ms; s.expire(now); false }
                };
                let _ = s.take_deliveries();
                prop_assert!(s.index() >= before);
                if wrote {
                    // One index for the write; expiries run first may add theirs.
                    prop_assert!(s.index() > before);
                }
                let root = s.get("/", true, now).unwrap();
                // The root's own name is empty; hidden keys are not listed, so they are
                // counted apart.
                let hidden: u64 = s.get("/x/_h", true, now).map_or(0, |e| count(&e.node));
                prop_assert_eq!(s.bytes(), count(&root.node) + hidden);
                for k in KEYS {
                    if let Ok(e) = s.get(k, false, now) {
                        prop_assert!(e.node.expiration_ms.is_none_or(|at| at > now), "{k} expired but read");
                    }
                }
            }
        }
    }
}

#[test]
fn a_key_deeper_than_the_limit_is_refused_and_the_deepest_allowed_reads_back() {
    let limits = Limits::default();
    let mut s = S::new(limits);
    let deep = format!("/z{}", "/a".repeat(2100));
    let e = s.put(&deep, &put("v"), 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField);
    assert!(e.cause.contains("levels"), "{}", e.cause);
    assert!(!s.exists("/z"), "nothing stored");
    let ok = format!("/z{}", "/a".repeat(limits.max_key_depth - 1));
    s.put(&ok, &put("v"), 0).unwrap();
    // The whole chain as a recursive view, in half the stack of a tokio worker (2 MiB).
    let got = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            let mut n = s.get("/z", true, 0).unwrap().node;
            let mut levels = 1;
            while let Some(mut c) = n.nodes.take() {
                n = c.remove(0);
                levels += 1;
            }
            levels
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(got, limits.max_key_depth);
}

#[test]
fn a_ttl_past_any_date_is_clamped() {
    let mut s = S::new(Limits::default());
    let e = s.put("/k", &ttl("v", 300_000_000_000), 1_000).unwrap();
    let at = e.node.expiration_ms.unwrap();
    assert_eq!(at, 1_000 + MAX_TTL_SECS * 1000);
    let view = s.get("/", true, 2_000).unwrap();
    assert!(view.node.nodes.unwrap()[0].ttl.unwrap() > 0);
}

#[test]
fn the_history_holds_bounded_bytes() {
    let mut s = S::new(Limits::default());
    let big = "x".repeat(1_500_000);
    for _ in 0..200 {
        s.put("/k", &put(&big), 0).unwrap();
    }
    // Each event keeps its value and the previous one (3 MB); the store holds 1.5 MB.
    assert!(s.history_bytes() <= HISTORY_BYTES, "{}", s.history_bytes());
    assert!(s.history_bytes() >= HISTORY_BYTES / 2, "keeps what fits");
    assert_eq!(s.bytes(), 1_500_000 + 1);
    // An index older than the kept events is refused as etcd refuses one past 1000 events.
    let e = s.watch("/k", false, Some(2), 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::EventIndexCleared);
}

#[test]
fn a_recursive_read_past_the_answer_limit_is_refused_and_one_key_still_reads() {
    let mut s = S::new(Limits {
        max_answer_bytes: 10_000,
        ..Limits::default()
    });
    for i in 0..10 {
        s.put(&format!("/d/k{i}"), &put(&"x".repeat(1_500)), 0)
            .unwrap();
    }
    let e = s.get("/", true, 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField);
    assert!(e.cause.contains("limit is 10000"), "{}", e.cause);
    assert_eq!(
        s.get("/d/k3", false, 0).unwrap().node.value.unwrap().len(),
        1_500
    );
    // One level of the directory lists the keys with their values, as etcd does: the same
    // bound holds.
    assert!(s.get("/d", false, 0).is_err());
    s.put("/small/a", &put("1"), 0).unwrap();
    assert!(s.get("/small", false, 0).is_ok());
}

#[test]
fn a_rerun_purges_the_abandoned_run_and_an_idle_run_goes_after_the_ttl() {
    let t0 = Instant::now();
    let ttl = Duration::from_secs(60);
    let config = StoreConfig {
        limits: Limits::default(),
        idle_ttl: Some(ttl),
    };
    let mut s = V2Store::new(config, WallClock::new(t0, 0));
    let state = "/torch/elastic/rendezvous/job.1";
    let run = RunNamespace::Dynamic("job.1".into());
    let read = || V2Request::Get(GetOpts::default());
    let ask = |s: &mut V2Store, at: Instant, conn: u64, request: V2Request| {
        let key = state.to_owned();
        s.handle(at, Input::Request { conn, key, request });
        std::iter::from_fn(|| s.poll_output()).collect::<Vec<_>>()
    };
    let answer = |outputs: &[Output]| match outputs.last() {
        Some(Output::Answer { answer, .. }) => answer.clone(),
        other => panic!("{other:?}"),
    };
    // The first run starts (nothing to purge) and writes its state.
    let out = ask(&mut s, t0, 1, read());
    assert_eq!(answer(&out).unwrap_err().code, ErrorCode::KeyNotFound);
    ask(&mut s, t0, 1, V2Request::Put(put("v1")));
    // Another agent of the same run reads it while the first is connected.
    let out = ask(&mut s, t0, 2, read());
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(matches!(answer(&out), Ok(Answer::Now(e)) if e.node.value.as_deref() == Some("v1")));
    // Both leave; the run is idle from then.
    s.handle(t0, Input::Closed { conn: 1 });
    s.handle(t0, Input::Closed { conn: 2 });
    assert_eq!(s.poll_timeout(), Some(t0 + ttl));
    // A rerun's first read finds no client of the earlier run: its keys go first.
    let t1 = t0 + Duration::from_secs(1);
    let out = ask(&mut s, t1, 3, read());
    assert_eq!(
        out[0],
        Output::Purged {
            run: run.clone(),
            files: 1,
            reason: PurgeReason::Rerun
        }
    );
    assert_eq!(answer(&out).unwrap_err().code, ErrorCode::KeyNotFound);
    // The rerun writes, leaves, and is purged once idle for the TTL.
    ask(&mut s, t1, 3, V2Request::Put(put("v2")));
    s.handle(t1, Input::Closed { conn: 3 });
    assert_eq!(s.poll_timeout(), Some(t1 + ttl));
    s.handle_timeout(t1 + ttl - Duration::from_millis(1));
    assert_eq!(s.poll_output(), None);
    assert!(s.exists(state));
    s.handle_timeout(t1 + ttl);
    assert_eq!(
        s.poll_output(),
        Some(Output::Purged {
            run,
            files: 1,
            reason: PurgeReason::Idle
        })
    );
    assert!(!s.exists(state));
    assert_eq!(s.poll_timeout(), None);
}
