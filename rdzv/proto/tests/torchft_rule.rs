//! torchft's own `quorum_compute` tests (`src/lighthouse.rs`), as behaviour specs of
//! [`rule::compute`]: the same states, the same verdicts.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dt_rdzv_proto::torchft::rule::{self, changed, compute, next_quorum_id};
use dt_rdzv_proto::torchft::{Joined, LighthouseConfig, Member, Quorum};

fn member(id: &str) -> Member {
    Member {
        replica_id: id.into(),
        step: 1,
        world_size: 1,
        ..Member::default()
    }
}

fn config(min_replicas: u64, join_timeout_ms: u64) -> LighthouseConfig {
    LighthouseConfig {
        min_replicas,
        join_timeout: Duration::from_millis(join_timeout_ms),
        heartbeat_timeout: Duration::from_millis(5000),
        ..LighthouseConfig::default()
    }
}

#[derive(Default)]
struct State {
    heartbeats: HashMap<String, Instant>,
    joiners: HashMap<String, Joined>,
    prev: Option<Quorum>,
}

impl State {
    fn join(&mut self, m: Member, at: Instant) {
        self.heartbeats.insert(m.replica_id.clone(), at);
        self.joiners
            .insert(m.replica_id.clone(), Joined { member: m, at });
    }
    fn run(&self, now: Instant, c: &LighthouseConfig) -> rule::Verdict {
        compute(now, c, &self.heartbeats, &self.joiners, self.prev.as_ref())
    }
}

fn quorum(ids: &[&str], now: Instant) -> Quorum {
    Quorum {
        quorum_id: 1,
        participants: ids.iter().map(|i| member(i)).collect::<Vec<_>>().into(),
        created: now,
    }
}

fn ids(v: &rule::Verdict) -> Vec<String> {
    let p = v.participants.as_ref().expect(&v.reason);
    p.iter().map(|m| m.replica_id.clone()).collect()
}

#[test]
fn quorum_join_timeout() {
    let c = config(1, 60 * 60 * 1000);
    let now = Instant::now();
    let mut s = State::default();
    let v = s.run(now, &c);
    assert!(v.participants.is_none());
    assert!(
        v.reason.contains(
            "New quorum not ready, only have 0 participants, need min_replicas 1 [0/0 participants healthy]"
        ),
        "{}",
        v.reason
    );
    s.join(member("a"), now);
    s.join(member("b"), now);
    assert_eq!(ids(&s.run(now, &c)), ["a", "b"]);
    // A healthy replica that has not joined: wait for it.
    s.heartbeats.insert("c".into(), now);
    let v = s.run(now, &c);
    assert!(
        v.participants.is_none() && v.reason.contains("join timeout"),
        "{}",
        v.reason
    );
    // The join timeout passed since the first join: go without it.
    let later = now + Duration::from_secs(10 * 60 * 60);
    s.heartbeats.insert("a".into(), later);
    s.heartbeats.insert("b".into(), later);
    s.heartbeats.insert("c".into(), later);
    assert_eq!(ids(&s.run(later, &c)), ["a", "b"]);
}

#[test]
fn quorum_heartbeats() {
    let c = config(1, 0);
    let now = Instant::now();
    let mut s = State::default();
    s.join(member("a"), now);
    let v = s.run(now, &c);
    assert_eq!(ids(&v), ["a"]);
    assert!(
        v.reason
            .contains("[1/1 participants healthy][1 heartbeating]"),
        "{}",
        v.reason
    );
    // Expired.
    s.heartbeats
        .insert("a".into(), now - Duration::from_secs(10));
    let v = s.run(now, &c);
    assert!(v.participants.is_none());
    assert!(
        v.reason
            .contains("[0/1 participants healthy][0 heartbeating]"),
        "{}",
        v.reason
    );
    // One healthy, one expired.
    s.join(member("b"), now);
    assert_eq!(ids(&s.run(now, &c)), ["b"]);
    // Exactly the timeout old is not healthy.
    assert!(!rule::healthy(
        now + Duration::from_millis(5000),
        now,
        c.heartbeat_timeout
    ));
    assert!(rule::healthy(
        now + Duration::from_millis(4999),
        now,
        c.heartbeat_timeout
    ));
}

#[test]
fn quorum_fast_prev_quorum() {
    let c = config(1, 60 * 60 * 1000);
    let now = Instant::now();
    let mut s = State::default();
    assert!(s.run(now, &c).participants.is_none());
    s.join(member("a"), now);
    // b is alive but does not join: the split-brain guard holds.
    s.heartbeats.insert("b".into(), now);
    let v = s.run(now, &c);
    assert!(
        v.participants.is_none() && v.reason.contains("need at least half"),
        "{}",
        v.reason
    );
    // The previous quorum was {a}, and a joined: fast quorum.
    s.prev = Some(quorum(&["a"], now));
    let v = s.run(now, &c);
    assert_eq!(ids(&v), ["a"]);
    assert!(v.reason.starts_with("Fast quorum found!"), "{}", v.reason);
    // Growing by fast quorum.
    s.join(member("b"), now);
    assert_eq!(ids(&s.run(now, &c)), ["a", "b"]);
}

#[test]
fn quorum_shrink_only() {
    let c = config(1, 60 * 60 * 1000);
    let now = Instant::now();
    let mut s = State {
        prev: Some(quorum(&["a", "b"], now)),
        ..State::default()
    };
    let shrink = |id: &str| Member {
        shrink_only: true,
        ..member(id)
    };
    s.join(shrink("a"), now);
    s.join(shrink("c"), now);
    let v = s.run(now, &c);
    assert!(v.reason.contains("[shrink_only=true]"), "{}", v.reason);
    assert_eq!(ids(&v), ["a"]);
}

#[test]
fn quorum_split_brain() {
    let c = config(1, 60 * 60 * 1000);
    let now = Instant::now();
    let mut s = State::default();
    s.join(member("a"), now);
    assert_eq!(ids(&s.run(now, &c)), ["a"]);
    s.heartbeats.insert("b".into(), now);
    let v = s.run(now, &c);
    assert!(v.participants.is_none());
    assert!(
        v.reason.contains(
            "New quorum not ready, only have 1 participants, need at least half of 2 healthy workers [1/1 participants healthy][2 heartbeating]"
        ),
        "{}",
        v.reason
    );
}

#[test]
fn quorum_changed() {
    let a = [member("1")];
    let b = [Member {
        address: "changed".into(),
        store_address: "changed".into(),
        step: 1000,
        ..member("1")
    }];
    assert!(!changed(&a, &b), "same ids");
    assert!(changed(&a, &[member("2")]));
    assert!(changed(&a, &[member("1"), member("2")]));
    let now = Instant::now();
    let prev = quorum(&["1"], now);
    assert_eq!(next_quorum_id(7, None, &a), 8, "the first quorum");
    assert_eq!(next_quorum_id(7, Some(&prev), &b), 7, "same ids: same id");
    let failed = [Member {
        commit_failures: 2,
        ..member("1")
    }];
    assert_eq!(
        next_quorum_id(7, Some(&prev), &failed),
        8,
        "commit failures"
    );
}

#[test]
fn candidates_sorted_by_replica_id_bytes() {
    let c = config(1, 0);
    let now = Instant::now();
    let mut s = State::default();
    for id in ["replica_10", "replica_2", "Replica_3", "replica_1"] {
        s.join(member(id), now);
    }
    assert_eq!(
        ids(&s.run(now, &c)),
        ["Replica_3", "replica_1", "replica_10", "replica_2"]
    );
}

#[test]
fn min_replicas_counts_healthy_joiners() {
    let c = config(2, 0);
    let now = Instant::now();
    let mut s = State::default();
    s.join(member("a"), now);
    let v = s.run(now, &c);
    assert!(v.reason.contains("need min_replicas 2"), "{}", v.reason);
    s.join(member("b"), now);
    assert_eq!(ids(&s.run(now, &c)), ["a", "b"]);
}
