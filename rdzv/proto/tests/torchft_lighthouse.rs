//! The [`Lighthouse`] core on a virtual clock: torchft's end-to-end Lighthouse tests
//! (`test_lighthouse_e2e`, `test_lighthouse_join_during_shrink`,
//! `test_lighthouse_commit_failures`, the Python `test_heartbeat_round_trip`) as behaviour
//! specs, and what dt-rdzv adds: several jobs, ids never reused, bounded memory, departures.

use std::time::{Duration, Instant};

use bytes::Bytes;
use dt_rdzv_proto::sans_io::Core;
use dt_rdzv_proto::torchft::{
    CallId, Input, LeaveReason, Lighthouse, LighthouseConfig, Limits, Member, Output, Quorum,
    Refusal,
};

struct Sim {
    lh: Lighthouse,
    now: Instant,
    next_call: CallId,
}

fn member(id: &str, step: i64) -> Member {
    Member {
        replica_id: id.into(),
        address: format!("addr-{id}"),
        store_address: format!("store-{id}"),
        step,
        world_size: 1,
        wire: Bytes::from(format!("wire-{id}")),
        ..Member::default()
    }
}

impl Sim {
    fn new(config: LighthouseConfig) -> Self {
        Self {
            lh: Lighthouse::new(config),
            now: Instant::now(),
            next_call: 0,
        }
    }

    fn outputs(&mut self) -> Vec<Output> {
        std::iter::from_fn(|| self.lh.poll_output()).collect()
    }

    /// Starts a quorum call; its id.
    fn ask(&mut self, job: &str, m: Member) -> CallId {
        self.next_call += 1;
        let call = self.next_call;
        self.lh.handle(
            self.now,
            Input::Quorum {
                call,
                job: job.into(),
                member: m,
            },
        );
        call
    }

    fn beat(&mut self, job: &str, id: &str) -> Result<(), Refusal> {
        self.next_call += 1;
        let call = self.next_call;
        self.lh.handle(
            self.now,
            Input::Heartbeat {
                call,
                job: job.into(),
                replica_id: id.into(),
            },
        );
        let out = self.outputs();
        match out.as_slice() {
            [Output::Heartbeat { call: c, result }] if *c == call => result.clone(),
            other => panic!("{other:?}"),
        }
    }

    /// Moves the clock, running every deadline on the way.
    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while let Some(t) = self.lh.poll_timeout().filter(|&t| t <= end) {
            self.now = self.now.max(t);
            self.lh.handle_timeout(self.now);
        }
        self.now = end;
    }

    /// The answers among `outputs`, by call.
    fn answers(out: &[Output]) -> Vec<(CallId, Result<Quorum, Refusal>)> {
        out.iter()
            .filter_map(|o| match o {
                Output::Quorum { call, result } => Some((*call, result.clone())),
                _ => None,
            })
            .collect()
    }
}

fn ids(q: &Quorum) -> Vec<&str> {
    q.participants
        .iter()
        .map(|m| m.replica_id.as_str())
        .collect()
}

fn config(min_replicas: u64, join_timeout_ms: u64) -> LighthouseConfig {
    LighthouseConfig {
        min_replicas,
        join_timeout: Duration::from_millis(join_timeout_ms),
        quorum_tick: Duration::from_millis(10),
        heartbeat_timeout: Duration::from_millis(5000),
        ..LighthouseConfig::default()
    }
}

#[test]
fn lighthouse_e2e() {
    let mut s = Sim::new(config(1, 1));
    s.beat("", "foo").unwrap();
    let call = s.ask("", member("foo", 10));
    let out = s.outputs();
    let answers = Sim::answers(&out);
    assert_eq!(answers.len(), 1);
    let q = answers[0].1.clone().unwrap();
    assert_eq!(answers[0].0, call);
    assert_eq!(ids(&q), ["foo"]);
    assert_eq!(q.quorum_id, 1);
    assert_eq!(
        q.participants[0].wire,
        Bytes::from("wire-foo"),
        "sent back verbatim"
    );
    assert!(
        matches!(out[0], Output::Issued { changed: true, .. }),
        "logged before the answers, as a new quorum"
    );
    // The same member asks for its next step: the same quorum again, not a new one.
    let call = s.ask("", member("foo", 2));
    let out = s.outputs();
    assert!(
        matches!(out[0], Output::Issued { changed: false, .. }),
        "{out:?}"
    );
    assert_eq!(Sim::answers(&out)[0].0, call);
}

#[test]
fn lighthouse_join_during_shrink() {
    let mut s = Sim::new(config(2, 1000));
    // 1. First quorum.
    let a = s.ask("", member("replica0", 1));
    assert!(Sim::answers(&s.outputs()).is_empty(), "min_replicas 2");
    let b = s.ask("", member("replica1", 1));
    let got = Sim::answers(&s.outputs());
    assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), [a, b]);
    let q1 = got[0].1.clone().unwrap();
    assert_eq!(ids(&q1), ["replica0", "replica1"]);
    assert_eq!(q1.participants[1].step, 1);

    // 2. A joiner waits while the two ask shrink_only: the fast quorum leaves it out.
    s.advance(Duration::from_millis(5));
    let joiner = s.ask("", member("joiner", 1));
    s.advance(Duration::from_millis(5));
    let shrink = Member {
        shrink_only: true,
        ..member("replica0", 2)
    };
    s.ask("", shrink);
    s.advance(Duration::from_millis(5));
    s.ask("", member("replica1", 2));
    let got = Sim::answers(&s.outputs());
    assert_eq!(got.len(), 2, "{got:?}");
    let q2 = got[0].1.clone().unwrap();
    assert_eq!(ids(&q2), ["replica0", "replica1"]);
    assert_eq!(q2.participants[1].step, 2);
    assert_eq!(q2.quorum_id, q1.quorum_id, "same ids, same quorum id");
    assert!(got.iter().all(|(c, _)| *c != joiner));

    // 3. Without shrink_only the joiner (joined again when q2 passed it) comes in.
    s.advance(Duration::from_millis(5));
    s.ask("", member("replica0", 3));
    s.ask("", member("replica1", 3));
    let got = Sim::answers(&s.outputs());
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.iter().any(|(c, _)| *c == joiner));
    let q3 = got[0].1.clone().unwrap();
    assert_eq!(ids(&q3), ["joiner", "replica0", "replica1"]);
    assert_eq!(q3.participants[2].step, 3);
    assert_eq!(q3.quorum_id, q1.quorum_id + 1);
}

#[test]
fn lighthouse_commit_failures() {
    let mut s = Sim::new(config(2, 1000));
    let failing = |id: &str, n: i64| Member {
        commit_failures: n,
        ..member(id, 10)
    };
    for _ in 0..2 {
        s.ask("", failing("replica0", 0));
        s.ask("", failing("replica1", 0));
        let got = Sim::answers(&s.outputs());
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].1.as_ref().unwrap().quorum_id, 1);
        s.advance(Duration::from_millis(20));
    }
    s.ask("", failing("replica0", 0));
    s.ask("", failing("replica1", 2));
    let got = Sim::answers(&s.outputs());
    let q = got[1].1.clone().unwrap();
    assert_eq!(q.quorum_id, 2);
    assert_eq!(q.participants[0].commit_failures, 0);
    assert_eq!(q.participants[1].commit_failures, 2);
}

#[test]
fn join_timeout_on_the_tick() {
    let mut s = Sim::new(config(1, 400));
    s.beat("", "straggler").unwrap();
    let a = s.ask("", member("a", 1));
    s.ask("", member("b", 1));
    assert!(
        Sim::answers(&s.outputs()).is_empty(),
        "waits for the straggler"
    );
    s.advance(Duration::from_millis(390));
    assert!(Sim::answers(&s.outputs()).is_empty());
    s.advance(Duration::from_millis(20));
    let got = Sim::answers(&s.outputs());
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].0, a);
    assert_eq!(ids(got[0].1.as_ref().unwrap()), ["a", "b"]);
}

#[test]
fn heartbeat_round_trip() {
    // torchft's Python test_heartbeat_round_trip, at 200 ms.
    let mut s = Sim::new(LighthouseConfig {
        heartbeat_timeout: Duration::from_millis(200),
        ..config(1, 60_000)
    });
    s.beat("", "rep0").unwrap();
    s.advance(Duration::from_millis(150));
    s.ask("", member("rep0", 1));
    let q = Sim::answers(&s.outputs())[0].1.clone().unwrap();
    assert_eq!(ids(&q), ["rep0"]);
    s.advance(Duration::from_millis(250));
    s.ask("", member("probe", 1));
    let out = s.outputs();
    let q = Sim::answers(&out)[0].1.clone().unwrap();
    assert_eq!(ids(&q), ["probe"]);
    // rep0 left by heartbeat timeout.
    let left = out
        .iter()
        .find_map(|o| match o {
            Output::Issued { left, .. } => Some(left.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].replica_id, "rep0");
    assert!(
        matches!(left[0].reason, LeaveReason::HeartbeatTimeout { silent_for } if silent_for >= Duration::from_millis(200))
    );
}

#[test]
fn answered_only_to_requesters_it_contains() {
    let mut s = Sim::new(config(1, 60_000));
    s.ask("", member("a", 1));
    s.outputs();
    // Previous quorum {a}; a asks shrink_only with newcomer n waiting: n is not answered.
    let n = s.ask("", member("n", 1));
    assert!(
        Sim::answers(&s.outputs()).is_empty(),
        "a is in the previous quorum: no fast quorum, split brain guard / wait"
    );
    s.ask(
        "",
        Member {
            shrink_only: true,
            ..member("a", 2)
        },
    );
    let got = Sim::answers(&s.outputs());
    assert_eq!(got.len(), 1);
    assert_ne!(got[0].0, n);
    assert_eq!(s.lh.waiting_calls(), 1, "n still waits");
    // n's call ends (deadline): forgotten.
    s.lh.handle(s.now, Input::Cancel { call: n });
    assert_eq!(s.lh.waiting_calls(), 0);
}

#[test]
fn not_rejoined_is_recorded() {
    let mut s = Sim::new(config(1, 100));
    for id in ["a", "b", "c"] {
        s.beat("", id).unwrap();
    }
    s.ask("", member("a", 1));
    s.ask("", member("b", 1));
    s.ask("", member("c", 1));
    s.outputs();
    let st = s.lh.status(s.now);
    assert_eq!(st[0].quorum.as_ref().map(ids), Some(vec!["a", "b", "c"]));
    // All keep beating; c does not ask again: after the join timeout a and b go without it.
    s.advance(Duration::from_millis(10));
    s.ask("", member("a", 2));
    s.ask("", member("b", 2));
    s.beat("", "c").unwrap();
    assert!(Sim::answers(&s.outputs()).is_empty(), "waits for c");
    s.advance(Duration::from_millis(120));
    let st = s.lh.status(s.now);
    assert_eq!(st[0].quorum.as_ref().map(ids), Some(vec!["a", "b"]));
    assert_eq!(st[0].departures.len(), 1);
    assert_eq!(st[0].departures[0].replica_id, "c");
    assert_eq!(st[0].departures[0].reason, LeaveReason::NotRejoined);
    assert_eq!(st[0].departures[0].last_quorum_id, 1);
    assert_eq!(st[0].departures[0].quorum_id, 2);
}

#[test]
fn multi_job_isolation() {
    let mut s = Sim::new(config(2, 60_000));
    s.ask("job-a", member("r0", 1));
    s.ask("job-b", member("r1", 1));
    assert!(
        Sim::answers(&s.outputs()).is_empty(),
        "min_replicas 2 in each job"
    );
    // A heartbeat in job-b does not hold job-a's quorum back.
    s.beat("job-b", "r2").unwrap();
    s.ask("job-a", member("r1", 1));
    let got = Sim::answers(&s.outputs());
    assert_eq!(got.len(), 2);
    assert_eq!(ids(got[0].1.as_ref().unwrap()), ["r0", "r1"]);
    assert_eq!(s.lh.quorum_id("job-a"), Some(1));
    assert_eq!(s.lh.quorum_id("job-b"), Some(0), "job-b has no quorum yet");
    assert_eq!(
        s.lh.quorum_id(""),
        None,
        "the default job is a job of its own"
    );
    let st = s.lh.status(s.now);
    assert_eq!(st.len(), 2);
    assert_eq!(st[1].joiners.len(), 1);
    assert_eq!(st[1].heartbeats.len(), 2);
}

#[test]
fn monotonic_quorum_id() {
    // A restarted server continues above what it issued.
    let mut s = Sim::new(LighthouseConfig {
        min_quorum_id: 41,
        ..config(1, 0)
    });
    s.ask("", member("a", 1));
    assert_eq!(
        Sim::answers(&s.outputs())[0].1.as_ref().unwrap().quorum_id,
        42
    );
    s.lh.restore_quorum_id(s.now, "j", 100);
    s.ask("j", member("a", 1));
    assert_eq!(
        Sim::answers(&s.outputs())[0].1.as_ref().unwrap().quorum_id,
        101
    );
    // Restoring lower never goes back.
    s.lh.restore_quorum_id(s.now, "j", 5);
    assert_eq!(s.lh.quorum_id("j"), Some(101));

    // A take-over restores the group's highest id: every job, and jobs made later, go above it.
    assert_eq!(s.lh.highest_quorum_id(), 101);
    s.lh.restore_floor(s.now, 500);
    assert_eq!(s.lh.quorum_id("j"), Some(500));
    assert_eq!(s.lh.highest_quorum_id(), 500);
    s.ask("fresh", member("a", 1));
    assert_eq!(
        Sim::answers(&s.outputs())[0].1.as_ref().unwrap().quorum_id,
        501
    );
    s.lh.restore_floor(s.now, 7);
    assert_eq!(
        s.lh.quorum_id("fresh"),
        Some(501),
        "a lower floor changes nothing"
    );

    // A job forgotten while idle comes back above its last id.
    let ttl = Duration::from_secs(60);
    let mut s = Sim::new(LighthouseConfig {
        limits: Limits {
            idle_job_ttl: ttl,
            ..Limits::default()
        },
        heartbeat_timeout: Duration::from_millis(100),
        ..config(1, 0)
    });
    for i in 0..3 {
        s.ask("j", member(&format!("r{i}"), 1));
        s.outputs();
        s.advance(Duration::from_millis(150));
    }
    assert_eq!(s.lh.quorum_id("j"), Some(3));
    s.advance(Duration::from_secs(1) + ttl * 2);
    assert_eq!(s.lh.job_count(), 0, "forgotten");
    assert_eq!(s.lh.poll_timeout(), None, "nothing left to time");
    s.ask("j", member("r0", 1));
    assert_eq!(
        Sim::answers(&s.outputs())[0].1.as_ref().unwrap().quorum_id,
        4
    );
}

#[test]
fn bounded_memory() {
    let limits = Limits {
        max_jobs: 2,
        max_replicas_per_job: 3,
        max_waiting_per_job: 4,
        ..Limits::default()
    };
    let mut s = Sim::new(LighthouseConfig {
        limits,
        heartbeat_timeout: Duration::from_millis(100),
        ..config(10, 60_000)
    });
    // Sizes.
    let long = "x".repeat(1025);
    assert!(
        matches!(s.beat("", &long), Err(Refusal::InvalidArgument(m)) if m.contains("replica_id"))
    );
    let c = s.ask("", member(&long, 1));
    assert!(
        matches!(&Sim::answers(&s.outputs())[..], [(x, Err(Refusal::InvalidArgument(_)))] if *x == c)
    );
    let huge = Member {
        world_size: (1 << 20) + 1,
        ..member("w", 1)
    };
    s.ask("", huge);
    assert!(
        matches!(&Sim::answers(&s.outputs())[..], [(_, Err(Refusal::InvalidArgument(m)))] if m.contains("world_size"))
    );
    let fat = Member {
        wire: Bytes::from(vec![0u8; (64 << 10) + 1]),
        ..member("f", 1)
    };
    s.ask("", fat);
    assert!(matches!(
        &Sim::answers(&s.outputs())[..],
        [(_, Err(Refusal::InvalidArgument(_)))]
    ));
    s.ask(&"j".repeat(257), member("a", 1));
    assert!(matches!(
        &Sim::answers(&s.outputs())[..],
        [(_, Err(Refusal::InvalidArgument(_)))]
    ));

    // Replica ids per job.
    for id in ["a", "b", "c"] {
        s.beat("", id).unwrap();
    }
    assert!(matches!(
        s.beat("", "d"),
        Err(Refusal::ResourceExhausted(_))
    ));
    s.ask("", member("d", 1));
    assert!(matches!(
        &Sim::answers(&s.outputs())[..],
        [(_, Err(Refusal::ResourceExhausted(_)))]
    ));
    s.beat("", "a").unwrap();
    // Waiting calls per job.
    for _ in 0..4 {
        s.ask("", member("a", 1));
    }
    s.ask("", member("a", 1));
    assert!(matches!(
        &Sim::answers(&s.outputs())[..],
        [(_, Err(Refusal::ResourceExhausted(_)))]
    ));

    // Old heartbeats are forgotten (10 timeouts), and the ids with them.
    let calls: Vec<CallId> = (1..=s.next_call).collect();
    for call in calls {
        s.lh.handle(s.now, Input::Cancel { call });
    }
    s.advance(Duration::from_millis(1001));
    assert!(s.lh.status(s.now)[0].heartbeats.is_empty());
    assert!(s.lh.status(s.now)[0].joiners.is_empty());
    s.beat("", "d").unwrap();

    // Jobs: at the bound an idle job makes room, an active one does not.
    s.beat("j2", "a").unwrap();
    assert!(matches!(s.beat("j3", "a"), Err(Refusal::ResourceExhausted(m)) if m.contains("jobs")));
    s.advance(Duration::from_millis(1100));
    assert_eq!(s.lh.job_count(), 2, "idle, not yet past their time to live");
    s.beat("j3", "a").unwrap();
    assert_eq!(s.lh.job_count(), 2);
}
